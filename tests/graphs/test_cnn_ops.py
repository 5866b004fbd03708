"""The ops of the field's benchmark CNNs (issue 29): Clip (ReLU6), HardSigmoid/HardSwish, QONNX
Trunc in every rounding mode, and a channels-first input's reordering on the host. Each against
its definition outside this project (onnxruntime, qonnx), and gpu-emu and the circuit (Amaranth
simulation) against the golden model bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit import gpu_backend as gb
from modelcircuit.graphs import reference
from modelcircuit.graphs.ir import Node
from modelcircuit.graphs.ops import TRUNC_MODES
from modelcircuit.graphs.reference import trunc_round
from tests.hdl.helpers import check, compiled_from, extremes

MODES = sorted(TRUNC_MODES)


def _onnx(nodes, in_shape, out_shape, inits=(), opset=17):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, *in_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [1, *out_shape])],
                          initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _save(m, tmp_path, name="m.onnx"):
    p = tmp_path / name
    onnx.save(m, str(p))
    return p


def _ort(path, x):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])


# -- QONNX Trunc's rounding modes ------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_trunc_rounding_is_qonnx(mode, d):
    """reference.trunc_round == qonnx's own rounding function on q / 2**d, every residue."""
    from qonnx.custom_op.general.intquant import resolve_rounding_mode

    q = np.arange(-(3 << d), (3 << d) + 1, dtype=np.int64)
    want = resolve_rounding_mode(mode)(q / float(1 << d)).astype(np.int64)
    np.testing.assert_array_equal(trunc_round(q, d, mode), want)


def _trunc_qonnx_model(mode: str, scale: float, out_scale: float, signed: int) -> onnx.ModelProto:
    """Quant(8b, scale s) -> AveragePool 2x2 -> Trunc(scale s/4, 10 bits -> out_bits 4):
    brevitas' TruncAvgPool, written by hand."""
    q = "qonnx.custom_op.general"
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (
        ("s", scale), ("z", 0.0), ("b8", 8.0), ("ts", scale / 4), ("tb", 10.0),
        ("os", out_scale), ("ob", 4.0))]
    nodes = [helper.make_node("Quant", ["x", "s", "z", "b8"], ["q"], domain=q, signed=signed,
                              narrow=0, rounding_mode="ROUND"),
             helper.make_node("AveragePool", ["q"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Trunc", ["p", "ts", "z", "tb", "os", "ob"], ["y"], domain=q,
                              rounding_mode=mode, signed=signed, narrow=0)]
    g = helper.make_graph(nodes, "trunc",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                               helper.make_opsetid(q, 2)])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("signed", [0, 1])
