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
from amaranth.hdl import Module, Mux, Shape, Signal, Value, signed

from ...graphs.types import FixedType
from ..errors import HdlError
from .arith import fit, requantize, shape_of
from .base import Unit
from .elementwise import table_read, table_rom

LATENCY = 8
# LayerNormFold's cycles per token beside its two passes (its docstring)
FOLD_FIXED = 9


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

    def products(self) -> list[tuple[int, int, int]]:
        """(A width, B width, count) of the products this unit writes as `*` (the `$mul`s
        yosys lists before choosing DSP blocks, hdl/flow/yosys.py), widths computed as
        `elaborate` builds them: d ** 2, d * R and t * g (by constants here), per element."""
        x = Signal(shape_of(self.tx))
        s = Signal(Value.cast(_tree([x] * self.d)).shape())
        dd = Signal(Value.cast(self.d * x - s).shape())
        r = Signal(shape_of(self.table_type))
        t = Value.cast(dd * r)
        out = {mul_operands(dd, dd): self.d, mul_operands(dd, r): self.d}
        for gv in self.g:
            k = mul_operands(t, gv)
            out[k] = out.get(k, 0) + 1
        return [(a, b, n) for (a, b), n in out.items()]

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


def _times_const(v: Value, k: int) -> Value:
    """v * k for a small positive constant k as shifts and adds (no multiplier)."""
    out: Value | None = None
    for b in range(k.bit_length()):
        if k >> b & 1:
            out = Value.cast(v) << b if out is None else out + (Value.cast(v) << b)
    assert out is not None
    return out


def mul_operands(a: Any, b: Any) -> tuple[int, int]:
    """The operand widths of the `$mul` Amaranth writes for `a * b` (Values or Shapes): a
    product of a signed and an unsigned operand widens the unsigned one by its sign bit."""
    sa = a if isinstance(a, Shape) else Value.cast(a).shape()
    sb = b if isinstance(b, Shape) else Value.cast(b).shape()
    wa, wb = sa.width, sb.width
    if sa.signed and not sb.signed:
        wb += 1
    elif sb.signed and not sa.signed:
        wa += 1
    return wa, wb


def fold_ii(d: int, passes: int) -> int:
    """II (= latency) of LayerNormFold over d elements in `passes` cycles per pass."""
    return 2 * passes + FOLD_FIXED


