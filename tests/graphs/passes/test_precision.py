"""The precision pass (passes/precision.py): per-layer types over the global one, QDQ
pairs as types."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.frontend.onnx.importer import import_model
from tests.graphs.helpers import mlp


def test_per_layer_precision_overrides_global():
    c = mc.compile(mlp(), precision="fixed<16,6>",
                   per_layer={"fc2": {"result": "fixed<12,5>", "weight": "fixed<10,2>"}})
    g = c.graph
    fc2 = g.node("fc2")
    assert str(g.tensor(fc2.outputs[0]).dtype) == "fixed<12,5>"
    assert str(g.tensor(fc2.inputs[1]).dtype) == "fixed<10,2>"
    assert str(g.tensor(g.node("fc1").outputs[0]).dtype) == "fixed<16,6>"


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

