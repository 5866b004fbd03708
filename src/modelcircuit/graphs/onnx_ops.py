"""ONNX op handlers for the importer: one function per standard op, in one table.

Each handler reads an ONNX node and emits IR nodes through the importer (`_Importer`), which
owns constants, shapes and aliases. The importer has already checked the node against its
schema (input and output counts, attribute names and types) and that its inputs exist; a
handler checks the values: axes, perms, shapes, parameters. Every refusal is `im.err(node,
...)` (a GraphError naming the node and its op).
"""

from __future__ import annotations

import math
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
    """Per-sample shape of an activation input of the node being imported."""
    s = im.src(name)
    if s not in im.shapes:
        raise im.err(im.node, f"input {name!r} must be an activation here, not a constant")
    return im.shapes[s]


def _int_const(im: _Importer, node: onnx.NodeProto, name: str, what: str) -> list[int]:
    """A constant 1-D (or scalar) integer input, e.g. a shape or axes."""
    if not im.is_const(name):
        raise im.err(node, f"{what} {name!r} must be a constant")
    v = np.asarray(im.const(name))
    if v.dtype.kind not in "iu" or v.ndim > 1:
        raise im.err(node, f"{what} {name!r} must be a 1-D integer tensor, got dtype {v.dtype} "
                     f"shape {list(v.shape)}")
    return [int(x) for x in v.reshape(-1)]


