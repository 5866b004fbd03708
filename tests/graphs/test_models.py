"""Real models: float golden vs onnxruntime; QONNX fixed golden vs qonnx's own execution."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import modelcircuit as mc
from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs import reference
from modelcircuit.graphs.types import parse_type
from tests.conftest import assert_float32_close, shared_model, tail_error_bound


def _ort_session(path) -> ort.InferenceSession:
    """onnxruntime with the batch dimension made symbolic (the models fix it to 1 or 789444)."""
    m = onnx.load(str(path))
    inits = {i.name for i in m.graph.initializer}
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name not in inits and vi.type.tensor_type.shape.dim:
            vi.type.tensor_type.shape.dim[0].ClearField("dim_value")
            vi.type.tensor_type.shape.dim[0].dim_param = "N"
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", ["three_layer_keras", "three_layer_pytorch", "two_layer_keras",
                                  "digits"])
def test_float_golden_matches_onnxruntime(name, digits_model):
    path = digits_model if name == "digits" else shared_model(name)
    c = mc.compile(mc.load_onnx(path), precision="float32")
    shp = c.graph.tensor(c.graph.inputs[0]).shape
    x = np.random.default_rng(1).standard_normal((1000, *shp)).astype(np.float32)
    sess = _ort_session(path)
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    got = mc.run(c, x)
    assert got.shape == want.shape
    # both sum in float32, onnxruntime in a CPU-dependent order: within rounding, not equal
    assert_float32_close(got, want, c, x, "ours - onnxruntime")


def _qonnx_context(path, feeds: dict, shape: list[int]):
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ModelWrapper(str(path))
        m.set_tensor_shape(m.graph.input[0].name, shape)
        m = m.transform(InferShapes())
        return execute_onnx(m, feeds, return_full_exec_context=True)


def test_qkeras_jettagging_fixed_equals_qonnx():
    pytest.importorskip("qonnx")
    path = shared_model("qkeras_jettagging")
    t = parse_type("fixed<8,3>")
    x = np.random.default_rng(2).standard_normal((1000, 16)) * 2
    x = fx.to_float(fx.quantize(x, t), t).astype(np.float32)  # on a narrow grid: exact in f32
    ctx = _qonnx_context(path, {"global_in": x}, [1000, 16])
    c = mc.compile(mc.load_onnx(path))
    env = reference.execute(c.graph, [x], trace=True)
    checked = 0
    for name in ("Quant_8_out0", "Quant_9_out0", "Quant_10_out0", "Add_3_out0"):
        ours = reference.to_values(c.graph, name, env[name])
        assert np.array_equal(ours, ctx[name].astype(np.float64)), name
        checked += 1
    assert checked == 4


def _digits_28x28(n: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = (np.arange(28) * 8) // 28  # nearest-neighbour upscaling 8x8 -> 28x28
    imgs = (d.images[:n][:, idx][:, :, idx] / 16.0).astype(np.float32)[:, None]
    return imgs, d.target[:n]


def test_tfc_2w2a_fixed_equals_qonnx():
    pytest.importorskip("qonnx")
    path = shared_model("TFC_2W2A")
    x, _ = _digits_28x28(1000)
    ctx = _qonnx_context(path, {"0": x}, [1000, 1, 28, 28])
    c = mc.compile(mc.load_onnx(path))
    g = c.graph
    # the input pre-processing (Mul, Sub) and its quantizer run on the host, in float32 as the
    # model does; BatchNorm in float between integer layers became exact thresholds; the
    # expanded BatchNorm after the last MatMul is the float tail on the host
    assert c.head is not None and c.head.nodes[-1].op == "Requant"
    assert sum(n.op == "Threshold" for n in g.nodes) == 3
    assert [n.op for n in g.nodes if n.op not in ("Dense", "Threshold")] == []
    assert c.tail is not None and {n.op for n in c.tail.nodes} <= {"Add", "Mul", "Div"}
    env = mc.run(c, x, trace=True)
    for name in ("39", "51", "63", "75"):  # every quantized activation, the input's included
        ours = env[name].reshape(1000, -1)
        assert np.array_equal(ours, ctx[name].reshape(1000, -1).astype(np.float64)), name
    # the last MatMul is the circuit's output, exact
    assert np.array_equal(env[g.outputs[0]], ctx["82"].astype(np.float64))
    # the float tail: the same float32 ops (Div by a constant is a Mul by its reciprocal here),
    # so within their rounding, scaled to the magnitudes the tail computes
    out, want = mc.run(c, x), ctx[c.tail.outputs[0]].astype(np.float64)
    bound = tail_error_bound(c, x)
    assert np.all(np.abs(out - want) <= bound)
    assert np.max(np.abs(out - want) / bound) > 0  # not vacuous: the two do round differently


def _logits(c, x):
    """The tensor that feeds the Softmax (the issue compares argmax of the logits)."""
    sm = next(n for n in c.graph.nodes if n.op == "Softmax")
    return mc.run(c, x, trace=True)[sm.inputs[0]]


def test_jet_tagger_fidelity_at_fixed_16_6():
    """argmax agreement with float on 1,000 standard-normal inputs (hls4ml: 0.986)."""
    path = shared_model("three_layer_keras")
    g = mc.load_onnx(path)
    x = np.random.default_rng(3).standard_normal((1000, 16)).astype(np.float32)
    yf = _logits(mc.compile(g, precision="float32"), x)
    yq = _logits(mc.compile(g, precision="fixed<16,6>"), x)
    assert np.mean(yf.argmax(-1) == yq.argmax(-1)) >= 0.995


def test_jet_tagger_calibrated_8_bits():
    path = shared_model("three_layer_keras")
    g = mc.load_onnx(path)
    rng = np.random.default_rng(4)
    cal = rng.standard_normal((1000, 16)).astype(np.float32)
    x = rng.standard_normal((1000, 16)).astype(np.float32)
    yf = _logits(mc.compile(g, precision="float32"), x)
    yq = _logits(mc.compile(g, precision="fixed<8,3>", calibrate=cal), x)
    assert np.mean(yf.argmax(-1) == yq.argmax(-1)) >= 0.95


def test_digits_accuracy_fixed(digits_model, digits_test):
    x, y = digits_test
    g = mc.load_onnx(digits_model)
    acc_f = np.mean(mc.run(mc.compile(g, precision="float32"), x).argmax(-1) == y)
    acc_q = np.mean(mc.run(mc.compile(g, precision="fixed<16,6>"), x).argmax(-1) == y)
    assert acc_f >= 0.95
    assert acc_q >= acc_f - 0.01


def test_qkeras_user_precision_rounds_once_like_qonnx():
    """With --precision fixed<16,6> the Dense before each model quantizer keeps its exact
    accumulator: QONNX rounds once from the exact sum; truncating to fixed<16,6> first and
    rounding again changed 747 of 64,000 first-layer codes on N(0,1) inputs."""
    pytest.importorskip("qonnx")
    path = shared_model("qkeras_jettagging")
    t = parse_type("fixed<16,6>")
    x = np.random.default_rng(0).standard_normal((4000, 16))
    x = fx.to_float(fx.quantize(x, t), t).astype(np.float32)  # the input type's own grid
    ctx = _qonnx_context(path, {"global_in": x}, [4000, 16])
    c = mc.compile(mc.load_onnx(path), precision="fixed<16,6>")
    env = mc.run(c, x, trace=True)
    for name in ("Quant_8_out0", "Quant_9_out0", "Quant_10_out0"):
        assert np.array_equal(env[name], ctx[name].astype(np.float64)), name
    dense = [n for n in c.graph.nodes if n.op == "Dense"][:3]
    assert all(n.get("relu") for n in dense)  # fused with the ReLU, from the exact sum
