"""ONNX (+ QONNX Quant/BipolarQuant, ONNX QDQ) -> Graph.

The batch dimension (fixed, e.g. 789444, or symbolic) is dropped: the IR is per sample.
Subgraphs that only compute constants (Shape/Gather/Concat/Reshape chains, weight Quant and
Transpose) are folded here with onnx's reference evaluator. Every refusal is a GraphError
naming the node and what is wrong.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .ir import Graph, GraphError, Node, Tensor, prune, toposort
from .types import FixedType, NumType, Rounding

SUPPORTED_OPS = (
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Selu", "Sigmoid",
    "Tanh", "Softmax", "BatchNormalization", "Flatten", "Reshape", "Transpose", "Squeeze",
    "Unsqueeze", "Identity", "Dropout", "Quant", "BipolarQuant", "QuantizeLinear",
    "DequantizeLinear", "Shape", "Gather", "Concat", "Constant", "Cast",
)
_QUANT_DOMAINS = ("qonnx", "finn", "brevitas")


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
        handler = _HANDLERS.get(op)
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
            raise self.err(node, f"rounding_mode {rounding!r} is not supported "
                           "(ROUND and FLOOR are)")
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


# -- handlers for standard ops ----------------------------------------------------
def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _shape(im: _Importer, name: str) -> tuple[int, ...]:
    return im.shapes[im.src(name)]


def _matmul(im: _Importer, node: onnx.NodeProto) -> None:
    x, w = node.input
    if not im.is_const(w):
        raise im.err(node, "MatMul of two activations is not supported (weights must be constant)")
    W = im.const(w)
    xs = _shape(im, x)
    if W.ndim != 2 or len(xs) != 1 or xs[0] != W.shape[0]:
        raise im.err(node, f"MatMul needs a per-sample vector times a 2-D weight, got "
                     f"{list(xs)} x {list(W.shape)}")
    im.emit(node, "Dense", [x, im.src(w)], node.output[0], (W.shape[1],))


def _gemm(im: _Importer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    ins = list(node.input) + [""] * (3 - len(node.input))
    x, w, c = ins[:3]
    if a.get("transA", 0):
        raise im.err(node, "Gemm with transA=1 is not supported (the batch must be dimension 0)")
    if not im.is_const(w) or (c and not im.is_const(c)):
        raise im.err(node, "Gemm weights and bias must be constants")
    W = im.const(w).astype(np.float64)
    if a.get("transB", 0):
        W = W.T
    W = W * float(a.get("alpha", 1.0))
    wn = im.add_const(im.fresh(f"{w}_gemm"), W, im.const_types.get(im.src(w))
                      if a.get("alpha", 1.0) == 1.0 else None)
    inputs = [x, wn]
    if c and im.const(c).ndim == 2 and im.const(c).shape[0] != 1:
        raise im.err(node, f"Gemm bias of shape {list(im.const(c).shape)} varies along the "
                     "batch (dimension 0); only a per-column bias is supported")
    if c:
        C = np.broadcast_to(im.const(c).astype(np.float64) * float(a.get("beta", 1.0)),
                            (1, W.shape[1])).reshape(-1)
        inputs.append(im.add_const(im.fresh(f"{c}_gemm"), C, im.const_types.get(im.src(c))
                                   if a.get("beta", 1.0) == 1.0 else None))
    xs = _shape(im, x)
    if len(xs) != 1 or xs[0] != W.shape[0]:
        raise im.err(node, f"Gemm input shape {list(xs)} does not match weight {list(W.shape)}")
    im.emit(node, "Dense", inputs, node.output[0], (W.shape[1],))


def _bcast_shape(im: _Importer, node: onnx.NodeProto, act: tuple[int, ...],
                 const: np.ndarray) -> np.ndarray:
    """A constant operand broadcast against a per-sample activation shape."""
    c = np.asarray(const, dtype=np.float64)
    if c.ndim > len(act):  # has the batch dimension
        if c.shape[0] != 1:
            raise im.err(node, f"constant of shape {list(c.shape)} varies along the batch")
        c = c.reshape(c.shape[1:])
    try:
        np.broadcast_to(c, act)
    except ValueError:
        raise im.err(node, f"constant of shape {list(c.shape)} does not broadcast to "
                     f"{list(act)}") from None
    return c


def _binary(im: _Importer, node: onnx.NodeProto) -> None:
    op = node.op_type
    a, b = node.input
    ca, cb = im.is_const(a), im.is_const(b)
    if not ca and not cb:
        return _binary_activations(im, node)
    x, c = (b, a) if ca else (a, b)
    shp = _shape(im, x)
    cv = _bcast_shape(im, node, shp, im.const(c))
    ctype = im.const_types.get(im.src(c))
    if op == "Add":
        im.emit(node, "Add", [x, im.add_const(im.fresh(c), cv, ctype)], node.output[0], shp)
    elif op == "Sub" and not ca:
        im.emit(node, "Add", [x, im.add_const(im.fresh(c), -cv, ctype)], node.output[0], shp)
    elif op == "Sub":  # c - x = (-1 * x) + c
        t = im.fresh(node.output[0] + "_neg")
        im.emit(node, "Mul", [x, im.add_const(im.fresh("minus_one"), np.array(-1.0))], t, shp)
        im.emit(node, "Add", [t, im.add_const(im.fresh(c), cv, ctype)], node.output[0], shp)
    elif op == "Mul":
        im.emit(node, "Mul", [x, im.add_const(im.fresh(c), cv, ctype)], node.output[0], shp)
    elif op == "Div":
        if ca:
            raise im.err(node, "division of a constant by an activation is not supported")
        if np.any(cv == 0):
            raise im.err(node, "division by a constant that contains zero")
        im.emit(node, "Mul", [x, im.add_const(im.fresh(c), 1.0 / cv)], node.output[0], shp)


def _binary_activations(im: _Importer, node: onnx.NodeProto) -> None:
    """Add/Sub/Mul/Div of two activations, with numpy broadcasting of the per-sample shapes.

    Both operands carry the batch as their first dimension, so they must have the same rank:
    broadcasting a lower-rank operand would align its batch with a per-sample dimension of
    the other. Div of two activations is its own IR op (float only; refused in fixed point
    at compile time, as is broadcasting between activations)."""
    op = node.op_type
    a, b = node.input
    sa, sb = _shape(im, a), _shape(im, b)
    if len(sa) != len(sb):
        raise im.err(node, f"{op} of activations of ranks {len(sa) + 1} and {len(sb) + 1} "
                     "would broadcast the batch dimension (both operands must have the "
                     "batch as their first dimension)")
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(sa, sb))
    except ValueError:
        raise im.err(node, f"{op} of per-sample shapes {list(sa)} and {list(sb)}: shapes do "
                     "not broadcast") from None
    im.emit(node, op, [a, b], node.output[0], out)


def _unary(op: str, **fixed: Any) -> Callable[[_Importer, onnx.NodeProto], None]:
    def h(im: _Importer, node: onnx.NodeProto) -> None:
        a = _attrs(node)
        attrs = dict(fixed)
        if op == "LeakyRelu":
            attrs["alpha"] = float(a.get("alpha", 0.01))
        if fixed.get("func") == "selu":
            attrs["alpha"] = float(a.get("alpha", 1.67326319217681884765625))
            attrs["gamma"] = float(a.get("gamma", 1.05070102214813232421875))
        x = node.input[0]
        im.emit(node, op, [x], node.output[0], _shape(im, x), **attrs)
    return h


def _softmax(im: _Importer, node: onnx.NodeProto) -> None:
    x = node.input[0]
    shp = _shape(im, x)
    axis = _attrs(node).get("axis", 1 if im.opset < 13 else -1)
    rank = len(shp) + 1
    ax = axis + rank if axis < 0 else axis
    if ax != rank - 1 and not (im.opset < 13 and ax == 1 and len(shp) == 1):
        raise im.err(node, f"Softmax over axis {axis} of a rank-{rank} tensor: only the last axis "
                     "is supported")
    im.emit(node, "Softmax", [x], node.output[0], shp)


def _batchnorm(im: _Importer, node: onnx.NodeProto) -> None:
    x, s, b, m, v = node.input[:5]
    eps = float(_attrs(node).get("epsilon", 1e-5))
    if _attrs(node).get("training_mode", 0):
        raise im.err(node, "BatchNormalization with training_mode=1 (batch statistics) is not "
                     "supported; export the model in inference mode")
    shp = _shape(im, x)
    for nm in (s, b, m, v):
        if not im.is_const(nm):
            raise im.err(node, "BatchNormalization parameters must be constants")
    im.emit(node, "BatchNorm", [x] + [im.src(n) for n in (s, b, m, v)], node.output[0], shp,
            epsilon=eps)


def _reshape_to(im: _Importer, node: onnx.NodeProto, x: str, full: tuple[int, ...]) -> None:
    """Reshape given an ONNX (batch-including, batch=1) target shape."""
    shp = _shape(im, x)
    size = int(np.prod(shp, dtype=np.int64))
    per = tuple(int(d) for d in full[1:])
    if int(np.prod(per, dtype=np.int64)) != size:
        raise im.err(node, f"cannot reshape per-sample {list(shp)} to {list(per)}; the batch "
                     "dimension must stay first")
    if per == shp:
        im.alias[node.output[0]] = im.src(x)
        im.shapes[node.output[0]] = shp
        return
    im.emit(node, "Reshape", [x], node.output[0], per, shape=list(per))


def _reshape(im: _Importer, node: onnx.NodeProto) -> None:
    x = node.input[0]
    shp = (1,) + _shape(im, x)
    if node.op_type == "Flatten":
        ax = _attrs(node).get("axis", 1)
        ax = ax + len(shp) if ax < 0 else ax
        if ax == 0:
            raise im.err(node, "Flatten with axis 0 folds the batch dimension into the sample")
        target = (int(np.prod(shp[:ax])), int(np.prod(shp[ax:])))
    elif node.op_type == "Reshape":
        if not im.is_const(node.input[1]):
            raise im.err(node, "Reshape target shape must be constant")
        t = [int(v) for v in im.const(node.input[1]).reshape(-1)]
        t = [shp[i] if (v == 0 and not _attrs(node).get("allowzero", 0)) else v
             for i, v in enumerate(t)]
        if -1 in t:
            known = int(np.prod([v for v in t if v != -1]))
            t[t.index(-1)] = int(np.prod(shp)) // max(known, 1)
        target = tuple(t)
        if target and target[0] != 1:  # a fixed batch (e.g. 789444) written into the shape
            target = (1,) + target[1:]
    else:  # Squeeze / Unsqueeze
        a = _attrs(node)
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = [int(v) for v in im.const(node.input[1]).reshape(-1)]
        if node.op_type == "Squeeze":
            axes = [ax + len(shp) if ax < 0 else ax for ax in (axes or [i for i, d in enumerate(shp) if d == 1 and i > 0])]
            if 0 in axes:
                raise im.err(node, "cannot squeeze the batch dimension")
            target = tuple(d for i, d in enumerate(shp) if i not in axes)
        else:
            out_rank = len(shp) + len(axes or [])
            axes = sorted(ax + out_rank if ax < 0 else ax for ax in (axes or []))
            if 0 in axes:
                raise im.err(node, "cannot unsqueeze in front of the batch dimension")
            t = list(shp)
            for ax in axes:
                t.insert(ax, 1)
            target = tuple(t)
    _reshape_to(im, node, x, target)


def _transpose(im: _Importer, node: onnx.NodeProto) -> None:
    x = node.input[0]
    shp = _shape(im, x)
    perm = list(_attrs(node).get("perm", list(range(len(shp) + 1))[::-1]))
    if perm[0] != 0:
        raise im.err(node, f"Transpose perm {perm} moves the batch dimension")
    per = [p - 1 for p in perm[1:]]
    if per == sorted(per):
        im.alias[node.output[0]] = im.src(x)
        im.shapes[node.output[0]] = shp
        return
    im.emit(node, "Transpose", [x], node.output[0], tuple(shp[p] for p in per), perm=per)


def _identity(im: _Importer, node: onnx.NodeProto) -> None:
    im.alias[node.output[0]] = im.src(node.input[0])
    im.shapes[node.output[0]] = _shape(im, node.input[0])


def _dropout(im: _Importer, node: onnx.NodeProto) -> None:
    """Inference Dropout is the identity; training mode (random masks) is refused."""
    ins = list(node.input) + ["", ""]
    ratio = float(im.const(ins[1]).reshape(-1)[0]) if ins[1] and im.is_const(ins[1]) else 0.5
    training = ins[2] and (not im.is_const(ins[2]) or bool(im.const(ins[2]).reshape(-1)[0]))
    if training and ratio != 0.0:
        raise im.err(node, "Dropout in training mode (random mask) is not supported; "
                     "export the model in inference mode")
    _identity(im, node)


def _qdq(im: _Importer, node: onnx.NodeProto) -> None:
    x, s = node.input[:2]
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if node.op_type == "DequantizeLinear":
        return _identity(im, node)
    zpv = im.const(zp) if zp else np.zeros((), np.uint8)
    signed = zpv.dtype.kind == "i" or zp is None and False
    if zp is None:
        signed = False
    bits = 8 * zpv.dtype.itemsize
    t = im._pow2_type(node, im.const(s), zpv, bits, signed, False, "ROUND")
    if t is None:
        raise im.err(node, "QuantizeLinear needs one power-of-two scale and zero point 0")
    if im.is_const(x):
        w = im.const(x).astype(np.float64)
        vals = np.clip(np.round(w * 2.0 ** t.frac), t.qmin, t.qmax) * 2.0 ** -t.frac
        im.add_const(node.output[0], vals, t)
        return
    im.emit(node, "Requant", [x], node.output[0], _shape(im, x), quant_type=str(t))
    im.types[node.output[0]] = t


_HANDLERS: dict[str, Callable[[_Importer, onnx.NodeProto], None]] = {
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Add": _binary, "Sub": _binary, "Mul": _binary, "Div": _binary,
    "Relu": _unary("Relu"),
    "LeakyRelu": _unary("LeakyRelu"),
    "Sigmoid": _unary("Lut", func="sigmoid"),
    "Tanh": _unary("Lut", func="tanh"),
    "Selu": _unary("Lut", func="selu"),
    "Softmax": _softmax,
    "BatchNormalization": _batchnorm,
    "Flatten": _reshape, "Reshape": _reshape, "Squeeze": _reshape, "Unsqueeze": _reshape,
    "Transpose": _transpose,
    "Identity": _identity, "Dropout": _dropout,
    "QuantizeLinear": _qdq, "DequantizeLinear": _qdq,
}


def import_model(model: onnx.ModelProto, name: str = "model") -> Graph:
    """Import an in-memory ModelProto (used by load_onnx and the conformance backend)."""
    try:
        return _Importer(model, name).run()
    except GraphError:
        raise
    except (KeyError, IndexError) as e:
        raise GraphError(f"malformed ONNX graph: missing tensor or input {e}") from None
