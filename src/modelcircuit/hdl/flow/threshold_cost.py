"""The estimate of the streamed Threshold units (hdl/streamed/threshold.py), for `--reuse
auto` (stream_fit.py) and the per-layer costs (the depthwise Conv units'
(hdl/streamed/depthwise.py) are estimate.py `depthwise_cost`).

A folded Threshold at a frame budget of T cycles runs its C channels on
P = ceil(C / (T // pixels)) lanes (the lowering takes the busiest unit before it, at most
T), L compare stages each: per lane L comparators of the key width + 1, the channel
selection (a ceil(C/P):1 mux of the input width), the clamp, and L pipeline registers; per
channel the held input and two output registers; the key ROMs (per lane and stage ceil(C/P)
* 2**s words) in block RAM from BRAM_MIN_DEPTH words on, else LUT ROM (16 words a LUT4 per
bit). A Threshold of few thresholds is the plain comparators per pixel: C*K comparators.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ops import Op
from ..streamed.threshold import channel_search, fold_thresholds, search_levels
from .estimate import LayerCost, bram_tiles

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


__all__ = ["threshold_cost", "threshold_costs", "threshold_layers"]
