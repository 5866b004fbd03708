"""Convolutional ops (Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Resize)
imported into channels-last IR frames; the layout bookkeeping (which ONNX tensors are stored
channels-last, Transposes, Flatten permutations) is frontend/onnx/channels.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import onnx

from .layout import (
    act_shape,
    attrs,
)

if TYPE_CHECKING:
    from .state import ImportState
from .channels import channels_last, materialize, onnx_shape


def _ints(a: dict, key: str, n: int, default: int) -> list[int]:
    v = a.get(key)
    return [default] * n if v is None else [int(x) for x in v]


def _dilations(im: ImportState, node: onnx.NodeProto, r: int) -> list[int]:
    """A window op's dilations, checked: one positive integer per spatial axis."""
    dil = _ints(attrs(node), "dilations", r, 1)
    if len(dil) != r or any(d < 1 for d in dil):
        raise im.err(node, f"dilations {dil} must be {r} positive integers")
    return dil


def _window_attrs(im: ImportState, node: onnx.NodeProto, spatial: tuple[int, ...],
                  kernel: list[int]) -> tuple[list[int], list[int]]:
    """(strides, pads) of a window op, checked: auto_pad resolved, every window overlapping
    the input (a pool's ceil_mode: _ceil_pads). `kernel` is the window's extent: a dilated
    Conv's is that of its expanded weight (_dilate), as ONNX's SAME padding counts it."""
    a = attrs(node)
    r = len(spatial)
    if len(kernel) != r or any(k < 1 for k in kernel):
        raise im.err(node, f"kernel {kernel} does not fit the {r} spatial axes of the input")
    strides = _ints(a, "strides", r, 1)
    if len(strides) != r or any(s < 1 for s in strides):
        raise im.err(node, f"strides {strides} must be {r} positive integers")
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
    return strides, pads


