"""Units other than Dense: element-wise ops, lookup tables, Softmax, pure wiring."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from amaranth.hdl import Module, Mux, Value
from amaranth.lib.memory import Memory

from ...graphs.types import FixedType
from .arith import fit, requantize, shape_of, table_index
from .base import Unit

ElemFn = Callable[[list[list[Value]]], list[Value]]


class Elementwise(Unit):
    """Any per-element function of the input vectors, then one output register."""

    def __init__(self, ins: Sequence[tuple[FixedType, int]], out: tuple[FixedType, int],
                 fn: ElemFn, multipliers: int = 0):
        super().__init__(ins, out)
        self.fn = fn
        self.latency = 1
        self.multipliers = multipliers

    def elaborate(self, platform: object) -> Module:
        m = Module()
        self.out_regs(m, self.fn([self.inputs(k) for k in range(len(self.in_specs))]))
        return m


class Wiring(Unit):
    """Reshape / Transpose: y[i] = x[perm[i]], no logic, latency 0."""

    def __init__(self, t: FixedType, perm: Sequence[int]):
        super().__init__([(t, len(perm))], (t, len(perm)))
        self.perm = [int(p) for p in perm]
        self.latency = 0

    def elaborate(self, platform: object) -> Module:
        m = Module()
        x = self.inputs()
        self.drive_y(m, [x[p] for p in self.perm])
        return m


def _rom(m: Module, name: str, table: np.ndarray, t: FixedType) -> Memory:
    mem = Memory(shape=shape_of(t), depth=len(table), init=[int(v) for v in table])
    m.submodules[name] = mem
    return mem


def _read(m: Module, mem: Memory, addr: Value, en: Value) -> Value:
    """A synchronous read port: the table output is the stage register."""
    rp = mem.read_port(domain="sync")
    m.d.comb += [rp.addr.eq(addr), rp.en.eq(en)]
    return rp.data


class Lut(Unit):
    """Table activation: out = table[table_index(x)] (reference.lut); one ROM, one read
    port per element, latency 1 (the ROM's output register)."""

    def __init__(self, tin: FixedType, n: int, tout: FixedType, table: np.ndarray, lo: int,
                 shift: int):
        super().__init__([(tin, n)], (tout, n))
        self.table, self.lo, self.shift = np.asarray(table, dtype=np.int64), int(lo), int(shift)
        self.latency = 1

    def elaborate(self, platform: object) -> Module:
        m = Module()
        mem = _rom(m, "table", self.table, self.out_spec[0])
        self.drive_y(m, [_read(m, mem, table_index(q, self.lo, self.shift, len(self.table)),
                               self.en) for q in self.inputs()])
        return m


# Softmax products in logic (`--strategy da`, deep schedule): slices of this many bits of
# the reciprocal (an 18-bit one: 3 partial products of 18 x 6, two registered sum levels)
SOFT_PRODUCT_SLICE = 6


class Softmax(Unit):
    """reference.softmax in four stages:
    1. d = x - max(x), exp index            -> register
    2. e = exp_table[index]                  (ROM output register)
    3. s = sum(e), reciprocal index -> r = recip_table[...] (ROM output register), e delayed
    4. requantize(e * r) to the output type  -> register
    With `deep` (the "fmax" schedule) every level of the max and of the sum trees, x - max,
    both ROM outputs and the products are registered too (the data they still need delayed
    alongside): the jet tagger's softmax set its clock on an ECP5 (43 MHz on the sum into
    the reciprocal ROM's address, 53 MHz on the max tree, 75 MHz on the ROM output into
    the multiplier).
    `split` (deep only; 0: off): the products are built in logic (no DSP block, `--strategy
    da`), so each e * r becomes partial products e * r_j over `split`-bit slices r_j of r,
    registered, then summed (shifted) in a pairwise tree with a register after every level:
    an 18 x 18 product in logic is one long carry-save path, an 18 x 6 slice is short.
    Exact: the sum of e * r_j << (j * split) is e * r.
    """

    def __init__(self, tin: FixedType, n: int, tout: FixedType, exp_table: np.ndarray,
                 exp_t: FixedType, exp_lo: int, exp_shift: int, recip_table: np.ndarray,
                 recip_t: FixedType, recip_lo: int, recip_shift: int, deep: bool = False,
                 split: int = 0):
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
        # deep: max levels, x - max, index, e, e registered, sum levels, r, r registered,
        # products (partial products, their sum levels), output
        self.latency = 2 * self.levels + 8 + self.split_levels if self.deep else 4
        self.multipliers = n

    def _reduce(self, m: Module, vals: list[Value], keep: list[Value], op, name: str
                ) -> tuple[Value, list[Value]]:
        """Pairwise tree of `op`; with `deep` a register after every level, `keep`
        delayed alongside. Returns (result, keep)."""
        cur = list(vals)
        for lvl in range(self.levels):
            cur = [op(cur[i], cur[i + 1]) if i + 1 < len(cur) else cur[i]
                   for i in range(0, len(cur), 2)]
            if self.deep:
                r = self.regs(m, cur + keep, f"{name}{lvl}_")
                cur, keep = r[:len(cur)], r[len(cur):]
        return cur[0], keep

    def elaborate(self, platform: object) -> Module:
        m = Module()
        etab, et, elo, esh = self.exp
        rtab, rt, rlo, rsh = self.rec
        x = self.inputs()
        mx, x = self._reduce(m, x, x, lambda a, b: Mux(a >= b, a, b), "mx")
        d = [q - mx for q in x]
        if self.deep:
            d = self.regs(m, d, "d")
        idx = self.regs(m, [table_index(v, elo, esh, len(etab)) for v in d], "ei")
        emem = _rom(m, "exp_table", etab, et)
        e = [_read(m, emem, a, self.en) for a in idx]
        if self.deep:  # block RAM clock-to-out is 5.6 ns on an ECP5: nothing after it
            e = self.regs(m, e, "eo")
        s, e = self._reduce(m, e, e, lambda a, b: a + b, "s")
        rmem = _rom(m, "recip_table", rtab, rt)
        r = _read(m, rmem, table_index(s, rlo, rsh, len(rtab)), self.en)
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


    def _split_products(self, m: Module, e: list[Value], r: Value) -> list[Value]:
        """e_i * r as registered partial products over `split`-bit slices of r, summed
        shifted in a pairwise tree registered after every level (split_levels)."""
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
            flat = self.regs(m, [p for row in nxt for p, _ in row], f"ps{lvl}_")
            widths = [len(row) for row in nxt]
            rows, at = [], 0
            for i, row in enumerate(nxt):
                rows.append([(flat[at + j], sh) for j, (_, sh) in enumerate(row)])
                at += widths[i]
        return [row[0][0] << row[0][1] for row in rows]


def threshold_fn(thr: np.ndarray, steps: np.ndarray, base: np.ndarray, tout: FixedType
                 ) -> ElemFn:
    """reference.threshold: out[c] = base[c] + sum_k steps[c, k] * (x[c] >= thr[c, k])."""

    def fn(ins: list[list[Value]]) -> list[Value]:
        x = ins[0]
        t = np.broadcast_to(thr, (len(x), thr.shape[-1]))
        st = np.broadcast_to(steps, t.shape)
        b = np.broadcast_to(base.reshape(-1) if base.size > 1 else base.reshape(1), (len(x),))
        out = []
        for c, q in enumerate(x):
            acc: Value = Value.cast(int(b[c]))
            for kk in range(t.shape[1]):
                if int(st[c, kk]):
                    acc = acc + Mux(q >= int(t[c, kk]), int(st[c, kk]), 0)
            out.append(fit(acc, tout.width, tout.signed))
        return out

    return fn
