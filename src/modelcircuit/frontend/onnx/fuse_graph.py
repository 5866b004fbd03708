"""The ONNX graph as the pattern fusions (frontend/onnx/attention.py `fuse`) read it:
producers, consumers, constants, which tensors are dynamic, and the evaluation of a
sub-model in float64 (onnx.reference) that the fusions probe their patterns with; the
fusions' shared result (`Fused`) and one-line errors naming a node.

Why a module of its own: both fusions, the attention walk and fit
(frontend/onnx/attention_walk.py, attention.py) and the Gelu table
(frontend/onnx/gelu_fuse.py), stand on this view of the graph, and nothing in it is
particular to either.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...graphs import limits
from ...graphs.ir import GraphError
from .io import node_name, q, tensor_value

DOMAIN = "modelcircuit.fused"


class OnnxModel:
    """The ONNX graph as maps: producers, consumers, constants, which tensors are dynamic."""

    def __init__(self, model: onnx.ModelProto, base_dir: str | bytes | None = None) -> None:
        self.model = model
        self.base_dir = base_dir  # the model's folder: where external tensor data is read
        g = model.graph
        self.inits = {t.name: t for t in g.initializer}
        self.inputs = [vi.name for vi in g.input if vi.name not in self.inits]
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        dyn = set(self.inputs)
        for n in g.node:
            for o in n.output:
                if o:
                    self.producer[o] = n
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)
            # shapes are known at import (the batch fixed, or 1): Shape/Size are constants
            if n.op_type not in ("Shape", "Size") and any(i in dyn for i in n.input if i):
                dyn.update(o for o in n.output if o)
        self.dynamic = dyn
        self.outputs = {o.name for o in g.output}
        self.input_shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
                             for vi in g.input if vi.name in self.inputs}
        self.info: dict[str, list[int | None]] = {}  # shapes (batch None), set by fuse
        self.shape_feeds: set[str] = set()
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          13)

    def cons(self, t: str) -> list[onnx.NodeProto]:
        """The consumers of t that read its values (Shape/Size only read its shape)."""
        return [n for n in self.consumers.get(t, []) if n.op_type not in ("Shape", "Size")]

    def is_const(self, t: str) -> bool:
        return bool(t) and t not in self.dynamic

    def closure(self, outputs: list[str], feeds: set[str]) -> list[onnx.NodeProto]:
        """The nodes that compute `outputs` from `feeds`, the graph inputs and constants, in
        graph order."""
        need, todo = set(), list(outputs)
        self.shape_feeds: set[str] = set()
        while todo:
            t = todo.pop()
            if t in feeds or t in self.inits or not t or t in self.inputs:
                continue
            n = self.producer.get(t)
            if n is None:
                raise Foreign(t)
            if id(n) in need:
                continue
            need.add(id(n))
            for i in n.input:
                if not i:
                    continue
                if (n.op_type in ("Shape", "Size") and i not in feeds and i in self.info
                        and all(d is not None for d in self.info[i][1:])):
                    self.shape_feeds.add(i)  # only its shape is read: zeros of that shape
                else:
                    todo.append(i)
        return [n for n in self.model.graph.node if id(n) in need]

    def evaluate(self, outputs: list[str], feeds: dict[str, np.ndarray],
                 batch: int = 1) -> list[np.ndarray]:
        """Evaluate `outputs` with onnx.reference from `feeds` (float initializers in float64,
        so that fitted weights are exact); graph inputs read only for their shapes are zeros
        of `batch` samples."""
        from onnx.reference import ReferenceEvaluator

        outputs = [o for o in outputs]
        nodes = self.closure(outputs, set(feeds))
        feeds = dict(feeds)
        if any(np.asarray(v).size > limits.MAX_TENSOR_ELEMENTS for v in feeds.values()):
            raise ValueError("a probe of the pattern exceeds MAX_TENSOR_ELEMENTS")
        for i in self.shape_feeds:
            feeds[i] = np.zeros((batch,) + tuple(self.info[i][1:]), dtype=np.float64)
        read = {i for n in nodes for i in n.input}
        for i in self.inputs:  # read for their shapes (or by a side path checked before)
            if i in read and i not in feeds:
                feeds[i] = np.zeros((batch,) + tuple(self.input_shapes[i][1:]),
                                    dtype=np.float64)
        used = {i for n in nodes for i in n.input}
        inits = []
        for k in sorted(used & set(self.inits)):
            v = self.init_value(k)
            inits.append(numpy_helper.from_array(v.astype(np.float64) if v.dtype == np.float32
                                                 else v, k))
        ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
               for k, v in feeds.items()]
        outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
        g = helper.make_graph([_as_double(n) for n in nodes], "probe", ins, outs,
                              initializer=inits)
        m = helper.make_model(g, opset_imports=list(self.model.opset_import))
        import warnings

        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ReferenceEvaluator(m).run(None, feeds)
        return [np.asarray(r) for r in res]

    def init_value(self, t: str) -> np.ndarray:
        """An initializer's values, external data included (read, checked, as the importer
        reads it: io.tensor_value)."""
        return tensor_value(self.inits[t], f"initializer {q(t)}", self.base_dir)

    def value(self, t: str) -> np.ndarray:
        if t in self.inits:
            return self.init_value(t)
        return self.evaluate([t], {})[0]


def _as_double(n: onnx.NodeProto) -> onnx.NodeProto:
    """The node computing in float64 where it would make float32 (Cast, Constant values)."""
    if n.op_type not in ("Cast", "Constant", "ConstantOfShape"):
        return n
    c = onnx.NodeProto()
    c.CopyFrom(n)
    for a in c.attribute:
        if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
            a.i = TensorProto.DOUBLE
        elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
            a.t.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
        elif a.name == "value_float":
            v = a.f
            c.ClearField("attribute")
            c.attribute.extend([helper.make_attribute(
                "value", numpy_helper.from_array(np.array(v, dtype=np.float64)))])
            break
    return c


class Foreign(Exception):
    """A tensor needed by a sub-model is an activation outside it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def label(n: onnx.NodeProto) -> str:
    return f"node {node_name(n, q)} ({n.op_type})"


def err(n: onnx.NodeProto, msg: str) -> GraphError:
    return GraphError(f"{label(n)}: {msg}")


def dyn_inputs(m: OnnxModel, n: onnx.NodeProto) -> list[str]:
    return [i for i in n.input if i and i in m.dynamic]


def scalar(m: OnnxModel, n: onnx.NodeProto) -> float | None:
    """The constant scalar operand of a Mul/Div with one activation (None: not such a node)."""
    if n.op_type not in ("Mul", "Div") or len(dyn_inputs(m, n)) != 1:
        return None
    c = n.input[1] if n.input[0] in m.dynamic else n.input[0]
    if n.op_type == "Div" and c == n.input[0]:
        return None
    v = m.value(c)
    if v.size != 1:
        return None
    f = float(v.reshape(-1)[0])
    return 1.0 / f if n.op_type == "Div" else f


def shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    try:
        inf = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:
        inf = model
    out = {}
    for vi in list(inf.graph.value_info) + list(inf.graph.input) + list(inf.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                            for d in tt.shape.dim]
    return out


class Fused:
    def __init__(self) -> None:
        self.remove: set[int] = set()
        self.new_nodes: list[tuple[onnx.NodeProto, list[onnx.NodeProto]]] = []  # (anchor, nodes)
        self.inits: list[onnx.TensorProto] = []
