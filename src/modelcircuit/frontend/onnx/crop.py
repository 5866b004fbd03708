"""ONNX Slice of an activation: crops (TCN's Chomp1d `x[:, :, :-k]`, U-Net's
`x[:, :, a:-b, c:-d]`), strided picks and parts of the channel axis.

Constant starts/ends/axes/steps (inputs from opset 10, attributes before) are read as ONNX's
Slice defines them (onnx/reference/ops/op_slice.py): negative starts and ends count from the
end, then are clamped ([0, n] for a positive step, [0, n - 1] and [-1, n - 1] for a negative
one; INT64_MAX / INT64_MIN mean "to the end"), so each sliced axis keeps range(start, end,
step). Each axis whose kept indices are not the whole axis becomes one IR Gather with those
indices (graphs/ops.py: golden, GPU and the streamed circuits run it; passes/crop.py folds a
crop of a Conv's padded border into the Conv's pads). A channels-first frame (im.cf) stays
marked: its ONNX axes are mapped onto the channels-last IR axes. The batch axis may only be
kept whole. Bad parameters are one line naming the node and the input or attribute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from .channels import to_cf
from .layout import act_shape, attrs

if TYPE_CHECKING:
    from .state import ImportState

_BIG = 2 ** 62  # INT64_MAX / INT64_MIN ends are "to the end" (clamped below)


def _param(im: ImportState, node: onnx.NodeProto, k: int, what: str) -> list[int] | None:
    """Slice input k (starts, ends, axes, steps) or, before opset 10, the attribute `what`;
    None where absent. Not a constant, not integers or not 1-D: refused, naming it."""
    if im.opset < 10:
        v = attrs(node).get(what)
        return None if v is None else [int(x) for x in v]
    if len(node.input) <= k or not node.input[k]:
        return None
    name = node.input[k]
    if not im.is_const(name):
        raise im.err(node, f"Slice {what} {name!r} is computed at run time; only constant "
                     f"{what} are supported")
    v = np.asarray(im.const(name))
    if v.dtype.kind not in "iu" or v.ndim != 1:
        raise im.err(node, f"Slice {what} {name!r} must be a 1-D integer tensor, got dtype "
                     f"{v.dtype} shape {list(v.shape)}")
    return [int(x) for x in v]


def slice_ranges(im: ImportState, node: onnx.NodeProto, dims: tuple[int | None, ...]
                 ) -> dict[int, range]:
    """ONNX axis -> the range of indices it keeps, for the axes the Slice names (dims: the
    ONNX shape, None where unknown: the batch)."""
    starts, ends = _param(im, node, 1, "starts"), _param(im, node, 2, "ends")
    if starts is None or ends is None:
        raise im.err(node, "Slice needs starts and ends")
    axes, steps = _param(im, node, 3, "axes"), _param(im, node, 4, "steps")
    rank = len(dims)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise im.err(node, f"Slice starts {starts}, ends {ends}, axes {axes} and steps {steps} "
                     "must have one entry per sliced axis")
    out: dict[int, range] = {}
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        if not -rank <= a < rank:
            raise im.err(node, f"Slice axes {axes}: axis {a} is out of range for a rank-{rank} "
                         "tensor")
        a %= rank
        if a in out:
            raise im.err(node, f"Slice axes {axes} repeat axis {a}")
        if st == 0:
            raise im.err(node, f"Slice steps {steps}: a step of 0 (axis {a})")
        n = dims[a]
        if n is None:  # the batch, of unknown size: kept whole, or refused
            if st == 1 and (s == 0 or s <= -_BIG) and e >= _BIG:
                out[a] = range(0, _BIG)
                continue
            raise im.err(node, f"Slice of axis 0 (the batch) with starts {s}, ends {e}, steps "
                         f"{st}; only per-sample axes may be sliced")
        s, e = max(-_BIG, min(s, _BIG)), max(-_BIG, min(e, _BIG))
        s, e = s + n if s < 0 else s, e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
        r = range(s, e, st)
        if len(r) == 0:
            raise im.err(node, f"Slice starts {starts}, ends {ends}, steps {steps} keep nothing of "
                         f"axis {a} (size {n}): a crop to zero size")
        out[a] = r
    return out


def slice_(im: ImportState, node: onnx.NodeProto) -> None:
    """Slice of an activation: one Gather per per-sample axis it changes; none (an alias)
    where it keeps every axis whole. A marked channels-first frame stays marked."""
    x, y = node.input[0], node.output[0]
    shp = act_shape(im, x)
    r = len(shp)
    cf = x in im.cf
    onnx_dims = tuple(shp[p] for p in to_cf(r)) if cf else shp
    dims = (im.batch,) + onnx_dims
    ranges = slice_ranges(im, node, dims)
    todo = []
    for a, rg in sorted(ranges.items()):
        if rg.step == 1 and rg.start == 0 and rg.stop >= (dims[a] or _BIG):
            continue  # a whole axis
        if a == 0:
            raise im.err(node, f"Slice keeps {rg} of axis 0 (the batch, of size {dims[0]}); "
                         "only per-sample axes may be sliced")
        todo.append((to_cf(r)[a - 1] if cf else a - 1, rg))
    cur, cur_shape = x, shp
    for k, (ax, rg) in enumerate(todo):
        cur_shape = cur_shape[:ax] + (len(rg),) + cur_shape[ax + 1:]
        out = y if k == len(todo) - 1 else im.fresh(f"{y}_axis{ax}")
        im.emit(node, "Gather", [cur], out, cur_shape, axis=ax, indices=list(rg),
                indices_shape=[len(rg)])
        cur = out
    if not todo:
        im.alias[y] = im.src(x)
        im.shapes[y] = shp
    if cf:
        im.cf.add(y)
