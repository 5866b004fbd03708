"""A folded MultiThreshold: a binary search over each channel's sorted thresholds.

reference.threshold defines out[c] = base[c] + sum_k steps[c, k] * (x[c] >= thr[c, k]). The
plain circuit (hdl/units/elementwise.py `threshold_fn`) builds that sum: K comparators and an
adder chain per channel, per pixel. An 8-bit quantizer has K = 255, so a 64-channel layer is
16,320 comparators, and a ResNet-8 of them took minutes and gigabytes to export.

`ThresholdFold` computes the same integer by a search. Per channel, at compile time: the
thresholds are clipped to the input's range (a threshold at or below qmin always counts, one
above qmax never does), the distinct values u_1 < ... < u_m that change the sum are kept, and
V[j] = base + (the steps of every threshold <= u_j) is tabulated (V[0]: those <= qmin). Then
out = V[#{u_j <= x}]. The count is found by L = ceil(log2(m + 1)) compare stages (the list
padded to 2**L - 1 entries with qmax + 1, which never counts): stage s (bit b = L-1-s) reads
u[pos + 2**b - 1] from a ROM of 2**(L-1-s) entries (the search tree's level s, indexed by the
bits found so far) and sets bit b of pos when x >= it. A register after every stage, then V
(pos) into the output register: latency L + 1, II 1, L comparators per channel.

V is affine in the count for a quantizer (V[j] = V[0] + s * j, the usual unit steps): no
output ROM then, else a ROM of 2**L words.

`fold_thresholds` is the choice between the two circuits (the streamed lowering and the
estimate both call it): the search from FOLD_MIN_THRESHOLDS thresholds per channel on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Const, Module, Value, signed, unsigned
from amaranth.lib.memory import Memory

from ...graphs.types import FixedType
from ..units.arith import fit, shape_of
from ..units.base import Unit

# from this many thresholds per channel on, the search (L stages) replaces the comparators
FOLD_MIN_THRESHOLDS = 16


def fold_thresholds(k: int) -> bool:
    """Whether a Threshold with k thresholds per channel takes the folded search."""
    return int(k) >= FOLD_MIN_THRESHOLDS


@dataclass(frozen=True)
class ChannelSearch:
    """One channel's compile-time search: padded thresholds (2**levels - 1) and values V."""

    keys: tuple[int, ...]
    values: tuple[int, ...]  # V[j], j = 0 .. 2**levels - 1 (padded with the last)

    def step(self) -> int | None:
        """s when V[j] = V[0] + s * j for every j up to the last real key, else None."""
        v = self.values
        s = v[1] - v[0] if len(v) > 1 else 0
        return s if all(v[j] == v[0] + s * j for j in range(len(v))) else None


def channel_search(thr: np.ndarray, steps: np.ndarray, base: int, qmin: int, qmax: int
                   ) -> tuple[list[int], list[int]]:
    """(u, V) of one channel (see the module docstring): u strictly increasing in
    (qmin, qmax], len(V) = len(u) + 1, V[j] = base + steps of thresholds <= u_j."""
    thr = np.asarray(thr, dtype=np.int64).reshape(-1)
    steps = np.broadcast_to(np.asarray(steps, dtype=np.int64), thr.shape).reshape(-1)
    v0 = int(base) + int(steps[thr <= qmin].sum())
    keys, vals = [], [v0]
    inside = (thr > qmin) & (thr <= qmax)
    for u in np.unique(thr[inside]):
        v = vals[-1] + int(steps[thr == u].sum())
        if v != vals[-1]:
            keys.append(int(u))
            vals.append(v)
    return keys, vals


def search_levels(m: int) -> int:
    """Compare stages for m keys: the least L with 2**L - 1 >= m."""
    return int(m).bit_length()


def _wrap(v: int, t: FixedType) -> int:
    """v in t's W bits (two's complement wrap, as `fit`)."""
    v &= (1 << t.width) - 1
    return v - (1 << t.width) if t.signed and v >> (t.width - 1) else v


