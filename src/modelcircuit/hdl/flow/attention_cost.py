"""Resources of the attention circuits (hdl/streamed/attention.py AttentionUnit,
hdl/units/layernorm.py) as `LayerCost`s, in the style of estimate.py's recurrent and Softmax
costs, so `--reuse auto` (fit.py, stream_fit.py) plans a transformer with them counted.

Attention (per node, H heads, S keys, widths from the compiled types): the products (H*dk for
the scores, H for e * r, H*dv for p * v) as multipliers; the score and exp rings (H*S
registers each), the products' and accumulators' registers, the adder trees, the
requantizations and the comparisons in logic; the token buffer (q, k, v: S words each), the
exp and reciprocal tables (one copy per head) and the mask ROM (T*S words) in block RAM.
LayerNorm (per node): the parallel unit's 3*D products, or the fold's 3*lanes
(hdl/streamed/attention.py `layernorm_passes` decides, as in the circuit); the adder trees, the
d ring and the constant rings, the rsqrt table in block RAM.

The products of both (H*dk for the scores, H for the scale, H for e * r, H*dv for p * v; the
LayerNorm's d ** 2, d * R, t * g per lane) are counted as the circuit writes them
(hdl/streamed/attention.fixed_products, `$mul`s of their real widths: the encoder's 35 x 17
scale and 47 x 16 t * g take 2 and 3 DSP blocks each), `dsp_first` (the flow keeps them in
DSP blocks before the narrower Dense lanes) with the blocks they want; issue 25: counted as
one block each, the small encoder's 46 products were estimated at 46 blocks, and took 82."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ops import AttentionAttrs, LayerNormAttrs, Op
from .devices import family
from .layer_cost import LayerCost, bram_tiles


def _w(g: Any, name: str) -> int:
    return int(getattr(g.tensor(name).dtype, "width", 16) or 16)


def _log2(n: int) -> int:
    return max(1, (max(2, n) - 1).bit_length())


def _products(g: Any, n: Any, plan: dict[str, int], family_name: str) -> tuple[int, int, int]:
    """(products, the DSP blocks they want, LUT4 per product in logic) of one node's `$mul`s
    (hdl/streamed/attention.fixed_products, the widths the circuit writes): blocks as the
    flow counts them (devices.dsp_blocks; none within the soft width), a product in logic
    at BOOTH_LUT LUT4 per bit of A x B before the family's lut_scale."""
    from ..streamed.attention import fixed_products
    from .devices import dsp_blocks, soft_max_width

    narrow = soft_max_width(family_name)
    n_mul = blocks = lut = 0
    for name, a, b, k in fixed_products(g, plan):
        if name != n.name:
            continue
        n_mul += k
        if max(a, b) > narrow:
            blocks += k * dsp_blocks({"a": a, "b": b, "y": a + b}, family_name)
        lut += k * int(BOOTH_LUT * a * b)
    return n_mul, blocks, lut // max(1, n_mul)


# LUT4 per bit of A x B of a `$mul` that yosys builds in logic (`booth`), before lut_scale:
# issue 25, the small encoder at R 16 in synth_ecp5 (flattened), 70 of its 16 x 11 Dense
# lanes in logic: 44,612 LUT4 + 4,692 CCU2C, with every product in a DSP block 22,304 +
# 3,783: 319 LUT4 + 13 CCU2C a product, 345 LUT4 with a carry as 2, 1.96 per bit of A x B,
# 1.1 before ECP5's lut_scale of 1.75
BOOTH_LUT = 1.1


