"""Dense (MatMul/Gemm with constant weights), bias, fused ReLU and requantization.

Numbers (reference.dense): products are exact; the sum is exact at the product's binary
point, or the bias's if it has more fractional bits; then one requantization to the output
type, then ReLU. Every partial sum is kept modulo 2**M with M = accumulator width + 1: two's
complement arithmetic is exact modulo 2**M and the final sum fits in M signed bits (the
accumulator type is computed from the weight and input ranges), so the result is exact.

R = 1: one term per non-zero weight (zero weights cost nothing, a power of two is a shift,
anything else a constant multiplier), the bias as one more term, an adder tree with a
register every `adder_levels` levels (the multiply and the requantization count as levels).

R > 1: the input vector is loaded into a shift register and consumed in R_in = min(R, N_in)
chunks of c = ceil(N_in / R_in) elements, one chunk per cycle: c * N_out time-shared
multipliers (their coefficients come from small per-lane ROMs indexed by the chunk
counter), a pipelined tree per output over the chunk, then an accumulator; the bias is
added with the requantization. A new vector is accepted every R cycles (II = R).
"""

from __future__ import annotations

import math

import numpy as np
from amaranth.hdl import Const, Module, Mux, Signal, Value, signed

from ..graphs.types import FixedType
from .arith import const_mul, fit, relu, requantize, shape_of
from .unit import Unit


def tree_levels(n_terms: int) -> int:
    return max(0, math.ceil(math.log2(n_terms))) if n_terms > 1 else 0


def tree_plan(levels: int, depth: int, adder_levels: int) -> tuple[int, int]:
    """(registers inserted, depth after) for `levels` adder levels starting at `depth`."""
    regs = 0
    for _ in range(levels):
        depth += 1
        if depth >= adder_levels:
            regs, depth = regs + 1, 0
    return regs, depth