def _axes(im: _Importer, node: onnx.NodeProto, axes: list[int], rank: int) -> list[int]:
    """ONNX axes of a rank-`rank` tensor, made non-negative; out of range or repeated: refused."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise im.err(node, f"axis {a} is out of range for a rank-{rank} tensor")
        out.append(a + rank if a < 0 else a)
    if len(set(out)) != len(out):
        raise im.err(node, f"axes {axes} repeat an axis")
    return out


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
    if im.flag(node, a, "transA", 0):
        raise im.unsupported(node, "transA", "Gemm with transA=1 is not supported (the batch "
                             "must be dimension 0)")
    trans_b = im.flag(node, a, "transB", 0)
    if not im.is_const(w) or (c and not im.is_const(c)):
        raise im.err(node, "Gemm weights and bias must be constants")
    xs = _shape(im, x)
    if im.const(w).ndim != 2:
        raise im.err(node, f"Gemm weight {w!r} must be 2-D, got shape {list(im.const(w).shape)}")
    W = im.const(w).astype(np.float64)
    if trans_b:
        W = W.T
    if c:
        cs = tuple(im.const(c).shape)
        try:
            ok = len(cs) <= 2 and np.broadcast_shapes(cs, (1, W.shape[1])) == (1, W.shape[1])
        except ValueError:
            ok = False
        if not ok and not (len(cs) == 2 and cs[0] != 1):  # that one: "varies along the batch"
            raise im.err(node, f"Gemm bias {c!r} of shape {list(cs)} does not broadcast to the "
                         f"output's {W.shape[1]} columns")
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
    if im.const(idx).dtype.kind not in "iu":
        raise im.err(node, f"Gather indices {idx!r} must be integers, got {im.const(idx).dtype}")
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
    a = _attrs(node)
    eps = float(a.get("epsilon", 1e-5))
    if im.flag(node, a, "training_mode", 0):
        raise im.unsupported(node, "training_mode", "BatchNormalization with training_mode=1 "
                             "(batch statistics) is not supported; export the model in "
                             "inference mode")
    if not im.flag(node, a, "spatial", 1):
        raise im.unsupported(node, "spatial", "BatchNormalization with spatial=0 (statistics "
                             "per element) is not supported")
    if eps < 0:
        raise im.err(node, f"epsilon {eps:g} is negative")
    shp = _shape(im, x)
    if not shp:
        raise im.err(node, "BatchNormalization needs a channel dimension (dimension 1)")
    for nm in (s, b, m, v):
        if not im.is_const(nm):
            raise im.err(node, "BatchNormalization parameters must be constants")
    vals = {}
    for nm, what in ((s, "scale"), (b, "bias"), (m, "mean"), (v, "variance")):
        p = im.const(nm)
        if p.dtype.kind not in "fiu" or p.shape != (shp[0],):
            raise im.err(node, f"{what} {nm!r} must hold one number per channel, shape "
                         f"[{shp[0]}], got {p.dtype} {list(p.shape)}")
        with np.errstate(all="ignore"):
            vals[what] = p.astype(np.float64)
        if not np.all(np.isfinite(vals[what])):
            raise im.err(node, f"{what} {nm!r} contains NaN or Inf")
    var = vals["variance"]
    if np.any(var < 0):
        raise im.err(node, f"variance {v!r} has negative values (e.g. {var[var < 0][0]:g})")
    if np.any(var + eps <= 0):
        raise im.err(node, f"variance + epsilon must be positive; variance {v!r} has "
                     f"{int(np.sum(var + eps <= 0))} zero(s) with epsilon {eps:g}")
    im.emit(node, "BatchNorm", [x] + [im.src(n) for n in (s, b, m, v)], node.output[0], shp,
            epsilon=eps)


def _reshape_to(im: _Importer, node: onnx.NodeProto, x: str, full: tuple[int, ...]) -> None:
    """Reshape given an ONNX (batch-including, batch=1) target shape."""
    shp = _shape(im, x)
    size = math.prod(shp)
    per = tuple(int(d) for d in full[1:])
    if any(d < 1 for d in per) or math.prod(per) != size:
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
        axis = _attrs(node).get("axis", 1)
        ax = axis + len(shp) if axis < 0 else axis
        if not 0 <= ax <= len(shp):
            raise im.err(node, f"axis {axis} is out of range for a rank-{len(shp)} tensor")
        if ax == 0:
            raise im.err(node, "Flatten with axis 0 folds the batch dimension into the sample")
        target = (math.prod(shp[:ax]), math.prod(shp[ax:]))
    elif node.op_type == "Reshape":
        if not im.is_const(node.input[1]):
            raise im.err(node, "Reshape target shape must be constant")
        t = _int_const(im, node, node.input[1], "shape")
        allowzero = im.flag(node, _attrs(node), "allowzero", 0)
        if any(v < -1 for v in t) or t.count(-1) > 1 or (allowzero and 0 in t and -1 in t):
            raise im.err(node, f"shape {t} is not a valid Reshape target (dimensions >= -1, at "
                         "most one -1, and no -1 with a 0 under allowzero=1)")
        if not allowzero and any(v == 0 and i >= len(shp) for i, v in enumerate(t)):
            raise im.err(node, f"shape {t} copies (0) a dimension the rank-{len(shp)} input "
                         "does not have")
        t = [shp[i] if (v == 0 and not allowzero) else v for i, v in enumerate(t)]
        if t and t[0] != 1 and (t[0] == -1 or t.count(-1) == 1):
            t[0] = 1  # the batch, fixed or inferred, is the first dimension
        if -1 in t:
            known = math.prod(v for v in t if v != -1)
            if known == 0 or math.prod(shp) % known:
                raise im.err(node, f"cannot reshape per-sample {list(shp[1:])} to {t}: no "
                             "whole size for the -1")
            t[t.index(-1)] = math.prod(shp) // known
        target = tuple(t)
        if target and target[0] != 1:  # a fixed batch (e.g. 789444) written into the shape
            target = (1,) + target[1:]
    else:  # Squeeze / Unsqueeze
        a = _attrs(node)
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = _int_const(im, node, node.input[1], "axes")
        if node.op_type == "Squeeze":
            axes = (_axes(im, node, list(axes), len(shp)) if axes
                    else [i for i, d in enumerate(shp) if d == 1 and i > 0])
            if 0 in axes:
                raise im.err(node, "cannot squeeze the batch dimension")
            if any(shp[i] != 1 for i in axes):
                raise im.err(node, f"cannot squeeze axes {sorted(axes)} of shape {list(shp)}: "
                             "only dimensions of size 1 can be squeezed")
            target = tuple(d for i, d in enumerate(shp) if i not in axes)
        else:
            if not axes:
                raise im.err(node, "Unsqueeze needs axes")
            out_rank = len(shp) + len(axes)
            axes = sorted(_axes(im, node, list(axes), out_rank))
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
    if sorted(perm) != list(range(len(shp) + 1)):
        raise im.err(node, f"perm {perm} is not a permutation of the {len(shp) + 1} axes of "
                     "the input")
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
    for nm, what in ((ins[1], "ratio"), (ins[2], "training_mode")):
        if nm and im.is_const(nm) and im.const(nm).size != 1:
            raise im.err(node, f"{what} {nm!r} must be a scalar, got shape "
                         f"{list(im.const(nm).shape)}")
    ratio = float(im.const(ins[1]).reshape(-1)[0]) if ins[1] and im.is_const(ins[1]) else 0.5
    if not 0.0 <= ratio < 1.0:
        raise im.err(node, f"ratio {ratio} is not in [0, 1)")
    training = ins[2] and (not im.is_const(ins[2]) or bool(im.const(ins[2]).reshape(-1)[0]))
    if training and ratio != 0.0:
        raise im.err(node, "Dropout in training mode (random mask) is not supported; "
                     "export the model in inference mode")
    _identity(im, node)


# zero-point dtypes of QuantizeLinear the importer carries as a fixed-point type
_QDQ_DTYPES = {np.dtype(np.int8): onnx.TensorProto.INT8, np.dtype(np.uint8): onnx.TensorProto.UINT8,
               np.dtype(np.int16): onnx.TensorProto.INT16,
               np.dtype(np.uint16): onnx.TensorProto.UINT16}


def _qdq_params(im: _Importer, node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point of a QuantizeLinear/DequantizeLinear: constants, a positive
    finite scale, a supported zero-point dtype, shapes that fit `axis`."""
    from .onnx_import import Unsupported

    x, s = node.input[:2]
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    a = _attrs(node)
    sc = im.qparam(node, s, "scale")
    im.check_scale(node, s, sc)
    if zp is not None and not im.is_const(zp):
        raise im.err(node, f"{node.op_type} parameter {zp!r} (zero point) must be a constant")
    out_dt = a.get("output_dtype", 0)
    if zp is None:
        np_dt = (helper.tensor_dtype_to_np_dtype(out_dt) if out_dt in _QDQ_DTYPES.values()
                 else None)
        if out_dt and np_dt is None:
            name = onnx.TensorProto.DataType.Name(out_dt) if out_dt in \
                onnx.TensorProto.DataType.values() else str(out_dt)
            raise Unsupported(f"{im.label(node)}: output_dtype {name} is not supported "
                              "(INT8, UINT8, INT16, UINT16 are)", "dtype", name)
        zpv = np.zeros((), np_dt or np.uint8)
    else:
        zpv = np.asarray(im.const(zp))
        if zpv.dtype not in _QDQ_DTYPES:
            name = str(zpv.dtype).upper()
            raise Unsupported(f"{im.label(node)}: zero point {zp!r} has dtype {name}; "
                              "supported: INT8, UINT8, INT16, UINT16", "dtype", name)
        if out_dt and out_dt != _QDQ_DTYPES[zpv.dtype]:
            raise im.err(node, f"output_dtype {out_dt} does not match the zero point's dtype "
                         f"{zpv.dtype}")
        if zpv.shape != sc.shape:
            raise im.err(node, f"zero point {zp!r} of shape {list(zpv.shape)} does not match "
                         f"the scale's shape {list(sc.shape)}")
    if a.get("block_size", 0):
        raise im.unsupported(node, "block_size", "blocked quantization (block_size != 0) is "
                             "not supported")
    full = im.full_shape(x)
    if sc.ndim > 1:
        raise im.err(node, f"scale {s!r} must be a scalar or 1-D, got shape {list(sc.shape)}")
    if sc.ndim == 1:
        axis = a.get("axis", 1)
        if not -len(full) <= axis < len(full):
            raise im.err(node, f"axis {axis} is out of range for a rank-{len(full)} tensor")
        if sc.shape[0] != full[axis]:
            raise im.err(node, f"scale {s!r} has {sc.shape[0]} values; axis {axis} of the "
                         f"input has {full[axis]}")
    return sc, zpv