def _ceil_pads(im: ImportState, node: onnx.NodeProto, spatial: tuple[int, ...],
               kernel: list[int], strides: list[int], pads: list[int]) -> list[int]:
    """A pool's pads with ceil_mode=1: a partial last window (one that starts inside the
    input or its begin padding, as PyTorch and onnxruntime count them) is a window over
    more end padding, which never wins a MaxPool and which an AveragePool leaves out of the
    divisor (count_include_pad=0, or no declared padding: the divisor then counts the
    window's positions inside the input, as PyTorch's and onnxruntime's do). An
    AveragePool with count_include_pad=1 and declared padding divides a partial window by
    its positions inside the declared padding: refused."""
    r = len(spatial)
    out = list(pads)
    for i in range(r):
        span = spatial[i] + pads[i] + pads[i + r] - kernel[i]
        n = -(-span // strides[i]) + 1
        if (n - 1) * strides[i] >= spatial[i] + pads[i]:
            n -= 1
        out[i + r] += max(0, (n - 1) * strides[i] + kernel[i]
                          - (spatial[i] + pads[i] + pads[i + r]))
    if out != pads and node.op_type == "AveragePool" and any(pads) \
            and im.flag(node, attrs(node), "count_include_pad", 0):
        raise im.unsupported(node, "ceil_mode", "ceil_mode=1 with a partial last window "
                             "and count_include_pad=1 with padding is not supported (use "
                             "ceil_mode=0 or count_include_pad=0)")
    return out


def _out_spatial(spatial: tuple[int, ...], kernel: list[int], strides: list[int],
                 pads: list[int]) -> tuple[int, ...]:
    r = len(spatial)
    return tuple((spatial[i] + pads[i] + pads[i + r] - kernel[i]) // strides[i] + 1
                 for i in range(r))


def _frame(im: ImportState, node: onnx.NodeProto, cl_domain: bool) -> tuple[str, tuple[int, ...]]:
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


def conv(im: ImportState, node: onnx.NodeProto, cl_domain: bool = False) -> None:
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
        Wt, group = _dense_groups(Wt, group), 1
    dil = _dilations(im, node, r)
    if any(d != 1 for d in dil):
        Wt = _dilate(Wt, dil)
        kernel = list(Wt.shape[:r])
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


def _dense_groups(Wt: np.ndarray, group: int) -> np.ndarray:
    """A grouped Conv's (*kernel, Cin/group, Cout) weight as the (*kernel, Cin, Cout) weight of
    a Conv with group 1: output channel o of group j = o // (Cout/group) reads input channels
    j*Cin/group ... (j+1)*Cin/group, its other weights are zeros. Exact in every number type
    (a zero product adds nothing); the circuit's constant multipliers drop the zeros, a folded
    (reused) one spends group times the multiplications of the grouped Conv."""
    cg, cout = Wt.shape[-2], Wt.shape[-1]
    full = np.zeros(Wt.shape[:-2] + (cg * group, cout), dtype=Wt.dtype)
    og = cout // group
    for j in range(group):
        full[..., j * cg:(j + 1) * cg, j * og:(j + 1) * og] = Wt[..., j * og:(j + 1) * og]
    return full


def _dilate(Wt: np.ndarray, dil: list[int]) -> np.ndarray:
    """A dilated Conv's (*kernel, Cin/group, Cout) weight as the weight of the Conv with
    dilation 1 over the span of its window: kernel (k - 1) * d + 1 per axis, tap i at
    i * d, zeros between. Exact in every number type (a zero product adds nothing); the
    circuit's constant multipliers drop the zeros at reuse 1, a folded (reused) Conv spends
    steps on them; the line buffers hold the rows a dilated window spans anyway."""
    r = len(dil)
    span = tuple((k - 1) * d + 1 for k, d in zip(Wt.shape[:r], dil, strict=True))
    full = np.zeros(span + Wt.shape[r:], dtype=Wt.dtype)
    full[tuple(slice(None, None, d) for d in dil)] = Wt
    return full


def pool(im: ImportState, node: onnx.NodeProto, cl_domain: bool = False) -> None:
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
        dil = _dilations(im, node, len(shp) - 1)
        if any(d != 1 for d in dil):  # a max/mean over spaced taps is no window of the IR
            why = f"{op} dilations {dil} are not supported (dilation 1 only; a dilated Conv is)"
            raise im.unsupported(node, "dilations", why)
        strides, pads = _window_attrs(im, node, shp[:-1], kernel)
    declared = pads
    if not glob and im.flag(node, a, "ceil_mode", 0):
        pads = _ceil_pads(im, node, shp[:-1], kernel, strides, pads)
    out = _out_spatial(shp[:-1], kernel, strides, pads) + (shp[-1],)
    if op in ("MaxPool", "GlobalMaxPool"):
        if int(a.get("storage_order", 0)) not in (0, 1):
            raise im.err(node, "storage_order must be 0 or 1")
        return im.emit(node, "MaxPool", [xi], node.output[0], out, kernel=kernel,
                       strides=strides, pads=pads)
    extra = {}
    if (any(pads) and not im.flag(node, a, "count_include_pad", 0)) or pads != declared:
        extra["exclude_pad"] = True  # a divisor per window: its positions inside the input
    im.emit(node, "AvgPool", [xi], node.output[0], out, kernel=kernel, strides=strides,
            pads=pads, **extra)


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


def resize(im: ImportState, node: onnx.NodeProto) -> None:
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


# -- explicit Pad nodes, ReduceMean/ReduceMax over the spatial axes --------------------------
_PADDABLE = ("Conv", "AveragePool")


def _int_list(im: ImportState, node: onnx.NodeProto, k: int, what: str) -> list[int] | None:
    if len(node.input) <= k or not node.input[k]:
        return None
    if not im.is_const(node.input[k]):
        raise im.err(node, f"{what} ({node.input[k]!r}) must be a constant")
    return [int(v) for v in np.asarray(im.const(node.input[k])).reshape(-1)]


def pad_folds(im: ImportState, node: onnx.NodeProto) -> None:
    """A constant-mode zero Pad of the spatial axes is folded into the Conv or AveragePool
    that reads it (their own padding is zeros too: the same values); anything else is refused
    in one line. The reader is rewritten when it is visited (padded_reader)."""
    a = attrs(node)
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "constant":
        raise im.unsupported(node, "mode", f"Pad mode {mode!r} is not supported (constant "
                             "zeros folded into the next Conv or AveragePool)")
    if im.opset < 11:
        pads = [int(v) for v in a.get("pads", [])]
        value = float(a.get("value", 0.0))
    else:
        pads = _int_list(im, node, 1, "pads") or []
        cv = node.input[2] if len(node.input) > 2 else ""
        if cv and not im.is_const(cv):
            raise im.err(node, f"constant_value ({cv!r}) must be a constant")
        value = float(np.asarray(im.const(cv)).reshape(-1)[0]) if cv else 0.0
    x, out = node.input[0], node.output[0]
    rank = len(onnx_shape(im, x)) + 1
    axes = _int_list(im, node, 3, "axes") if im.opset >= 18 else None
    if axes is not None:
        full = [0] * (2 * rank)
        for i, ax in enumerate(axes):
            full[ax % rank], full[ax % rank + rank] = pads[i], pads[i + len(axes)]
        pads = full
    readers = [n for n in im.g.node if out in n.input]
    where = "; only a constant zero Pad of the spatial axes read by one Conv or AveragePool "
    where += "(count_include_pad=1) alone is supported (folded into its pads)"
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise im.err(node, f"pads {pads} are not {2 * rank} non-negative integers" + where)
    if value != 0.0:
        raise im.err(node, f"constant_value {value:g} is not 0" + where)
    if out in [o.name for o in im.g.output] or len(readers) != 1 or (
            readers[0].op_type not in _PADDABLE or readers[0].domain not in ("", "ai.onnx")):
        who = ", ".join(f"{r.op_type} {r.name!r}" for r in readers) or "the graph output"
        raise im.err(node, f"its output is read by {who}" + where)
    r = readers[0]
    ra = attrs(r)
    if r.op_type == "AveragePool" and any(int(p) for p in ra.get("pads", [])) and not int(
            ra.get("count_include_pad", 0)):
        raise im.err(node, "the AveragePool reading it pads with count_include_pad=0" + where)
    auto = ra.get("auto_pad", b"NOTSET")
    if (auto.decode() if isinstance(auto, bytes) else str(auto)) not in ("NOTSET", ""):
        raise im.err(node, f"the {r.op_type} reading it has auto_pad" + where)
    if any(pads[i] or pads[i + rank] for i in (0, 1)):
        raise im.err(node, f"pads {pads} pad the batch or channel axis" + where)
    im.pad_fold[out] = (x, pads[2:rank] + pads[rank + 2:])


def padded_reader(im: ImportState, node: onnx.NodeProto) -> onnx.NodeProto:
    """The Conv/AveragePool reading a folded Pad, as a copy reading the Pad's input with the
    Pad's amounts added to its own pads (the user's model is not changed)."""
    if not node.input or node.input[0] not in im.pad_fold:
        return node
    x, extra = im.pad_fold[node.input[0]]
    new = onnx.NodeProto()
    new.CopyFrom(node)
    new.input[0] = x
    own = [int(p) for p in attrs(node).get("pads", [0] * len(extra))]
    keep = [at for at in new.attribute if at.name not in ("pads", "count_include_pad")]
    del new.attribute[:]
    new.attribute.extend(keep)
    new.attribute.append(onnx.helper.make_attribute(
        "pads", [a + b for a, b in zip(own, extra, strict=True)]))
    if node.op_type == "AveragePool":
        new.attribute.append(onnx.helper.make_attribute("count_include_pad", 1))
    return new


def reduce_spatial(im: ImportState, node: onnx.NodeProto) -> None:
    """ReduceMean (ReduceMax) over every spatial axis of a channels-first frame (torch.export's
    global average (max) pool, AdaptiveAvgPool2d(1) / AdaptiveMaxPool2d(1)): the
    GlobalAveragePool (GlobalMaxPool) it equals; with keepdims=0 (PyTorch's `x.mean((2, 3))`,
    `x.amax((2, 3))`) followed by the Reshape to (N, C) that drops the 1x1 frame."""
    op, what = {"ReduceMean": ("GlobalAveragePool", "mean"),
                "ReduceMax": ("GlobalMaxPool", "max")}[node.op_type]
    a = attrs(node)
    x = node.input[0]
    rank = len(onnx_shape(im, x)) + 1
    axes = ([int(v) for v in a["axes"]] if "axes" in a else
            _int_list(im, node, 1, "axes") if im.opset >= 18 else None)
    axes = sorted({ax % rank for ax in axes}) if axes else None
    if axes != list(range(2, rank)) or rank < 3:
        raise im.unsupported(node, "axes", f"{node.op_type} over axes {axes} (keepdims "
                     f"{int(a.get('keepdims', 1))}) of a rank-{rank} tensor: only the {what} "
                     "over all spatial axes of an (N, C, ...) frame (a global pool) is "
                     "supported")
    keep = int(a.get("keepdims", 1))
    out = node.output[0] if keep else im.fresh(f"{node.output[0]}_pooled")
    pool(im, onnx.helper.make_node(op, [x], [out], name=node.name))
    if not keep:  # the pooled frame is (1, ..., C): the same values in ONNX's (C,) order
        ch = act_shape(im, out)[-1]
        im.emit(node, "Reshape", [out], node.output[0], (ch,), shape=[ch])
