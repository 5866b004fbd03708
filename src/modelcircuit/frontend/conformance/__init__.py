"""The ONNX backend-test adapter (backend.py) and the conformance report over ONNX's own
node tests (suite.py): which ops run through the golden model and which are excused."""