def fold_passes(d: int, budget: int) -> int:
    """The most cycles per pass (fewest multipliers) whose II stays within `budget` cycles
    per token; 0 when even one cycle per pass does not (the parallel unit then)."""
    p = max(0, (budget - FOLD_FIXED) // 2)
    if p <= 1:
        return 0
    lanes = -(-d // min(p, d))
    return -(-d // lanes)


class LayerNormFold(LayerNormUnit):
    """LayerNorm of one (D,) token with `lanes` = ceil(D / passes) elements per cycle: the
    contract of LayerNormUnit, its sums in three steps per token:
      cycle 0 (start):    q and S = sum q registered (an adder tree, no multiplier);
      cycle 1:            d_i = D * q_i - S (shift-adds) into a ring of D registers;
      cycles 2..P+1:      the ring rotates by `lanes`; the lanes' d_i ** 2 registered;
      cycles 3..P+2:      V += their sum (E first);
      cycle P+3:          e and m = V >> 2e registered; the ROM reads R (valid at P+5),
                          registered once more (P+6);
      cycles P+6..2P+5:   the ring rotates again: d * R registered, then t = that >> e,
                          then t * g + b, then y = requantize(t * g + b) into the output
                          ring (g, b rotate in constant rings alongside, P+8..2P+7).
    Every product has a register of its own on both sides: on an ECP5 the one-cycle
    rsqrt-read -> d * R -> shift of the first version was the critical path of the small
    encoder (29.4 ns: BRAM clock-to-out, two chained MULT18X18Ds, their carry sum).
    II = latency = 2P + 9; 3 * lanes multipliers."""

    def __init__(self, *args: Any, passes: int, **kw: Any):
        super().__init__(*args, **kw)
        self.lanes = -(-self.d // max(1, int(passes)))
        self.passes = -(-self.d // self.lanes)
        self.ii = self.latency = fold_ii(self.d, self.passes)
        self.reuse = self.passes
        self.multipliers = 3 * self.lanes

    def products(self) -> list[tuple[int, int, int]]:
        """As LayerNormUnit.products, per lane: d ** 2 and d * R on the ring, t * g by the
        rotating gamma register."""
        x = Signal(shape_of(self.tx))
        ssum = Signal(Value.cast(_tree([x] * self.d)).shape())
        dw = len(Value.cast(_times_const(x, self.d) - ssum)) + 1
        d = Signal(signed(dw))
        r = Signal(shape_of(self.table_type))
        t = Value.cast(d * r)
        gw = max(2, max(abs(v) for v in self.g).bit_length() + 1)
        return [(*mul_operands(d, d), self.lanes), (*mul_operands(d, r), self.lanes),
                (*mul_operands(t, Signal(signed(gw))), self.lanes)]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "lanes": self.lanes, "passes": self.passes}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        n, ln, P, en = self.d, self.lanes, self.passes, self.en
        npad = ln * P
        L = self.latency
        x = self.inputs()
        c = Signal(range(L + 1), name="c")
        run = Signal(name="run")
        with m.If(en):
            with m.If(self.start):
                m.d.sync += [c.eq(1), run.eq(1)]
            with m.Elif(run):
                m.d.sync += c.eq(c + 1)
                with m.If(c == L - 1):
                    m.d.sync += [c.eq(0), run.eq(0)]

        def between(a: int, b: int) -> Value:
            return run & (c >= a) & (c <= b)

        q = [Signal(v.shape(), name=f"q{i}", reset_less=True) for i, v in enumerate(x)]
        ssum = Signal(Value.cast(_tree(x)).shape(), name="s", reset_less=True)
        with m.If(en & self.start):
            m.d.sync += [*(q[i].eq(x[i]) for i in range(n)), ssum.eq(_tree(x))]
        dvals = [_times_const(v, n) - ssum for v in q]
        dw = max(len(Value.cast(v)) for v in dvals) + 1
        ring = [Signal(signed(dw), name=f"d{i}", reset_less=True) for i in range(npad)]
        rot = [ring[(i + ln) % npad] for i in range(npad)]
        vsum = Signal(self.v_width + 1, name="v", reset_less=True)
        with m.If(en & run & (c == 1)):
            m.d.sync += [ring[i].eq(dvals[i] if i < n else 0) for i in range(npad)]
        with m.If(en & (between(2, P + 1) | between(P + 6, 2 * P + 5))):
            m.d.sync += [ring[i].eq(rot[i]) for i in range(npad)]
        sq = self.regs(m, [ring[j] * ring[j] for j in range(ln)], "sq")
        with m.If(en & between(3, P + 2)):
            m.d.sync += vsum.eq(fit(Mux(c == 3, self.eps, vsum) + _tree(sq),
                                    self.v_width + 1, False))
        e: Value = Value.cast(0)
        for k in range(1, self.e_max + 1):
            lo = 2 * k + self.bits - 2
            if lo < len(vsum):
                e = e + vsum[lo:].any()
        ew = max(1, self.e_max.bit_length())
        e = fit(e, ew, False)
        mant = Signal(self.bits, name="mant", reset_less=True)
        esh = Signal(ew, name="e", reset_less=True)
        with m.If(en & run & (c == P + 3)):
            m.d.sync += [mant.eq(fit(vsum >> (e << 1), self.bits, False)), esh.eq(e)]
        rom = table_rom(m, "rsqrt_table", self.table, self.table_type)
        r = self.regs(m, [table_read(m, rom, mant, en)], "r")[0]
        pr = self.regs(m, [ring[j] * r for j in range(ln)], "p")
        tw = self.regs(m, [v >> esh for v in pr], "t")
        # the constants of the lanes, rotating one pass behind the ring (t is registered)
        gpad = self.g + [0] * (npad - n)
        bpad = self.b + [0] * (npad - n)
        fo = self.frac + self.fg
        gw = max(2, max(abs(v) for v in gpad).bit_length() + 1)
        bw = max(2, max(abs(v << (fo - self.fb)) for v in bpad).bit_length() + 1)
        gr = [Signal(signed(gw), name=f"g{i}", init=gpad[i]) for i in range(npad)]
        br = [Signal(signed(bw), name=f"b{i}", init=bpad[i] << (fo - self.fb))
              for i in range(npad)]
        with m.If(en & between(P + 8, 2 * P + 7)):
            m.d.sync += [gr[i].eq(gr[(i + ln) % npad]) for i in range(npad)]
            m.d.sync += [br[i].eq(br[(i + ln) % npad]) for i in range(npad)]
        tout = self.out_spec[0]
        u = self.regs(m, [tw[j] * gr[j] + br[j] for j in range(ln)], "u")
        ys = [fit(requantize(u[j], fo, tout), tout.width, tout.signed) for j in range(ln)]
        yr = [Signal(shape_of(tout), name=f"y{i}", reset_less=True) for i in range(npad)]
        with m.If(en & between(P + 9, 2 * P + 8)):
            m.d.sync += [yr[i].eq(yr[i + ln]) for i in range(npad - ln)]
            m.d.sync += [yr[npad - ln + j].eq(ys[j]) for j in range(ln)]
        self.drive_y(m, yr[:n])
        return m


def layernorm_unit(g: Any, node: Any, tx: FixedType, d: int, tout: FixedType,
                   passes: int = 0) -> LayerNormUnit:
    """The unit of a compiled LayerNorm node (inputs x, gamma, beta, g, b, rsqrt_table):
    LayerNormFold with `passes` cycles per pass when passes > 1, else the parallel one."""
    from ...graphs.ops import LayerNormAttrs

    where = f"node {node.name} ({node.op})"
    a = LayerNormAttrs.of(node)
    if len(node.inputs) < 6 or a.rsqrt_bits is None or a.eps_code is None:
        raise HdlError(f"{where}: no rsqrt table; compile the graph first")
    gn, bn, tn = node.inputs[3:6]
    tg, tb = g.tensor(gn).dtype, g.tensor(bn).dtype
    if not isinstance(tg, FixedType) or not isinstance(tb, FixedType):
        raise HdlError(f"{where}: gamma / beta are not fixed point")
    args = (tx, d, tout, np.asarray(g.constants[gn]).reshape(-1), tg.frac,
            np.asarray(g.constants[bn]).reshape(-1), tb.frac, int(a.eps_code),
            int(a.rsqrt_bits), int(a.rsqrt_frac), np.asarray(g.constants[tn]), where)
    if passes > 1:
        return LayerNormFold(*args, passes=passes)
    return LayerNormUnit(*args)


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

__all__ = ["LATENCY", "LayerNormFold", "LayerNormUnit", "fold_ii", "fold_passes", "layernorm_unit", "lower_layer_norm"]
