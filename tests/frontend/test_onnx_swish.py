"""SiLU and HardSwish written as a product (frontend/onnx/swish.py): Mul(x, Sigmoid(x)) and
Mul(x, HardSigmoid(x)), either input order, import as one silu / hardswish Lut of x. Float32
golden == onnxruntime, fixed<16,6> gpu-emu == golden bit for bit (both were refused: "only a
product by a constant is supported"), golden == RTL under Verilator on one small model; a gate
with a second reader, or a QONNX Quant between the gate and the Mul, is not fused."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit import gpu_backend as gb
from modelcircuit.sim import rtl
from modelcircuit.sim.verify import verify

EPS = 2.0 ** -24  # float32's unit roundoff
SIXTH = float(np.float32(1.0 / 6.0))  # torch's HardSigmoid alpha for nn.Hardswish


def _model(nodes, in_shape, out_shape, inits=(), opset=13, domains=()):
    g = helper.make_graph(nodes, "swish", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, *in_shape])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, *out_shape])], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                               *(helper.make_opsetid(d, 1) for d in domains)])


def _gate(kind: str, x: str, out: str):
    if kind == "silu":
        return helper.make_node("Sigmoid", [x], [out])
    if kind == "hardswish":  # what TorchScript writes for nn.Hardswish at opsets 11..13
        return helper.make_node("HardSigmoid", [x], [out], alpha=SIXTH)
    return helper.make_node("HardSigmoid", [x], [out], alpha=0.3, beta=0.4)


def _swish(kind: str, gate_first: bool) -> onnx.ModelProto:
    ins = ["s", "x"] if gate_first else ["x", "s"]
    return _model([_gate(kind, "x", "s"), helper.make_node("Mul", ins, ["y"])], (16,), (16,))


def _cnn(kind: str) -> onnx.ModelProto:
    """Conv -> x * gate(x) -> Conv: the activation of a channels-first frame (MobileNetV3,
    EfficientNet)."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, size=s).astype(np.float32), n)
             for n, s in (("w1", (4, 2, 3, 3)), ("b1", (4,)), ("w2", (3, 4, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             _gate(kind, "c", "s"), helper.make_node("Mul", ["c", "s"], ["a"]),
             helper.make_node("Conv", ["a", "w2"], ["y"])]
    return _model(nodes, (2, 5, 6), (3, 5, 6), inits)


def _save(m: onnx.ModelProto, tmp_path) -> str:
    p = str(tmp_path / "m.onnx")
    onnx.checker.check_model(m)
    onnx.save(m, p)
    return p


def _ort(p: str, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(p, providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])


def _luts(g) -> list[str]:
    return [n.get("func") for n in g.nodes if n.op == "Lut"]


def _gpu_emu_equals_golden(c, x) -> None:
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))


@pytest.mark.parametrize("gate_first", [False, True])
@pytest.mark.parametrize("kind", ["silu", "hardswish", "hardswish_ab"])
def test_product_is_one_table(kind, gate_first, tmp_path):
    p = _save(_swish(kind, gate_first), tmp_path)
    g = mc.load_onnx(p)
    func = "silu" if kind == "silu" else "hardswish"
    assert [n.op for n in g.nodes] == ["Lut"] and _luts(g) == [func]
    lut = g.nodes[0]
    # torch's alpha 1/6 (float32) and beta 0.5 are ONNX HardSwish's: the node is the one
    # HardSwish imports as; other parameters are kept
    f32 = float(np.float32(0.3)), float(np.float32(0.4))  # the attributes are float32
    assert (lut.get("alpha"), lut.get("beta")) == (f32 if kind == "hardswish_ab"
                                                   else (None, None))
    x = np.concatenate([np.linspace(-12, 12, 16 * 15), np.random.default_rng(0).normal(
        0, 4, 16 * 49)]).astype(np.float32).reshape(-1, 16)
    c = mc.compile(g, precision="float32")
    got, want = np.asarray(mc.run(c, x), dtype=np.float64), _ort(p, x).astype(np.float64)
    # x times a gate: the gate's float32 error (onnxruntime's sigmoid is off by up to 1.4 EPS
    # absolute, tests/conftest.py) scaled by |x|, and one rounding of the product per side
    assert np.all(np.abs(got - want) <= 4 * EPS * np.abs(want) + 4 * EPS * np.abs(x)), \
        np.abs(got - want).max()
    # the float golden model rounds as the unfused Mul(x, gate(x)) does, in float32
    if kind == "silu":
        gate = np.float32(1.0) / (np.float32(1.0) + np.exp(-x))
    else:
        a, b = (0.3, 0.4) if kind == "hardswish_ab" else (SIXTH, 0.5)
        gate = np.clip(x * np.float32(a) + np.float32(b), 0, 1)
    assert gate.dtype == np.float32
    np.testing.assert_array_equal(got, (x * gate).astype(np.float64))
    emu = gb.execute(c, [x], emulate=True)[c.graph.outputs[0]]  # the float32 kernel
    np.testing.assert_allclose(emu, got, rtol=4 * EPS, atol=4 * EPS)
    cf = mc.compile(g, precision="fixed<16,6>")
    _gpu_emu_equals_golden(cf, x)


