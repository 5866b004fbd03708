"""Convolutional ops (Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Resize)
and the layout bookkeeping they need: ONNX channels-first tensors -> channels-last IR.

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
permuted vector): always correct, never silent.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import onnx

from .onnx_layout import (
    _flatten_target,
    _reshape_target,
    act_shape,
    attrs,
    batch_axis,
    concat,
)

if TYPE_CHECKING:
    from .onnx_import import _Importer

CHANNELS_LAST = "qonnx.custom_op.channels_last"
CHANNELS_LAST_OPS = ("Conv", "MaxPool")
SPATIAL_OPS = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
               "Resize")
_FOLLOW = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Selu", "Identity", "Dropout", "Cast")


def to_cl(r: int) -> list[int]:
    """Per-sample perm channels-first (C, *S) -> channels-last (*S, C)."""
    return list(range(1, r)) + [0]


def to_cf(r: int) -> list[int]:
    """Per-sample perm channels-last (*S, C) -> channels-first (C, *S)."""
    return [r - 1] + list(range(r - 1))


def onnx_shape(im: _Importer, name: str) -> tuple[int, ...]:
    """Per-sample shape of an activation as ONNX sees it."""
    shp = act_shape(im, name)
    return tuple(shp[p] for p in to_cf(len(shp))) if name in im.cf else shp


def _tmp(im: _Importer, node: onnx.NodeProto, op: str, x: str, shp: tuple[int, ...],
         what: str, **a: object) -> str:
    t = im.fresh(f"{im.src(x)}_{what}")
    aux = onnx.NodeProto()  # its own name: the ONNX node's name stays with the op it is
    aux.CopyFrom(node)
    aux.name = f"{node.name or node.op_type}_{what}"
    im.emit(aux, op, [x], t, shp, **a)
    return t


def channels_last(im: _Importer, node: onnx.NodeProto, x: str) -> str:
    """The IR tensor holding x channels-last, for a standard (channels-first) spatial op."""
    if x in im.cf:
        return im.src(x)
    shp = act_shape(im, x)
    if len(shp) < 2:
        raise im.err(node, f"input {x!r} of per-sample shape {list(shp)} has no spatial axis")
    return _move(im, node, x, shp, to_cl(len(shp)), "nhwc")


def _move(im: _Importer, node: onnx.NodeProto, x: str, shp: tuple[int, ...], perm: list[int],
          what: str) -> str:
    """x transposed by perm: a Reshape where only axes of size 1 move (one channel, a 1x1
    frame), the values staying in order; else a Transpose."""
    out = tuple(shp[p] for p in perm)
    moved = [p for p in perm if shp[p] != 1]
    if moved == sorted(moved):
        return _tmp(im, node, "Reshape", x, out, what, shape=list(out))
    return _tmp(im, node, "Transpose", x, out, what, perm=perm)


def materialize(im: _Importer, node: onnx.NodeProto | None, x: str) -> str:
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


def marked(im: _Importer, node: onnx.NodeProto) -> bool:
    return any(i and (i in im.cf or i in im.flat_perm) for i in node.input)


def _uniform(im: _Importer, names: list[str]) -> bool:
    return all(not n or (im.is_const(n) and np.unique(im.const(n)).size == 1) for n in names)


def layout_consumer(im: _Importer, node: onnx.NodeProto, handle, binary) -> None:
    """A node with an input marked channels-first (im.cf) or permuted (im.flat_perm).
    `handle` imports a node as usual, `binary` is onnx_ops' Add/Sub/Mul/Div handler (passed in:
    onnx_ops imports this module)."""
    op = node.op_type
    ins = [i for i in node.input if i]
    acts = [i for i in ins if not im.is_const(i)]
    cf = [i for i in acts if i in im.cf]
    fp = [i for i in acts if i in im.flat_perm]
    quant = op in ("Quant", "BipolarQuant")
    std = node.domain in ("", "ai.onnx")
    if cf and len(cf) == len(acts) and not fp:
        if std and op in SPATIAL_OPS and node.input[0] in im.cf:
            return handle(node)  # the spatial handlers take a marked input as it is
        if op == "Transpose":
            return transpose_marked(im, node)
        if (std and op in _FOLLOW) or (quant and _uniform(im, ins[1:])):
            handle(node)
            return _mark(im, node, im.cf)
        if std and op in ("Add", "Sub", "Mul", "Div") and len(acts) == 2:
            handle(node)
            return _mark(im, node, im.cf)
        if std and op in ("Add", "Sub", "Mul", "Div"):
            return _binary_marked(im, node, binary)
        if std and op == "Concat":
            return _concat_marked(im, node)
        if std and op == "BatchNormalization" and len(acts) == 1 and node.input[0] in im.cf:
            return _batchnorm_marked(im, node)
        if std and op in ("Flatten", "Reshape") and len(acts) == 1 and _flattens(im, node):
            return _flatten_marked(im, node)
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


def _mark(im: _Importer, node: onnx.NodeProto, table) -> None:
    x = next(i for i in node.input if i in table)
    for o in node.output[:1]:
        if isinstance(table, set):
            table.add(o)
        else:
            table[o] = table[x]


def transpose_marked(im: _Importer, node: onnx.NodeProto) -> None:
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


def transpose_plain(im: _Importer, node: onnx.NodeProto) -> bool:
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


def _binary_marked(im: _Importer, node: onnx.NodeProto, binary) -> None:
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


def _batchnorm_marked(im: _Importer, node: onnx.NodeProto) -> None:
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


def _concat_marked(im: _Importer, node: onnx.NodeProto) -> None:
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


def _flattens(im: _Importer, node: onnx.NodeProto) -> bool:
    """Does this Flatten/Reshape make one vector per sample of a marked frame?"""
    shp = (1,) + onnx_shape(im, node.input[0])
    t = (_flatten_target if node.op_type == "Flatten" else _reshape_target)(im, node, shp)
    return len(t) == 2 and t[0] == 1


def _flatten_marked(im: _Importer, node: onnx.NodeProto) -> None:
    """Flatten of a channels-first frame: the IR Reshape flattens channels-last; the vector
    is that of ONNX permuted: IR element j is ONNX element idx[j]."""
    x = node.input[0]
    oshp = onnx_shape(im, x)
    idx = np.arange(math.prod(oshp)).reshape(oshp).transpose(to_cl(len(oshp))).reshape(-1)
    out = node.output[0]
    im.emit(node, "Reshape", [x], out, (idx.size,), shape=[int(idx.size)])
    if np.any(idx != np.arange(idx.size)):
        im.flat_perm[out] = idx


def _dense_permuted(im: _Importer, node: onnx.NodeProto, handle) -> None:
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


# -- the spatial ops --------------------------------------------------------------------------


def _ints(a: dict, key: str, n: int, default: int) -> list[int]:
    v = a.get(key)
    return [default] * n if v is None else [int(x) for x in v]


def _window_attrs(im: _Importer, node: onnx.NodeProto, spatial: tuple[int, ...],
                  kernel: list[int]) -> tuple[list[int], list[int]]:
    """(strides, pads) of a window op, checked: dilations 1, auto_pad resolved, ceil_mode
    only where it changes nothing, every window overlapping the input."""
    a = attrs(node)
    r = len(spatial)
    if len(kernel) != r or any(k < 1 for k in kernel):
        raise im.err(node, f"kernel {kernel} does not fit the {r} spatial axes of the input")
    strides = _ints(a, "strides", r, 1)
    dil = _ints(a, "dilations", r, 1)
    if len(strides) != r or any(s < 1 for s in strides):
        raise im.err(node, f"strides {strides} must be {r} positive integers")
    if any(d != 1 for d in dil):
        raise im.unsupported(node, "dilations", f"dilations {dil} are not supported "
                             "(dilation 1 only)")
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto in ("NOTSET", ""):
        pads = _ints(a, "pads", 2 * r, 0)
    elif auto == "VALID":
        pads = [0] * (2 * r)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * r)
        for i in range(r):
            out = -(-spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + kernel[i] - spatial[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + r] = (small, big) if auto == "SAME_UPPER" else (big, small)
    else:
        raise im.unsupported(node, "auto_pad", f"auto_pad {auto!r} is not supported")
    if len(pads) != 2 * r or any(p < 0 for p in pads):
        raise im.err(node, f"pads {pads} must be {2 * r} non-negative integers")
    if any(pads[i] >= kernel[i] or pads[i + r] >= kernel[i] for i in range(r)):
        raise im.err(node, f"pads {pads} reach a whole kernel {kernel} beyond the input; "
                     "windows of padding only are not supported")
    for i in range(r):
        if spatial[i] + pads[i] + pads[i + r] < kernel[i]:
            raise im.err(node, f"kernel {kernel} is larger than the padded input "
                         f"{list(spatial)}")
    if im.flag(node, a, "ceil_mode", 0):
        for i in range(r):
            span = spatial[i] + pads[i] + pads[i + r] - kernel[i]
            if span % strides[i]:
                raise im.unsupported(node, "ceil_mode", "ceil_mode=1 with a partial last "
                                     "window is not supported (use ceil_mode=0)")
    return strides, pads


def _out_spatial(spatial: tuple[int, ...], kernel: list[int], strides: list[int],
                 pads: list[int]) -> tuple[int, ...]:
    r = len(spatial)
    return tuple((spatial[i] + pads[i] + pads[i + r] - kernel[i]) // strides[i] + 1
                 for i in range(r))


def _frame(im: _Importer, node: onnx.NodeProto, cl_domain: bool) -> tuple[str, tuple[int, ...]]:
    """(IR input channels-last, its shape) of a spatial op; marks the output channels-first
    for a standard op."""
    x = node.input[0]
    if cl_domain:
        xi = materialize(im, node, x) if x in im.cf or x in im.flat_perm else x
    else:
        xi = channels_last(im, node, x)
        im.cf.add(node.output[0])
    shp = act_shape(im, xi)
    if not 2 <= len(shp) <= 3:
        raise im.err(node, f"{node.op_type} on a per-sample frame of shape {list(shp)}: only "
                     "1-D (L, C) and 2-D (H, W, C) frames are supported")
    return xi, shp


def conv(im: _Importer, node: onnx.NodeProto, cl_domain: bool = False) -> None:
    ins = list(node.input) + [""] * (3 - len(node.input))
    w, b = ins[1], ins[2]
    if not im.is_const(w) or (b and not im.is_const(b)):
        raise im.err(node, "Conv weights and bias must be constants")
    xi, shp = _frame(im, node, cl_domain)
    r, cin = len(shp) - 1, shp[-1]
    W = np.asarray(im.const(w), dtype=np.float64)
    if W.ndim != r + 2:
        raise im.err(node, f"weight {w!r} of shape {list(W.shape)} does not fit a {r}-D Conv")
    # IR weight: (*kernel, Cin/group, Cout)
    perm = list(range(1, r + 2)) + [0] if cl_domain else list(range(2, r + 2)) + [1, 0]
    Wt = W.transpose(perm)
    kernel = list(Wt.shape[:r])
    a = attrs(node)
    if "kernel_shape" in a and [int(k) for k in a["kernel_shape"]] != kernel:
        raise im.err(node, f"kernel_shape {list(a['kernel_shape'])} differs from the weight's "
                     f"{kernel}")
    group = int(a.get("group", 1))
    cout = Wt.shape[-1]
    if group < 1 or cin % group or Wt.shape[-2] * group != cin or cout % group:
        raise im.err(node, f"group {group} does not fit {cin} input channels and weight "
                     f"{list(W.shape)}")
    if group not in (1, cin):
        raise im.unsupported(node, "group", f"group {group} is not supported (1, or the "
                             f"number of input channels {cin} for a depthwise Conv)")
    strides, pads = _window_attrs(im, node, shp[:-1], kernel)
    out_sp = _out_spatial(shp[:-1], kernel, strides, pads)
    wn = im.add_const(im.fresh(f"{im.src(w)}_hwio"), Wt, im.const_types.get(im.src(w)))
    inputs = [xi, wn]
    if b:
        bv = np.asarray(im.const(b), dtype=np.float64)
        if bv.size != cout:
            raise im.err(node, f"bias {b!r} has {bv.size} values for {cout} output channels")
        inputs.append(im.add_const(im.fresh(im.src(b)), bv.reshape(cout),
                                   im.const_types.get(im.src(b))))
    im.emit(node, "Conv", inputs, node.output[0], out_sp + (cout,), kernel=kernel,
            strides=strides, pads=pads, group=group)


def pool(im: _Importer, node: onnx.NodeProto, cl_domain: bool = False) -> None:
    op = node.op_type
    if len(node.output) > 1 and node.output[1]:
        raise im.err(node, "MaxPool's Indices output is not supported")
    xi, shp = _frame(im, node, cl_domain)
    a = attrs(node)
    glob = op.startswith("Global")
    kernel = list(shp[:-1]) if glob else [int(k) for k in a.get("kernel_shape", [])]
    if glob:
        strides, pads = [1] * len(kernel), [0] * (2 * len(kernel))
    else:
        strides, pads = _window_attrs(im, node, shp[:-1], kernel)
    out = _out_spatial(shp[:-1], kernel, strides, pads) + (shp[-1],)
    if op in ("MaxPool", "GlobalMaxPool"):
        if int(a.get("storage_order", 0)) not in (0, 1):
            raise im.err(node, "storage_order must be 0 or 1")
        return im.emit(node, "MaxPool", [xi], node.output[0], out, kernel=kernel,
                       strides=strides, pads=pads)
    if any(pads) and not im.flag(node, a, "count_include_pad", 0):
        raise im.unsupported(node, "count_include_pad", "AveragePool with padding and "
                             "count_include_pad=0 (a divisor per window) is not supported; "
                             "count_include_pad=1 is")
    im.emit(node, "AvgPool", [xi], node.output[0], out, kernel=kernel, strides=strides,
            pads=pads)


_COORD = ("half_pixel", "pytorch_half_pixel", "asymmetric", "tf_half_pixel_for_nn",
          "align_corners")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _nearest_index(n_in: int, n_out: int, scale: float, coord: str, mode: str) -> np.ndarray:
    """ONNX Resize (opset >= 11) nearest: the input index each output index reads."""
    x = np.arange(n_out, dtype=np.float64)
    if coord == "half_pixel":
        o = (x + 0.5) / scale - 0.5
    elif coord == "pytorch_half_pixel":
        o = (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(x)
    elif coord == "asymmetric":
        o = x / scale
    elif coord == "tf_half_pixel_for_nn":
        o = (x + 0.5) / scale
    else:  # align_corners
        o = x * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(x)
    fl = np.floor(o)
    half = (o - fl) == 0.5
    if mode == "floor":
        i = fl
    elif mode == "ceil":
        i = np.ceil(o)
    elif mode == "round_prefer_floor":
        i = np.where(half, fl, np.round(o))
    else:
        i = np.where(half, fl + 1, np.round(o))
    return np.clip(i, 0, n_in - 1).astype(np.int64)


def resize(im: _Importer, node: onnx.NodeProto) -> None:
    """Resize, nearest, integer factors: a repeat of every pixel (checked against ONNX's
    coordinate mapping for the node's modes). Channels-last or channels-first frames."""
    if im.opset < 11:
        raise im.err(node, f"Resize of opset {im.opset} is not supported (opset 11 or newer)")
    a = attrs(node)
    dec = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}
    if dec.get("mode", "nearest") != "nearest":
        raise im.unsupported(node, "mode", f"Resize mode {dec['mode']!r} is not supported "
                             "(nearest)")
    coord = dec.get("coordinate_transformation_mode", "half_pixel")
    nmode = dec.get("nearest_mode", "round_prefer_floor")
    if coord not in _COORD or nmode not in _NEAREST:
        raise im.unsupported(node, "coordinate_transformation_mode", "Resize with "
                             f"coordinate_transformation_mode {coord!r} / nearest_mode "
                             f"{nmode!r} is not supported")
    if a.get("antialias", 0) or a.get("axes") is not None:
        raise im.unsupported(node, "axes", "Resize with antialias or axes is not supported")
    x = node.input[0]
    oshp = onnx_shape(im, x)
    ins = list(node.input) + [""] * (4 - len(node.input))
    full_in = (1,) + oshp
    if ins[2] and im.const(ins[2]).size:
        sc = [float(v) for v in np.asarray(im.const(ins[2])).reshape(-1)]
        if len(sc) != len(full_in):
            raise im.err(node, f"scales {sc} do not match the input's rank {len(full_in)}")
        sizes = [int(math.floor(d * s)) for d, s in zip(full_in, sc, strict=True)]
    elif ins[3]:
        sizes = [int(v) for v in np.asarray(im.const(ins[3])).reshape(-1)]
        if len(sizes) != len(full_in):
            raise im.err(node, f"sizes {sizes} do not match the input's rank {len(full_in)}")
        sc = [s / d for s, d in zip(sizes, full_in, strict=True)]
    else:
        raise im.err(node, "Resize needs scales or sizes")
    if sizes[0] != 1:
        raise im.err(node, "Resize must not scale the batch dimension")
    fac = []
    for d, s, n in zip(full_in[1:], sc[1:], sizes[1:], strict=True):
        k = n // d
        if n != k * d or k < 1 or not np.array_equal(
                _nearest_index(d, n, s, coord, nmode), np.repeat(np.arange(d), k)):
            raise im.unsupported(node, "scales", f"Resize from {list(full_in)} to {sizes} is "
                                 "not an integer nearest-neighbour upsampling (each pixel "
                                 "repeated) with these modes; only that is supported")
        fac.append(k)
    r = len(oshp)
    if x in im.cf:  # ONNX (C, *S) of an IR (*S, C) frame
        if fac[0] != 1:
            raise im.err(node, "Resize along the channel axis is not supported")
        ir_fac = fac[1:]
        xi = im.src(x)
        im.cf.add(node.output[0])
    elif fac[-1] == 1:  # channels-last data (or a factor of 1 on the last axis anyway)
        ir_fac, xi = fac[:-1], x
    elif fac[0] == 1 and r >= 2:
        ir_fac, xi = fac[1:], channels_last(im, node, x)
        im.cf.add(node.output[0])
    else:
        raise im.err(node, f"Resize by {fac} scales both the first and the last per-sample "
                     "axis; one of them must be the channels (factor 1)")
    shp = act_shape(im, xi)
    out = tuple(d * f for d, f in zip(shp[:-1], ir_fac, strict=True)) + (shp[-1],)
    im.emit(node, "Resize", [xi], node.output[0], out, scales=ir_fac)