def _qdq(im: _Importer, node: onnx.NodeProto) -> None:
    """QuantizeLinear -> a fixed-point type (Requant); DequantizeLinear right after it (same
    scale and zero point) is the identity, since the IR carries real values."""
    x = node.input[0]
    sc, zpv = _qdq_params(im, node)
    if node.op_type == "DequantizeLinear":
        q = im.qdq.get(im.src(x))
        if q is None:
            raise im.err(node, f"input {x!r} is not the output of a QuantizeLinear (integer "
                         "codes); only QuantizeLinear -> DequantizeLinear pairs are supported")
        if q[1].dtype != zpv.dtype or not (np.array_equal(q[0], sc) and np.array_equal(q[1], zpv)):
            raise im.err(node, f"scale/zero point ({zpv.dtype}) do not match the QuantizeLinear "
                         f"that produced {x!r} ({q[1].dtype})")
        return _identity(im, node)
    signed = zpv.dtype.kind == "i"
    bits = 8 * zpv.dtype.itemsize
    t = im._pow2_type(node, sc, zpv, bits, signed, False, "ROUND")
    if t is None:
        raise im.err(node, "QuantizeLinear needs one power-of-two scale and zero point 0")
    if im.is_const(x):
        w = im.const(x).astype(np.float64)
        if not np.all(np.isfinite(w)):
            raise im.err(node, f"weight {im.src(x)!r} contains NaN or Inf")
        with np.errstate(all="ignore"):  # huge weights saturate; no warning lines
            vals = np.clip(np.round(w * 2.0 ** t.frac), t.qmin, t.qmax) * 2.0 ** -t.frac
        im.add_const(node.output[0], vals, t)
        return
    im.emit(node, "Requant", [x], node.output[0], _shape(im, x), quant_type=str(t))
    im.types[node.output[0]] = t
    im.qdq[node.output[0]] = (sc, zpv)


def _cast(im: _Importer, node: onnx.NodeProto) -> None:
    """Cast of a (float32) activation to float32 is the identity; other dtypes are refused."""
    from .onnx_import import Unsupported

    to = _attrs(node).get("to", 0)
    if to != onnx.TensorProto.FLOAT:
        name = (onnx.TensorProto.DataType.Name(to) if to in onnx.TensorProto.DataType.values()
                else str(to))
        raise Unsupported(f"{im.label(node)}: Cast to {name} is not supported; the golden model "
                          "computes float32 (FLOAT)", "dtype", name)
    _identity(im, node)


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
    "Cast": _cast,
}