class ThresholdFold(Unit):
    """MultiThreshold by binary search over n channels (one pixel per start): thr (rows, K)
    with rows 1 (every channel) or n, steps broadcast to thr, base (rows,) or one value."""

    def __init__(self, tin: FixedType, n: int, thr: np.ndarray, steps: np.ndarray,
                 base: np.ndarray, tout: FixedType):
        super().__init__([(tin, n)], (tout, n))
        thr = np.asarray(thr, dtype=np.int64)
        thr = thr.reshape(1, -1) if thr.ndim < 2 else thr.reshape(thr.shape[0], -1)
        st = np.broadcast_to(np.asarray(steps, dtype=np.int64).reshape(
            (-1, thr.shape[1]) if np.size(steps) > 1 else (1, 1)), thr.shape)
        b = np.asarray(base, dtype=np.int64).reshape(-1)
        rows = thr.shape[0]
        per_row = [channel_search(thr[r], st[r], int(b[r] if b.size > 1 else b[0]),
                                  tin.qmin, tin.qmax) for r in range(rows)]
        self.levels = max(search_levels(len(k)) for k, _ in per_row)
        size = (1 << self.levels) - 1
        never = tin.qmax + 1
        self.rows = []
        for keys, vals in per_row:
            pk = tuple(keys + [never] * (size - len(keys)))
            pv = tuple(vals + [vals[-1]] * (size + 1 - len(vals)))
            self.rows.append(ChannelSearch(pk, pv))
        self.chan = [self.rows[c if rows > 1 else 0] for c in range(n)]
        self.tin, self.tout, self.n = tin, tout, n
        self.key_shape = signed(tin.width + 1) if tin.signed else unsigned(tin.width + 1)
        self.latency = self.levels + 1
        self.ii = 1
        self.thresholds = int(thr.shape[1])

    def comparators(self) -> int:
        return self.n * self.levels

    def rom_bits(self) -> int:
        """Key ROM bits (levels >= 1 beyond the first, a constant) and value ROMs."""
        kb = self.n * ((1 << self.levels) - 1 - min(1, self.levels)) * (self.tin.width + 1)
        vb = sum(len(r.values) * self.tout.width for r in self.chan if r.step() is None)
        return kb + vb

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "kind": "threshold search", "levels": self.levels,
                "thresholds": self.thresholds, "comparators": self.comparators()}

    def _lookup(self, m: Module, name: str, table: list[int], shape: object, idx: Value
                ) -> Value:
        if len(table) == 1 or len(set(table)) == 1:
            return Const(table[0], shape)
        mem = Memory(shape=shape, depth=len(table), init=table)
        m.submodules[name] = mem
        rp = mem.read_port(domain="comb")
        m.d.comb += rp.addr.eq(idx)
        return rp.data

    def elaborate(self, platform: object) -> Module:
        m = Module()
        L, xs, ys = self.levels, self.inputs(), []
        for c, (x, row) in enumerate(zip(xs, self.chan, strict=True)):
            pos: Value = Const(0, max(1, L))
            for s in range(L):
                b = L - 1 - s
                level = [row.keys[(j << (b + 1)) + (1 << b) - 1] for j in range(1 << s)]
                t = self._lookup(m, f"k{c}_{s}", level, self.key_shape,
                                 pos[b + 1:] if s else Const(0, 1))
                nxt = fit(pos | ((x >= t) << b), L, False)
                pos, x = self.regs(m, [nxt, x], f"s{s}_c{c}_")
            step = row.step()
            if step is not None:
                y = row.values[0] + pos * step if L else Const(row.values[0])
            else:
                t_ = self.tout
                y = self._lookup(m, f"v{c}", [_wrap(v, t_) for v in row.values],
                                 shape_of(t_), pos)
            ys.append(y)
        self.out_regs(m, ys)
        return m


__all__ = ["FOLD_MIN_THRESHOLDS", "ThresholdFold", "channel_search", "fold_thresholds"]
