"""An `onnx.backend.base.Backend` over the golden model in float mode (ONNX node conformance).

The model goes through the real front end: `onnx_import.import_model`, then
`modelcircuit.compile(graph, precision="float32")`, then `reference.execute`.

Two conventions of the IR shape what this adapter does (DESIGN.md, "Numbers", "Layout"):

* The IR is per sample: the first dimension of the (first) input is the batch.
* Weights are compiled into the graph. ONNX node tests feed weights as graph inputs, so a
  graph input is an *activation* when it is the first input or has the first input's
  declared shape and type; every other input is a *parameter*: its value is bound as an
  initializer when `run` is called, and the model is compiled then (cached by the values).

Two views of a test tensor (both checked against onnx's expected outputs, so neither can pass
a case it computes wrongly):

1. *rows* (tried first; how exported models look): dimension 0 of every activation is the
   batch, and the model is imported as it is.
2. *one sample* (when the golden model refuses the rows view): each activation is one sample.
   A copy of the model proto (parameters already bound as initializers) gets a leading batch
   axis of size 1 on every activation input and output and on every tensor computed from
   them, and the nodes that see those tensors are rewritten to keep their meaning
   (`one_sample`): non-negative axis attributes shift by one (Softmax, Concat, Gather,
   Squeeze/Unsqueeze axes, attribute or constant input; negative axes count from the end and
   stay), a Transpose perm becomes [0] + [p + 1], a constant Reshape target gets a leading
   1, Flatten (always 2-D) becomes a Reshape to [1, a, b], element-wise ops keep a constant
   operand only if its rank does not exceed the activation's. A node it cannot rewrite
   exactly (e.g. BatchNormalization, whose channel axis is 1, or Gemm, 2-D only) makes the
   view fail with a GraphError naming it. Inputs are fed as x[None]; outputs are returned
   as y[0].

Anything the golden model cannot do is a `GraphError` whose message says why (unsupported op,
attribute, dtype or shape), never a silent fallback. Refusals for a dtype or an attribute
value are `onnx_import.Unsupported` (kind "dtype"/"attribute" and the name, which the
message contains): the conformance table counts only those as excused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from ...graphs import reference
from ...graphs.ir import GraphError
from ..onnx.importer import Unsupported, import_model


def _dtype_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type)


def _declared(vi: onnx.ValueInfoProto) -> tuple[int, tuple[Any, ...] | None]:
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is None:
        return TensorProto.UNDEFINED, None
    if not tt.HasField("shape"):
        return tt.elem_type, None
    return tt.elem_type, tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                               for d in tt.shape.dim)


def _check_value_type(vi: onnx.ValueInfoProto, what: str) -> None:
    if not vi.type.HasField("tensor_type"):
        kind = vi.type.WhichOneof("value") or "untyped"
        raise Unsupported(f"{what} {vi.name!r} has type {kind}; only tensors (dtype float32) "
                          "are supported", "dtype", kind)
    et = vi.type.tensor_type.elem_type
    if et not in (TensorProto.FLOAT, TensorProto.UNDEFINED):
        raise Unsupported(f"{what} {vi.name!r} has dtype {_dtype_name(et)}; the float golden "
                          "model computes float32 only", "dtype", _dtype_name(et))


def excused(e: BaseException) -> bool:
    """A refusal for a dtype or attribute value the golden model does not support, whose
    message names it (strict: anything else counts against conformance)."""
    return (isinstance(e, Unsupported) and e.kind in ("dtype", "attribute")
            and bool(e.what) and e.what in str(e))


# -- the one-sample view ----------------------------------------------------------------

_UNARY = ("Relu", "LeakyRelu", "Selu", "Sigmoid", "Tanh", "Identity", "Dropout")
_BINARY = ("Add", "Sub", "Mul", "Div")


def _shift(axes: Sequence[int]) -> list[int]:
    return [int(a) + 1 if a >= 0 else int(a) for a in axes]


def one_sample(model: onnx.ModelProto, activations: Sequence[str]) -> onnx.ModelProto:
    """A copy of `model` in which every activation (and every tensor computed from one)
    carries a leading batch axis of size 1; see the module docstring. Raises GraphError
    for a node it cannot rewrite exactly."""
    return _OneSample(model, activations).rewrite()


class _OneSample:
    """The rewrite of one_sample: one method per kind of node, chosen by REWRITES."""

    def __init__(self, model: onnx.ModelProto, activations: Sequence[str]) -> None:
        self.m = onnx.ModelProto()
        self.m.CopyFrom(model)
        self.g = self.m.graph
        inferred = onnx.shape_inference.infer_shapes(model)
        self.shapes: dict[str, tuple[int, ...] | None] = {}
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(
                inferred.graph.output):
            _, shp = _declared(vi)
            self.shapes[vi.name] = (tuple(shp) if shp is not None
                                    and all(isinstance(d, int) for d in shp) else None)
        self.consts = {i.name: numpy_helper.to_array(i) for i in self.g.initializer}
        self.opset = next((o.version for o in self.m.opset_import
                           if o.domain in ("", "ai.onnx")), 13)
        self.batched = set(activations)

    # -- helpers ------------------------------------------------------------------------
    @staticmethod
    def fail(node: onnx.NodeProto, why: str) -> GraphError:
        return GraphError(f"cannot present the test tensors as one sample: node "
                          f"{node.name or '?'} ({node.op_type}) {why}")

    def rank(self, node: onnx.NodeProto, name: str) -> int:
        shp = self.shapes.get(name)
        if shp is None:
            raise self.fail(node, f"input {name!r} has no static shape")
        return len(shp)

    def new_const(self, base: str, value: np.ndarray) -> str:
        name = f"{base}__one_sample"
        self.g.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    @staticmethod
    def set_attr(node: onnx.NodeProto, name: str, value: Any) -> None:
        keep = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(keep)
        node.attribute.append(helper.make_attribute(name, value))

    # -- one method per kind of node: (node, inputs, attrs) -> the rewritten node --------
    def unary(self, node: onnx.NodeProto, ins: list[str], attrs: dict) -> onnx.NodeProto:
        return node

    def binary(self, node: onnx.NodeProto, ins: list[str], attrs: dict) -> onnx.NodeProto:
        r = max(self.rank(node, i) for i in ins if i in self.batched)
        for i in ins:
            if i not in self.batched and (i not in self.consts or self.consts[i].ndim > r):
                raise self.fail(node, f"operand {i!r} is not a constant of rank <= {r}")
        return node

    def softmax(self, node: onnx.NodeProto, ins: list[str], attrs: dict) -> onnx.NodeProto:
        axis = attrs.get("axis", 1 if self.opset < 13 else -1)
        self.set_attr(node, "axis", _shift([axis])[0])
        return node

    def concat_gather(self, node: onnx.NodeProto, ins: list[str], attrs: dict) -> onnx.NodeProto:
        if node.op_type == "Concat" and not all(i in self.batched for i in ins):
            raise self.fail(node, "concatenates a constant with activations")
        if node.op_type == "Gather" and ins[1] in self.batched:
            raise self.fail(node, "gathers with activation indices")
        self.set_attr(node, "axis", _shift([attrs.get("axis", 0)])[0])
        return node

    def transpose(self, node: onnx.NodeProto, ins: list[str], attrs: dict) -> onnx.NodeProto:
        perm = attrs.get("perm", list(range(self.rank(node, ins[0])))[::-1])
        self.set_attr(node, "perm", [0] + [int(p) + 1 for p in perm])
        return node

    def flatten(self, node: onnx.NodeProto, ins: list[str], attrs: dict) -> onnx.NodeProto:
        x = ins[0]
        shp = self.shapes.get(x)
        if shp is None:
            raise self.fail(node, f"input {x!r} has no static shape")
        ax = attrs.get("axis", 1)
        ax = ax + len(shp) if ax < 0 else ax
        target = [1, int(np.prod(shp[:ax], dtype=np.int64)),
                  int(np.prod(shp[ax:], dtype=np.int64))]
        shape = self.new_const(node.output[0] + "_shape", np.array(target, np.int64))
        return helper.make_node("Reshape", [x, shape], list(node.output), name=node.name)

    def reshape(self, node: onnx.NodeProto, ins: list[str], attrs: dict) -> onnx.NodeProto:
        if len(ins) < 2 or ins[1] not in self.consts:
            raise self.fail(node, "has a target shape that is not a constant")
        t = np.concatenate([[1], self.consts[ins[1]].reshape(-1)]).astype(np.int64)
        node.input[1] = self.new_const(ins[1], t)
        return node

    def squeeze(self, node: onnx.NodeProto, ins: list[str], attrs: dict) -> onnx.NodeProto:
        if "axes" in attrs:
            self.set_attr(node, "axes", _shift(attrs["axes"]))
        elif len(ins) > 1:
            if ins[1] not in self.consts:
                raise self.fail(node, "has axes that are not a constant")
            node.input[1] = self.new_const(
                ins[1], np.array(_shift(self.consts[ins[1]].reshape(-1)), np.int64))
        elif node.op_type == "Unsqueeze":
            raise self.fail(node, "has no axes")
        # Squeeze without axes: the importer keeps the batch axis (it squeezes only
        # per-sample dimensions of size 1)
        return node

    def rewrite_node(self, node: onnx.NodeProto) -> onnx.NodeProto:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ins = [i for i in node.input if i]
        if not any(i in self.batched for i in ins):
            return node
        op = node.op_type
        if node.domain not in ("", "ai.onnx"):
            raise self.fail(node, "is not a standard op")
        if ins[0] not in self.batched and op not in _BINARY:
            raise self.fail(node, f"takes activation(s) {[i for i in ins if i in self.batched]} "
                            "as operand(s) other than the first")
        kind = ("unary" if op in _UNARY else "binary" if op in _BINARY else REWRITES.get(op))
        if kind is None:
            raise self.fail(node, "has no exact one-sample rewrite")
        node = getattr(self, kind)(node, ins, attrs)
        self.batched.update(node.output)
        return node

    def rewrite(self) -> onnx.ModelProto:
        g = self.g
        nodes = [self.rewrite_node(node) for node in g.node]
        del g.node[:]
        g.node.extend(nodes)
        for vi in list(g.input) + list(g.output):
            if vi.name not in self.batched or not vi.type.tensor_type.HasField("shape"):
                continue
            dims = list(vi.type.tensor_type.shape.dim)
            del vi.type.tensor_type.shape.dim[:]
            vi.type.tensor_type.shape.dim.add().dim_value = 1
            vi.type.tensor_type.shape.dim.extend(dims)
        missing = [o.name for o in g.output if o.name not in self.batched]
        if missing:
            raise GraphError(f"cannot present the test tensors as one sample: output(s) "
                             f"{missing} do not depend on an activation")
        return self.m


REWRITES = {"Softmax": "softmax", "LogSoftmax": "softmax", "Concat": "concat_gather",
            "Gather": "concat_gather", "Transpose": "transpose", "Flatten": "flatten",
            "Reshape": "reshape", "Squeeze": "squeeze", "Unsqueeze": "squeeze"}


class GoldenRep(BackendRep):
    """A prepared model: activations fed per call, parameters bound (and compiled) per value."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        g = model.graph
        inits = {i.name for i in g.initializer}
        inputs = [vi for vi in g.input if vi.name not in inits]
        if not inputs:
            raise GraphError("model has no non-constant input")
        for vi in g.output:
            _check_value_type(vi, "output")
        first = _declared(inputs[0])
        _check_value_type(inputs[0], "input")
        self.input_names = [vi.name for vi in inputs]
        self.activations = [vi.name for vi in inputs
                            if vi is inputs[0] or _declared(vi) == first]
        self.params = [n for n in self.input_names if n not in self.activations]
        self.output_names = [vi.name for vi in g.output]
        self._compiled: dict[str, tuple[str, Any]] = {}
        if not self.params:
            self._compiled[""] = self._compile({})

    def _bind(self, bound: dict[str, np.ndarray]) -> onnx.ModelProto:
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        if bound:
            keep = [vi for vi in m.graph.input if vi.name not in bound]
            del m.graph.input[:]
            m.graph.input.extend(keep)
            m.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k)
                                       for k, v in bound.items())
        return m

    @staticmethod
    def _import(m: onnx.ModelProto) -> Any:
        from ...graphs.pipeline import compile_graph

        graph = import_model(m, name=m.graph.name or "model")
        compiled = compile_graph(graph, precision="float32")
        missing = [o for o in compiled.graph.outputs if o not in compiled.graph.tensors]
        if missing:
            raise GraphError(f"output(s) {missing} are not computed by the imported graph")
        return compiled

    def _compile(self, bound: dict[str, np.ndarray]) -> tuple[str, Any]:
        """(view, compiled): the rows view, else the one-sample view (module docstring)."""
        m = self._bind(bound)
        try:
            return "rows", self._import(m)
        except GraphError as e:
            rows_err = e
        try:
            return "sample", self._import(one_sample(m, self.activations))
        except GraphError as e:
            sample_err = e
        for e in (rows_err, sample_err):
            if excused(e):
                raise e
        if str(sample_err) == str(rows_err):
            raise rows_err
        raise GraphError(f"{rows_err} | as one sample: {sample_err}")

    def _compiled_for(self, bound: dict[str, np.ndarray]) -> tuple[str, Any]:
        h = hashlib.sha256()
        for k in sorted(bound):
            v = np.ascontiguousarray(bound[k])
            h.update(f"{k}|{v.dtype}|{v.shape}|".encode())
            h.update(v.tobytes())
        key = h.hexdigest() if bound else ""
        if key not in self._compiled:
            self._compiled[key] = self._compile(bound)
        return self._compiled[key]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            if len(inputs) != len(self.input_names):
                raise GraphError(f"model takes {len(self.input_names)} inputs, got {len(inputs)}")
            feeds = {k: np.asarray(v) for k, v in zip(self.input_names, inputs, strict=True)}
        acts = [feeds[n] for n in self.activations]
        for n, a in zip(self.activations, acts, strict=True):
            if a.dtype != np.float32:
                raise Unsupported(f"input {n!r} has dtype {a.dtype}; the float golden model "
                                  "computes float32 only", "dtype", str(a.dtype))
        view, compiled = self._compiled_for({n: feeds[n] for n in self.params})
        g = compiled.graph
        if view == "sample":
            acts = [a[None] for a in acts]
        for n, a in zip(self.activations, acts, strict=True):
            if a.ndim < 1:
                raise GraphError(f"input {n!r} is a scalar; the first dimension is the batch")
        batch = acts[0].shape[0]
        for n, a in zip(self.activations, acts, strict=True):
            if a.shape[0] != batch:
                raise GraphError(f"input {n!r} has batch {a.shape[0]}, the first input {batch}")
        env = reference.execute(g, acts)
        outs = []
        for o in g.outputs:
            v = np.asarray(env[o], dtype=np.float32)
            v = v.reshape((batch,) + tuple(g.tensor(o).shape))
            outs.append(v[0] if view == "sample" else v)
        return namedtupledict("Outputs", self.output_names)(*outs)


class GoldenBackend(Backend):
    """onnx.backend.base.Backend adapter: the golden interpreter, float32, on the CPU."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            cls.prepare(model, device, **kwargs)
        except GraphError:
            return False
        return True

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU",
                **kwargs: Any) -> GoldenRep:
        if not cls.supports_device(device):
            raise GraphError(f"device {device!r} is not supported; the golden model runs on CPU")
        return GoldenRep(model)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                             np.asarray(v).shape)
               for n, v in zip(node.input, inputs, strict=False)]
        outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in node.output]
        model = helper.make_model(helper.make_graph([node], "node", ins, outs))
        return cls.run_model(model, list(inputs), device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


prepare = GoldenBackend.prepare
run_model = GoldenBackend.run_model
run_node = GoldenBackend.run_node
supports_device = GoldenBackend.supports_device


# -- conformance against ONNX's own node test cases -------------------------------------
#
# onnx >= 1.23 wheels no longer ship the node test data; it is regenerated once with
# `onnx.backend.test.case.node.collect_testcases()` into a cache folder (official layout:
# <case>/model.onnx, <case>/test_data_set_<k>/{input,output}_<j>.pb) and read from there.