class Dense(Unit):
    def __init__(self, tx: FixedType, w: np.ndarray, tw: FixedType, b: np.ndarray | None,
                 tb: FixedType | None, tout: FixedType, acc: FixedType, relu: bool,
                 reuse: int = 1, adder_levels: int = 4):
        w = np.asarray(w, dtype=np.int64)
        self.n_in, self.n_out = w.shape
        super().__init__([(tx, self.n_in)], (tout, self.n_out))
        self.tx, self.w, self.tw, self.tout, self.relu_ = tx, w, tw, tout, bool(relu)
        self.adder_levels = int(adder_levels)
        frac = tx.frac + tw.frac
        self.frac = max(frac, tb.frac) if b is not None and tb is not None else frac
        self.p_shift = self.frac - frac
        self.bias = ([0] * self.n_out if b is None else
                     [int(v) << (self.frac - tb.frac) for v in np.asarray(b).reshape(-1)])
        self.mod = acc.width + 1
        self.reuse = int(reuse)
        self.ii = self.reuse
        if self.reuse == 1:
            nz = w != 0
            p2 = nz & ((np.abs(w) & (np.abs(w) - 1)) == 0)
            self.multipliers, self.shifts = int((nz & ~p2).sum()), int(p2.sum())
            terms = [int(nz[:, j].sum()) + (self.bias[j] != 0) for j in range(self.n_out)]
            self.levels = max([tree_levels(t) for t in terms] + [0])
            regs, _ = tree_plan(self.levels, 1, self.adder_levels)
            self.latency = regs + 1
        else:
            self.r_in = min(self.reuse, self.n_in)
            self.c = -(-self.n_in // self.r_in)
            self.lanes = self._lanes()
            self.multipliers = sum(1 for v in self.lanes.values() if v[1] == "mul")
            self.shifts = sum(1 for v in self.lanes.values() if v[1] == "shift")
            self.levels = tree_levels(self.c)
            self.tree_regs, _ = tree_plan(self.levels, 1, self.adder_levels)
            self.latency = self.r_in + self.tree_regs + 2

    def _lanes(self) -> dict[tuple[int, int], tuple[list[int], str]]:
        """(t, j) -> (coefficient per chunk, kind) for every lane that is not always zero."""
        lanes = {}
        for j in range(self.n_out):
            for t in range(self.c):
                col = [int(self.w[k * self.c + t, j]) if k * self.c + t < self.n_in else 0
                       for k in range(self.r_in)]
                if not any(col):
                    continue
                a = abs(col[0])
                same_pow2 = len(set(col)) == 1 and a & (a - 1) == 0
                kind = "shift" if same_pow2 else "mul"
                lanes[(t, j)] = (col, kind)
        return lanes

    # -- shared pieces -------------------------------------------------------------------
    def _wrap(self, v: Value) -> Value:
        v = Value.cast(v)
        return fit(v, self.mod, True) if len(v) > self.mod or not v.shape().signed else v

    def _tree(self, m: Module, cols: list[list[Value]], depth: int,
              carry: list[Value]) -> tuple[list[Value], list[Value], int, int]:
        """Reduce each column to one value; register all columns (and `carry`) whenever
        `adder_levels` levels have passed. Returns (sums, carry, registers, depth)."""
        regs = 0
        cols = [c if c else [Const(0, signed(2))] for c in cols]
        for lvl in range(self.levels):
            cols = [[self._wrap(c[i] + c[i + 1]) if i + 1 < len(c) else c[i]
                     for i in range(0, len(c), 2)] for c in cols]
            depth += 1
            if depth >= self.adder_levels:
                flat = [v for c in cols for v in c]
                r = self.regs(m, flat + carry, f"t{lvl}_")
                it = iter(r[:len(flat)])
                cols = [[next(it) for _ in c] for c in cols]
                carry = r[len(flat):]
                regs, depth = regs + 1, 0
        assert all(len(c) == 1 for c in cols)
        return [c[0] for c in cols], carry, regs, depth

    def _finish(self, v: Value, j: int) -> Value:
        y = requantize(v, self.frac, self.tout)
        return relu(y) if self.relu_ else y

    def elaborate(self, platform: object) -> Module:
        m = Module()
        if self.reuse == 1:
            self._parallel(m)
        else:
            self._folded(m)
        return m

    def _parallel(self, m: Module) -> None:
        x = self.inputs()
        cols: list[list[Value]] = []
        for j in range(self.n_out):
            terms = []
            for i in range(self.n_in):
                p, _ = const_mul(x[i], int(self.w[i, j]))
                if p is not None:
                    terms.append(self._wrap(p << self.p_shift))
            if self.bias[j]:
                terms.append(self._wrap(Const(self.bias[j])))
            cols.append(terms)
        sums, _, regs, _ = self._tree(m, cols, 1, [])
        assert regs + 1 == self.latency
        self.out_regs(m, [self._finish(fit(s, self.mod, True), j) for j, s in enumerate(sums)])

    def _folded(self, m: Module) -> None:
        x = self.inputs()
        n = self.r_in * self.c
        sr = [Signal(shape_of(self.tx), name=f"sr{i}", reset_less=True) for i in range(n)]
        k = Signal(range(max(2, self.r_in)), name="k")
        run = Signal(name="run")
        with m.If(self.en):
            with m.If(self.start):
                m.d.sync += [sr[i].eq(x[i] if i < self.n_in else 0) for i in range(n)]
                m.d.sync += [k.eq(0), run.eq(1)]
            with m.Else():
                m.d.sync += [sr[i].eq(sr[i + self.c] if i + self.c < n else 0) for i in range(n)]
                with m.If(run):
                    m.d.sync += k.eq(k + 1)
                    with m.If(k == self.r_in - 1):
                        m.d.sync += [run.eq(0), k.eq(0)]
        cols: list[list[Value]] = [[] for _ in range(self.n_out)]
        for (t, j), (col, kind) in sorted(self.lanes.items()):
            if kind == "shift":
                p, _ = const_mul(sr[t], col[0])
            else:
                cw = max(abs(v) for v in col).bit_length() + 1
                coef = Signal(signed(cw), name=f"w{t}_{j}")
                with m.Switch(k):
                    for kk, v in enumerate(col):
                        with m.Case(kk):
                            m.d.comb += coef.eq(v)
                    with m.Default():
                        m.d.comb += coef.eq(0)
                p = sr[t] * coef
            cols[j].append(self._wrap(p << self.p_shift))
        first = Signal(name="first")
        m.d.comb += first.eq(k == 0)
        sums, (act, fst), regs, _ = self._tree(m, cols, 1, [run, first])
        assert regs == self.tree_regs
        acc = [Signal(signed(self.mod), name=f"acc{j}", reset_less=True)
               for j in range(self.n_out)]
        with m.If(self.en & act):
            for j in range(self.n_out):
                m.d.sync += acc[j].eq(fit(Mux(fst, 0, acc[j]) + sums[j], self.mod, True))
        self.out_regs(m, [self._finish(fit(acc[j] + self.bias[j], self.mod, True), j)
                          for j in range(self.n_out)])
