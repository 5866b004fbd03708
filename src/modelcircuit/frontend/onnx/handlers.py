"""ONNX op handlers for the importer: one function per standard op, in one table.

The handlers of ops that only move values (Reshape, Transpose, ...) are in onnx_layout.py,
those of the quantizers (QuantizeLinear/DequantizeLinear) in onnx_quant.py. Each handler reads an ONNX node and emits IR nodes through the importer (`ImportState`), which
owns constants, shapes and aliases. The importer has already checked the node against its
schema (input and output counts, attribute names and types) and that its inputs exist; a
handler checks the values: axes, perms, shapes, parameters. Every refusal is `im.err(node,
...)` (a GraphError naming the node and its op).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ...graphs.ir import GraphError
from .checks import check_float_attrs
from .crop import slice_
from .encoder import gelu, layer_norm, token_mean, token_mean_axes
from .io import Unsupported, show
from .layout import (
    act_shape,
    attrs,
    batch_axis,
    concat,
    gather,
    identity,
    reshape,
    split,
    transpose,
)
from .qdq import clip_bounds, qdq
from .recurrent import recurrent, swapped_move
from .spatial import conv, pool, reduce_spatial, resize
from .swish import swish

if TYPE_CHECKING:
    from .state import ImportState


def _matmul(im: ImportState, node: onnx.NodeProto) -> None:
    x, w = node.input
    if not im.is_const(w):
        raise im.err(node, "MatMul of two activations is not supported (weights must be constant)")
    W = im.const(w)
    xs = act_shape(im, x)
    if W.ndim != 2 or len(xs) < 1 or xs[-1] != W.shape[0]:
        raise im.err(node, f"MatMul needs a per-sample vector (or a sequence of them: one "
                     f"weight matrix for every step) times a 2-D weight, got "
                     f"{list(xs)} x {list(W.shape)}")
    im.emit(node, "Dense", [x, im.src(w)], node.output[0], tuple(xs[:-1]) + (W.shape[1],))


def _gemm(im: ImportState, node: onnx.NodeProto) -> None:
    a = attrs(node)
    ins = list(node.input) + [""] * (3 - len(node.input))
    x, w, c = ins[:3]
    if im.flag(node, a, "transA", 0):
        raise im.unsupported(node, "transA", "Gemm with transA=1 is not supported (the batch "
                             "must be dimension 0)")
    trans_b = im.flag(node, a, "transB", 0)
    if not im.is_const(w) or (c and not im.is_const(c)):
        raise im.err(node, "Gemm weights and bias must be constants")
    xs = act_shape(im, x)
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


def _bcast_shape(im: ImportState, node: onnx.NodeProto, act: tuple[int, ...],
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


def binary(im: ImportState, node: onnx.NodeProto, cvalue: np.ndarray | None = None) -> None:
    """Add/Sub/Mul/Div; with a constant operand (its value `cvalue` when given: already put
    in the batch-first layout) the op keeps the activation's shape."""
    op = node.op_type
    a, b = node.input
    ca, cb = im.is_const(a), im.is_const(b)
    if not ca and not cb:
        return _binary_activations(im, node)
    x, c = (b, a) if ca else (a, b)
    shp = act_shape(im, x)
    if cvalue is None:
        cvalue = _legacy_broadcast(im, node, x, c) if im.opset < 7 else im.const(c)
    cv = _bcast_shape(im, node, shp, cvalue)
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


def _legacy_broadcast(im: ImportState, node: onnx.NodeProto, x: str, c: str) -> np.ndarray:
    """Opset < 7 Add/Sub/Mul/Div: the second operand B is broadcast onto A only with
    broadcast=1, its dimensions aligned at `axis` (default: the trailing ones); without it
    the shapes must be equal. Returns B as a numpy-broadcastable constant."""
    a = attrs(node)
    cv = im.const(c)
    full = im.full_shape(x)
    if not a.get("broadcast", 0):
        if tuple(cv.shape) not in (full, full[1:]):
            raise im.err(node, f"constant {c!r} of shape {list(cv.shape)} differs from the "
                         f"activation's {['N', *full[1:]]}, and without broadcast=1 (opset "
                         f"{im.opset}) the shapes must be equal")
        return cv
    if c == node.input[0]:
        raise im.err(node, f"broadcast=1 (opset {im.opset}) broadcasts the second operand "
                     "onto the first; here the first is a constant and the second an "
                     "activation, which is not supported")
    if "axis" not in a:
        return cv
    ax = int(a["axis"]) + (len(full) if int(a["axis"]) < 0 else 0)
    if not 0 <= ax <= len(full) - cv.ndim:
        raise im.err(node, f"axis {a['axis']} does not place the constant's "
                     f"{cv.ndim} dimensions within the rank-{len(full)} activation")
    return cv.reshape((1,) * ax + tuple(cv.shape) + (1,) * (len(full) - ax - cv.ndim))


