"""bench/hdl_peers.py's like-for-like model: `logits_model` cuts a final Softmax (the peer,
alkaid/da4ml, builds none) and leaves every other model alone. Checked with onnxruntime on
a model made with onnx.helper: the cut model's output is the original's input to Softmax."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[3]


def _peers():  # noqa: ANN202 - the bench script as a module
    spec = importlib.util.spec_from_file_location("bench_hdl_peers", ROOT / "bench" / "hdl_peers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mlp(path: Path, softmax: bool) -> Path:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.normal(size=(4, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"])]
    out = "logits"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["prob"], axis=-1))
        out = "prob"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 3])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def test_logits_model_cuts_the_final_softmax(tmp_path: Path) -> None:
    peers = _peers()
    full = _mlp(tmp_path / "full.onnx", softmax=True)
    cut = peers.logits_model(full, tmp_path)
    assert cut != full
    m = onnx.load(str(cut))
    onnx.checker.check_model(m)
    assert [n.op_type for n in m.graph.node] == ["MatMul"]
    x = np.random.default_rng(0).normal(size=(1, 4)).astype(np.float32)
    logits = _run(cut, x)
    prob = _run(full, x)
    e = np.exp(logits - logits.max())
    np.testing.assert_allclose(prob, e / e.sum(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(logits, prob)  # the cut model is the logits, not the softmax


def test_logits_model_leaves_other_models_alone(tmp_path: Path) -> None:
    plain = _mlp(tmp_path / "plain.onnx", softmax=False)
    assert _peers().logits_model(plain, tmp_path) == plain
