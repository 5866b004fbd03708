"""What `mc.run` takes as float inputs: a batch (N, *shape), a batch of flat samples (N, size)
also where the model's input has several axes, one sample; and a large finite input through
a host head (a QuantizeLinear of scale s: x / s overflows float32 to Inf) saturates as ONNX
QuantizeLinear does instead of failing."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import modelcircuit as mc
from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs.types import parse_type


def seq_model() -> onnx.ModelProto:
    """x (1, 3, 4) -> Flatten -> MatMul 12 -> 2: a per-sample input of two axes."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).normal(0, 0.3, (12, 2)).astype(np.float32), "w"
    )
    g = oh.make_graph(
        [oh.make_node("Flatten", ["x"], ["f"], axis=1), oh.make_node("MatMul", ["f", "w"], ["y"])],
        "seq2d",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [w],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])


def qdq_input_model() -> onnx.ModelProto:
    """x (1, 4) -> QuantizeLinear(0.013, int8) -> DequantizeLinear -> MatMul: the scale is
    no power of two, so the quantizer is a host head (Div, Requant)."""
    inits = [
        numpy_helper.from_array(
            np.random.default_rng(1).normal(0, 0.3, (4, 3)).astype(np.float32), "w"
        ),
        numpy_helper.from_array(np.array(0.013, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int8), "z"),
    ]
    g = oh.make_graph(
        [
            oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            oh.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
            oh.make_node("MatMul", ["d", "w"], ["y"]),
        ],
        "qdq_in",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        inits,
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])


def load(model: onnx.ModelProto, tmp_path) -> mc.Graph:
    p = tmp_path / f"{model.graph.name}.onnx"
    onnx.save(model, str(p))
    return mc.load_onnx(str(p))


def test_flat_batch_of_a_two_axis_input(tmp_path) -> None:
    c = mc.compile(load(seq_model(), tmp_path))
    x = np.random.default_rng(2).normal(0, 1, (5, 3, 4)).astype(np.float32)
    want = mc.run(c, x)
    # (5, 12) was taken for one sample of 2 axes and refused ("[1, 5, 12]")
    assert np.array_equal(mc.run(c, x.reshape(5, 12)), want)
    assert np.array_equal(mc.run(c, x.reshape(5, 12), backend="gpu-emu"), want)
    assert np.array_equal(mc.run(c, x[0]), want[:1])
    with pytest.raises(mc.GraphError, match=r"input of shape \[5, 11\]"):
        mc.run(c, np.zeros((5, 11), np.float32))


@pytest.mark.parametrize("precision", [None, "float32"])
def test_huge_finite_input_saturates_in_the_head(tmp_path, precision) -> None:
    c = mc.compile(load(qdq_input_model(), tmp_path), precision=precision)
    if precision is None:
        assert [n.op for n in c.head.nodes] == ["Div", "Requant"]
    big = np.float32(3e38)  # finite; big / 0.013 is Inf in float32
    x = np.array([[big] * 4, [-big] * 4], np.float32)
    ends = np.array([[127 * 0.013] * 4, [-128 * 0.013] * 4], np.float32)  # the int8 ends
    got = mc.run(c, x)
    assert np.array_equal(got, mc.run(c, ends))
    if precision is None:
        assert np.array_equal(mc.run(c, x, backend="gpu-emu"), got)


def test_saturate_inf_keeps_nan_and_wrapping_types() -> None:
    t = parse_type("fixed<8,3>")
    q = fx.quantize(fx.saturate_inf(np.array([np.inf, -np.inf, 1.0]), t), t)
    assert q.tolist() == [t.qmax, t.qmin, 32]
    with pytest.raises(ValueError, match="NaN or Inf"):
        fx.quantize(fx.saturate_inf(np.array([np.nan]), t), t)
    w = parse_type("fixed<8,3,TRN,WRAP>")
    with pytest.raises(ValueError, match="NaN or Inf"):
        fx.quantize(fx.saturate_inf(np.array([np.inf]), w), w)
