"""Compiler passes on small hand-built graphs: precision sources, QDQ and bipolar import,
accumulator widths, table indexing, determinism of the graph id."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.graphs import reference
from modelcircuit.graphs.builder import GraphBuilder
from modelcircuit.graphs.ir import GraphError
from modelcircuit.graphs.onnx_export import to_onnx
from modelcircuit.graphs.onnx_import import import_model
from modelcircuit.graphs.types import FixedType, parse_type


def _mlp(seed: int = 0) -> mc.Graph:
    rng = np.random.default_rng(seed)
    b = GraphBuilder("mlp")
    x = b.input("x", 6)
    h = b.relu(b.dense(x, rng.normal(size=(6, 5)), rng.normal(size=5), name="fc1"), name="r1")
    b.output(b.dense(h, rng.normal(size=(5, 3)), None, name="fc2"))
    return b.build()


def test_per_layer_precision_overrides_global():
    c = mc.compile(_mlp(), precision="fixed<16,6>",
                   per_layer={"fc2": {"result": "fixed<12,5>", "weight": "fixed<10,2>"}})
    g = c.graph
    fc2 = g.node("fc2")
    assert str(g.tensor(fc2.outputs[0]).dtype) == "fixed<12,5>"
    assert str(g.tensor(fc2.inputs[1]).dtype) == "fixed<10,2>"
    assert str(g.tensor(g.node("fc1").outputs[0]).dtype) == "fixed<16,6>"


def test_dense_relu_fused_and_bit_exact_against_fractions():
    g = _mlp(1)
    c = mc.compile(g, precision="fixed<10,4>")
    cg = c.graph
    assert [n.op for n in cg.nodes] == ["Dense", "Dense"] and cg.nodes[0].get("relu")
    x = np.random.default_rng(2).normal(size=(50, 6))
    out = mc.run(c, x, codes=True)
    # independent model: exact rationals, floor requantization, saturation
    t = FixedType(10, 4)

    def q(v: Fraction) -> int:
        k = int(np.floor(v * 2**t.frac))
        return min(max(k, t.qmin), t.qmax)

    W1, b1 = (cg.constants[i] for i in cg.nodes[0].inputs[1:])
    W2 = cg.constants[cg.nodes[1].inputs[1]]
    for row, got in zip(x, out, strict=True):
        xv = [q(Fraction(float(v))) for v in row]
        h = [max(q(sum(Fraction(int(xv[i]) * int(W1[i, j]), 2 ** (2 * t.frac)) for i in range(6))
                   + Fraction(int(b1[j]), 2**t.frac)), 0) for j in range(5)]
        y = [q(sum(Fraction(h[i] * int(W2[i, j]), 2 ** (2 * t.frac)) for i in range(5)))
             for j in range(3)]
        assert list(got) == y


def test_accumulator_width_is_exact_range():
    b = GraphBuilder("acc")
    x = b.input("x", 3)
    b.output(b.dense(x, np.array([[1.0], [-2.0], [0.5]]), None, name="d"))
    c = mc.compile(b.build(), precision="fixed<8,4>")
    # codes: x in [-128, 127], w = 16, -32, 8 (frac 4) -> sum in [-7168, 7112] at frac 8
    assert c.graph.node("d").get("acc") == "fixed<14,6>"


def test_qdq_becomes_a_type():
    w = numpy_helper.from_array(np.array([[0.5, -0.25], [1.0, 0.75]], np.float32), "w")
    s = numpy_helper.from_array(np.array(2.0**-4, np.float32), "s")
    z = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
                          initializer=[w, s, z])
    gr = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    c = mc.compile(gr)
    assert str(c.graph.tensor(c.graph.outputs[0]).dtype) == "fixed<8,4,RND_CONV,SAT>"


def test_bipolar_weights_import():
    w = numpy_helper.from_array(np.array([[0.3, -0.2], [-1.0, 0.0]], np.float32), "w")
    sc = numpy_helper.from_array(np.array(1.0, np.float32), "sc")
    nodes = [helper.make_node("BipolarQuant", ["w", "sc"], ["wq"], domain="qonnx.custom_op.general"),
             helper.make_node("MatMul", ["x", "wq"], ["y"])]
    g = helper.make_graph(nodes, "bp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
                          initializer=[w, sc])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                            helper.make_opsetid("qonnx.custom_op.general", 1)])
    gr = import_model(m)
    wq = gr.constants[gr.nodes[0].inputs[1]]
    assert wq.tolist() == [[1.0, -1.0], [-1.0, 1.0]]


def test_lut_index_is_documented_slice():
    b = GraphBuilder("sig")
    x = b.input("x", 4)
    b.output(b.activation(x, "sigmoid", name="s"))
    c = mc.compile(b.build(), precision="fixed<16,6>", table_bits=10)
    n = c.graph.node("s")
    lo, shift, size = n.get("lo"), n.get("shift"), n.get("size")
    assert lo % (1 << shift) == 0 and size <= 1025
    codes = np.array([[-32768, -1, 0, 32767]])
    got = reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]
    table = c.graph.constants[n.inputs[1]]
    assert got[0, 0] == table[0] and got[0, 3] == table[-1]
    # sigmoid(0) ~ 0.5 within the table step
    assert abs(got[0, 2] / 2**10 - 0.5) < 2 ** -4


def test_softmax_sums_to_one_and_matches_float():
    b = GraphBuilder("sm")
    x = b.input("x", 5)
    b.output(b.softmax(x, name="sm"))
    c = mc.compile(b.build(), precision="fixed<16,6>")
    cf = mc.compile(b.build(), precision="float32")
    xs = np.random.default_rng(3).normal(size=(200, 5)) * 3
    yq, yf = mc.run(c, xs), mc.run(cf, xs)
    assert np.max(np.abs(yq - yf)) < 0.01
    assert np.max(np.abs(yq.sum(-1) - 1)) < 0.01


def test_builder_onnx_roundtrip_float():
    g = _mlp(4)
    g2 = import_model(to_onnx(g))
    x = np.random.default_rng(5).normal(size=(20, 6)).astype(np.float32)
    a = mc.run(mc.compile(g, precision="float32"), x)
    b = mc.run(mc.compile(g2, precision="float32"), x)
    assert np.array_equal(a, b)


def test_graph_id_changes_with_weights_and_options():
    ids = {mc.compile(_mlp(0), precision="fixed<16,6>").graph_id,
           mc.compile(_mlp(1), precision="fixed<16,6>").graph_id,
           mc.compile(_mlp(0), precision="fixed<16,7>").graph_id,
           mc.compile(_mlp(0), precision="fixed<16,6>", table_bits=8).graph_id}
    assert len(ids) == 4
    assert mc.compile(_mlp(0), precision="fixed<16,6>").graph_id == mc.compile(
        _mlp(0), precision="fixed<16,6>").graph_id


def test_wrap_output_flips_sign_like_hls4ml():
    b = GraphBuilder("w")
    x = b.input("x", 1)
    b.output(b.dense(x, np.array([[3.0]]), None, name="d"))
    y_wrap = mc.run(mc.compile(b.build(), precision="fixed<8,3,TRN,WRAP>"), np.array([[1.5]]))
    y_sat = mc.run(mc.compile(b.build(), precision="fixed<8,3>"), np.array([[1.5]]))
    assert y_sat[0, 0] == pytest.approx(4 - 2**-5)  # saturates at the top of fixed<8,3>
    assert y_wrap[0, 0] == pytest.approx(4.5 - 8.0)  # 4.5 wraps to -3.5


def test_unsupported_builder_activation():
    b = GraphBuilder("bad")
    x = b.input("x", 2)
    with pytest.raises(GraphError, match="unknown activation"):
        b.activation(x, "gelu")


def test_parse_type_roundtrip():
    for s in ["fixed<16,6>", "ufixed<8,0>", "fixed<8,-2>", "fixed<4,9>", "fixed<8,3,RND_CONV,WRAP>"]:
        assert str(parse_type(str(parse_type(s)))) == str(parse_type(s))


def test_onnx_model_keeps_checker_happy(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(to_onnx(_mlp()), p)
    onnx.checker.check_model(str(p))


def test_leaky_relu_scalar_alpha_constant_compiles():
    """A 0-d constant (the LeakyRelu alpha) goes through quantize/overflow as a 0-d array."""
    b = GraphBuilder("lr")
    x = b.input("x", 1)
    b.output(b.leaky_relu(b.dense(x, np.array([[0.088]]), None, name="d"), alpha=0.125))
    c = mc.compile(b.build(), precision="ufixed<3,0>")
    assert mc.run(c, np.array([[0.5]]), codes=True).shape == (1, 1)
