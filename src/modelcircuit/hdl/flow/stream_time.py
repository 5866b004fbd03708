"""The time model of a streamed plan: how many cycles per frame each layer's unit takes at a
reuse R, and the plan that keeps every layer within a frame time.

Time, not the layer count, decides a streamed plan: one input pixel per handshake, and a
layer at a deeper level of the network sees fewer pixels per frame, so it may fold further at
no cost in throughput. A window unit (Conv) at reuse R occupies
`hp*wp + (R - 1) * ho*wo` cycles per frame (every padded position one step, every window R);
a Flatten->Dense (FlatDense) or a whole-vector Dense R.

Why a module of its own: this is arithmetic on the graph alone (no design is built, no
resource counted); the search (hdl/flow/stream_fit.py) walks frame times with it and the
resource model (hdl/flow/stream_cost.py) prices the plans it gives.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def busy_fn(g: Any, node: Any, lay: dict[str, Any]) -> tuple[int, int]:
    """(base, per_extra_R): the layer's unit occupies base + (R - 1) * per cycles/frame."""
    from ...graphs.ops import RECURRENT, ConvAttrs, GruAttrs, Op
    from ..streamed.lower_context import geometry
    from ..streamed.recurrent import TAIL

    if node.op in RECURRENT:  # T steps of (the folded gate sums + the tail) each
        t = int(g.tensor(g.activations(node)[0]).shape[0])
        passes = 2 if node.op == Op.GRU and not GruAttrs.of(node).lbr else 1
        return t * passes * (TAIL["LSTM"] + 2), t * passes
    if node.op == Op.CONV:
        a = ConvAttrs.of(node)
        x = g.activations(node)[0]
        geo = geometry(tuple(g.tensor(x).shape), a.kernel, a.strides, a.pads,
                       f"node {node.name}")
        return geo.hp * geo.wp, geo.ho * geo.wo
    shp = g.tensor(g.activations(node)[0]).shape
    if len(shp) >= 2:  # a Dense per token of a sequence: R cycles for each of its T tokens
        t = int(np.prod(shp[:-1]))
        return t, t
    return 1, 1  # FlatDense (R = pixels x cycles per pixel) or a whole-vector Dense


def base_cycles(g: Any) -> int:
    """T0: cycles per frame of the busiest unit at reuse 1 (every window op's padded
    positions, Resize outputs, the input pixels)."""
    from ...graphs.ops import AvgPoolAttrs, ConvAttrs, MaxPoolAttrs, Op
    from ..streamed.lower_context import geometry

    shp = g.tensor(g.inputs[0]).shape
    t0 = int(np.prod(shp[:-1]))
    attrs = {Op.CONV: ConvAttrs, Op.MAX_POOL: MaxPoolAttrs, Op.AVG_POOL: AvgPoolAttrs}
    for n in g.nodes:
        if n.op in (Op.LSTM, Op.GRU):
            t0 = max(t0, busy_fn(g, n, {})[0])
        elif n.op in attrs:
            a = attrs[n.op].of(n)
            x = g.activations(n)[0]
            geo = geometry(tuple(g.tensor(x).shape), a.kernel, a.strides, a.pads,
                           f"node {n.name}")
            t0 = max(t0, geo.hp * geo.wp)
        elif n.op == Op.RESIZE:
            t0 = max(t0, int(np.prod(g.tensor(n.outputs[0]).shape[:-1])))
        elif n.op == Op.ATTENTION:  # the load and T rows (hdl/streamed/attention.py)
            from ..streamed.attention import sequence_cycles
            t0 = max(t0, sequence_cycles(*(int(g.tensor(n.inputs[k]).shape[-2])
                                           for k in (0, 1))))
    return t0


def within_time(cs: list[int], base: int, per: int, t: int) -> list[int]:
    """The candidates whose unit stays within t cycles per frame (at least the first),
    thinned out geometrically (every one up to 16, then steps of about 1/8) plus the
    largest: the cost of a fold changes slowly with R."""
    ok = [c for c in cs if base + (c - 1) * per <= t] or cs[:1]
    out, last = [], 0
    for c in ok:
        if c <= 16 or c >= last * 9 // 8:
            out.append(c)
            last = c
    if out[-1] != ok[-1]:
        out.append(ok[-1])
    return out


def plan_at(cands: dict[str, list[int]], busy: dict[str, tuple[int, int]], t: int,
            score: Any = None) -> dict[str, int]:
    """Each layer's reuse within t cycles per frame: the cheapest by `score(node, r)`
    (ties: the smaller R, lower latency), or without a score the largest."""
    out = {}
    for name, cs in cands.items():
        ok = within_time(cs, *busy[name], t)
        out[name] = ok[-1] if score is None else min(ok, key=lambda r: (score(name, r), r))
    return out


def frame_time(busy: dict[str, tuple[int, int]], plan: dict[str, int]) -> int:
    """The busiest layer's cycles per frame at the plan's reuse (the frame time)."""
    return max([b + (int(plan.get(n, 1)) - 1) * p for n, (b, p) in busy.items()] + [1])
