"""Dilated Conv (TCN / WaveNet Conv1d, DeepLab Conv2d; was refused at import): the Conv with
dilation 1 over the window's span whose weight has zeros between the taps
(frontend/onnx/spatial._dilate), so every backend computes it unchanged. Float32 golden ==
onnxruntime within the float32 rounding bound (onnx.reference for dilations with auto_pad
SAME_*, which onnxruntime refuses), fixed point gpu-emu == golden bit for bit, and on a 1-D
and a 2-D model with strides and padding golden == RTL (Verilator) == gpu-emu. A dilated
MaxPool/AveragePool and bad dilations are refused in one line (tests/graphs/test_cnn.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.sim import rtl
from tests.graphs.helpers import float_matches_reference, verify_onnx_rtl

# name: (Conv attributes, Cin, Cout, kernel, frame (per axis), group)
CASES = {
    "1d_causal_tcn": (dict(dilations=[4], pads=[4, 0]), 3, 4, (2,), (12,), 1),
    "1d_stride_pads": (dict(dilations=[3], strides=[2], pads=[3, 2]), 3, 4, (3,), (13,), 1),
    "1d_same_lower": (dict(dilations=[3], auto_pad="SAME_LOWER"), 2, 3, (2,), (10,), 1),
    "2d_stride_asym_pads": (
        dict(dilations=[2, 3], strides=[2, 1], pads=[2, 3, 1, 0]),
        3,
        5,
        (3, 2),
        (9, 8),
        1,
    ),
    "2d_depthwise": (dict(dilations=[2, 2], pads=[2, 2, 2, 2]), 4, 8, (3, 3), (7, 6), 4),
    "2d_grouped": (dict(dilations=[2, 1], pads=[2, 1, 2, 1]), 4, 6, (3, 3), (7, 6), 2),
    "2d_same_upper_stride": (
        dict(dilations=[2, 2], auto_pad="SAME_UPPER", strides=[2, 2]),
        2,
        3,
        (3, 3),
        (8, 7),
        1,
    ),
}


def _model(nodes, in_shape, inits, opset=13) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "dilated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *in_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _case(name: str) -> tuple[onnx.ModelProto, np.ndarray, tuple[int, ...]]:
    attrs, cin, cout, k, frame, group = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    w = rng.normal(0, 0.5, size=(cout, cin // group, *k))
    inits = {"w": w, "b": rng.normal(0, 0.3, size=cout)}
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, **attrs)
    return _model([node], (cin, *frame), inits), w.astype(np.float32), (cin, *frame)


def _reference(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime, one row at a time; onnx.reference where onnxruntime refuses ("Dilation not
    supported for AutoPadType::SAME_UPPER or AutoPadType::SAME_LOWER")."""
    if any(a.name == "auto_pad" for nd in m.graph.node for a in nd.attribute):
        from onnx.reference import ReferenceEvaluator

        s = ReferenceEvaluator(m)
    else:
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"x": x[i : i + 1]})[0] for i in range(len(x))])


@pytest.mark.parametrize("name", sorted(CASES))
def test_dilated_conv_equals_onnxruntime(name, tmp_path):
    m, w, shp = _case(name)
    p, x, _ = float_matches_reference(m, shp, tmp_path, _reference, name)
    c = mc.compile(mc.load_onnx(p), precision="float32")
    # the IR Conv: dilation 1 over the span, the ONNX taps at multiples of d, zeros between
    attrs, _, _, k, _, group = CASES[name]
    dil = attrs["dilations"]
    conv = next(n for n in c.graph.nodes if str(n.op) == "Conv")
    wt = c.graph.constants[conv.inputs[1]]
    span = tuple((kk - 1) * d + 1 for kk, d in zip(k, dil, strict=True))
    assert tuple(conv.get("kernel")) == span == wt.shape[: len(k)]
    taps = wt[tuple(slice(None, None, d) for d in dil)]
    if conv.get("group") == group:  # (a grouped one is block-diagonal, test_cnn_ops.py)
        r = len(k)
        np.testing.assert_array_equal(taps, w.transpose(list(range(2, r + 2)) + [1, 0]))
    assert np.count_nonzero(wt) == np.count_nonzero(taps)
    # fixed point: the CUDA kernels (CPU emulator) == golden, bit for bit
    c = mc.compile(mc.load_onnx(p), precision="fixed<16,6>")
    np.testing.assert_array_equal(
        mc.run(c, x, backend="gpu-emu", codes=True), mc.run(c, x, codes=True)
    )


def _rtl_model(kind: str) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """1-D: a causal dilated Conv (TCN), ReLU, a dilated Conv with stride 2 and uneven pads.
    2-D: a Conv with dilations (2, 3), strides (2, 1) and asymmetric pads, ReLU."""
    rng = np.random.default_rng(3)
    n = helper.make_node
    if kind == "1d":
        nodes = [
            n("Conv", ["x", "w1", "b1"], ["c1"], dilations=[2], pads=[2, 0]),
            n("Relu", ["c1"], ["r1"]),
            n("Conv", ["r1", "w2", "b2"], ["y"], dilations=[3], strides=[2], pads=[3, 1]),
        ]
        inits = {
            "w1": rng.normal(0, 0.5, (4, 2, 2)),
            "b1": rng.normal(0, 0.3, 4),
            "w2": rng.normal(0, 0.5, (3, 4, 3)),
            "b2": rng.normal(0, 0.3, 3),
        }
        return _model(nodes, (2, 12), inits), (2, 12)
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], dilations=[2, 3], strides=[2, 1], pads=[2, 1, 1, 2]),
        n("Relu", ["c1"], ["y"]),
    ]
    inits = {"w1": rng.normal(0, 0.5, (3, 2, 3, 2)), "b1": rng.normal(0, 0.3, 3)}
    return _model(nodes, (2, 7, 6), inits), (2, 7, 6)


@pytest.mark.integration
@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
@pytest.mark.parametrize("kind", ["1d", "2d"])
def test_dilated_conv_verify_golden_rtl_gpu_emu(kind, tmp_path):
    """`verify --backends golden,rtl,gpu-emu` (Verilator + cocotb, about 30 s each: the
    build): bit-exact, simulated latency and II == the compile-time report."""
    m, shp = _rtl_model(kind)
    verify_onnx_rtl(m, shp, tmp_path, "fixed<10,4>", _reference)
