"""Models in: everything that becomes a Graph (imports graphs/ and util/ only).

    builder.py     the Python API that builds a Graph by hand
    onnx/          ONNX / QONNX / QDQ import (the walk, its shared state, one module per
                   family of handlers) and the Graph -> ONNX export
    conformance/   the onnx backend-test adapter that runs the golden model on ONNX's suite
"""
