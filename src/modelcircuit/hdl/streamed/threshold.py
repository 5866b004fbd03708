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
from amaranth.hdl import Array, Const, Module, Mux, Signal, Value, signed, unsigned

from ...graphs.types import FixedType
from ..units.arith import fit, shape_of
from ..units.base import Unit
from ..units.rom_text import rom

# from this many thresholds per channel on, the search (L stages) replaces the comparators
FOLD_MIN_THRESHOLDS = 16


def fold_thresholds(k: int) -> bool:
    """Whether a Threshold with k thresholds per channel takes the folded search."""
    return int(k) >= FOLD_MIN_THRESHOLDS


@dataclass(frozen=True)
class ChannelSearch:
    """One channel's compile-time search: keys relative to `lo` (its least key), padded to
    2**levels - 1 with `hi` + 1 (the clamp's top + 1: never counted), and values V (padded
    with the last)."""

    keys: tuple[int, ...]
    values: tuple[int, ...]
    lo: int
    hi: int  # the clamp's top: the largest real key, relative to lo
    m: int  # real keys

    def step(self) -> int | None:
        """s when V[j] = V[0] + s * j for every reachable j (up to m), else None."""
        v = self.values
        s = v[1] - v[0] if self.m else 0
        return s if all(v[j] == v[0] + s * j for j in range(self.m + 1)) else None


def channel_search(thr: np.ndarray, steps: np.ndarray, base: int, qmin: int, qmax: int
                   ) -> tuple[list[int], list[int]]:
    """(u, V) of one channel (see the module docstring): u strictly increasing in
    (qmin, qmax], len(V) = len(u) + 1, V[j] = base + steps of thresholds <= u_j."""
    thr = np.asarray(thr, dtype=np.int64).reshape(-1)
    steps = np.broadcast_to(np.asarray(steps, dtype=np.int64), thr.shape).reshape(-1)
    v0 = int(base) + int(steps[thr <= qmin].sum())
    inside = (thr > qmin) & (thr <= qmax)
    u, inv = np.unique(thr[inside], return_inverse=True)
    per = np.zeros(len(u), dtype=np.int64)
    np.add.at(per, inv.reshape(-1), steps[inside])
    nz = per != 0  # a key whose steps cancel changes nothing
    return [int(k) for k in u[nz]], [v0] + [v0 + int(v) for v in np.cumsum(per)[nz]]


def search_levels(m: int) -> int:
    """Compare stages for m keys: the least L with 2**L - 1 >= m."""
    return int(m).bit_length()


def _wrap(v: int, t: FixedType) -> int:
    """v in t's W bits (two's complement wrap, as `fit`)."""
    v &= (1 << t.width) - 1
    return v - (1 << t.width) if t.signed and v >> (t.width - 1) else v


