"""The estimate of the streamed Threshold units (hdl/streamed/threshold.py) and of the
depthwise Conv units (hdl/streamed/depthwise.py), for `--reuse auto` (stream_fit.py) and
the per-layer costs.

A folded Threshold at a frame budget of T cycles runs its C channels on
P = ceil(C / (T // pixels)) lanes (the lowering takes the busiest unit before it, at most
T), L compare stages each: per lane L comparators of the key width + 1, the channel
selection (a ceil(C/P):1 mux of the input width), the clamp, and L pipeline registers; per
channel the held input and two output registers; the key ROMs (per lane and stage ceil(C/P)
* 2**s words) in block RAM from BRAM_MIN_DEPTH words on, else LUT ROM (16 words a LUT4 per
bit). A Threshold of few thresholds is the plain comparators per pixel: C*K comparators.

A depthwise Conv at reuse R is C lanes of a (kh*kw, 1) Dense at R (estimate.layer_cost of
one lane, times C); a global one (the window is the frame) C multipliers and accumulators.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ops import ConvAttrs, Op
from ..streamed.threshold import channel_search, fold_thresholds, search_levels
from .estimate import LayerCost, bram_tiles, layer_cost

BRAM_MIN_DEPTH = 64  # a ROM this deep or deeper goes to block RAM (yosys memory_libmap)


def threshold_layers(compiled: CompiledGraph) -> list[dict[str, Any]]:
    """Per Threshold on a pixel stream: its figures for threshold_cost."""
    g = compiled.graph
    out = []
    for n in g.nodes:
        if n.op != Op.THRESHOLD or n.inputs[1] not in g.constants:
            continue
        shp = g.tensor(n.inputs[0]).shape
        thr = np.asarray(g.constants[n.inputs[1]], dtype=np.int64)
        if len(shp) < 2 or thr.ndim != 2:
            continue
        tin, tout = g.tensor(n.inputs[0]).dtype, g.tensor(n.outputs[0]).dtype
        c, k = int(shp[-1]), int(thr.shape[1])
        wi = int(getattr(tin, "width", 16) or 16)
        lay = {"node": n.name, "c": c, "k": k, "pixels": int(np.prod(shp[:-1])), "wi": wi,
               "wo": int(getattr(tout, "width", 8) or 8), "fold": fold_thresholds(k)}
        if lay["fold"]:
            st = np.broadcast_to(np.asarray(g.constants[n.inputs[2]], dtype=np.int64)
                                 .reshape(-1, k) if np.size(g.constants[n.inputs[2]]) > 1
                                 else np.ones((1, 1), np.int64), thr.shape)
            ms, span = 0, 1
            for r in range(thr.shape[0]):
                keys, _ = channel_search(thr[r], st[r], 0, tin.qmin, tin.qmax)
                ms = max(ms, len(keys))
                span = max(span, keys[-1] - keys[0] + 2 if keys else 1)
            lay["levels"] = max(1, search_levels(ms))
            lay["kw"] = int(span).bit_length()
        out.append(lay)
    return out


def threshold_cost(lay: dict[str, Any], t: int, family_name: str,
                   geom: tuple[int, int] = (36, 512)) -> LayerCost:
    """One Threshold's LUT4 / FF / BRAM at a frame budget of t cycles (module docstring)."""
    c, wi, wo = lay["c"], lay["wi"], lay["wo"]
    if not lay["fold"]:
        cmp = c * lay["k"]
        return LayerCost(lay["node"], 1, 0, int(cmp * (wi + 1) // 2 + c * wo), 1,
                         int(c * wo), 1)
    steps = max(1, min(c, int(t) // max(1, lay["pixels"])))
    lanes = -(-c // steps)
    n = -(-c // lanes)
    L, kw = lay["levels"], lay["kw"]
    lut = ff = bram = 0
    for s in range(L):
        depth = n << s
        if depth >= BRAM_MIN_DEPTH:
            bram += lanes * bram_tiles(kw, depth, family_name, geom)
        elif depth > 1:
            lut += lanes * kw * -(-depth // 16) * (1 if depth <= 16 else 2)
    lut += lanes * (L * (kw + 1) + (wi * max(0, n - 1) // 3) + 2 * (wi + 1) + 2 * wo)
    ff += c * wi + 2 * c * wo + lanes * L * (kw + 1 + L + n.bit_length())
    return LayerCost(lay["node"], 2 if n > 1 else 1, 0, int(lut), 1, int(ff), L + n + 2,
                     int(bram))


def threshold_costs(layers: list[dict[str, Any]], t: int, family_name: str,
                    geom: tuple[int, int] = (36, 512)) -> list[LayerCost]:
    return [threshold_cost(lay, t, family_name, geom) for lay in layers]


def depthwise_shape(compiled: CompiledGraph, node: Any) -> tuple[int, int, bool] | None:
    """(kh*kw, Cout, global) of a depthwise Conv on a pixel stream, else None."""
    if node.op != Op.CONV:
        return None
    g = compiled.graph
    a = ConvAttrs.of(node)
    w = np.asarray(g.constants.get(node.inputs[1], np.zeros((0,))))
    shp = g.tensor(g.activations(node)[0]).shape
    if w.ndim < 3 or not (int(a.group) > 1 and int(a.group) == int(shp[-1])
                          and w.shape[-2] == 1):
        return None
    kk = int(np.prod(w.shape[:-2]))
    return kk, int(w.shape[-1]), tuple(a.kernel) == tuple(shp[:-1]) and not any(a.pads)


def depthwise_cost(layer: dict[str, Any], r: int, lean: bool = False,
                   strategy: str = "mult") -> LayerCost:
    """A dense_layers entry with "depthwise" = (taps, Cout, global) at reuse r."""
    kk, cout, glob = layer["depthwise"]
    if glob:  # per channel one product (ROM coefficient or constant) and one accumulator
        wx, ww, acc, wo = layer["wx"], layer["ww"], layer["acc"], layer["wo"]
        return LayerCost(layer["node"], 2, cout, int(cout * (acc + 2 * wo)),
                         max(1, wx * ww // 2), int(cout * (wx + 2 * acc + wo)), 4,
                         lut_per_mul_min=max(1, wx * ww // 2))
    memo = layer.setdefault("_depthwise_costs", {})
    key = (max(1, min(r, kk)), lean, strategy)
    if key not in memo:
        memo[key] = _lanes_cost(layer, kk, cout, *key)
    return memo[key]


def _lanes_cost(layer: dict[str, Any], kk: int, cout: int, r: int, lean: bool,
                strategy: str) -> LayerCost:
    w = layer["w"]
    cin = w.shape[0] // kk
    mult = cout // max(1, cin)
    costs = []
    for o in range(cout):
        lane = dict(layer, w=w[np.arange(kk) * cin + o // mult, o].reshape(kk, 1),
                    node=layer["node"])
        lane.pop("depthwise")
        lane.pop("_depthwise_costs", None)
        costs.append(layer_cost(lane, r, lean, strategy))
    c0 = costs[0]
    return LayerCost(layer["node"], c0.reuse, sum(c.multipliers for c in costs),
                     sum(c.lut for c in costs), c0.lut_per_mul, sum(c.ff for c in costs),
                     max(c.latency_extra for c in costs), sum(c.bram for c in costs),
                     c0.soft, c0.lut_per_mul_min)


__all__ = ["depthwise_cost", "depthwise_shape", "threshold_cost", "threshold_costs",
           "threshold_layers"]
