"""Lowering functions of the convolutional ops (Conv, MaxPool, AvgPool, Resize) and of Concat:
one kernel per node from templates/cuda (conv.cu.j2, pool.cu.j2, resize.cu.j2, concat.cu.j2),
one thread per output element, batch included (direct convolution; each thread's weight
reads coalesce over the output channel). Activations are channels-last per sample, (H, W, C)
or (L, C), with the attributes of graphs/ops.py (ConvAttrs, ...); a 1-D op is lowered as a
2-D one of height 1, so one template serves both.

Every function checks the geometry it is given against the tensor shapes and raises a
GraphError naming the node when they disagree, rather than running a kernel that would read
out of bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graphs.ir import GraphError, Node
from ..graphs.ops import (
    AvgPoolAttrs,
    ConcatAttrs,
    ConvAttrs,
    MaxPoolAttrs,
    ResizeAttrs,
    attrs,
    window_shape,
)
from .context import LowerCtx, Lowered, cll, linear_tail, requant_args


@dataclass(frozen=True)
class Window:
    """A sliding window over a channels-last input, as 2-D (1-D: height 1)."""

    IH: int
    IW: int
    CIN: int
    KH: int
    KW: int
    SH: int
    SW: int
    PT: int
    PL: int
    OH: int
    OW: int

    def ctx(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def window(ctx: LowerCtx, node: Node) -> Window:
    """The window of a Conv or pool node: input (H, W, C) or (L, C), attributes `kernel`,
    `strides`, `pads` (ONNX order: begins, then ends); the output's spatial shape must be
    floor((in + pads - k) / s) + 1 per axis (ops.window_shape)."""
    ish = ctx.g.tensor(node.inputs[0]).shape
    osh = ctx.g.tensor(node.outputs[0]).shape
    if len(ish) not in (2, 3) or len(osh) != len(ish):
        raise GraphError(f"node {node.name} ({node.op}): expected channels-last (L, C) or "
                         f"(H, W, C) tensors, got {list(ish)} -> {list(osh)}")
    nd = len(ish) - 1
    a = attrs(node)
    assert isinstance(a, (ConvAttrs, MaxPoolAttrs, AvgPoolAttrs))
    k, s, p = a.kernel, a.strides, a.pads
    if (len(k), len(s), len(p)) != (nd, nd, 2 * nd) or min(k) < 1 or min(s) < 1 or min(p) < 0:
        raise GraphError(f"node {node.name} ({node.op}): kernel {list(k)}, strides {list(s)} and "
                         f"pads {list(p)} for a {nd}-D input: need {nd}, {nd} and {2 * nd} "
                         "values, positive (pads non-negative)")
    want = window_shape(tuple(ish[:nd]), k, s, p)
    if max(int(np.prod(ish)), int(np.prod(osh))) >= 1 << 31:
        raise GraphError(f"node {node.name} ({node.op}): {list(ish)} -> {list(osh)} is over 2**31 "
                         "elements per sample (the kernels index a sample with int)")
    if tuple(osh[:nd]) != want or min(want) < 1:
        raise GraphError(f"node {node.name} ({node.op}): output {list(osh)} does not match input "
                         f"{list(ish)} with kernel {list(k)}, strides {list(s)}, pads {list(p)}")
    if nd == 1:
        return Window(1, ish[0], ish[1], 1, k[0], 1, s[0], 0, p[0], 1, osh[0])
    return Window(ish[0], ish[1], ish[2], k[0], k[1], s[0], s[1], p[0], p[1], osh[0], osh[1])


def lower_conv(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    """Direct convolution (conv.cu.j2): the exact int64 sum of the window (fixed point) or a
    float32 fmaf chain over (ky, kx, ci), then the Dense epilogue (bias, requant, ReLU)."""
    x, wn = node.inputs[0], node.inputs[1]
    bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    w = ctx.cval(wn)
    ish, osh = ctx.g.tensor(x).shape, ctx.g.tensor(node.outputs[0]).shape
    if w.ndim != len(ish) + 1:
        raise GraphError(f"node {node.name} (Conv): weights {list(w.shape)} for an input "
                         f"{list(ish)}; expected (kh, kw, cin/group, cout) or (k, cin/group, cout)")
    at = ConvAttrs.of(node)
    win = window(ctx, node)
    groups = at.group
    cin_g, cout = int(w.shape[-2]), int(w.shape[-1])
    if tuple(w.shape[:-2]) != at.kernel or groups < 1 or cin_g * groups != win.CIN \
            or cout % groups or osh[-1] != cout:
        raise GraphError(f"node {node.name} (Conv): weights {list(w.shape)}, group {groups} do "
                         f"not match input {list(ish)} -> output {list(osh)}")
    c = ctx.base(node, kname)
    fl = c["is_float"]
    params = [ctx.act("x", x), ctx.const("w", wn, w.reshape(-1), fl)]
    c.update(win.ctx(), COUT=cout, G=groups, CIN_G=cin_g, COUT_G=cout // groups,
             relu=at.relu, bias=bn is not None, xt=ctx.ctype(x), wt=params[1].ctype,
             acc=str(at.acc))
    linear_tail(ctx, node, c, params, bn)
    return "conv.cu.j2", c, params, int(np.prod(osh))


def _pool(ctx: LowerCtx, node: Node, kname: str, is_max: bool) -> tuple[dict[str, Any], list]:
    x, out = node.inputs[0], node.outputs[0]
    win = window(ctx, node)
    if ctx.g.tensor(out).shape[-1] != win.CIN:
        raise GraphError(f"node {node.name} ({node.op}): {win.CIN} channels in, "
                         f"{ctx.g.tensor(out).shape[-1]} out")
    c = ctx.base(node, kname)
    c.update(win.ctx(), C=win.CIN, is_max=is_max, xt=ctx.ctype(x), count=win.KH * win.KW,
             exclude=False)
    return c, [ctx.act("x", x)]


def lower_maxpool(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    """Max over the valid positions of each window (padding never wins)."""
    c, params = _pool(ctx, node, kname, True)
    if not c["is_float"]:
        c["r"] = requant_args(node, ctx.t(node.inputs[0]).frac, ctx.t(node.outputs[0]))
    params.append(ctx.act("y", node.outputs[0]))
    return "pool.cu.j2", c, params, ctx.g.tensor(node.outputs[0]).size


def recip_code(ctx: LowerCtx, node: Node) -> tuple[int, int]:
    """The reciprocal of the window size as (code, fractional bits): the constant input
    `recip` that accumulator_types adds, round(2**F / count) in `recip_type`."""
    rt = AvgPoolAttrs.of(node).recip_type
    if rt is None or len(node.inputs) < 2 or not node.inputs[1]:
        raise GraphError(f"node {node.name} (AvgPool): reciprocal of the window size not "
                         "computed; compile the graph first")
    return int(ctx.cval(node.inputs[1]).reshape(-1)[0]), rt.frac


def lower_avgpool(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    """Window sum (padding counts as zeros), then times the reciprocal code and one
    conversion to the output type (fixed point) or divided by the count (float32). With
    exclude_pad the count is the window's positions inside the input, and the reciprocal
    the entry of that count in the table accumulator_types made (a constant `rt`)."""
    c, params = _pool(ctx, node, kname, False)
    a = AvgPoolAttrs.of(node)
    c["exclude"] = a.exclude_pad
    if not c["is_float"]:
        if c["exclude"]:
            rt = AvgPoolAttrs.of(node).recip_type
            if rt is None or len(node.inputs) < 2 or ctx.cval(node.inputs[1]).ndim != 1:
                raise GraphError(f"node {node.name} (AvgPool): the reciprocal table of the "
                                 "window counts is not computed; compile the graph first")
            rfrac = rt.frac
            params.append(ctx.const("rt", node.inputs[1], ctx.cval(node.inputs[1]), False))
        else:
            code, rfrac = recip_code(ctx, node)
            c["recip"] = cll(code)
        c["r"] = requant_args(node, ctx.t(node.inputs[0]).frac + rfrac, ctx.t(node.outputs[0]))
    params.append(ctx.act("y", node.outputs[0]))
    return "pool.cu.j2", c, params, ctx.g.tensor(node.outputs[0]).size


def lower_resize(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    """Nearest upsampling by integer factors, one per spatial axis (the last axis is the
    channels)."""
    x, out = node.inputs[0], node.outputs[0]
    ish, osh = ctx.g.tensor(x).shape, ctx.g.tensor(out).shape
    sc = ResizeAttrs.of(node).scales + (1,)
    if len(osh) != len(ish) or len(sc) != len(ish) or any(o != i * s for i, o, s in zip(ish, osh, sc, strict=True)) \
            or min(sc) < 1:
        raise GraphError(f"node {node.name} (Resize): scales {list(sc[:-1])} do not take "
                         f"{list(ish)} to {list(osh)}")
    strides = [int(np.prod(ish[d + 1:], dtype=np.int64)) for d in range(len(ish))]
    axes = [{"out": osh[d], "scale": sc[d], "stride": strides[d]}
            for d in reversed(range(len(ish)))]
    c = ctx.base(node, kname)
    c.update(axes=axes, scales=list(sc[:-1]), size=ctx.g.tensor(out).size,
             in_size=ctx.g.tensor(x).size, same_type=True)
    if not c["is_float"]:
        tin, tout = ctx.t(x), ctx.t(out)
        c["same_type"] = tin == tout
        if tin != tout:
            c["r"] = requant_args(node, tin.frac, tout)
    return "resize.cu.j2", c, [ctx.act("x", x), ctx.act("y", out)], c["size"]


def lower_concat(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    """Concat along any per-sample axis (channels: the last); each input's codes converted
    to the output type where its type differs."""
    out = node.outputs[0]
    osh = ctx.g.tensor(out).shape
    axis = ConcatAttrs.of(node).axis
    ax = axis + len(osh) if axis < 0 else axis
    if not 0 <= ax < len(osh):
        raise GraphError(f"node {node.name} (Concat): axis {axis} for shape {list(osh)}")
    c = ctx.base(node, kname)
    tout = ctx.t(out)
    parts, params, start = [], [], 0
    for k, name in enumerate(node.inputs):
        sh = ctx.g.tensor(name).shape
        if len(sh) != len(osh) or sh[:ax] != osh[:ax] or sh[ax + 1:] != osh[ax + 1:]:
            raise GraphError(f"node {node.name} (Concat): input {name!r} {list(sh)} does not "
                             f"fit the output {list(osh)} on axis {axis}")
        inner = int(np.prod(sh[ax:], dtype=np.int64))
        p = {"name": f"a{k}", "size": ctx.g.tensor(name).size, "inner": inner, "start": start,
             "end": start + inner, "same_type": True}
        if not c["is_float"]:
            tin = ctx.t(name)
            p["same_type"] = tin == tout
            if tin != tout:
                p["r"] = requant_args(node, tin.frac, tout)
        parts.append(p)
        params.append(ctx.act(p["name"], name))
        start += inner
    inner = int(np.prod(osh[ax:], dtype=np.int64))
    if start != inner:
        raise GraphError(f"node {node.name} (Concat): inputs add up to {start} of {inner} "
                         f"elements per block")
    c.update(parts=parts, inner=inner, outer=int(np.prod(osh[:ax], dtype=np.int64)),
             size=ctx.g.tensor(out).size)
    params.append(ctx.act("y", out))
    return "concat.cu.j2", c, params, c["size"]