class ThresholdFold(Unit):
    """MultiThreshold by binary search over n channels (one pixel per start): thr (rows, K)
    with rows 1 (every channel) or n, steps broadcast to thr, base (rows,) or one value;
    `lanes` channels at a time (module docstring)."""

    def __init__(self, tin: FixedType, n: int, thr: np.ndarray, steps: np.ndarray,
                 base: np.ndarray, tout: FixedType, lanes: int | None = None):
        super().__init__([(tin, n)], (tout, n))
        thr = np.asarray(thr, dtype=np.int64)
        thr = thr.reshape(1, -1) if thr.ndim < 2 else thr.reshape(thr.shape[0], -1)
        st = np.broadcast_to(np.asarray(steps, dtype=np.int64).reshape(
            (-1, thr.shape[1]) if np.size(steps) > 1 else (1, 1)), thr.shape)
        b = np.asarray(base, dtype=np.int64).reshape(-1)
        rows = thr.shape[0]
        per_row = [channel_search(thr[r], st[r], int(b[r] if b.size > 1 else b[0]),
                                  tin.qmin, tin.qmax) for r in range(rows)]
        self.levels = max(1, max(search_levels(len(k)) for k, _ in per_row))
        size = (1 << self.levels) - 1
        self.rows = []
        for keys, vals in per_row:
            lo = keys[0] if keys else 0
            hi = keys[-1] - lo if keys else 0
            pk = tuple([k - lo for k in keys] + [hi + 1] * (size - len(keys)))
            pv = tuple(vals + [vals[-1]] * (size + 1 - len(vals)))
            self.rows.append(ChannelSearch(pk, pv, lo, hi, len(keys)))
        self.chan = [self.rows[c if rows > 1 else 0] for c in range(n)]
        self.tin, self.tout, self.n = tin, tout, n
        self.lanes = max(1, min(n, int(lanes or n)))
        self.steps_ = -(-n // self.lanes)  # cycles per pixel
        self.key_width = max(1, max(r.hi + 1 for r in self.rows).bit_length())
        self.affine = all(r.step() is not None for r in self.chan)
        self.ii = self.steps_
        self.latency = self.levels + self.steps_ + 2 + (0 if self.affine else 1)
        self.thresholds = int(thr.shape[1])

    def comparators(self) -> int:
        return self.lanes * self.levels

    def memories(self) -> list[tuple[int, int]]:
        """(width, depth) of every ROM: per lane, the keys of each stage (and the values
        unless affine)."""
        out = [(self.key_width, self.steps_ << s) for s in range(self.levels)] * self.lanes
        if not self.affine:
            out += [(self.tout.width, self.steps_ << self.levels)] * self.lanes
        return out

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "kind": "threshold search", "levels": self.levels,
                "lanes": self.lanes, "thresholds": self.thresholds,
                "comparators": self.comparators()}

    def _ch(self, j: int, p: int) -> ChannelSearch | None:
        c = j * self.lanes + p
        return self.chan[c] if c < self.n else None

    def elaborate(self, platform: object) -> Module:
        m = Module()
        en, L, P, n, t = self.en, self.levels, self.lanes, self.steps_, self.tin
        kw = self.key_width
        xs = self.inputs()
        # the pixel, held while its n steps run
        hold = [Signal(shape_of(t), name=f"h{c}", reset_less=True) for c in range(self.n)]
        run = Signal(name="run")
        j = Signal(range(max(2, n)), name="j")
        with m.If(en):
            with m.If(self.start):
                m.d.sync += [h.eq(x) for h, x in zip(hold, xs, strict=True)]
                m.d.sync += [run.eq(1), j.eq(0)]
            with m.Elif(run):
                m.d.sync += j.eq(j + 1)
                with m.If(j == n - 1):
                    m.d.sync += run.eq(0)

        def pick(vals: list[int | Value], idx: Value, name: str) -> Value:
            """vals[idx] as a signal of its own (an Array proxy in arithmetic with another
            would expand to every pair of their elements)."""
            if len(vals) == 1 or all(isinstance(v, int) and v == vals[0] for v in vals):
                return Value.cast(vals[0])
            vv = [Value.cast(v) for v in vals]
            sh = signed(max(len(v) + (0 if v.shape().signed else 1) for v in vv))
            sig = Signal(sh, name=name)
            m.d.comb += sig.eq(Array(vv)[idx])
            return sig

        ys_last: list[tuple[Value, Value]] = []  # per lane: (value, step index)
        collect = [Signal(shape_of(self.tout), name=f"c{c}", reset_less=True)
                   for c in range(self.n)]
        done_v: Value | None = None
        done_j: Value | None = None
        for p in range(P):
            chans = [self._ch(jj, p) for jj in range(n)]
            xv = pick([hold[jj * P + p] if chans[jj] else 0 for jj in range(n)], j, f"x{p}")
            lo = pick([c.lo if c else 0 for c in chans], j, f"lo{p}")
            hi = pick([c.hi if c else 0 for c in chans], j, f"hi{p}")
            d = Signal(signed(max(t.width, kw) + 3), name=f"d{p}")
            m.d.comb += d.eq(xv - lo)
            xc = Mux(d < -1, -1, Mux(d > hi, hi, d))
            x1, j1, v1 = self.regs(m, [fit(xc, kw + 1, True), j, run], f"sel{p}_",
                                   [signed(kw + 1), j.shape(), 1])
            xq: Value = x1
            jq: Value = j1
            vq: Value = v1
            pos: Value = Const(0, L)
            for s in range(L):
                b = L - 1 - s
                words = []
                for jj in range(n):
                    c = chans[jj]
                    for i in range(1 << s):
                        words.append(c.keys[(i << (b + 1)) + (1 << b) - 1] if c else 0)
                xd, pd, jd, vd = self.regs(m, [xq, pos, jq, vq], f"st{p}_{s}_",
                                           [signed(kw + 1), unsigned(L), j.shape(), 1])
                if len(set(words)) == 1:
                    key: Value = Const(words[0], unsigned(kw))
                else:
                    addr = (jq << s) | (pos >> (b + 1)) if s else jq
                    key = rom(m, f"k{p}_{s}", unsigned(kw), words, addr, en)
                pos = fit(pd | ((xd >= key) << b), L, False)
                xq, jq, vq = xd, jd, vd
            if self.affine:
                v0 = pick([c.values[0] if c else 0 for c in chans], jq, f"v0_{p}")
                sv = pick([c.step() or 0 if c else 0 for c in chans], jq, f"sv{p}")
                y: Value = v0 + pos * sv
            else:
                words = [_wrap(c.values[i] if c else 0, self.tout)
                         for c in chans for i in range(1 << L)]
                y = rom(m, f"v{p}", shape_of(self.tout), words, (jq << L) | pos, en)
                jq, vq = self.regs(m, [jq, vq], f"vl{p}_", [j.shape(), 1])
            ys_last.append((fit(y, self.tout.width, self.tout.signed), jq))
            done_v, done_j = vq, jq
        # collect the lanes' values; the last step's go straight into the output register
        out = [Signal(shape_of(self.tout), name=f"y{c}", reset_less=True) for c in range(self.n)]
        assert done_v is not None and done_j is not None
        with m.If(en & done_v):
            with m.Switch(done_j):
                for jj in range(n):
                    with m.Case(jj):
                        for p, (y, _) in enumerate(ys_last):
                            c = jj * P + p
                            if c < self.n:
                                m.d.sync += collect[c].eq(y)
                                if jj == n - 1:
                                    m.d.sync += out[c].eq(y)
                        if jj == n - 1:
                            m.d.sync += [out[c].eq(collect[c]) for c in range((n - 1) * P)]
        self.drive_y(m, out)
        return m


__all__ = ["FOLD_MIN_THRESHOLDS", "ThresholdFold", "channel_search", "fold_thresholds"]
