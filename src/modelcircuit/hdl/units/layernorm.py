"""LayerNorm over one token (graphs/attention.py has the numeric contract, steps 1-5; its
`layernorm_codes` is what this circuit matches bit for bit).

A whole-token `Unit` (II 1, a static pipeline; hdl/streamed wraps it in a `MapUnit` to run
once per token of a sequence, hdl/vector uses it on a vector). Stages, each registered
(enabled by `en`):
  1. S = sum_j q_j (an adder tree), q kept;
  2. d_i = D * q_i - S (exact);
  3. d_i ** 2;
  4. V = sum_i d_i ** 2 + E (an adder tree);
  5. e = max(0, ceil((bitlen(V) - M) / 2)) (a count of bit tests: e >= k iff
     V >= 2**(2k + M - 2)), m = V >> 2e (a barrel shifter);
  6. R = rsqrt_table[m] (a ROM of 2**M entries, its registered read port);
  7. t_i = (d_i * R) >> e (arithmetic: floor);
  8. y_i = requantize(t_i * g_i + (b_i << (fr + fg - fb)), fr + fg, out).
Latency 8, 3 * D multipliers (d_i ** 2, d_i * R, t_i * g_i, the last by constants).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from amaranth.hdl import Module, Value

from ...graphs.types import FixedType
from ..errors import HdlError
from .arith import fit, requantize
from .base import Unit
from .elementwise import table_read, table_rom

LATENCY = 8


def _tree(vals: list[Value]) -> Value:
    cur = list(vals)
    while len(cur) > 1:
        cur = [cur[i] + cur[i + 1] if i + 1 < len(cur) else cur[i] for i in range(0, len(cur), 2)]
    return cur[0]


class LayerNormUnit(Unit):
    """LayerNorm of one (D,) token (module docstring). `g`, `b`: the node's constant codes
    (gamma * sqrt(D) at `fg`, beta at `fb`); `table`: the rsqrt table (2**bits entries)."""

    def __init__(self, tx: FixedType, d: int, tout: FixedType, g: np.ndarray, fg: int,
                 b: np.ndarray, fb: int, eps_code: int, bits: int, frac: int,
                 table: np.ndarray, where: str = "LayerNorm"):
        super().__init__([(tx, d)], (tout, d))
        self.d, self.tx = int(d), tx
        self.g = [int(v) for v in np.broadcast_to(np.asarray(g, dtype=np.int64), (d,))]
        self.b = [int(v) for v in np.broadcast_to(np.asarray(b, dtype=np.int64), (d,))]
        self.fg, self.fb, self.eps, self.bits, self.frac = int(fg), int(fb), int(eps_code), \
            int(bits), int(frac)
        self.table = np.asarray(table, dtype=np.int64).reshape(-1)
        if self.table.size != 1 << self.bits:
            raise HdlError(f"{where}: the rsqrt table has {self.table.size} entries, not "
                           f"2**{self.bits}")
        if self.fb > self.frac + self.fg:
            raise HdlError(f"{where}: beta has more fractional bits ({self.fb}) than the "
                           f"product ({self.frac + self.fg})")
        self.latency = LATENCY
        self.multipliers = 3 * self.d
        # V's bound: D * sum d_i**2 with |d_i| <= D * 2**(W-1) * 2, plus E
        qa = 1 << tx.width
        vmax = self.d * (2 * self.d * qa) ** 2 + self.eps
        self.v_width = max(1, vmax.bit_length())
        self.e_max = max(0, (self.v_width - self.bits + 1) // 2)
        self.table_type = FixedType(int(self.table.max(initial=1)).bit_length() + 1,
                                    int(self.table.max(initial=1)).bit_length() + 1)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "layernorm": {"rsqrt_bits": self.bits,
                                                    "rsqrt_frac": self.frac,
                                                    "max_shift": self.e_max}}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        n = self.d
        x = self.inputs()
        s1 = self.regs(m, [*x, _tree(x)], "s1_")
        q, s = s1[:n], s1[n]
        dd = self.regs(m, [n * v - s for v in q], "d")
        s3 = self.regs(m, [*(v * v for v in dd), *dd], "s3_")
        sq, d3 = s3[:n], s3[n:]
        s4 = self.regs(m, [_tree(sq) + self.eps, *d3], "s4_")
        v, d4 = fit(s4[0], self.v_width + 1, False), s4[1:]
        e: Value = Value.cast(0)
        for k in range(1, self.e_max + 1):
            lo = 2 * k + self.bits - 2
            if lo < len(v):
                e = e + v[lo:].any()
        ew = max(1, self.e_max.bit_length())
        e = fit(e, ew, False)
        mant = fit(v >> (e << 1), self.bits, False)
        s5 = self.regs(m, [mant, e, *d4], "s5_")
        mr, e5, d5 = s5[0], s5[1], s5[2:]
        rom = table_rom(m, "rsqrt_table", self.table, self.table_type)
        r = table_read(m, rom, mr, self.en)  # stage 6: the ROM's register
        s6 = self.regs(m, [e5, *d5], "s6_")
        e6, d6 = s6[0], s6[1:]
        t7 = self.regs(m, [(dv * r) >> e6 for dv in d6], "t")
        fo = self.frac + self.fg
        tout = self.out_spec[0]
        ys = [requantize(tv * self.g[i] + (self.b[i] << (fo - self.fb)), fo, tout)
              for i, tv in enumerate(t7)]
        self.out_regs(m, ys)
        return m


def layernorm_unit(g: Any, node: Any, tx: FixedType, d: int, tout: FixedType) -> LayerNormUnit:
    """The unit of a compiled LayerNorm node (inputs x, gamma, beta, g, b, rsqrt_table)."""
    from ...graphs.ops import LayerNormAttrs

    where = f"node {node.name} ({node.op})"
    a = LayerNormAttrs.of(node)
    if len(node.inputs) < 6 or a.rsqrt_bits is None or a.eps_code is None:
        raise HdlError(f"{where}: no rsqrt table; compile the graph first")
    gn, bn, tn = node.inputs[3:6]
    tg, tb = g.tensor(gn).dtype, g.tensor(bn).dtype
    if not isinstance(tg, FixedType) or not isinstance(tb, FixedType):
        raise HdlError(f"{where}: gamma / beta are not fixed point")
    return LayerNormUnit(tx, d, tout, np.asarray(g.constants[gn]).reshape(-1), tg.frac,
                         np.asarray(g.constants[bn]).reshape(-1), tb.frac, int(a.eps_code),
                         int(a.rsqrt_bits), int(a.rsqrt_frac),
                         np.asarray(g.constants[tn]), where)


def lower_layer_norm(g: Any, node: Any, opt: Any) -> LayerNormUnit:
    """hdl/vector/lower.py's entry: LayerNorm of a (D,) (or (1, D)) vector."""
    from .arith import check_fixed

    where = f"node {node.name} ({node.op})"
    shp = tuple(g.tensor(node.inputs[0]).shape)
    if len(shp) > 1 and int(np.prod(shp[:-1])) != 1:
        raise HdlError(f"{where}: a LayerNorm of {list(shp)} in a whole-vector model; a "
                       "sequence streams one token per handshake (hdl/streamed)")
    tx = check_fixed(g.tensor(node.inputs[0]).dtype, f"{where}, tensor {node.inputs[0]!r}")
    tout = check_fixed(g.tensor(node.outputs[0]).dtype, f"{where}, tensor {node.outputs[0]!r}")
    return layernorm_unit(g, node, tx, shp[-1], tout)

__all__ = ["LATENCY", "LayerNormUnit", "layernorm_unit", "lower_layer_norm"]
