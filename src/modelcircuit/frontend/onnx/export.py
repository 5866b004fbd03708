"""Graph (float, before compile) -> ONNX, our own exporter: the bundled example model is
written with it, so the same IR round-trips through ONNX and onnxruntime can check it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...graphs.ir import Graph, GraphError

_LUT = {"sigmoid": "Sigmoid", "tanh": "Tanh", "selu": "Selu"}


def to_onnx(g: Graph, opset: int = 17) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k)
             for k, v in sorted(g.constants.items())]
    nodes = []
    for n in g.nodes:
        out = n.outputs[0]
        if n.op == "Dense":
            mm = out if len(n.inputs) == 2 else f"{out}_mm"
            nodes.append(helper.make_node("MatMul", list(n.inputs[:2]), [mm], name=f"{n.name}_matmul"))
            if len(n.inputs) > 2:
                nodes.append(helper.make_node("Add", [mm, n.inputs[2]], [out], name=f"{n.name}_bias"))
        elif n.op in ("Relu", "Add", "Sub", "Mul", "Softmax"):
            kw = {"axis": -1} if n.op == "Softmax" else {}
            nodes.append(helper.make_node(n.op, list(n.inputs), [out], name=n.name, **kw))
        elif n.op == "LeakyRelu":
            nodes.append(helper.make_node("LeakyRelu", [n.inputs[0]], [out], name=n.name,
                                          alpha=float(n.get("alpha"))))
        elif n.op == "Lut":
            nodes.append(helper.make_node(_LUT[n.get("func")], [n.inputs[0]], [out], name=n.name))
        else:
            raise GraphError(f"onnx export: op {n.op} (node {n.name}) is not exportable")
    ins = [helper.make_tensor_value_info(i, TensorProto.FLOAT, ["N", *g.tensor(i).shape])
           for i in g.inputs]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["N", *g.tensor(o).shape])
            for o in g.outputs]
    graph = helper.make_graph(nodes, g.name, ins, outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="modelcircuit")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
