"""Both Softmax units: the parallel one (`Softmax`, II 1) and a serial one (`SoftmaxSerial`:
one exp-table read port, one multiplier), the rule that picks between them, and the
resource cost of both.

Numbers: reference.softmax, bit for bit, as the parallel unit:
    d = x - max(x); e = exp_table[table_index(d)]; s = sum(e);
    r = recip_table[table_index(s)]; y = requantize(e * r, exp.frac + recip.frac, out)

`SoftmaxSerial` walks the n elements three times through a rotating register of the input
(loaded on `start`), one element per enabled cycle; c counts enabled cycles after the start
cycle (c = 0):
    c in [1, n]          max:      mx = max(mx, x_k)              (mx loaded with x_0)
    c in [n+1, 2n]       sum:      exp port reads x_k - mx; e_k arrives at c + 1 and is
                                   added into s (c in [n+2, 2n+1])
    c = 2n+1             the rotation pauses one cycle (the reciprocal is not there yet)
    c = 2n+2             the reciprocal port reads s (its data holds from c = 2n+3 on)
    c in [2n+2, 3n+1]    products: exp port reads x_k - mx again; e_k * r at c + 1 into the
                                   product register, requantized into the output shift
                                   register at c + 2 (the last at c = 3n+3)
so latency = 3n + 4 and II = 3n + 2 (3n + 10 and 3n + 4 with `deep`, the "fmax" schedule:
x - max registered before its clip into the exp table's address, both table addresses and
outputs and the products registered once more, so the rotation pauses three cycles; the
next start may come once the last x_k has been read; the product tail is driven by valid
bits that travel with the data, not by the counter). The output register shifts only while
products arrive, so y holds the whole vector from c = 3n + 4 until the next vector's
products start (c' = 2n + 4 after the next start): the top reads it at c = latency.

The product e * r of two unsigned 18-bit codes would take four 16 x 16 DSP blocks of an
iCE40 (yosys mul2dsp); with `split` it is one 16 x 16 product (one SB_MAC16) and the
cross terms of the top 2 bits of each operand as shift-adds (a few dozen LUT4s).

Which one (`use_serial`): the parallel unit (II 1) unless the design's II budget covers the
serial unit's II (3n + 4: the deep variant's, for every schedule), so choosing it never
slows the design down:
- a streamed model (hdl/streamed/lower.py; any spatial op): the Softmax runs once per frame, on the
  vector after the Flatten; the budget is the input pixels per frame (a frame takes at
  least one cycle per pixel, so the stream's II per pixel does not change);
- a whole-vector model (hdl/vector/top.py ModelTop): the budget is its II, the largest reuse
  factor of its Dense layers (a folded Dense at reuse R has II R).
The same rule costs the unit in the resource estimate (`softmax_cost`, for hdl/flow).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from functools import reduce
from typing import Any

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned

from ...graphs.ops import SPATIAL, Op, SoftmaxAttrs
from ...graphs.types import FixedType
from .arith import fit, requantize, shape_of, table_index
from .base import Unit
from .elementwise import table_read, table_rom

# Softmax products in logic (`--strategy da`, deep schedule): slices of this many bits of
# the reciprocal (an 18-bit one: 9 partial products of 18 x 2, each one adder, summed in a
# tree of 4 levels, `SOFT_SUM_LEVELS` a stage). 6-bit slices (18 x 6: a carry-save array in
# LUTs, then a carry chain) set the qkeras jet tagger's clock on an ECP5-85k: 13.6 ns,
# 73.3 MHz, from the reciprocal's register through one slice product
SOFT_PRODUCT_SLICE = 2
SOFT_SUM_LEVELS = 2


class Softmax(Unit):
    """reference.softmax in four stages:
    1. d = x - max(x), exp index            -> register
    2. e = exp_table[index]                  (ROM output register)
    3. s = sum(e), reciprocal index -> r = recip_table[...] (ROM output register), e delayed
    4. requantize(e * r) to the output type  -> register
    With `deep` (the "fmax" schedule) every level of the max tree, every `SUM_LEVELS`
    levels of the sum tree, x - max, both ROM outputs and the products are registered too
    (the data they still need delayed alongside): the jet tagger's softmax set its clock on
    an ECP5 (43 MHz on the sum into the reciprocal ROM's address, 53 MHz on the max tree,
    75 MHz on the ROM output into the multiplier). Deep with 2 <= n <= `PAIRWISE_MAX`, the
    max tree and x - max (levels + 1 stages) are two: every difference x_i - x_j
    registered, then the argmax as a one-hot from their signs (ties: the lowest index, as
    any tie gives the same differences) selecting d_i = x_i - x_argmax (n(n-1)
    subtractors: 20 for the jet tagger's 5 classes).
    `split` (deep only; 0: off): the products are built in logic (no DSP block, `--strategy
    da`), so each e * r becomes partial products e * r_j over `split`-bit slices r_j of r,
    registered, then summed (shifted) in a pairwise tree with a register after every
    `sum_levels` levels: an 18 x 18 product in logic is one long carry-save path, an 18 x 2
    slice is one adder.
    Exact: the sum of e * r_j << (j * split) is e * r.
    """

    PAIRWISE_MAX = 8  # n(n-1) subtractors: 56 at 8
    SUM_LEVELS = 2  # deep: sum-tree levels a stage (an 18-bit e: ~20-bit adders)

    def __init__(self, tin: FixedType, n: int, tout: FixedType, exp_table: np.ndarray,
                 exp_t: FixedType, exp_lo: int, exp_shift: int, recip_table: np.ndarray,
                 recip_t: FixedType, recip_lo: int, recip_shift: int, deep: bool = False,
                 split: int = 0, sum_levels: int = 1):
        super().__init__([(tin, n)], (tout, n))
        self.n = n
        self.exp = (np.asarray(exp_table, dtype=np.int64), exp_t, int(exp_lo), int(exp_shift))
        self.rec = (np.asarray(recip_table, dtype=np.int64), recip_t, int(recip_lo),
                    int(recip_shift))
        self.deep = bool(deep)
        self.levels = (n - 1).bit_length()  # pairwise tree levels over n elements
        split = int(split) if self.deep else 0
        rw = recip_t.width
        # unsigned reciprocals only (every slice is then unsigned): ufixed, as compiled
        self.split = split if 0 < split < rw and not recip_t.signed else 0
        self.slices = -(-rw // self.split) if self.split else 1
        self.split_levels = (self.slices - 1).bit_length()  # the partial products' sum tree
        self.sum_levels = max(1, int(sum_levels))
        self.split_stages = -(-self.split_levels // self.sum_levels)
        self.pairwise = self.deep and 2 <= n <= self.PAIRWISE_MAX
        # deep: the max (its levels and x - max, or pairwise: differences, selection),
        # index, e, e registered, the sum's stages, r, r registered, products (partial
        # products, their sum stages), output
        self.max_stages = 2 if self.pairwise else self.levels + 1
        self.sum_stages = -(-self.levels // self.SUM_LEVELS)
        self.latency = (self.max_stages + self.sum_stages + 7 + self.split_stages
                        if self.deep else 4)
        self.multipliers = n

    def _reduce(self, m: Module, vals: list[Value], keep: list[Value], op, name: str,
                every: int = 1) -> tuple[Value, list[Value]]:
        """Pairwise tree of `op`; with `deep` a register after every `every` levels and
        after the last, `keep` delayed alongside. Returns (result, keep)."""
        cur = list(vals)
        for lvl in range(self.levels):
            cur = [op(cur[i], cur[i + 1]) if i + 1 < len(cur) else cur[i]
                   for i in range(0, len(cur), 2)]
            if self.deep and ((lvl + 1) % every == 0 or lvl + 1 == self.levels):
                r = self.regs(m, cur + keep, f"{name}{lvl}_")
                cur, keep = r[:len(cur)], r[len(cur):]
        return cur[0], keep

    def elaborate(self, platform: object) -> Module:
        m = Module()
        etab, et, elo, esh = self.exp
        rtab, rt, rlo, rsh = self.rec
        x = self.inputs()
        if self.pairwise:
            d = self.regs(m, self._pairwise_d(m, x), "d")
        else:
            mx, x = self._reduce(m, x, x, lambda a, b: Mux(a >= b, a, b), "mx")
            d = [q - mx for q in x]
            if self.deep:
                d = self.regs(m, d, "d")
        idx = self.regs(m, [table_index(v, elo, esh, len(etab)) for v in d], "ei")
        emem = table_rom(m, "exp_table", etab, et)
        e = [table_read(m, emem, a, self.en) for a in idx]
        if self.deep:  # block RAM clock-to-out is 5.6 ns on an ECP5: nothing after it
            e = self.regs(m, e, "eo")
        s, e = self._reduce(m, e, e, lambda a, b: a + b, "s", self.SUM_LEVELS)
        rmem = table_rom(m, "recip_table", rtab, rt)
        r = table_read(m, rmem, table_index(s, rlo, rsh, len(rtab)), self.en)
        e3 = self.regs(m, e, "e")
        if self.deep:
            *e3, r = self.regs(m, [*e3, r], "ro")
        if self.split:
            prods = self._split_products(m, e3, r)
        else:
            prods = [v * r for v in e3]
            if self.deep:
                prods = self.regs(m, prods, "pr")
        self.out_regs(m, [requantize(v, et.frac + rt.frac, self.out_spec[0]) for v in prods])
        return m


    def _pairwise_d(self, m: Module, x: list[Value]) -> list[Value]:
        """x_i - max(x) in two stages: every x_i - x_j registered; then x_j is the max
        where x_j > x_k for every k < j and x_j >= x_k for every k > j (one j: the lowest
        index among equal maxima) and d_i is the one-hot OR of x_i - x_j over that j."""
        n = self.n
        keys = [(i, j) for i in range(n) for j in range(n) if i != j]
        regd = self.regs(m, [x[i] - x[j] for i, j in keys], "dd")
        diff = dict(zip(keys, regd, strict=True))
        neg = {k: v[-1] for k, v in diff.items()}  # exact widths: the sign bit
        win = []
        for j in range(n):
            conds = [neg[(k, j)] for k in range(j)] + [~neg[(j, k)] for k in range(j + 1, n)]
            w = Signal(name=f"win{j}")
            m.d.comb += w.eq(Cat(*conds).all())
            win.append(w)
        width = max(len(v) for v in regd)
        out = []
        for i in range(n):
            terms = [Mux(win[j], diff[(i, j)], 0) for j in range(n) if j != i]
            acc = Signal(signed(width), name=f"dsel{i}")
            m.d.comb += acc.eq(reduce(operator.or_, terms))
            out.append(acc)
        return out

    def _split_products(self, m: Module, e: list[Value], r: Value) -> list[Value]:
        """e_i * r as registered partial products over `split`-bit slices of r, summed
        shifted in a pairwise tree registered after every `sum_levels` levels and after
        the last (split_stages)."""
        k = self.split
        parts = [[(v * r[j * k:(j + 1) * k], j * k) for j in range(self.slices)] for v in e]
        flat = self.regs(m, [p for row in parts for p, _ in row], "pp")
        rows = [[(flat[i * self.slices + j], sh) for j, (_, sh) in enumerate(row)]
                for i, row in enumerate(parts)]
        for lvl in range(self.split_levels):
            nxt = []
            for row in rows:
                nxt.append([(row[j][0] + (row[j + 1][0] << (row[j + 1][1] - row[j][1])),
                             row[j][1]) if j + 1 < len(row) else row[j]
                            for j in range(0, len(row), 2)])
            if (lvl + 1) % self.sum_levels and lvl + 1 < self.split_levels:
                rows = nxt  # no register after this level
                continue
            flat = self.regs(m, [p for row in nxt for p, _ in row], f"ps{lvl}_")
            widths = [len(row) for row in nxt]
            rows, at = [], 0
            for i, row in enumerate(nxt):
                rows.append([(flat[at + j], sh) for j, (_, sh) in enumerate(row)])
                at += widths[i]
        return [row[0][0] << row[0][1] for row in rows]



SPLIT_WIDTH = 16  # an iCE40 DSP block multiplies 16 x 16


def serial_ii(n: int, deep: bool = False) -> int:
    """II of SoftmaxSerial over n elements (`deep`: two more pause cycles)."""
    return 3 * n + 2 + 2 * int(deep)


def serial_latency(n: int, deep: bool = False) -> int:
    return 3 * n + 4 + 6 * int(deep)


class SoftmaxSerial(Unit):
    """reference.softmax over n elements with one exp-table port and one product per cycle
    (see the module docstring for the cycle plan). `split`: the product as one 16 x 16
    multiplier plus shift-adds (unsigned tables of at most 18 bits only). `deep` (the
    "fmax" schedule): both table outputs registered before they are used (block RAM
    clock-to-out is 5.6 ns on an ECP5), both table addresses registered and x - max
    registered before its clip (x - max, its clip and the route into the block RAM were the
    folded jet tagger's clock on an ECP5-25k: 7.8 ns; with only the address registered,
    7.0 ns) and the product registered twice; the rotation pauses three cycles, latency
    3n + 10, II 3n + 4."""

    def __init__(self, tin: FixedType, n: int, tout: FixedType, exp_table: np.ndarray,
                 exp_t: FixedType, exp_lo: int, exp_shift: int, recip_table: np.ndarray,
                 recip_t: FixedType, recip_lo: int, recip_shift: int, split: bool = True,
                 deep: bool = False):
        super().__init__([(tin, n)], (tout, n))
        self.n = int(n)
        self.exp = (np.asarray(exp_table, dtype=np.int64), exp_t, int(exp_lo), int(exp_shift))
        self.rec = (np.asarray(recip_table, dtype=np.int64), recip_t, int(recip_lo),
                    int(recip_shift))
        wide = max(exp_t.width, recip_t.width)
        self.split = bool(split) and not exp_t.signed and not recip_t.signed \
            and SPLIT_WIDTH < wide <= SPLIT_WIDTH + 2
        self.deep = bool(deep)
        self.latency = serial_latency(self.n, self.deep)
        self.ii = serial_ii(self.n, self.deep)
        self.multipliers = 1

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "softmax": "serial", "split_product": self.split}

    def _product(self, m: Module, e: Value, r: Value) -> Value:
        """e * r, exact: directly, or (split) as el*rl + (eh*rl + rh*el) << 16 +
        eh*rh << 32 with el, rl the low 16 bits; registered (the product register)."""
        if not self.split:
            p = self.regs(m, [e * r], "pr")[0]
            return self.regs(m, [p], "pd")[0] if self.deep else p
        k = SPLIT_WIDTH
        el, eh, rl, rh = e[:k], e[k:], r[:k], r[k:]
        cross: Value = Const(0, 1)
        for i in range(len(eh)):
            cross = cross + Mux(eh[i], Value.cast(rl) << i, 0)
        for i in range(len(rh)):
            cross = cross + Mux(rh[i], Value.cast(el) << i, 0)
        lo, cr, hi = self.regs(m, [el * rl, cross, eh * rh], "pr")
        p = lo + (Value.cast(cr) << k) + (Value.cast(hi) << (2 * k))
        return self.regs(m, [p], "pd")[0] if self.deep else p

    def _deep(self, m: Module, v: Value, name: str) -> Value:
        """v registered (each enabled cycle) under `deep`, else v."""
        return self.regs(m, [v], name)[0] if self.deep else v

    def elaborate(self, platform: object) -> Module:
        m = Module()
        n, d = self.n, int(self.deep)
        # a table read issued at c (its address from the registers at c) is e at c + 1 + 3d:
        # + 2d x - max and the address registered, + d the output register
        pause = 1 + 2 * d  # cycles the rotation waits for the reciprocal (and its registers)
        last = 3 * n + pause  # the last product read
        etab, et, elo, esh = self.exp
        rtab, rt, rlo, rsh = self.rec
        tin = self.in_specs[0][0]
        en, start = self.en, self.start
        x = self.inputs()
        xs = [Signal(shape_of(tin), name=f"xs{i}", reset_less=True) for i in range(n)]
        mx = Signal(shape_of(tin), name="mx", reset_less=True)
        c = Signal(range(last + 2), name="c")
        run = Signal(name="run")
        with m.If(en):
            with m.If(start):
                m.d.sync += [*(xs[i].eq(x[i]) for i in range(n)), mx.eq(x[0]), c.eq(1),
                             run.eq(1)]
            with m.Elif(run):
                m.d.sync += c.eq(c + 1)
                with m.If(c == last):
                    m.d.sync += run.eq(0)
                with m.If((c <= 2 * n) | (c > 2 * n + pause)):  # the rotation
                    m.d.sync += [xs[i].eq(xs[(i + 1) % n]) for i in range(n)]
                with m.If(c <= n):
                    m.d.sync += mx.eq(Mux(xs[0] > mx, xs[0], mx))
        # the exp port: x_k - max, read every enabled cycle (sum and product passes)
        emem = table_rom(m, "exp_table", etab, et)
        diff = self._deep(m, xs[0] - mx, "ed")
        ea = self._deep(m, table_index(diff, elo, esh, len(etab)), "ea")
        e = self._deep(m, table_read(m, emem, ea, en), "eo")
        s_w = max(1, (n * int(etab.max(initial=0))).bit_length())
        s = Signal(unsigned(s_w), name="s", reset_less=True)
        first = n + 2 + 3 * d  # e of the first sum read (c = n + 1)
        with m.If(en & run & (c >= first) & (c < first + n)):
            m.d.sync += s.eq(fit(Mux(c == first, 0, s) + e, s_w, False))
        rmem = table_rom(m, "recip_table", rtab, rt)
        rp = rmem.read_port(domain="sync")
        # s is whole from c = first + n on (held until the next sum), its address register
        # d cycles later: the read is a valid bit that leaves with the last sum read (c = 2n)
        # and travels with its e, then the address (for small n that cycle may come after
        # `run` has ended, or be the next vector's start)
        if d:
            rd_s = run & (c == 2 * n)
            for i in range(first + n + d - 2 * n):
                rd_s = self.regs(m, [rd_s], f"rv{i}")[0]
        else:  # c = 2n + 2 <= 3n + 1, the last cycle of `run`
            rd_s = run & (c == first + n)
        m.d.comb += [rp.addr.eq(self._deep(m, table_index(s, rlo, rsh, len(rtab)), "ra")),
                     rp.en.eq(en & rd_s)]
        r = self._deep(m, rp.data, "ro")
        # the product tail: valid bits travel with the data (the next start may come first)
        rd = Signal(name="prod_rd")
        m.d.comb += rd.eq(run & (c > 2 * n + pause))
        # product read (-> x - max, address registered) -> e valid (-> e registered) ->
        # product (-> registered)
        vals = [rd]
        for i in range(2 + 4 * d):
            v = Signal(name=f"pv{i}")
            with m.If(en):
                m.d.sync += v.eq(vals[-1])
            vals.append(v)
        pv = vals[-1]
        p = self._product(m, e, r)
        tout = self.out_spec[0]
        q = fit(requantize(p, et.frac + rt.frac, tout), tout.width, tout.signed)
        y = [Signal(shape_of(tout), name=f"y{i}", reset_less=True) for i in range(n)]
        with m.If(en & pv):
            m.d.sync += [y[i].eq(y[i + 1]) for i in range(n - 1)]
            m.d.sync += y[n - 1].eq(q)
        self.drive_y(m, y)
        return m


# -- the choice -------------------------------------------------------------------------------
def softmax_budget(g: Any, reuse: Mapping[str, int]) -> int:
    """Cycles the design leaves a Softmax per vector without slowing down (see the module
    docstring): input pixels per frame for a streamed model, else the largest Dense reuse."""
    if any(nd.op in SPATIAL for nd in g.nodes):
        return int(np.prod(g.tensor(g.inputs[0]).shape[:-1]))
    return max([int(r) for r in reuse.values()] + [1])


def use_serial(g: Any, node: Any, reuse: Mapping[str, int]) -> bool:
    """The rule: the serial unit when the design's budget covers its II under every
    schedule (3n + 4, the deep variant's), so the cost model needs no schedule."""
    return serial_ii(int(g.tensor(node.inputs[0]).size), deep=True) <= \
        softmax_budget(g, reuse)


# -- cost (LUT4 / FF / DSP / BRAM), the calibration style of hdl/flow/estimate.py ------------
# Measured with this flow (yosys 0.70, iCE40 UP5K, n = 10, fixed<8,3>: 256-entry exp table,
# 577-entry reciprocal table, 18-bit codes), each unit synthesized alone:
#   parallel: 10,473 LUT4 + 585 carry, 512 FF, 0 DSP, 4 BRAM (28 of its 30 products made of
#             logic: an 18 x 18 product wants 4 of the UP5K's 8 DSP blocks);
#   serial:   323 LUT4 + 117 carry, 221 FF, 1 DSP, 6 BRAM; placed in conv2d_small_keras's
#             iCEBreaker build it added ~570 logic cells (4,200 -> 4,770).
def _rom_bram(depth: int, width: int, geom: tuple[int, int]) -> int:
    bw, bd = geom
    return max(-(-width // bw) * -(-depth // bd), -(-width * depth // (bw * bd)))


def _rom_lut(depth: int, width: int) -> int:
    """A table read port made of logic: ~width * ceil(depth/16) LUT4 for the leaves, half as
    many again for the multiplexers (estimate.py's coefficient-ROM rule)."""
    return int(1.5 * width * max(1, -(-depth // 16)))


def softmax_cost(g: Any, node: Any, reuse: Mapping[str, int],
                 bram_geom: tuple[int, int] = (16, 256), dsp_width: int = 18
                 ) -> dict[str, Any]:
    """The resources of the Softmax `node` as the circuit builds it for this reuse plan
    (use_serial): {"kind", "lut", "ff", "dsp" (products in DSP blocks), "lut_per_mul",
    "bram", "latency", "ii"}, for a family with block RAMs of `bram_geom` (width, depth)
    and DSP blocks of `dsp_width` x `dsp_width`.

    Parallel (hdl/units/elementwise.py Softmax): n read ports on the exp table, each in logic (one
    block RAM has one read port), the max and sum trees, n products e * r and their
    requantization; where an e * r needs more than one DSP block (the iCE40's 16 x 16)
    the products are costed as logic (the flow keeps the DSPs for the layers' products),
    ~1.5 LUT4 per product bit. Serial: the input rotation (a mux per bit), the max, the
    sum, both tables in block RAM, one product (split: one 16 x 16 DSP, the cross terms in
    logic), the output shift register, a counter, the valid bit's delay line."""
    a = SoftmaxAttrs.of(node)
    tin = g.tensor(node.inputs[0]).dtype
    tout = g.tensor(node.outputs[0]).dtype
    n = int(g.tensor(node.inputs[0]).size)
    et, rt = a.exp_type, a.recip_type
    ew, rw = (et.width if et else 18), (rt.width if rt else 18)
    ed = int(np.asarray(g.constants[node.inputs[1]]).size) if len(node.inputs) > 1 else 1024
    rd = int(np.asarray(g.constants[node.inputs[2]]).size) if len(node.inputs) > 2 else 1024
    w, wo = int(tin.width), int(tout.width)
    s_w = ew + max(1, math.ceil(math.log2(max(2, n))))
    pw = ew + rw
    rq = 2 * wo + 4  # rounding and saturation of one output
    if use_serial(g, node, reuse):
        idx = w + 1 + idx_bits(ed)  # x - max, clip, into the address
        lut = (n * w + 3 * w + idx + s_w + (rw + idx_bits(rd))
               + 4 * (2 * SPLIT_WIDTH) + 2 * rw + pw + rq + 30)
        # + the valid bit's delay line over the latency (hdl/vector/top.py, stream.MapUnit)
        ff = n * w + w + s_w + pw + n * wo + 10 + serial_latency(n)
        return {"kind": "serial", "lut": int(lut), "ff": int(ff), "dsp": 1,
                "lut_per_mul": 16 * 16 // 2, "bram": _rom_bram(ed, ew, bram_geom)
                + _rom_bram(rd, rw, bram_geom), "latency": serial_latency(n),
                "ii": serial_ii(n)}
    soft = max(ew, rw) > dsp_width
    per_mul = 3 * ew * rw // 2
    lut = (n * _rom_lut(ed, ew) + (n - 1) * 2 * w + n * (w + 1) + n * idx_bits(ed)
           + (n - 1) * s_w + n * rq + (n * per_mul if soft else 0))
    ff = n * (w + 1) + n * ew + n * wo + s_w + rw
    return {"kind": "parallel", "lut": int(lut), "ff": int(ff), "dsp": 0 if soft else n,
            "lut_per_mul": per_mul, "bram": _rom_bram(rd, rw, bram_geom),
            "latency": 4, "ii": 1}


def idx_bits(depth: int) -> int:
    return max(1, (depth - 1).bit_length())


def softmax_nodes(g: Any) -> list[Any]:
    return [nd for nd in g.nodes if nd.op == Op.SOFTMAX]


__all__ = ["SoftmaxSerial", "serial_ii", "serial_latency", "softmax_budget", "softmax_cost",
           "softmax_nodes", "use_serial"]
