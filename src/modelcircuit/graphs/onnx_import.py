"""ONNX (+ QONNX Quant/BipolarQuant, ONNX QDQ) -> Graph.

The batch dimension (fixed, e.g. 789444, or symbolic) is dropped: the IR is per sample.
Subgraphs that only compute constants (Shape/Gather/Concat/Reshape chains, weight Quant and
Transpose) are folded here with onnx's reference evaluator. Every refusal is a GraphError
naming the node and what is wrong.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .ir import Graph, GraphError, Node, Tensor, prune, toposort
from .onnx_ops import HANDLERS
from .types import FixedType, NumType, Rounding

SUPPORTED_OPS = (
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Selu", "Sigmoid",
    "Tanh", "Softmax", "BatchNormalization", "Flatten", "Reshape", "Transpose", "Squeeze",
    "Unsqueeze", "Identity", "Dropout", "Quant", "BipolarQuant", "QuantizeLinear",
    "DequantizeLinear", "Shape", "Gather", "Concat", "Constant", "Cast",
)
_QUANT_DOMAINS = ("qonnx", "finn", "brevitas")


class Unsupported(GraphError):
    """A refusal because of a dtype or an attribute value the golden model does not support.

    `kind` is "dtype" or "attribute"; `what` names the dtype or the attribute, and the
    message says it (the conformance table counts only these refusals as excused)."""

    def __init__(self, message: str, kind: str, what: str) -> None:
        super().__init__(message)
        self.kind, self.what = kind, what


def load_onnx(path: str | os.PathLike[str]) -> Graph:
    """Read an ONNX file and import it; every failure is a one-line GraphError."""
    p = os.fspath(path)
    if not os.path.exists(p):
        raise GraphError(f"model file not found: {p}")
    if os.path.isdir(p):
        raise GraphError(f"model path is a directory, not an ONNX file: {p}")
    try:
        model = onnx.load(p)
    except Exception as e:  # protobuf DecodeError, truncated files
        raise GraphError(f"{p} is not a readable ONNX model (truncated or not ONNX): "
                         f"{type(e).__name__}") from None
    if not model.graph.node:
        raise GraphError(f"{p} is not an ONNX model with a graph (no nodes found)")
    name = os.path.splitext(os.path.basename(p))[0]
    return import_model(model, name=name)


class _Importer:
    def __init__(self, model: onnx.ModelProto, name: str) -> None:
        self.model = model
        self.g = model.graph
        self.name = name
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.consts: dict[str, np.ndarray] = {}
        self.const_types: dict[str, NumType] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}  # per-sample shapes of activations
        self.types: dict[str, NumType] = {}
        self.nodes: list[Node] = []
        self.alias: dict[str, str] = {}
        self.counter = 0

    # -- helpers ---------------------------------------------------------------
    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}__{self.counter}"

    def src(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def is_const(self, name: str) -> bool:
        return self.src(name) in self.consts

    def const(self, name: str) -> np.ndarray:
        return self.consts[self.src(name)]

    def add_const(self, name: str, value: np.ndarray, t: NumType | None = None) -> str:
        self.consts[name] = np.asarray(value)
        if t is not None:
            self.const_types[name] = t
        return name

    def emit(self, onnx_node: onnx.NodeProto, op: str, inputs: list[str], out: str,
             out_shape: tuple[int, ...], **attrs: Any) -> None:
        base = onnx_node.name or f"{op.lower()}_{len(self.nodes)}"
        names = {n.name for n in self.nodes}
        nm = base if base not in names else self.fresh(base)
        self.nodes.append(Node.make(nm, op, [self.src(i) for i in inputs], [out], **attrs))
        self.shapes[out] = tuple(int(s) for s in out_shape)

    def err(self, node: onnx.NodeProto, msg: str) -> GraphError:
        return GraphError(f"node {node.name or '?'} ({node.op_type}): {msg}")

    def unsupported(self, node: onnx.NodeProto, attr: str, msg: str) -> Unsupported:
        """An attribute value the golden model does not support; msg must name `attr`."""
        return Unsupported(f"node {node.name or '?'} ({node.op_type}): {msg}", "attribute", attr)

    # -- the walk --------------------------------------------------------------
    def run(self) -> Graph:
        for init in self.g.initializer:
            arr = numpy_helper.to_array(init)
            self.consts[init.name] = arr
        inputs = []
        for vi in self.g.input:
            if vi.name in self.consts:
                continue
            dims = vi.type.tensor_type.shape.dim
            if len(dims) < 1:
                raise GraphError(f"input {vi.name!r} has no shape; a static shape is needed")
            per = []
            for k, d in enumerate(dims[1:], start=1):
                if not d.HasField("dim_value") or d.dim_value <= 0:
                    raise GraphError(
                        f"input {vi.name!r} has a dynamic dimension {k} "
                        f"({d.dim_param or '?'}) that cannot be fixed; only the batch "
                        "(first) dimension may be dynamic")
                per.append(d.dim_value)
            self.shapes[vi.name] = tuple(per)
            inputs.append(vi.name)
        if not inputs:
            raise GraphError("model has no non-constant input")
        for node in self.g.node:
            self.visit(node)
        outputs = [self.src(o.name) for o in self.g.output]
        for o in outputs:
            if o not in self.shapes and o not in self.consts:
                raise GraphError(f"output {o!r} is not computed by any supported node "
                                 "(e.g. a Dropout mask or BatchNormalization training outputs)")
            if o in self.consts:
                raise GraphError(f"output {o!r} is a constant; nothing to compute")
        for name, arr in self.consts.items():
            if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                used = any(name in n.inputs for n in self.nodes)
                if used:
                    raise GraphError(f"weight {name!r} contains NaN or Inf")
        tensors = {n: Tensor(n, s, self.types.get(n)) for n, s in self.shapes.items()}
        consts = {}
        for n, v in self.consts.items():
            if v.dtype.kind in "fiub":
                consts[n] = v.astype(np.float64)
                tensors[n] = Tensor(n, tuple(v.shape), self.const_types.get(n))
        nodes = toposort(self.nodes, list(inputs) + list(consts))
        typed = bool(self.types or self.const_types)
        g = Graph(self.name, tuple(inputs), tuple(outputs), nodes, tensors, consts,
                  meta=(("source", "onnx"), ("typed_by_model", typed)))
        return prune(g)

    def visit(self, node: onnx.NodeProto) -> None:
        op = node.op_type
        if any(d in node.domain for d in _QUANT_DOMAINS) or op in ("Quant", "BipolarQuant"):
            if op == "Quant":
                return self.quant(node)
            if op == "BipolarQuant":
                return self.bipolar(node)
            raise self.err(node, f"unsupported op {node.domain}.{op}; supported: "
                           + ", ".join(SUPPORTED_OPS))
        if node.domain not in ("", "ai.onnx"):
            raise self.err(node, f"unsupported op {node.domain}.{op}; supported: "
                           + ", ".join(SUPPORTED_OPS))
        ins = [i for i in node.input]
        if op == "Shape" and ins and not self.is_const(ins[0]):
            shp = np.array((1,) + self.shapes[self.src(ins[0])], dtype=np.int64)
            self.add_const(node.output[0], shp)
            return
        if op == "Constant" or (ins and all((not i) or self.is_const(i) for i in ins)
                                and op not in ("QuantizeLinear",)):
            return self.fold(node)
        handler = HANDLERS.get(op)
        if handler is None:
            raise self.err(node, f"unsupported op {op}; supported: " + ", ".join(SUPPORTED_OPS))
        handler(self, node)

    def fold(self, node: onnx.NodeProto) -> None:
        from onnx.reference import ReferenceEvaluator

        feeds = {i: self.const(i) for i in node.input if i}
        inputs = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                  for i, v in feeds.items()]
        outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                   for o in node.output]
        g = helper.make_graph([node], "fold", inputs, outputs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            res = ReferenceEvaluator(m).run(None, feeds)
        except Exception as e:
            raise self.err(node, f"cannot fold constant subgraph: {e}") from None
        for o, v in zip(node.output, res, strict=False):
            self.add_const(o, np.asarray(v))
            t = self.const_types.get(self.src(node.input[0])) if node.input else None
            if t is not None and node.op_type in ("Transpose", "Reshape", "Identity", "Squeeze",
                                                  "Unsqueeze", "Flatten"):
                self.const_types[o] = t

    # -- quantizers ------------------------------------------------------------
    def _pow2_type(self, node: onnx.NodeProto, scale: np.ndarray, zp: np.ndarray, bits: float,
                   signed: bool, narrow: bool, rounding: str) -> FixedType | None:
        s = np.unique(np.asarray(scale, dtype=np.float64))
        if s.size != 1 or np.any(np.asarray(zp) != 0):
            return None
        m, e = math.frexp(float(s[0]))
        if m != 0.5 or bits != int(bits):
            return None
        frac = -(e - 1)
        rmap = {"ROUND": Rounding.RND_CONV, "FLOOR": Rounding.TRN,
                "ROUND_TO_ZERO": None, "CEIL": None}
        r = rmap.get(rounding.upper(), None)
        if r is None:
            raise self.unsupported(node, "rounding_mode", f"rounding_mode {rounding!r} is not "
                                   "supported (ROUND and FLOOR are)")
        return FixedType(int(bits), int(bits) - frac, signed, r, narrow=narrow)

    def quant(self, node: onnx.NodeProto) -> None:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        signed = bool(a.get("signed", 1))
        narrow = bool(a.get("narrow", 0))
        rounding = a.get("rounding_mode", b"ROUND")
        rounding = rounding.decode() if isinstance(rounding, bytes) else str(rounding)
        x, scale, zp, bw = node.input[:4]
        for nm in (scale, zp, bw):
            if not self.is_const(nm):
                raise self.err(node, f"Quant parameter {nm!r} must be a constant")
        sc, z, bits = self.const(scale), self.const(zp), float(self.const(bw).reshape(-1)[0])
        t = self._pow2_type(node, sc, z, bits, signed, narrow, rounding)
        if self.is_const(x):
            w = self.const(x).astype(np.float64)
            if not np.all(np.isfinite(w)):
                raise GraphError(f"weight {self.src(x)!r} contains NaN or Inf")
            qmin = (-(2 ** (bits - 1)) + (1 if narrow else 0)) if signed else 0
            qmax = (2 ** (bits - 1) - 1) if signed else 2 ** bits - 1 - (1 if narrow else 0)
            y = w / sc + z
            r = {"ROUND": np.round, "FLOOR": np.floor, "CEIL": np.ceil}.get(rounding.upper(), np.round)(y)
            vals = sc * (np.clip(r, qmin, qmax) - z)
            self.add_const(node.output[0], vals, t)
            return
        if t is None:
            raise self.err(node, "Quant on activations needs one power-of-two scale and zero "
                           "point 0 (per-channel or non power-of-two scales are not supported)")
        shp = self.shapes[self.src(x)]
        self.emit(node, "Requant", [x], node.output[0], shp, quant_type=str(t))
        self.types[node.output[0]] = t

    def bipolar(self, node: onnx.NodeProto) -> None:
        x, scale = node.input[:2]
        sc = float(np.asarray(self.const(scale)).reshape(-1)[0])
        m, e = math.frexp(sc)
        t = FixedType(2, 2 - (1 - e) , True, narrow=True) if m == 0.5 else None
        if self.is_const(x):
            w = self.const(x)
            self.add_const(node.output[0], np.where(w >= 0, sc, -sc), t)
            return
        if t is None:
            raise self.err(node, "BipolarQuant on activations needs a power-of-two scale")
        shp = self.shapes[self.src(x)]
        self.emit(node, "Bipolar", [x], node.output[0], shp, scale=sc)
        self.types[node.output[0]] = t


def import_model(model: onnx.ModelProto, name: str = "model") -> Graph:
    """Import an in-memory ModelProto (used by load_onnx and the conformance backend)."""
    try:
        return _Importer(model, name).run()
    except GraphError:
        raise
    except (KeyError, IndexError) as e:
        raise GraphError(f"malformed ONNX graph: missing tensor or input {e}") from None
