"""Layout bookkeeping for convolutional models: ONNX channels-first tensors -> channels-last IR.

The IR keeps every frame channels-last, per sample (L, C) or (H, W, C) (/work/notes/cnn_ir.md).
ONNX's standard ops are channels-first (N, C, H, W); the qonnx domain
`qonnx.custom_op.channels_last` holds Conv/MaxPool on (N, H, W, C) with (Cout, kh, kw, Cin)
weights. The importer tracks, per ONNX tensor name, whether its IR tensor is the
channels-last storage of a channels-first ONNX value (`im.cf`): a standard Conv's output is,
and so is a Transpose from channels-last to channels-first (keras wraps each Conv in such a
Transpose pair: both become aliases, no IR node). Element-wise ops, quantizers with one scale,
channel Concat and Transposes follow the mark; a Flatten of a marked frame is a Reshape in
channels-last order whose vector is recorded as a permutation of the ONNX order
(`im.flat_perm`), which the weight rows of the MatMul/Gemm after it absorb. Any other op (or a
graph output) gets its input back in ONNX layout through an IR Transpose (or a Gather for a
permuted vector): always correct, never silent. The ops themselves: frontend/onnx/spatial.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import onnx

from .layout import (
    act_shape,
    attrs,
    batch_axis,
    concat,
    flatten_target,
    gather,
    reshape_target,
    reshape_to,
    squeeze_target,
    unsqueeze_target,
)

if TYPE_CHECKING:
    from .state import ImportState

CHANNELS_LAST_OPS = ("Conv", "MaxPool")
SPATIAL_OPS = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
               "Resize", "ReduceMean", "ReduceMax")
# quantizers: they follow a frame's layout where their parameters are one value (per tensor)
_QUANTIZERS = ("Quant", "BipolarQuant", "Trunc", "QuantizeLinear", "DequantizeLinear")
_FOLLOW = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Selu", "Identity", "Dropout", "Cast",
           "Clip", "HardSigmoid", "HardSwish")
_RESHAPES = ("Flatten", "Reshape", "Squeeze", "Unsqueeze")


def to_cl(r: int) -> list[int]:
    """Per-sample perm channels-first (C, *S) -> channels-last (*S, C)."""
    return list(range(1, r)) + [0]


def to_cf(r: int) -> list[int]:
    """Per-sample perm channels-last (*S, C) -> channels-first (C, *S)."""
    return [r - 1] + list(range(r - 1))


def onnx_shape(im: ImportState, name: str) -> tuple[int, ...]:
    """Per-sample shape of an activation as ONNX sees it."""
    shp = act_shape(im, name)
    return tuple(shp[p] for p in to_cf(len(shp))) if name in im.cf else shp


def _tmp(im: ImportState, node: onnx.NodeProto, op: str, x: str, shp: tuple[int, ...],
         what: str, **a: object) -> str:
    t = im.fresh(f"{im.src(x)}_{what}")
    aux = onnx.NodeProto()  # its own name: the ONNX node's name stays with the op it is
    aux.CopyFrom(node)
    aux.name = f"{node.name or node.op_type}_{what}"
    im.emit(aux, op, [x], t, shp, **a)
    return t


def channels_last(im: ImportState, node: onnx.NodeProto, x: str) -> str:
    """The IR tensor holding x channels-last, for a standard (channels-first) spatial op."""
    if x in im.cf:
        return im.src(x)
    if x in im.channels_last:  # made for an earlier reader
        return im.channels_last[x]
    shp = act_shape(im, x)
    if len(shp) < 2:
        raise im.err(node, f"input {x!r} of per-sample shape {list(shp)} has no spatial axis")
    t = _move(im, node, x, shp, to_cl(len(shp)), "nhwc")
    im.channels_last[x] = t
    return t


def nchw_inputs(im: ImportState, inputs: list[str]) -> None:
    """The graph inputs that are channels-first frames read only by ops that take a
    channels-last frame (standard spatial ops, a Pad folded into one, element-wise
    activations, quantizers with one scale), in a model with spatial ops: each is moved to
    channels-last once, at its first reader (`im.pending_cf`; `to_channels_last`), so every
    reader shares one reorder that graphs/passes/host.py layout_ends gives the host, rather
    than a Transpose per reader, or a Transpose after an activation, left in the circuit."""
    nodes = list(im.g.node)
    std = ("", "ai.onnx")
    if not any(n.op_type in SPATIAL_OPS and n.domain in std for n in nodes):
        return
    outs = {o.name for o in im.g.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for i in set(n.input):
            readers.setdefault(i, []).append(n)
    for x in inputs:
        if x in outs or x in im.swapped or not 2 <= len(im.shapes[x]) <= 3:
            continue
        if _reaches_spatial_only(im, x, readers, outs):
            im.pending_cf.add(x)


def _reaches_spatial_only(im: ImportState, x: str, readers: dict, outs: set[str]) -> bool:
    """Whether the paths from x through element-wise ops (activations, quantizers with one
    scale, a Pad, residual joins) reach a standard spatial op reading it as its frame, and
    nothing else but graph outputs: then x is a channels-first frame (an NHWC input read by
    a channels_last-domain op, a Transpose or a Flatten is not)."""
    todo, seen, spatial = [x], set(), False
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        rs = readers.get(t, [])
        if len(seen) > 256 or (t == x and t in outs):
            return False
        for n in rs:
            join = n.domain in ("", "ai.onnx") and n.op_type in ("Add", "Sub", "Mul")
            if list(n.input).count(t) != 1 or (n.input[0] != t and not join):
                return False
            if join:  # a residual join of two frames (or a frame and a constant)
                todo.append(n.output[0])
                continue
            if n.domain in ("", "ai.onnx") and n.op_type in SPATIAL_OPS:
                spatial = True
                continue
            if n.op_type in _QUANTIZERS:
                if not all(im.is_const(i) for i in n.input[1:] if i):
                    return False
            elif not (n.domain in ("", "ai.onnx") and n.op_type in _FOLLOW + ("Pad",)):
                return False
            todo.append(n.output[0])
    return spatial


def to_channels_last(im: ImportState, node: onnx.NodeProto) -> None:
    """At the first reader of a pending channels-first input: its channels-last copy (named
    after that reader, as `channels_last` names it), and the input marked (im.cf) so every
    reader takes the copy."""
    for x in [i for i in node.input if i in im.pending_cf]:
        im.pending_cf.discard(x)
        t = channels_last(im, node, x)
        im.alias[x] = t
        im.cf.add(x)


def _move(im: ImportState, node: onnx.NodeProto, x: str, shp: tuple[int, ...], perm: list[int],
          what: str) -> str:
    """x transposed by perm: a Reshape where only axes of size 1 move (one channel, a 1x1
    frame), the values staying in order; else a Transpose."""
    out = tuple(shp[p] for p in perm)
    moved = [p for p in perm if shp[p] != 1]
    if moved == sorted(moved):
        return _tmp(im, node, "Reshape", x, out, what, shape=list(out))
    return _tmp(im, node, "Transpose", x, out, what, perm=perm)


def materialize(im: ImportState, node: onnx.NodeProto | None, x: str) -> str:
    """An IR tensor holding x in ONNX layout (a Transpose of a marked frame, a Gather of a
    permuted vector), made once per tensor."""
    if x in im.materialized:
        return im.materialized[x]
    shp = act_shape(im, x)
    if x in im.cf:
        t = _move(im, node or _dummy(x), x, shp, to_cf(len(shp)), "nchw")
    elif x in im.flat_perm:
        inv = np.argsort(im.flat_perm[x])
        t = _tmp(im, node or _dummy(x), "Gather", x, shp, "order", axis=0,
                 indices=inv.tolist(), indices_shape=[int(inv.size)])
    else:
        return x
    im.materialized[x] = t
    return t


def _dummy(name: str) -> onnx.NodeProto:
    return onnx.helper.make_node("Identity", [name], [name], name=f"{name}_layout")


def marked(im: ImportState, node: onnx.NodeProto) -> bool:
    return any(i and (i in im.cf or i in im.flat_perm) for i in node.input)


def _uniform(im: ImportState, names: list[str]) -> bool:
    return all(not n or (im.is_const(n) and np.unique(im.const(n)).size == 1) for n in names)


def layout_consumer(im: ImportState, node: onnx.NodeProto, handle, binary) -> None:
    """A node with an input marked channels-first (im.cf) or permuted (im.flat_perm).
    `handle` imports a node as usual, `binary` is onnx_ops' Add/Sub/Mul/Div handler (passed in:
    onnx_ops imports this module)."""
    op = node.op_type
    ins = [i for i in node.input if i]
    acts = [i for i in ins if not im.is_const(i)]
    cf = [i for i in acts if i in im.cf]
    fp = [i for i in acts if i in im.flat_perm]
    quant = op in _QUANTIZERS
    std = node.domain in ("", "ai.onnx")
    if cf and len(cf) == len(acts) and not fp:
        if std and (op in SPATIAL_OPS or op == "Slice") and node.input[0] in im.cf:
            return handle(node)  # the spatial handlers and Slice take a marked input as it is
        if op == "Transpose":
            return transpose_marked(im, node)
        if (std and op in _FOLLOW) or (quant and _uniform(im, ins[1:])):
            handle(node)
            return _mark(im, node, im.cf)
        if quant and len(acts) == 1 and node.input[0] in im.cf and "Linear" not in op:
            return _quant_marked(im, node, handle)  # QONNX's (1, C, 1, 1) parameters
        if std and op in ("Add", "Sub", "Mul", "Div") and len(acts) == 2:
            handle(node)
            return _mark(im, node, im.cf)
        if std and op in ("Add", "Sub", "Mul", "Div"):
            return _binary_marked(im, node, binary)
        if std and op == "Concat":
            return _concat_marked(im, node)
        if (std and op == "Gather" and len(acts) == 1 and node.input[0] in im.cf
                and im.is_const(node.input[1]) and np.ndim(im.const(node.input[1])) <= 1):
            return _gather_marked(im, node)
        if std and op == "BatchNormalization" and len(acts) == 1 and node.input[0] in im.cf:
            return _batchnorm_marked(im, node)
        if std and op in ("Flatten", "Reshape") and len(acts) == 1 and _flattens(im, node):
            return _flatten_marked(im, node)
        if std and op in _RESHAPES and len(acts) == 1 and node.input[0] in im.cf:
            t = _spatial_reshape(im, node)
            if t is not None:
                reshape_to(im, node, node.input[0], (1, *t[1:], t[0]))
                im.cf.add(node.output[0])
                return None
    if fp and len(fp) == len(acts) == 1 and not cf:
        if std and op in ("MatMul", "Gemm") and node.input[0] in im.flat_perm:
            return _dense_permuted(im, node, handle)
        if (std and op in _FOLLOW) or (quant and _uniform(im, ins[1:])):
            handle(node)
            return _mark(im, node, im.flat_perm)
    n2 = onnx.NodeProto()
    n2.CopyFrom(node)
    for k, i in enumerate(node.input):
        if i in im.cf or i in im.flat_perm:
            n2.input[k] = materialize(im, node, i)
    handle(n2)


def _mark(im: ImportState, node: onnx.NodeProto, table) -> None:
    x = next(i for i in node.input if i in table)
    for o in node.output[:1]:
        if isinstance(table, set):
            table.add(o)
        else:
            table[o] = table[x]


def transpose_marked(im: ImportState, node: onnx.NodeProto) -> None:
    x = node.input[0]
    shp = act_shape(im, x)
    r = len(shp)
    perm = list(attrs(node).get("perm", list(range(r + 1))[::-1]))
    if sorted(perm) != list(range(r + 1)) or perm[0] != 0:
        raise im.err(node, f"perm {perm} must keep the batch first (per-sample axes of the "
                     "channels-first frame)")
    cf = to_cf(r)
    q = [cf[p - 1] for p in perm[1:]]  # ONNX output = IR tensor transposed by q
    out = node.output[0]
    if q == list(range(r)):
        im.alias[out] = im.src(x)
        im.shapes[out] = shp
    elif q == cf:
        im.alias[out] = im.src(x)
        im.shapes[out] = shp
        im.cf.add(out)
    else:
        im.emit(node, "Transpose", [x], out, tuple(shp[p] for p in q), perm=q)


def transpose_plain(im: ImportState, node: onnx.NodeProto) -> bool:
    """A Transpose channels-last -> channels-first of an unmarked frame: an alias marked
    channels-first (True), so that the channels-first ops after it run on the IR frame."""
    x = node.input[0]
    shp = act_shape(im, x)
    r = len(shp)
    perm = list(attrs(node).get("perm", list(range(r + 1))[::-1]))
    if r < 2 or perm != [0] + [p + 1 for p in to_cf(r)]:
        return False
    out = node.output[0]
    im.alias[out] = im.src(x)
    im.shapes[out] = shp
    im.cf.add(out)
    return True


def _binary_marked(im: ImportState, node: onnx.NodeProto, binary) -> None:
    """Add/Sub/Mul/Div of a marked frame and a constant: the constant, broadcast as ONNX
    does against (N, C, *S), transposed into the channels-last layout."""
    x = next(i for i in node.input if i in im.cf)
    c = next(i for i in node.input if i != x)
    r = len(act_shape(im, x))
    cv = np.asarray(im.const(c), dtype=np.float64)
    if cv.ndim > r + 1:
        raise im.err(node, f"constant {c!r} has rank {cv.ndim}, over the activation's {r + 1}")
    cv = cv.reshape((1,) * (r + 1 - cv.ndim) + cv.shape)
    binary(im, node, cv.transpose([0] + [p + 1 for p in to_cl(r)]))
    im.cf.add(node.output[0])


def _quant_marked(im: ImportState, node: onnx.NodeProto, handle) -> None:
    """A quantizer with per-channel (or other non-uniform) constant parameters on a marked
    frame: each such parameter, broadcast as ONNX does against (N, C, *S), transposed into
    the channels-last layout (brevitas' per-channel activation scales (1, C, 1, 1) become
    per-channel scales of the last axis)."""
    x = node.input[0]
    r = len(act_shape(im, x))
    n2 = onnx.NodeProto()
    n2.CopyFrom(node)
    for k in range(1, len(node.input)):
        nm = node.input[k]
        if not nm:
            continue
        v = np.asarray(im.const(nm))
        if v.size == 1:
            continue
        if v.ndim > r + 1:
            raise im.err(node, f"parameter {nm!r} has rank {v.ndim}, over the activation's "
                         f"{r + 1}")
        v = v.reshape((1,) * (r + 1 - v.ndim) + v.shape).transpose([0] + [p + 1 for p in
                                                                         to_cl(r)])
        n2.input[k] = im.add_const(im.fresh(f"{im.src(nm)}_nhwc"), np.ascontiguousarray(v))
    handle(n2)
    im.cf.add(node.output[0])


def _batchnorm_marked(im: ImportState, node: onnx.NodeProto) -> None:
    """Inference BatchNormalization of a channels-first frame: per channel x * k + c (k =
    scale / sqrt(var + eps), c = bias - mean * k, in float64) on the channels-last frame, which
    passes/canonicalize.fold_batchnorm folds into the Conv before it."""
    x = node.input[0]
    a = attrs(node)
    if im.flag(node, a, "training_mode", 0):
        raise im.unsupported(node, "training_mode", "BatchNormalization with training_mode=1 "
                             "is not supported; export the model in inference mode")
    shp = act_shape(im, x)
    ch = shp[-1]
    vals = []
    for nm, what in zip(node.input[1:5], ("scale", "bias", "mean", "variance"), strict=True):
        if not im.is_const(nm):
            raise im.err(node, "BatchNormalization parameters must be constants")
        v = np.asarray(im.const(nm), dtype=np.float64)
        if v.shape != (ch,) or not np.all(np.isfinite(v)):
            raise im.err(node, f"{what} {nm!r} must hold {ch} finite numbers (one per channel), "
                         f"got shape {list(v.shape)}")
        vals.append(v)
    s_, b_, m_, v_ = vals
    eps = float(a.get("epsilon", 1e-5))
    if np.any(v_ + eps <= 0) or np.any(v_ < 0):
        raise im.err(node, "variance + epsilon must be positive, variance non-negative")
    k = s_ / np.sqrt(v_ + eps)
    t = im.fresh(f"{node.output[0]}_scaled")
    im.emit(node, "Mul", [x, im.add_const(im.fresh(f"{node.output[0]}_k"), k)], t, shp)
    im.emit(node, "Add", [t, im.add_const(im.fresh(f"{node.output[0]}_c"), b_ - m_ * k)],
            node.output[0], shp)
    im.cf.add(node.output[0])


def _concat_marked(im: ImportState, node: onnx.NodeProto) -> None:
    x = node.input[0]
    r = len(act_shape(im, x))
    ax = batch_axis(im, node, int(attrs(node).get("axis", 1)), r + 1)
    n2 = onnx.NodeProto()
    n2.CopyFrom(node)
    for a in n2.attribute:
        if a.name == "axis":
            a.i = to_cf(r)[ax] + 1
    if not any(a.name == "axis" for a in n2.attribute):
        n2.attribute.append(onnx.helper.make_attribute("axis", to_cf(r)[ax] + 1))
    concat(im, n2)
    im.cf.add(node.output[0])


def _gather_marked(im: ImportState, node: onnx.NodeProto) -> None:
    """Gather of a channels-first frame with constant scalar or 1-D indices (TCN's head
    `y[:, :, -1]`, the last time step): the Gather of the channels-last frame's axis. The
    output stays marked where it is still a frame (1-D indices, or a scalar index that leaves
    a spatial axis beside the channels)."""
    x = node.input[0]
    r = len(act_shape(im, x))
    ax = batch_axis(im, node, int(attrs(node).get("axis", 0)), r + 1)
    n2 = onnx.NodeProto()
    n2.CopyFrom(node)
    del n2.attribute[:]
    n2.attribute.append(onnx.helper.make_attribute("axis", to_cf(r)[ax] + 1))
    gather(im, n2)
    if np.ndim(im.const(node.input[1])) == 1 or (ax != 0 and r > 2):
        im.cf.add(node.output[0])


def _flattens(im: ImportState, node: onnx.NodeProto) -> bool:
    """Does this Flatten/Reshape make one vector per sample of a marked frame?"""
    shp = (1,) + onnx_shape(im, node.input[0])
    t = (flatten_target if node.op_type == "Flatten" else reshape_target)(im, node, shp)
    return len(t) == 2 and t[0] == 1


def _spatial_reshape(im: ImportState, node: onnx.NodeProto) -> tuple[int, ...] | None:
    """The ONNX per-sample target (C, *S') of a Flatten/Reshape/Squeeze/Unsqueeze of a marked
    frame (C, *S) that keeps the channels first and only adds or drops spatial axes of size 1
    (torch.export's AdaptiveAvgPool1d: Unsqueeze, ReduceMean, Squeeze), else None. Its
    channels-last storage (*S', C) holds the values in the order of (*S, C): an IR Reshape,
    the output marked too, instead of a Transpose to ONNX layout and back."""
    oshp = onnx_shape(im, node.input[0])
    target = {"Flatten": flatten_target, "Reshape": reshape_target,
              "Squeeze": squeeze_target, "Unsqueeze": unsqueeze_target}[node.op_type]
    t = tuple(target(im, node, (1, *oshp))[1:])
    if not 2 <= len(t) <= 3 or t[0] != oshp[0]:  # an IR frame: (L, C) or (H, W, C)
        return None
    if [d for d in t[1:] if d != 1] != [d for d in oshp[1:] if d != 1]:
        return None
    return t


def _flatten_marked(im: ImportState, node: onnx.NodeProto) -> None:
    """Flatten of a channels-first frame: the IR Reshape flattens channels-last; the vector
    is that of ONNX permuted: IR element j is ONNX element idx[j]."""
    x = node.input[0]
    oshp = onnx_shape(im, x)
    idx = np.arange(math.prod(oshp)).reshape(oshp).transpose(to_cl(len(oshp))).reshape(-1)
    out = node.output[0]
    im.emit(node, "Reshape", [x], out, (idx.size,), shape=[int(idx.size)])
    if np.any(idx != np.arange(idx.size)):
        im.flat_perm[out] = idx


def _dense_permuted(im: ImportState, node: onnx.NodeProto, handle) -> None:
    """MatMul/Gemm of a permuted vector: its weight rows are permuted to match."""
    x = node.input[0]
    idx = im.flat_perm[x]
    w = node.input[1]
    W = np.asarray(im.const(w))
    trans_b = node.op_type == "Gemm" and attrs(node).get("transB", 0)
    if W.ndim != 2 or W.shape[1 if trans_b else 0] != idx.size:
        return handle(_with_input(node, 0, materialize(im, node, x)))
    Wp = W[:, idx] if trans_b else W[idx, :]
    wn = im.add_const(im.fresh(f"{im.src(w)}_rows"), Wp, im.const_types.get(im.src(w)))
    n2 = _with_input(node, 1, wn)
    n2.input[0] = im.src(x)
    handle(n2)


def _with_input(node: onnx.NodeProto, k: int, name: str) -> onnx.NodeProto:
    n2 = onnx.NodeProto()
    n2.CopyFrom(node)
    n2.input[k] = name
    return n2
