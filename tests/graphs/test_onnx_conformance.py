"""ONNX node conformance of the golden model (float mode) through GoldenBackend.

The official node test cases are regenerated once with onnx's own
`collect_testcases()` into ~/.cache/modelcircuit (or $MODELCIRCUIT_CACHE), then every case of
every op in onnx_import.SUPPORTED_OPS runs through the onnx Backend adapter. The per-op table
is printed (pytest -s) and written as JSON beside the test's tmp folder; `bench/conformance.py`
prints the same table.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelcircuit.graphs import onnx_backend as ob
from modelcircuit.graphs.ir import GraphError

# ops whose own computation the importer supports on activations (not only constant folding)
COMPUTE_OPS = ("MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Selu",
               "Sigmoid", "Tanh", "Softmax", "BatchNormalization", "Flatten", "Reshape",
               "Transpose", "Squeeze", "Unsqueeze", "Identity", "Dropout")

# passes measured with onnx 1.23 (a floor: an importer regression must show up here)
PASS_FLOOR = {"Add": 2, "BatchNormalization": 2, "Div": 1, "Dropout": 5, "Flatten": 3,
              "Gemm": 8, "Identity": 1, "LeakyRelu": 3, "MatMul": 1, "Mul": 1, "Relu": 1,
              "Reshape": 4, "Selu": 3, "Sigmoid": 2, "Softmax": 5, "Squeeze": 1, "Sub": 3,
              "Tanh": 2, "Transpose": 2, "Unsqueeze": 6}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    res = ob.run_conformance()
    out = tmp_path_factory.mktemp("conformance") / "conformance.json"
    out.write_text(json.dumps(res, indent=1))
    print("\n" + ob.format_table(res) + f"\n(JSON: {out})")
    return res


def test_every_supported_compute_op_has_cases(result):
    assert set(COMPUTE_OPS) <= set(result["ops"])


def test_every_failure_is_a_clear_refusal(result):
    bad = [c for c in result["cases"] if c["status"] not in ("passed", "refused")]
    assert not bad, "wrong results or crashes:\n" + "\n".join(
        f"{c['case']}: {c['reason']}" for c in bad)
    for c in result["cases"]:
        if c["status"] == "refused":
            assert c["reason"].startswith("refused: ") and len(c["reason"]) > 20, c


def test_accepted_cases_pass(result):
    """Of the cases the golden model accepts (does not refuse with a GraphError), >= 80 % must
    match onnx's expected outputs (with onnx 1.23: all of them)."""
    acc = [c for c in result["cases"] if c["status"] != "refused"]
    passed = sum(c["passed"] for c in acc)
    assert acc and passed / len(acc) >= 0.8, f"{passed}/{len(acc)}"


def test_pass_floor_per_op(result):
    low = {op: (result["ops"][op]["passed"], n) for op, n in PASS_FLOOR.items()
           if result["ops"].get(op, {}).get("passed", 0) < n}
    assert not low, f"fewer passing cases than before (passed, floor): {low}"


# -- the adapter itself ---------------------------------------------------------------------


def _mlp() -> tuple:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), w, b


def test_backend_runs_a_model_per_sample():
    model, w, b = _mlp()
    x = np.random.default_rng(1).standard_normal((7, 6)).astype(np.float32)
    want = np.maximum(x @ w + b, 0)
    rep = ob.GoldenBackend.prepare(model)
    (y,) = rep.run([x])
    assert y.dtype == np.float32 and y.shape == (7, 4)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    # per sample: one row at a time gives the same rows
    rows = np.concatenate([rep.run([x[i:i + 1]])[0] for i in range(7)])
    np.testing.assert_array_equal(rows, y)
    np.testing.assert_array_equal(ob.GoldenBackend.run_model(model, [x])[0], y)


def test_backend_device_and_node():
    assert ob.GoldenBackend.supports_device("CPU")
    assert not ob.GoldenBackend.supports_device("CUDA")
    x = np.array([[-1.0, 2.0]], dtype=np.float32)
    (y,) = ob.GoldenBackend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, [[0.0, 2.0]])


def test_backend_refuses_clearly():
    node = helper.make_node("Relu", ["x"], ["y"])
    with pytest.raises(GraphError, match="float32 only"):
        ob.GoldenBackend.run_node(node, [np.array([[1, 2]], dtype=np.int32)])
    g = helper.make_graph([helper.make_node("Cos", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    with pytest.raises(GraphError, match="unsupported op Cos"):
        ob.GoldenBackend.prepare(helper.make_model(g))
