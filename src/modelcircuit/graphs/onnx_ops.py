"""ONNX op handlers for the importer: one function per standard op, in one table.

Each handler reads an ONNX node and emits IR nodes through the importer (`_Importer`), which
owns constants, shapes and aliases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

if TYPE_CHECKING:
    from .onnx_import import _Importer


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
        raise im.unsupported(node, "transA", "Gemm with transA=1 is not supported (the batch "
                             "must be dimension 0)")
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
    """Softmax over the last per-sample axis; another axis goes through Transposes (opset
    >= 13: one axis) or Reshapes (opset < 13: the input is coerced to 2-D at `axis`)."""
    x = node.input[0]
    shp = _shape(im, x)
    axis = _attrs(node).get("axis", 1 if im.opset < 13 else -1)
    rank = len(shp) + 1
    ax = _batch_axis(im, node, axis, rank) + 1  # a Softmax over dimension 0 mixes samples
    out = node.output[0]
    if im.opset < 13:
        inner = (int(np.prod(shp[:ax - 1], dtype=np.int64)),) if ax > 1 else ()
        flat = inner + (int(np.prod(shp[ax - 1:], dtype=np.int64)),)
        if flat == shp:
            return im.emit(node, "Softmax", [x], out, shp)
        t1, t2 = im.fresh(out + "_2d"), im.fresh(out + "_sm")
        im.emit(node, "Reshape", [x], t1, flat, shape=list(flat))
        im.emit(node, "Softmax", [t1], t2, flat)
        return im.emit(node, "Reshape", [t2], out, shp, shape=list(shp))
    if ax == rank - 1:
        return im.emit(node, "Softmax", [x], out, shp)
    perm = list(range(len(shp)))  # per-sample axes: swap ax - 1 with the last
    perm[ax - 1], perm[-1] = perm[-1], perm[ax - 1]
    tshp = tuple(shp[p] for p in perm)
    t1, t2 = im.fresh(out + "_t"), im.fresh(out + "_sm")
    im.emit(node, "Transpose", [x], t1, tshp, perm=perm)
    im.emit(node, "Softmax", [t1], t2, tshp)
    im.emit(node, "Transpose", [t2], out, shp, perm=perm)


def _batch_axis(im: _Importer, node: onnx.NodeProto, axis: int, rank: int) -> int:
    """ONNX axis of a rank-`rank` (batch-including) tensor -> per-sample axis."""
    ax = axis + rank if axis < 0 else axis
    if not 0 <= ax < rank:
        raise im.err(node, f"axis {axis} is out of range for a rank-{rank} tensor")
    if ax == 0:
        raise im.err(node, f"axis {axis} is the batch dimension (dimension 0); only per-sample "
                     "axes are supported")
    return ax - 1


def _concat(im: _Importer, node: onnx.NodeProto) -> None:
    """Concat of activations along a per-sample axis (constants mixed in are refused)."""
    ins = [i for i in node.input if i]
    consts = [i for i in ins if im.is_const(i)]
    if consts:
        raise im.err(node, f"Concat of activations with constants {consts} is not supported")
    shapes = [_shape(im, i) for i in ins]
    ax = _batch_axis(im, node, int(_attrs(node)["axis"]), len(shapes[0]) + 1)
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(
                a != b for k, (a, b) in enumerate(zip(s, shapes[0], strict=True)) if k != ax):
            raise im.err(node, f"Concat of per-sample shapes {[list(t) for t in shapes]} along "
                         f"axis {ax + 1}: the other dimensions differ")
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    im.emit(node, "Concat", ins, node.output[0], tuple(out), axis=ax)


def _gather(im: _Importer, node: onnx.NodeProto) -> None:
    """Gather along a per-sample axis of an activation with constant indices; the indices
    (negative ones made positive) are stored as the node's `indices` attribute."""
    x, idx = node.input[:2]
    if not im.is_const(idx):
        raise im.err(node, "Gather indices must be constants")
    shp = _shape(im, x)
    ax = _batch_axis(im, node, int(_attrs(node).get("axis", 0)), len(shp) + 1)
    iv = np.asarray(im.const(idx)).astype(np.int64)
    n = shp[ax]
    if np.any(iv < -n) or np.any(iv >= n):
        raise im.err(node, f"Gather indices {iv.reshape(-1).tolist()} are out of range for "
                     f"a dimension of size {n}")
    iv = np.where(iv < 0, iv + n, iv)
    out = shp[:ax] + tuple(iv.shape) + shp[ax + 1:]
    im.emit(node, "Gather", [x], node.output[0], out, axis=ax, indices=iv.tolist(),
            indices_shape=list(iv.shape))


def _batchnorm(im: _Importer, node: onnx.NodeProto) -> None:
    x, s, b, m, v = node.input[:5]
    eps = float(_attrs(node).get("epsilon", 1e-5))
    if _attrs(node).get("training_mode", 0):
        raise im.unsupported(node, "training_mode", "BatchNormalization with training_mode=1 "
                             "(batch statistics) is not supported; export the model in "
                             "inference mode")
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


HANDLERS: dict[str, Callable[[_Importer, onnx.NodeProto], None]] = {
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
    "Concat": _concat, "Gather": _gather,
    "QuantizeLinear": _qdq, "DequantizeLinear": _qdq,
}