def _binary_activations(im: ImportState, node: onnx.NodeProto) -> None:
    """Add/Sub/Mul/Div of two activations, with numpy broadcasting of the per-sample shapes.

    Both operands carry the batch as their first dimension, so they must have the same rank:
    broadcasting a lower-rank operand would align its batch with a per-sample dimension of
    the other. Div of two activations is its own IR op (float only; refused in fixed point
    at compile time, as is broadcasting between activations). x * Sigmoid(x) and
    x * HardSigmoid(x) are one table (frontend/onnx/swish.py)."""
    if swish(im, node):
        return
    op = node.op_type
    a, b = node.input
    sa, sb = act_shape(im, a), act_shape(im, b)
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


def _unary(op: str, **fixed: Any) -> Callable[[ImportState, onnx.NodeProto], None]:
    def h(im: ImportState, node: onnx.NodeProto) -> None:
        a = attrs(node)
        ir_attrs = dict(fixed)
        if op == "LeakyRelu":
            ir_attrs["alpha"] = float(a.get("alpha", 0.01))
        if fixed.get("func") == "selu":
            ir_attrs["alpha"] = float(a.get("alpha", 1.67326319217681884765625))
            ir_attrs["gamma"] = float(a.get("gamma", 1.05070102214813232421875))
        x = node.input[0]
        im.emit(node, op, [x], node.output[0], act_shape(im, x), **ir_attrs)
    return h


def _softmax(im: ImportState, node: onnx.NodeProto) -> None:
    """Softmax over the last per-sample axis; another axis goes through Transposes (opset
    >= 13: one axis) or Reshapes (opset < 13: the input is coerced to 2-D at `axis`)."""
    x = node.input[0]
    shp = act_shape(im, x)
    axis = attrs(node).get("axis", 1 if im.opset < 13 else -1)
    rank = len(shp) + 1
    ax = batch_axis(im, node, axis, rank) + 1  # a Softmax over dimension 0 mixes samples
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


def _batchnorm(im: ImportState, node: onnx.NodeProto, per_tensor: bool = False) -> None:
    """Inference BatchNormalization over per-sample axis 0 (ONNX dimension 1). Old-opset
    attributes: spatial must be 1; is_test, consumed_inputs and momentum do not change
    inference. `per_tensor`: the parameters have one element, the same for every channel
    (the channel axis was the batch, of 1; see swapped_consumer)."""
    x, s, b, m, v = node.input[:5]
    a = attrs(node)
    eps = float(a.get("epsilon", 1e-5))
    if im.flag(node, a, "training_mode", 0):
        raise im.unsupported(node, "training_mode", "BatchNormalization with training_mode=1 "
                             "(batch statistics) is not supported; export the model in "
                             "inference mode")
    if im.opset < 7 and not im.flag(node, a, "is_test", 0) and len(node.output) > 1:
        raise im.unsupported(node, "is_test", "BatchNormalization with is_test=0 and its "
                             "training outputs (batch statistics) is not supported; export "
                             "the model in inference mode")
    if not im.flag(node, a, "spatial", 1):
        raise im.unsupported(node, "spatial", "BatchNormalization with spatial=0 (statistics "
                             "per element) is not supported")
    if eps < 0:
        raise im.err(node, f"epsilon {eps:g} is negative")
    shp = act_shape(im, x)
    if not shp:
        raise im.err(node, "BatchNormalization needs a channel dimension (dimension 1)")
    for nm in (s, b, m, v):
        if not im.is_const(nm):
            raise im.err(node, "BatchNormalization parameters must be constants")
    vals = {}
    n = 1 if per_tensor else shp[0]
    for nm, what in ((s, "scale"), (b, "bias"), (m, "mean"), (v, "variance")):
        p = im.const(nm)
        if p.dtype.kind not in "fiu" or p.shape != (n,):
            raise im.err(node, f"{what} {nm!r} must hold one number per channel, shape "
                         f"[{n}], got {p.dtype} {list(p.shape)}")
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
    params = [im.src(p) for p in (s, b, m, v)]
    if per_tensor:
        params = [im.add_const(im.fresh(p), np.full(shp[0], vals[w][0]), None)
                  for p, w in zip(params, ("scale", "bias", "mean", "variance"), strict=True)]
    src = im.src(x)
    base = im.reshaped.get(src)
    if base is not None and im.shapes[base][:1] == shp[:1]:
        # after a Reshape that keeps the channels first (torch's Unsqueeze of (N, C) to
        # (N, C, 1)): normalise what it reshapes, so that the BatchNorm meets its Dense
        t = im.fresh(node.output[0] + "_bn")
        im.emit(node, "BatchNorm", [base] + params, t, im.shapes[base], epsilon=eps)
        im.emit(node, "Reshape", [t], node.output[0], shp, shape=list(shp))
        im.reshaped[node.output[0]] = t
        return
    im.emit(node, "BatchNorm", [x] + params, node.output[0], shp, epsilon=eps)


