"""The estimate of the streamed Threshold units (hdl/streamed/threshold.py), for `--reuse
auto` (stream_fit.py) and the per-layer costs (the depthwise Conv units'
(hdl/streamed/depthwise.py) are layer_cost.py `depthwise_cost`).

A folded Threshold at a frame budget of T cycles runs its C channels on
P = ceil(C / (T // pixels)) lanes (the lowering takes the busiest unit before it, at most
T), L compare stages each: per lane L comparators of the key width + 1, the channel
selection (a ceil(C/P):1 mux of the input width), the clamp, and L pipeline registers; per
channel the held input and two output registers; the key ROMs (per lane and stage ceil(C/P)
* 2**s words) in block RAM from BRAM_MIN_DEPTH words on, else LUT ROM (16 words a LUT4 per
bit). A Threshold of few thresholds is the plain comparators per pixel: C*K comparators.

Where the unit counts by a product ("multiply" mode, exact for a model quantizer's affine
thresholds): per lane one (kw+1) x Mw product in DSP blocks of the family's width (each a
multiplier of the estimate, ~Wx*Wc/2 LUT4 when it spills into logic), the M and C ROMs
(ceil(C/P) words each), the adder and two pipeline stages in place of the L compares.

A Threshold of a vector model (hdl/vector/lower.py `lower_threshold`, hdl/units/threshold.py)
is no fold. From FOLD_MIN_THRESHOLDS (16) thresholds a channel on, it is computed from the
channel's keys (a table of every code, or an unrolled search of ceil(log2(m + 1)) compares):
`vector_keys_lut`. Below that every channel compares its input with each of its K thresholds
(a constant compare of the input width Wi) and adds the K results into the output, all in
one cycle (vector_threshold_costs). yosys keeps each compare a carry chain of about Wi cells
(Gowin ALU, ECP5 CCU2C halves, iCE40 SB_CARRY beside its LUT) and the sum of the K bits
grows with its width b = K.bit_length(): VECTOR_CMP_LUT(Wi, b) = Wi + 0.75 * max(0, b - 4)
LUT4 a compare with a nonzero step. Measured (yosys 0.70, the unit alone: synth_gowin
LUT1-4 + ALU; synth_ecp5 LUT4 + 2 per CCU2C), 2026-12-08:
  brevitas w2a7 (C 32, K 127, Wi 14)  gw1nr-9  66,032 against 66,040
  brevitas w3a5 (C 32, K 31, Wi 15)   gw1nr-9  14,833 against 15,624
  brevitas skip w4a4 (24 x 15, Wi 16) gw1nr-9   5,648 against  5,760
           (24 x 15, Wi 11)           gw1nr-9   3,833 against  3,960
           (1 x 31 on 24, Wi 29)      gw1nr-9  22,908 against 22,134
  brevitas w3a5                       ecp5-25k 14,497 against 15,624
(tests/hdl/flow/test_threshold_cost.py holds them). The fit missed them before (the s48
sweep: the w2a7 model was estimated 4,076 LUT on a GW1NR-9, and its synthesis, 6 minutes,
gave 12,883 LUT1-4 besides its ALUs); they cost the same at every reuse, so such a model is
now refused before synthesis. Not in a simulation's fit (fit._context).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ops import Op
from ..streamed.threshold import ThresholdFold, fold_thresholds
from ..units.threshold import TABLE_MAX_BITS, channel_search
from ..units.threshold import fold_thresholds as vector_keys
from .devices import family
from .layer_cost import LayerCost, bram_tiles

BRAM_MIN_DEPTH = 64  # a ROM this deep or deeper goes to block RAM (yosys memory_libmap)


def vector_cmp_lut(wi: int, k: int) -> float:
    """LUT4 of one compare-and-add of a vector Threshold (module docstring)."""
    return wi + 0.75 * max(0, int(k).bit_length() - 4)


def vector_keys_lut(wi: int, m: int) -> int:
    """LUT4 (+ 2 per CCU2C) of one channel of a vector Threshold computed from its m keys
    (hdl/units/threshold.py, FOLD_MIN_THRESHOLDS thresholds or more): a table of every code
    for an input of at most TABLE_MAX_BITS bits, ~0.65 * ceil(log2(m + 1)) * 2**(wi - 4);
    else the unrolled search, L = ceil(log2(m + 1)) compares each picking its key from up to
    2**(L-1), ~L * wi * (1 + wi / 10). Fitted on the unit alone (synth_ecp5, 2026-12-08,
    per channel): 8-bit / 127 keys 72 (estimate 73), 10-bit / 31 76 (100), 14-bit / 127
    237 (235), 20-bit / 255 479 (480)."""
    if m <= 0:
        return 0
    bits = math.ceil(math.log2(m + 1))
    if wi <= TABLE_MAX_BITS:
        return int(round(0.65 * bits * (1 << max(0, wi - 4))))
    return int(round(bits * wi * (1 + wi / 10)))


def vector_threshold_costs(compiled: CompiledGraph) -> list[LayerCost]:
    """Each Threshold of a vector model as hdl/vector/lower.py builds it (module docstring):
    its compares with a nonzero step whose threshold the input's range can cross, and the
    C output registers."""
    g = compiled.graph
    out = []
    for n in g.nodes:
        if n.op != Op.THRESHOLD or not all(i in g.constants for i in n.inputs[1:3]):
            continue
        tin, tout = g.tensor(n.inputs[0]).dtype, g.tensor(n.outputs[0]).dtype
        wi = int(getattr(tin, "width", 16) or 16)
        wo = int(getattr(tout, "width", 8) or 8)
        c = int(np.prod(g.tensor(n.inputs[0]).shape))
        thr = np.asarray(g.constants[n.inputs[1]], dtype=np.int64)
        thr = thr.reshape(-1, thr.shape[-1]) if thr.ndim else thr.reshape(1, 1)
        steps = np.broadcast_to(np.asarray(g.constants[n.inputs[2]], dtype=np.int64), thr.shape)
        signed = bool(getattr(tin, "signed", True))
        lo, hi = (-(1 << (wi - 1)), (1 << (wi - 1)) - 1) if signed else (0, (1 << wi) - 1)
        rows = c // thr.shape[0] if thr.shape[0] < c else 1  # channels sharing a row
        if vector_keys(thr.shape[-1]):  # keys: a table or a search (units/threshold.py)
            lut = rows * sum(vector_keys_lut(wi, len(channel_search(t, st, 0, lo, hi)[0]))
                             for t, st in zip(thr, steps, strict=True))
        else:
            live = (steps != 0) & (thr > lo) & (thr <= hi)  # x >= t neither always nor never
            cmps = int(live.sum()) * rows
            lut = int(round(cmps * vector_cmp_lut(wi, thr.shape[-1])))
        out.append(LayerCost(n.name + " (thresholds)", 1, 0, lut, 1, c * wo, 0))
    return out


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
        src = _chained_conv(g, n)
        if src is not None:
            lay["src"], lay["src_shape"] = src
        if lay["fold"]:
            # the unit's own compile-time search (its keys, levels and product): no lanes
            # decided here, only the figures that do not depend on them
            u = ThresholdFold(tin, c, thr, g.constants[n.inputs[2]], g.constants[n.inputs[3]],
                              tout)
            lay["levels"], lay["kw"] = u.levels, u.key_width
            lay["multiply"] = None
            if u.multiply:
                ms, cs, _ = u.multiply
                lay["multiply"] = (u.key_width + 1, max(1, max(ms).bit_length()),
                                   max(1, max(cs).bit_length()))
        out.append(lay)
    return out


def _chained_conv(g: Any, n: Any) -> tuple[str, tuple[int, int]] | None:
    """(the Conv, its window Dense's (N_in, N_out)) where Threshold n alone reads a
    (not depthwise) Conv's output: the chain hdl/streamed/lower_ops.py `_chain_into` may make,
    whose folded Dense keeps the input n reads (units.ChainUnit._a_holds_for_b)."""
    x = n.inputs[0]
    prod = g.producer(x)
    if prod is None or prod.op != Op.CONV or x in g.outputs or len(g.consumers(x)) != 1:
        return None
    w = g.constants.get(prod.inputs[1])
    if w is None or np.ndim(w) < 3:
        return None
    cin = int(g.tensor(prod.inputs[0]).shape[-1])
    if int(np.shape(w)[-2]) == 1 and cin > 1:  # depthwise: its own lanes, no fold
        return None
    return prod.name, (int(np.prod(np.shape(w)[:-2])) * cin, int(np.shape(w)[-1]))


def reads_in_place(lay: dict[str, Any], plan: dict[str, int], t: int) -> bool:
    """Whether the Threshold reads its Conv's folded Dense in place at this plan (no held
    copy of its C inputs): ChainUnit._a_holds_for_b's test on the lanes threshold_cost
    gives it at a frame budget of t."""
    from ..plan.fold import fold_shape

    src, r = lay.get("src"), 0
    if src is not None:
        r = int(plan.get(src, 1))
    c = lay["c"]
    steps = max(1, min(c, int(t) // max(1, lay["pixels"])))
    lanes = -(-c // steps)
    n = -(-c // lanes)
    if not lay["fold"] or r <= 1 or n > r:  # a parallel Dense, or no chain
        return False
    f = fold_shape(*lay["src_shape"], r)
    ii = max(r, n)
    return all(1 + ch // lanes + (f.r_out - 1 - ch // f.m) * f.r_in < ii for ch in range(c))


def threshold_cost(lay: dict[str, Any], t: int, family_name: str,
                   geom: tuple[int, int] = (36, 512), in_place: bool = False) -> LayerCost:
    """One Threshold's LUT4 / FF / BRAM at a frame budget of t cycles (module docstring);
    `in_place`: it reads its Conv's output where it stays (reads_in_place), no copy."""
    c, wi, wo = lay["c"], lay["wi"], lay["wo"]
    if not lay["fold"]:
        cmp = c * lay["k"]
        return LayerCost(lay["node"], 1, 0, int(cmp * (wi + 1) // 2 + c * wo), 1,
                         int(c * wo), 1)
    steps = max(1, min(c, int(t) // max(1, lay["pixels"])))
    lanes = -(-c // steps)
    n = -(-c // lanes)
    L, kw = lay["levels"], lay["kw"]
    mul = lay.get("multiply")
    lut = ff = bram = 0

    def rom(width: int, depth: int) -> None:
        nonlocal lut, bram
        if depth >= BRAM_MIN_DEPTH:
            bram += lanes * bram_tiles(width, depth, family_name, geom)
        elif depth > 1:
            lut += lanes * width * -(-depth // 16) * (1 if depth <= 16 else 2)

    # the channel selection, the clamp and the output registers' input
    lut += lanes * ((wi * max(0, n - 1) // 3) + 2 * (wi + 1) + 2 * wo)
    ff += (0 if in_place else c * wi) + 2 * c * wo
    if mul:
        xw, mw, cw = mul
        mx = int(family(family_name).get("dsp_max_width", 18))
        blocks = -(-xw // mx) * -(-mw // mx)
        pw = xw + mw + 1
        rom(mw, n)
        rom(cw, n)
        lut += lanes * (max(pw, cw + 1) + 1)  # the + C adder
        ff += lanes * (2 * xw + pw + 2 * n.bit_length())
        return LayerCost(lay["node"], 2 if n > 1 else 1, lanes * blocks, int(lut),
                         max(1, xw * mw // 2 // blocks), int(ff), 2 + n + 2, int(bram),
                         lut_per_mul_min=max(1, xw * mw // 4 // blocks))
    for s in range(L):
        rom(kw, n << s)
    lut += lanes * L * (kw + 1)
    ff += lanes * L * (kw + 1 + L + n.bit_length())
    return LayerCost(lay["node"], 2 if n > 1 else 1, 0, int(lut), 1, int(ff), L + n + 2,
                     int(bram))


def threshold_costs(layers: list[dict[str, Any]], t: int, family_name: str,
                    geom: tuple[int, int] = (36, 512),
                    plan: dict[str, int] | None = None) -> list[LayerCost]:
    return [threshold_cost(lay, t, family_name, geom,
                           plan is not None and reads_in_place(lay, plan, t))
            for lay in layers]


__all__ = ["reads_in_place", "threshold_cost", "threshold_costs", "threshold_layers",
           "vector_cmp_lut", "vector_threshold_costs"]