def attention_cost(g: Any, n: Any, family_name: str, geom: tuple[int, int]) -> LayerCost:
    from ..streamed.attention import row_cycles

    a = AttentionAttrs.of(n)
    t, dq = (int(v) for v in g.tensor(n.inputs[0]).shape[-2:])
    s, dvv = (int(v) for v in g.tensor(n.inputs[2]).shape[-2:])
    h = int(a.heads)
    dk, dv = dq // h, dvv // h
    wq, wk, wv = _w(g, n.inputs[0]), _w(g, n.inputs[1]), _w(g, n.inputs[2])
    ws = a.score_type.width if a.score_type else 16
    wp = a.prob_type.width if a.prob_type else 16
    we = a.exp_type.width if a.exp_type else 16
    wr = a.recip_type.width if a.recip_type else 16
    wo = _w(g, n.outputs[0])
    wqk = wq + wk
    acc_w = wp + wv + _log2(s) + 1
    lut = h * (dk * (wqk + _log2(dk))          # the score adder tree
               + 4 * ws + 3 * ws               # scale, requantization, mask add, max compare
               + 2 * ws + 12                   # x - max, the exp index
               + we + _log2(s) + 12            # the sum, the reciprocal index
               + 2 * wp + 2 * dv * acc_w       # p requantized, the accumulators
               + dv * 2 * wo                   # the output requantization
               + s * (ws + we))                # the rings' enables / muxes
    lut += 3 * _log2(s) + 40                   # counters, address arithmetic, the step logic
    ff = (h * (dk * wqk + (wqk + _log2(dk)) + s * (ws + we + 1) + ws + we + _log2(s) + wp
               + dv * (wp + wv) + dv * acc_w) + dvv * wo + 3 * _log2(s) + 16)
    etab, rtab = (np.asarray(g.constants[x]) for x in n.inputs[-2:])
    bram = (bram_tiles(dq * wq, s, family_name, geom) + bram_tiles(dq * wk, s, family_name, geom)
            + bram_tiles(dvv * wv, s, family_name, geom)
            + h * (bram_tiles(we, int(etab.size), family_name, geom)
                   + bram_tiles(wr, int(rtab.size), family_name, geom)))
    if a.masked:
        bram += bram_tiles(ws + 1, t * s, family_name, geom)
    mults, blocks, per_mul = _products(g, n, {}, family_name)
    return LayerCost(n.name + " (attention)", row_cycles(s), mults, int(lut), int(per_mul),
                     int(ff), 0, int(bram), lut_per_mul_min=max(1, int(per_mul) // 2),
                     dsp_blocks=blocks, dsp_first=True)


def layernorm_cost(g: Any, n: Any, plan: dict[str, int], family_name: str,
                   geom: tuple[int, int]) -> LayerCost:
    from ..streamed.attention import layernorm_passes, streams_tokens

    a = LayerNormAttrs.of(n)
    d = int(g.tensor(n.inputs[0]).shape[-1])
    wx, wo = _w(g, n.inputs[0]), _w(g, n.outputs[0])
    passes = layernorm_passes(g, n, plan) if streams_tokens(g, n) else 0
    lanes = -(-d // passes) if passes > 1 else d
    dw = wx + _log2(d) + 1
    vw = 2 * dw + _log2(d)
    bits = int(a.rsqrt_bits or 10)
    lut = (d * (wx + _log2(d))                 # S (an adder tree)
           + d * dw * (2 if passes > 1 else 1)  # D*q - S (shift-adds), the ring's muxes
           + lanes * 2 * vw + 2 * vw           # V, e, the mantissa's barrel shifter
           + lanes * (2 * dw + 3 * wo))        # the shift by e, the requantization
    # the fold: the ring, the output ring, g and b; per lane the registered d ** 2, d * R,
    # t and t * g + b (LayerNormFold: every product registered on both sides)
    ff = d * (wx + dw) + vw + bits + 8 + (d * (wo + 32) + lanes * (5 * dw + wo + 16) + bits
                                          if passes > 1 else 4 * d * dw)
    tab = np.asarray(g.constants[n.inputs[5]]) if len(n.inputs) > 5 else np.zeros(1 << bits)
    bram = bram_tiles(int(tab.max(initial=1)).bit_length() + 1, int(tab.size), family_name,
                      geom)
    mults, blocks, per_mul = _products(g, n, plan, family_name)
    return LayerCost(n.name + " (layernorm)", max(1, passes), mults, int(lut),
                     int(per_mul), int(ff), 0, int(bram),
                     lut_per_mul_min=max(1, int(per_mul) // 2), dsp_blocks=blocks,
                     dsp_first=True)


def attention_costs(compiled: CompiledGraph, plan: dict[str, int], family_name: str
                    ) -> list[LayerCost]:
    """The LayerCost of every Attention and LayerNorm node (module docstring)."""
    g = compiled.graph
    geom = tuple(family(family_name)["bram_rom"])
    out = []
    for n in g.nodes:
        if n.op == Op.ATTENTION and len(n.inputs) >= 5:
            out.append(attention_cost(g, n, family_name, geom))
        elif n.op == Op.LAYER_NORM and len(n.inputs) >= 6:
            out.append(layernorm_cost(g, n, plan, family_name, geom))
    return out


__all__ = ["attention_cost", "attention_costs", "layernorm_cost"]