def _dropout(im: ImportState, node: onnx.NodeProto) -> None:
    """Inference Dropout is the identity; training mode (random masks) is refused."""
    ins = list(node.input) + ["", ""]
    for nm, what in ((ins[1], "ratio"), (ins[2], "training_mode")):
        if nm and im.is_const(nm) and im.const(nm).size != 1:
            raise im.err(node, f"{what} {nm!r} must be a scalar, got shape "
                         f"{list(im.const(nm).shape)}")
    ratio = float(im.const(ins[1]).reshape(-1)[0]) if ins[1] and im.is_const(ins[1]) else \
        float(attrs(node).get("ratio", 0.5))  # opset < 12: an attribute (is_test: ignored)
    if not 0.0 <= ratio < 1.0:
        raise im.err(node, f"ratio {ratio} is not in [0, 1)")
    training = ins[2] and (not im.is_const(ins[2]) or bool(im.const(ins[2]).reshape(-1)[0]))
    if training and ratio != 0.0:
        raise im.err(node, "Dropout in training mode (random mask) is not supported; "
                     "export the model in inference mode")
    identity(im, node)


def _cast(im: ImportState, node: onnx.NodeProto) -> None:
    """Cast of a (float32) activation to float32 is the identity; other dtypes are refused."""
    to = attrs(node).get("to", 0)
    if isinstance(to, bytes):  # opset < 6: the type's name
        name = to.decode("ascii", "replace").upper()
        if name != "FLOAT":
            raise Unsupported(f"{im.label(node)}: Cast to {show(name)} is not supported; the "
                              "golden model computes float32 (FLOAT)", "dtype", show(name))
        to = onnx.TensorProto.FLOAT
    if to != onnx.TensorProto.FLOAT:
        name = (onnx.TensorProto.DataType.Name(to) if to in onnx.TensorProto.DataType.values()
                else str(to))
        raise Unsupported(f"{im.label(node)}: Cast to {name} is not supported; the golden model "
                          "computes float32 (FLOAT)", "dtype", name)
    identity(im, node)


# ops that compute each element from that element alone: the same in any layout
_ELEMENTWISE = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Selu", "Identity", "Dropout", "Cast",
                "Clip", "HardSigmoid", "HardSwish")
_PER_FEATURE = "BatchNormalization, Add/Sub/Mul/Div by a constant, element-wise activations"


def _swapped_text(im: ImportState, name: str) -> str:
    perm, label = im.swapped[name]
    return (f"{name!r} is in the layout of {label} (perm {list(perm)} from batch-first), "
            "which moves the batch dimension")


def swapped_output(im: ImportState, name: str) -> None:
    """A graph output must be batch-first."""
    if name in im.swapped:
        raise GraphError(f"output {_swapped_text(im, name)}; it must be transposed back "
                         "before it is an output")


