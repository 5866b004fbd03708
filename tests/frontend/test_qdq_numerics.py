"""onnxruntime's QDQ numerics where two quantizers meet in float (models built with
onnx.helper, scales as onnxruntime's calibration writes them: float32, not powers of two).
The reference is onnxruntime with graph optimisations off, which is the ONNX definition
(onnx.reference agrees): DequantizeLinear, the float op, QuantizeLinear (half to even,
saturated). With its default optimisations onnxruntime fuses a QDQ Add into QLinearAdd (the
same codes here) and a QDQ Softmax into QLinearSoftmax (its own table: other codes).

* a residual Add of two activations with different scales: every pair of input codes gives
  onnxruntime's output code (the operands were each rounded to fixed<16,6>: one code off);
* a Softmax before a quantizer: at most one code from onnxruntime, as the bound computed
  from its tables promises (its exp table was indexed by fixed<16,6> values and the
  reciprocal table read sums 2048 codes apart: two codes off). Equality is impossible by
  design: the result is a product of two table entries."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.frontend.onnx.importer import import_model
from modelcircuit.graphs import reference
from modelcircuit.graphs.ops import Op, SoftmaxAttrs
from modelcircuit.graphs.passes.tables import quantizer_step, softmax_error_bound


def _t(name: str, v, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, dtype=dtype), name)


def _model(nodes, inits, n_in: int, n_out: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n_in])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n_out])
    m = helper.make_model(
        helper.make_graph(nodes, "qdq", [x], [y], inits),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    m.ir_version = 7
    return m


def _qdq(x: str, out: str, s: str, z: str) -> list:
    return [
        helper.make_node("QuantizeLinear", [x, s, z], [f"{out}_q"]),
        helper.make_node("DequantizeLinear", [f"{out}_q", s, z], [out]),
    ]


def _ort_codes(m: onnx.ModelProto, x: np.ndarray, s: float, z: int) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return np.round(sess.run(None, {"x": x})[0].astype(np.float64) / s).astype(np.int64) + z


def _golden_codes(c, x: np.ndarray, s: float, z: int) -> np.ndarray:
    y = np.asarray(mc.run(c, x), dtype=np.float64)
    return np.round(y / s).astype(np.int64) + z


def _join_model(dt, za: int, zb: int, zc: int) -> onnx.ModelProto:
    """x (N, 2) of codes / 256 (codes 0..255) -> a = QDQ(x0 * 256 sa, sa, za),
    b = QDQ(x1 * 256 sb, sb, zb) -> QDQ(a + b, sc, zc): the Add sees the codes x0 + za and
    x1 + zb."""
    sa, sb, sc = 0.018295104, 0.030043012, 0.042944986  # onnxruntime's, a sweep's skip model
    inits = [
        _t("s1", 1 / 256),
        _t("z1", 0, np.uint8),
        _t("sa", sa),
        _t("za", za, dt),
        _t("sb", sb),
        _t("zb", zb, dt),
        _t("sc", sc),
        _t("zc", zc, dt),
        _t("ka", np.float32(sa) * 256),
        _t("kb", np.float32(sb) * 256),
        _t("Wa", [[1, 0]], np.int8),
        _t("Wb", [[0, 1]], np.int8),
        _t("sw", 1.0),
        _t("zw", 0, np.int8),
    ]
    nodes = _qdq("x", "xd", "s1", "z1")
    for k in "ab":
        nodes += [
            helper.make_node("DequantizeLinear", [f"W{k}", "sw", "zw"], [f"w{k}"]),
            helper.make_node("Gemm", ["xd", f"w{k}"], [f"g{k}"], transB=1),
            helper.make_node("Mul", [f"g{k}", f"k{k}"], [f"m{k}"]),
        ]
        nodes += _qdq(f"m{k}", k, f"s{k}", f"z{k}")
    nodes.append(helper.make_node("Add", ["a", "b"], ["sum"]))
    nodes += [
        helper.make_node("QuantizeLinear", ["sum", "sc", "zc"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sc", "zc"], ["y"]),
    ]
    return _model(nodes, inits, 2, 1)


@pytest.mark.parametrize("dt,za,zb,zc", [(np.uint8, 0, 0, 0), (np.int8, -128, -128, -37)])
def test_residual_add_of_two_scales_every_code_pair(dt, za, zb, zc):
    m = _join_model(dt, za, zb, zc)
    i, j = np.meshgrid(np.arange(256), np.arange(256))
    x = (np.stack([i.ravel(), j.ravel()], axis=1) / 256).astype(np.float32)
    c = mc.compile(import_model(m))
    sc = float(np.float32(0.042944986))
    want = _ort_codes(m, x, sc, zc)
    assert len(np.unique(want)) > 100  # the sums span the output's codes
    got = _golden_codes(c, x, sc, zc)
    off = np.flatnonzero(got != want)
    assert off.size == 0, f"{off.size} of {len(x)} pairs off, e.g. {256 * x[off[:3]]}"
    join = next(n for n in c.graph.nodes if n.op == Op.ADD and len(c.graph.activations(n)) == 2)
    ts = [c.graph.tensor(i).dtype for i in join.inputs]  # the exact products s * (q - z)
    assert all(t.frac >= 24 and t.width <= 34 for t in ts), ts


def _softmax_model(s_in: float, z_in: int, n: int) -> onnx.ModelProto:
    inits = [_t("si", s_in), _t("zi", z_in, np.int8), _t("sy", 1 / 255), _t("zy", -128, np.int8)]
    nodes = _qdq("x", "xd", "si", "zi") + [helper.make_node("Softmax", ["xd"], ["p"], axis=1)]
    nodes += [
        helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    return _model(nodes, inits, n, n)


def test_softmax_before_a_quantizer_is_within_one_code_by_its_bound():
    s_in, z_in, n = 0.10356768, 16, 10  # onnxruntime's (a sweep's bn_sm_s8s8_pc model)
    m = _softmax_model(s_in, z_in, n)
    rng = np.random.default_rng(3)
    x = (rng.normal(0, 3, (3000, n)) + rng.uniform(-2, 2, (3000, 1))).astype(np.float32)
    c = mc.compile(import_model(m))
    sy = float(np.float32(1 / 255))
    g = c.graph
    sm = next(nd for nd in g.nodes if nd.op == Op.SOFTMAX)
    a = SoftmaxAttrs.of(sm)
    tin = g.tensor(sm.inputs[0]).dtype
    # the exp table reads the input codes, the scale in its entries: one entry per code
    assert tin.frac == 0 and a.exp_shift == 0 and a.scale == float(np.float32(s_in))
    tab = {
        "exp": g.constants[sm.inputs[1]],
        "exp_lo": a.exp_lo,
        "exp_shift": a.exp_shift,
        "recip": g.constants[sm.inputs[2]],
        "recip_lo": a.recip_lo,
        "recip_shift": a.recip_shift,
    }
    bound = softmax_error_bound(tab, a.scale, n)
    step = quantizer_step(g, sm)
    assert step is not None and sy * (1 - 1e-6) <= step <= sy and bound <= step / 2
    # the bound holds: the Softmax's unrounded result against the exact softmax of its codes
    q = np.clip(np.round(x.astype(np.float64) / np.float32(s_in)) + z_in, -128, 127)
    e = np.exp(np.float32(s_in) * (q - q.max(axis=1, keepdims=True)))
    exact = e / e.sum(axis=1, keepdims=True)
    y = reference.softmax(g, sm, [q.astype(np.int64)]) * g.tensor(sm.outputs[0]).dtype.lsb
    assert np.abs(y - exact).max() <= bound
    # and so the codes: one from onnxruntime at most (which rounds the exact softmax)
    want = _ort_codes(m, x, sy, -128)
    got = _golden_codes(c, x, sy, -128)
    assert np.abs(got - want).max() <= 1
    assert (got != want).any(axis=1).mean() < 0.1
