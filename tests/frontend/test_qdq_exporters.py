"""Quantized models as onnxruntime's quantizer and brevitas' QCDQ export write them, built
here with onnx.helper (small random weights, fixed seed):

* onnxruntime `quantize_static` (QDQ format): weights and biases stored as integer codes
  (int8 / uint8, int32 biases with a scale of shape (1,)) read through DequantizeLinear,
  per-tensor or per-channel, activations QuantizeLinear -> DequantizeLinear; the same around
  a channels-first Conv;
* brevitas `export_onnx_qcdq`: QuantizeLinear -> Clip -> DequantizeLinear for bit widths
  under 8, on weights and activations;
* a QONNX MLP whose first layer has no input quantizer (float input, quantized weights).

The golden model is compared with onnxruntime (graph optimisations off: the ONNX definition,
in float32) in output codes: equal, or one code apart where float32 rounding of the
accumulation falls on the other side of a rounding step."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.frontend.onnx.importer import import_model
from modelcircuit.graphs.ir import GraphError
from modelcircuit.graphs.types import FixedType

N = 300


def _t(name: str, v, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, dtype=dtype), name)


def _model(nodes, inits, in_shape, opset=13) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "qdq", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return m


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _codes_agree(m: onnx.ModelProto, x: np.ndarray, lsb: float) -> np.ndarray:
    """Golden and onnxruntime outputs in output codes: at most one apart, in few rows."""
    c = mc.compile(import_model(m))
    got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(len(x), -1)
    ref = _ort(m, x).astype(np.float64).reshape(len(x), -1)
    d = np.round(np.abs(got - ref) / lsb)
    assert d.max() <= 1, d.max()
    assert (d.max(axis=1) > 0).mean() <= 0.02, (d.max(axis=1) > 0).mean()
    return c


def _qdq(x: str, out: str, s: str, z: str) -> list:
    return [helper.make_node("QuantizeLinear", [x, s, z], [f"{out}_q"]),
            helper.make_node("DequantizeLinear", [f"{out}_q", s, z], [out])]


def _ort_mlp(rng, per_channel: bool, wt=np.int8, act=np.uint8):
    """x -> QDQ -> Gemm(DQ(W codes), DQ(int32 bias)) -> Relu -> QDQ -> Gemm -> QDQ (zp 128)."""
    nodes, inits = [], [_t("sx", 1 / 255), _t("zx", 0, act), _t("sh", 0.0173), _t("zh", 0, act),
                        _t("sy", 0.0391), _t("zy", 128 if act == np.uint8 else 0, act)]
    sx = np.float32(1 / 255)
    prev, prev_s = "xd", sx
    nodes += _qdq("x", "xd", "sx", "zx")
    for k, (i, o) in enumerate(((16, 12), (12, 5))):
        lo, hi = np.iinfo(wt).min, np.iinfo(wt).max
        codes = rng.integers(lo, hi + 1, (o, i)).astype(wt)  # (out, in): transB=1
        zw = np.full(o if per_channel else (), 128 if wt == np.uint8 else 0, wt)
        sw = (rng.uniform(0.004, 0.02, o) if per_channel else np.array(0.0123)).astype(np.float32)
        sb = (prev_s * sw).astype(np.float32)
        sb = sb if per_channel else sb.reshape(1)  # onnxruntime writes a (1,) bias scale
        inits += [_t(f"W{k}", codes, wt), _t(f"sw{k}", sw), _t(f"zw{k}", zw, wt),
                  _t(f"B{k}", rng.integers(-3000, 3000, o), np.int32), _t(f"sb{k}", sb),
                  _t(f"zb{k}", np.zeros(sb.shape), np.int32)]
        nodes += [helper.make_node("DequantizeLinear", [f"W{k}", f"sw{k}", f"zw{k}"], [f"w{k}"],
                                   axis=0),
                  helper.make_node("DequantizeLinear", [f"B{k}", f"sb{k}", f"zb{k}"], [f"b{k}"],
                                   axis=0),
                  helper.make_node("Gemm", [prev, f"w{k}", f"b{k}"], [f"g{k}"], transB=1)]
        if k == 0:
            nodes.append(helper.make_node("Relu", ["g0"], ["r0"]))
            nodes += _qdq("r0", "h", "sh", "zh")
            prev, prev_s = "h", np.float32(0.0173)
    nodes += [helper.make_node("QuantizeLinear", ["g1", "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    return _model(nodes, inits, (16,))


@pytest.mark.parametrize("per_channel,wt,act", [(False, np.int8, np.uint8),
                                                (True, np.int8, np.uint8),
                                                (False, np.uint8, np.uint8),
                                                (True, np.int8, np.int8)])
def test_onnxruntime_qdq_mlp(per_channel, wt, act):
    """onnxruntime's QDQ weights are constant codes read by DequantizeLinear (it was folded by
    onnx.reference, which has no DequantizeLinear before opset 19: refused at opset 13; at 21
    the weights lost their grid and the output was garbage)."""
    rng = np.random.default_rng(1)
    m = _ort_mlp(rng, per_channel, wt, act)
    x = rng.uniform(0, 1, (N, 16)).astype(np.float32)
    c = _codes_agree(m, x, 0.0391)
    dense = [n for n in c.graph.nodes if n.op == "Dense"]
    assert len(dense) == 2
    for d in dense:  # integer weight codes, not scaled floats in the default type
        t = c.graph.tensor(d.inputs[1]).dtype
        assert isinstance(t, FixedType) and t.frac == 0 and t.width <= 9, t


def test_onnxruntime_qdq_cnn_channels_first():
    """QuantizeLinear/DequantizeLinear on a channels-first frame follow its channels-last
    layout as QONNX's Quant does: no Transpose back to NCHW before them (which kept the
    Conv's scale and bias in the default fixed<16,6> instead of exact thresholds)."""
    rng = np.random.default_rng(2)
    sx, sh, sy = np.float32(1 / 255), np.float32(0.0211), np.float32(0.0457)
    sw = rng.uniform(0.004, 0.02, 4).astype(np.float32)
    inits = [_t("sx", sx), _t("zx", 0, np.uint8), _t("sh", sh), _t("zh", 0, np.uint8),
             _t("sy", sy), _t("zy", 128, np.uint8),
             _t("Wc", rng.integers(-127, 128, (4, 1, 3, 3)), np.int8), _t("swc", sw),
             _t("zwc", np.zeros(4), np.int8),
             _t("Bc", rng.integers(-500, 500, 4), np.int32), _t("sbc", sx * sw),
             _t("zbc", np.zeros(4), np.int32),
             _t("Wf", rng.integers(-127, 128, (3, 4 * 36)), np.int8), _t("swf", 0.0071),
             _t("zwf", 0, np.int8)]
    nodes = _qdq("x", "xd", "sx", "zx") + [
        helper.make_node("DequantizeLinear", ["Wc", "swc", "zwc"], ["wc"], axis=0),
        helper.make_node("DequantizeLinear", ["Bc", "sbc", "zbc"], ["bc"], axis=0),
        helper.make_node("Conv", ["xd", "wc", "bc"], ["c"], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"])] + _qdq("r", "rd", "sh", "zh") + [
        helper.make_node("Flatten", ["rd"], ["f"]),
        helper.make_node("DequantizeLinear", ["Wf", "swf", "zwf"], ["wf"]),
        helper.make_node("Gemm", ["f", "wf"], ["g"], transB=1),
        helper.make_node("QuantizeLinear", ["g", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    m = _model(nodes, inits, (1, 8, 8))
    x = rng.uniform(0, 1, (N, 1, 8, 8)).astype(np.float32)
    c = _codes_agree(m, x, float(sy))
    ops = [n.op for n in c.graph.nodes]
    assert "Transpose" not in ops, ops
    assert ops.count("Threshold") == 2, ops  # the Conv's and the Gemm's requantizations


def _qcdq_model(lo: int, hi: int):
    """brevitas' QCDQ: float weights -> QuantizeLinear -> Clip [-1, 1] -> DequantizeLinear
    (2-bit narrow), activations QuantizeLinear(uint8) -> Clip [lo, hi] -> DequantizeLinear."""
    rng = np.random.default_rng(3)
    inits = [_t("sx", 1 / 255), _t("zx", 0, np.uint8),
             _t("W0", rng.standard_normal((12, 16)) * 0.6), _t("sw", 0.5), _t("zw", 0, np.int8),
             _t("wlo", -1, np.int8), _t("whi", 1, np.int8),
             _t("sh", 0.0913), _t("zh", 0, np.uint8), _t("hlo", lo, np.uint8),
             _t("hhi", hi, np.uint8),
             _t("W1", rng.standard_normal((5, 12)) * 0.6), _t("sw1", 0.37)]
    nodes = _qdq("x", "xd", "sx", "zx") + [
        helper.make_node("QuantizeLinear", ["W0", "sw", "zw"], ["w0q"]),
        helper.make_node("Clip", ["w0q", "wlo", "whi"], ["w0c"]),
        helper.make_node("DequantizeLinear", ["w0c", "sw", "zw"], ["w0"]),
        helper.make_node("Gemm", ["xd", "w0"], ["g0"], transB=1),
        helper.make_node("QuantizeLinear", ["g0", "sh", "zh"], ["hq"]),
        helper.make_node("Clip", ["hq", "hlo", "hhi"], ["hc"]),
        helper.make_node("DequantizeLinear", ["hc", "sh", "zh"], ["h"]),
        helper.make_node("QuantizeLinear", ["W1", "sw1", "zw"], ["w1q"]),
        helper.make_node("Clip", ["w1q", "wlo", "whi"], ["w1c"]),
        helper.make_node("DequantizeLinear", ["w1c", "sw1", "zw"], ["w1"]),
        helper.make_node("Gemm", ["h", "w1"], ["y"], transB=1)]
    return _model(nodes, inits, (16,))


def test_qcdq_clip_narrows_codes():
    """QuantizeLinear -> Clip -> DequantizeLinear: the Clip narrows the codes' type (the
    constant DequantizeLinear was folded by onnx.reference: refused at opset 13)."""
    m = _qcdq_model(0, 7)
    x = np.random.default_rng(4).uniform(0, 1, (N, 16)).astype(np.float32)
    c = mc.compile(import_model(m))
    got = np.asarray(mc.run(c, x), dtype=np.float64)
    ref = _ort(m, x).astype(np.float64)
    assert np.abs(got - ref).max() < 1e-5  # float output: the integer sums times 0.37
    types = {str(c.graph.tensor(o).dtype) for n in c.graph.nodes for o in n.outputs}
    assert any(t.startswith("ufixed<3,3") for t in types), types  # [0, 7]: 3 bits
    w = [c.graph.tensor(n.inputs[1]).dtype for n in c.graph.nodes if n.op == "Dense"]
    assert all(isinstance(t, FixedType) and t.width <= 2 for t in w), w  # +-1 weights


def test_qcdq_clip_off_grid_refused():
    with pytest.raises(GraphError, match=r"Clip \[0, 5\].*not the range of a fixed-point"):
        import_model(_qcdq_model(0, 5))


def _quant(x, s, z, b, out, signed=1, narrow=0):
    return helper.make_node("Quant", [x, s, z, b], [out], domain="qonnx.custom_op.general",
                            signed=signed, narrow=narrow, rounding_mode="ROUND")


def test_qonnx_float_vector_input():
    """A QONNX MLP whose first QuantLinear reads the float input (no input quantizer): an
    integer Dense on the input's fixed-point codes with the scales after it, as for a frame
    (the activation scale was folded into the weights, rounded to fixed<16,6>: codes off)."""
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((16, 12)).astype(np.float32) * 0.4
    w1 = rng.standard_normal((12, 5)).astype(np.float32) * 0.4
    sw0, sw1, sh = np.float32(0.0319), np.float32(0.0277), np.float32(0.0837)
    inits = [_t("W0", w0), _t("W1", w1), _t("sw0", sw0), _t("sw1", sw1), _t("sh", sh),
             _t("z", 0.0), _t("b6", 6.0), _t("b3", 3.0), _t("B0", rng.standard_normal(12) * .1)]
    nodes = [_quant("W0", "sw0", "z", "b6", "w0"), _quant("W1", "sw1", "z", "b6", "w1"),
             helper.make_node("MatMul", ["x", "w0"], ["m0"]),
             helper.make_node("Add", ["m0", "B0"], ["a0"]),
             _quant("a0", "sh", "z", "b3", "h"),
             helper.make_node("MatMul", ["h", "w1"], ["y"])]
    m = _model(nodes, inits, (16,))
    m.opset_import.append(helper.make_opsetid("qonnx.custom_op.general", 1))
    x = (rng.integers(0, 17, (N, 16)) / 16).astype(np.float32)  # exact in fixed<16,6>

    def q(v, s, bits):
        return np.clip(np.round(v / s), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1) * s

    wq0, wq1 = q(w0.astype(np.float64), sw0, 6), q(w1.astype(np.float64), sw1, 6)
    a0 = (x.astype(np.float64) @ wq0 + numpy_helper.to_array(inits[-1])).astype(np.float32)
    h = q(a0, sh, 3)
    ref = h @ wq1
    c = mc.compile(import_model(m))
    got = np.asarray(mc.run(c, x), dtype=np.float64)
    first = next(n for n in c.graph.nodes if n.op == "Dense")
    t = c.graph.tensor(first.inputs[1]).dtype
    assert isinstance(t, FixedType) and t.frac == 0 and t.width <= 6, t
    rows_off = (np.abs(got - ref) > 1e-4).any(axis=1).mean()
    assert rows_off <= 0.01, rows_off