def swapped_consumer(im: ImportState, node: onnx.NodeProto) -> None:
    """A node using an activation whose layout moves the batch (the output of a Transpose
    such as perm [1, 0] on (N, F)). The values are kept batch-first; a per-feature op is the
    same computation there (its constants are transposed to match) and its output keeps the
    layout; a Transpose composes with it; anything else mixes samples: refused, naming the
    node, the op and the pattern."""
    op = node.op_type
    x = next(i for i in node.input if i and i in im.swapped)
    perm, _ = im.swapped[x]
    acts = [i for i in node.input if i and not im.is_const(i)]

    def refuse(why: str) -> GraphError:
        return im.err(node, f"input {_swapped_text(im, x)}; {why}. Between such a "
                      f"Transpose and the Transpose back only per-feature ops ({_PER_FEATURE}) "
                      "are the same computation per sample")

    if op == "Transpose":
        return transpose(im, node)
    if swapped_move(im, node, x, _matmul):  # sequences: LSTM/GRU, unit-axis moves, token-wise MatMul
        return None
    if op in _ELEMENTWISE and len(acts) == 1:
        check_float_attrs(im, node)
        HANDLERS[op](im, node)
    elif op in ("Add", "Sub", "Mul", "Div") and len(acts) == 1:
        check_float_attrs(im, node)
        c = next(i for i in node.input if i != x)
        cv = np.asarray(im.const(c))
        rank = len(perm)
        if cv.ndim > rank:
            raise refuse(f"constant {c!r} has rank {cv.ndim}, over the activation's {rank}")
        cv = cv.reshape((1,) * (rank - cv.ndim) + cv.shape).transpose(np.argsort(perm))
        if cv.shape[0] != 1:
            raise refuse(f"{op} by constant {c!r} of shape {list(im.const(c).shape)} differs "
                         "along the batch, so it is not per-feature")
        binary(im, node, cv)
    elif op == "BatchNormalization" and node.input[0] == x and len(acts) == 1:
        check_float_attrs(im, node)
        n = im.const(node.input[1]).size if im.is_const(node.input[1]) else -1
        if perm[1] == 0 and n != 1:
            raise refuse(f"{op} normalises along dimension 1, which is the batch here: its "
                         f"{n} parameters would differ per sample (only one, the same for "
                         "every sample of a batch of 1, is per-feature)")
        if perm[1] not in (0, 1):
            raise refuse(f"{op} normalises along dimension 1, which is batch-first dimension "
                         f"{perm[1]}; only dimension 1 is supported")
        _batchnorm(im, node, per_tensor=perm[1] == 0)
    else:
        raise refuse(f"{op} is not per-feature" if op not in _ELEMENTWISE + (
            "Add", "Sub", "Mul", "Div", "BatchNormalization") else
            f"{op} of two activations is not per-feature")
    for o in node.output[:1]:
        im.swapped[o] = im.swapped[x]


def _clip(im: ImportState, node: onnx.NodeProto) -> None:
    """Clip with constant bounds (opset >= 11: optional inputs; before: attributes min/max):
    an IR Clip (a saturation of the codes in fixed point). PyTorch writes ReLU6 so."""
    lo, hi = clip_bounds(im, node)
    x = node.input[0]
    extra = {k: v for k, v in (("lo", lo), ("hi", hi)) if v is not None}
    im.emit(node, "Clip", [x], node.output[0], act_shape(im, x), **extra)


def _hard(func: str) -> Callable[[ImportState, onnx.NodeProto], None]:
    """HardSigmoid (alpha, beta: defaults 0.2, 0.5) and HardSwish (x * HardSigmoid with alpha
    1/6, beta 0.5): compile-time tables in fixed point (DESIGN.md, "Numbers"), float32 kernels
    otherwise."""
    def h(im: ImportState, node: onnx.NodeProto) -> None:
        a = attrs(node)
        extra = {}
        if func == "hardsigmoid":
            extra = {"alpha": float(a.get("alpha", 0.2)), "beta": float(a.get("beta", 0.5))}
        x = node.input[0]
        im.emit(node, "Lut", [x], node.output[0], act_shape(im, x), func=func, **extra)
    return h


def _reduce_mean(im: ImportState, node: onnx.NodeProto) -> None:
    """ReduceMean over the tokens of a sequence (encoder.token_mean), else over the spatial
    axes of a frame (spatial.reduce_spatial)."""
    axes, keepdims = token_mean_axes(im, node)
    if not token_mean(im, node, axes, keepdims):
        reduce_spatial(im, node)


HANDLERS: dict[str, Callable[[ImportState, onnx.NodeProto], None]] = {
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Add": binary, "Sub": binary, "Mul": binary, "Div": binary,
    "Relu": _unary("Relu"),
    "LeakyRelu": _unary("LeakyRelu"),
    "Sigmoid": _unary("Lut", func="sigmoid"),
    "Tanh": _unary("Lut", func="tanh"),
    "Selu": _unary("Lut", func="selu"),
    "Softmax": _softmax,
    "BatchNormalization": _batchnorm,
    "Flatten": reshape, "Reshape": reshape, "Squeeze": reshape, "Unsqueeze": reshape,
    "Transpose": transpose,
    "Identity": identity, "Dropout": _dropout,
    "Concat": concat, "Gather": gather, "Split": split, "Slice": slice_,
    "QuantizeLinear": qdq, "DequantizeLinear": qdq,
    "Cast": _cast,
    "Conv": conv, "MaxPool": pool, "AveragePool": pool, "GlobalAveragePool": pool,
    "GlobalMaxPool": pool, "Resize": resize, "ReduceMean": _reduce_mean,
    "ReduceMax": reduce_spatial,
    "LayerNormalization": layer_norm, "Gelu": gelu,
    "Clip": _clip, "HardSigmoid": _hard("hardsigmoid"), "HardSwish": _hard("hardswish"),
    "LSTM": recurrent, "GRU": recurrent,
}