@pytest.mark.parametrize("kind", ["silu", "hardswish"])
def test_channels_first_frame(kind, tmp_path):
    """After a Conv (a channels-first frame): golden == onnxruntime, gpu-emu == golden."""
    p = _save(_cnn(kind), tmp_path)
    g = mc.load_onnx(p)
    assert "Mul" not in [n.op for n in g.nodes] and _luts(g) == [kind]
    x = np.random.default_rng(2).normal(0, 2, size=(6, 2, 5, 6)).astype(np.float32)
    c = mc.compile(g, precision="float32")
    got, want = np.asarray(mc.run(c, x)), _ort(p, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    cf = mc.compile(g, precision="fixed<16,6>")
    _gpu_emu_equals_golden(cf, x)


@pytest.mark.parametrize("second", ["reader", "output"])
def test_gate_with_another_reader_is_not_fused(second, tmp_path):
    """HardSigmoid read by the Mul and by an Add (or also a graph output): two tables would
    not be one, so the product stays a Mul of two activations (float only, as before)."""
    nodes = [_gate("hardswish", "x", "s"), helper.make_node("Mul", ["x", "s"], ["m"])]
    if second == "reader":
        nodes.append(helper.make_node("Add", ["m", "s"], ["y"]))
        m = _model(nodes, (16,), (16,))
    else:
        nodes.append(helper.make_node("Identity", ["m"], ["y"]))
        m = _model(nodes, (16,), (16,))
        m.graph.output.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 16]))
    p = _save(m, tmp_path)
    g = mc.load_onnx(p)
    assert "Mul" in [n.op for n in g.nodes] and _luts(g) == ["hardsigmoid"]
    if second == "reader":  # (two outputs import, but compile takes one output only)
        x = np.random.default_rng(3).normal(0, 4, size=(8, 16)).astype(np.float32)
        got = mc.run(mc.compile(g, precision="float32"), x)
        np.testing.assert_allclose(np.asarray(got), _ort(p, x), rtol=1e-6, atol=1e-6)


def test_quant_between_gate_and_mul_is_not_fused(tmp_path):
    """A QONNX Quant on the gate: the Mul reads the quantizer, not the gate; not fused."""
    q = "qonnx.custom_op.general"
    inits = [numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("sc", 2.0 ** -4), ("z", 0.0), ("b", 8.0))]
    nodes = [_gate("silu", "x", "s"),
             helper.make_node("Quant", ["s", "sc", "z", "b"], ["qs"], domain=q, signed=1,
                              narrow=0, rounding_mode="ROUND"),
             helper.make_node("Mul", ["x", "qs"], ["y"])]
    p = _save(_model(nodes, (16,), (16,), inits, domains=(q,)), tmp_path)
    g = mc.load_onnx(p)
    assert "Mul" in [n.op for n in g.nodes] and "silu" not in _luts(g)


@pytest.mark.integration
@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
def test_golden_rtl_bit_exact(tmp_path):
    """silu(x) + hardswish(x) (alpha 0.3, beta 0.4) at fixed<16,6>: golden == RTL
    (Verilator, 5 vectors)."""
    nodes = [_gate("silu", "x", "s"), helper.make_node("Mul", ["s", "x"], ["a"]),
             _gate("hardswish_ab", "x", "h"), helper.make_node("Mul", ["x", "h"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    g = mc.load_onnx(_save(_model(nodes, (8,), (8,)), tmp_path))
    assert sorted(_luts(g)) == ["hardswish", "silu"]
    c = mc.compile(g, precision="fixed<16,6>")
    x = np.random.default_rng(4).normal(0, 4, size=(5, 8)).astype(np.float32)
    out = io.StringIO()
    code, rep = verify(c, x, ["golden", "rtl"], out=out)
    assert code == 0 and rep["bit_exact"], out.getvalue()
