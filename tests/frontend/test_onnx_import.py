"""The ONNX importer (onnx_import.py)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from modelcircuit.frontend.onnx.importer import import_model


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