def test_trunc_avgpool_equals_qonnx_exactly(mode, signed, tmp_path):
    """The TruncAvgPool pattern in every mode: golden == qonnx execution exactly (values),
    gpu-emu == golden bit for bit. Output scale 4x the input's: 4 bits are dropped from the
    window sum (2 by the mean, 2 by the Trunc), so every residue class is reached."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    s = 0.0371
    m = _trunc_qonnx_model(mode, s, 4 * s, signed)
    p = _save(m, tmp_path)
    c = mc.compile(mc.load_onnx(p))
    assert "Trunc" in [str(n.op) for n in c.graph.nodes]
    rng = np.random.default_rng(3)
    x = (rng.normal(0, 3, size=(24, 2, 4, 4)) * (1 if signed else 2)).astype(np.float32)
    got = np.asarray(mc.run(c, x), dtype=np.float64)
    w = ModelWrapper(m).transform(InferShapes())
    want = np.stack([execute_onnx(w, {"x": x[i:i + 1]})["y"][0] for i in range(len(x))])
    # values: codes times the output scale, computed by the host tail as QONNX does
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=2e-7, atol=0)
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))


def test_trunc_circuit_every_mode_bit_exact():
    """A Trunc per mode on 9-bit codes (dropping 3 bits into a signed 4-bit output, so the
    saturation is reached too): the circuit (Amaranth simulation) == golden, every code."""
    for mode in MODES:
        c = compiled_from([Node.make("t", "Trunc", ["x"], ["y"], mode=mode)],
                          {"x": ((4,), "fixed<9,9>"), "y": ((4,), "fixed<4,7>")}, {}, ["x"],
                          ["y"], name=f"trunc_{mode.lower()}")
        x = np.arange(-256, 256, dtype=np.int64).reshape(-1, 4)
        np.testing.assert_array_equal(  # frac 0 -> frac -3: 3 bits dropped
            reference.execute(c.graph, [x], inputs_are_codes=True)["y"],
            np.clip(trunc_round(x, 3, mode), -8, 7))
        check(c, x)


# -- Clip (ReLU6) and the hard activations ---------------------------------------------------
def _clip_model(opset: int):
    if opset >= 11:
        inits = [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
                 numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
        clip = helper.make_node("Clip", ["x", "lo", "hi"], ["c"])
    else:
        inits = []
        clip = helper.make_node("Clip", ["x"], ["c"], min=0.0, max=6.0)
    nodes = [clip, helper.make_node("HardSigmoid", ["c"], ["h"], alpha=0.3, beta=0.4),
             helper.make_node("HardSwish", ["x"], ["w"]) if opset >= 14 else
             helper.make_node("Identity", ["x"], ["w"]),
             helper.make_node("Add", ["h", "w"], ["y"])]
    return _onnx(nodes, (16,), (16,), inits, opset)


@pytest.mark.parametrize("opset", [9, 17])
def test_clip_and_hard_activations_float_equal_onnxruntime(opset, tmp_path):
    p = _save(_clip_model(opset), tmp_path)
    c = mc.compile(mc.load_onnx(p), precision="float32")
    x = np.random.default_rng(0).normal(0, 5, size=(64, 16)).astype(np.float32)
    got, want = mc.run(c, x), _ort(p, x)
    # ReLU6, a clamp and x * clamp: each rounds at most twice per side
    np.testing.assert_allclose(got, want, rtol=4 * 2.0 ** -23, atol=1e-7)
    emu = gb.execute(c, [x], emulate=True)[c.graph.outputs[0]]
    np.testing.assert_allclose(emu, got, rtol=4 * 2.0 ** -23, atol=1e-7)


def test_clip_fixed_point_saturates_exactly(tmp_path):
    """fixed<10,5>: codes clamped at 0 and 6 * 2**5; golden == the exact clamp of the codes,
    gpu-emu and the circuit == golden."""
    p = _save(_clip_model(17), tmp_path)
    c = mc.compile(mc.load_onnx(p), precision="fixed<10,5>")
    x = np.linspace(-20, 20, 16 * 40, dtype=np.float32).reshape(-1, 16)
    env = mc.run(c, x, trace=True)
    xq = np.floor(np.clip(x, -16, 16 - 2 ** -5) * 32) / 32
    np.testing.assert_array_equal(env["c"], np.clip(xq, 0, 6))
    codes = reference.quantize_inputs(c.graph, [x])[0]
    want = reference.execute(c.graph, [codes], inputs_are_codes=True)
    got = gb.execute(c, [codes], emulate=True)
    for o in c.graph.outputs:
        np.testing.assert_array_equal(got[o], want[o])


def test_clip_circuit_bit_exact():
    for lo, hi in ((0.0, 6.0), (-1.3, 2.71), (None, 0.5), (-3.0, None), (2.0, 1.0)):
        kw = {k: v for k, v in (("lo", lo), ("hi", hi)) if v is not None}
        c = compiled_from([Node.make("c", "Clip", ["x"], ["y"], **kw)],
                          {"x": ((6,), "fixed<8,4>"), "y": ((6,), "fixed<6,3,RND>")}, {},
                          ["x"], ["y"], name="clip")
        x = extremes(c.graph.tensor("x").dtype, 6, np.random.default_rng(1), 40)
        check(c, x)


# -- channels-first input: the host reorders ------------------------------------------------
def test_nchw_model_circuit_input_is_raster_order_pixels(tmp_path):
    """An NCHW Conv model: the circuit's input is the channels-last frame (the host head
    transposes), the golden model still equals onnxruntime's on the NCHW input."""
    w = np.random.default_rng(2).normal(size=(4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    p = _save(_onnx(nodes, (3, 5, 6), (4, 5, 6), inits), tmp_path)
    c = mc.compile(mc.load_onnx(p), precision="fixed<16,6>")
    g = c.graph
    assert [str(n.op) for n in c.head.nodes] == ["Transpose"]
    assert g.tensor(g.inputs[0]).shape == (5, 6, 3)
    assert "Transpose" not in [str(n.op) for n in g.nodes]
    assert [str(n.op) for n in c.tail.nodes] == ["Transpose"]  # the NCHW output back
    x = np.random.default_rng(4).normal(size=(3, 3, 5, 6)).astype(np.float32)
    got = np.asarray(mc.run(c, x), dtype=np.float64)
    want = _ort(p, x)
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 0.05  # fixed<16,6>: ~28 products of 2**-10 steps
