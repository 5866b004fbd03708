"""A folded MultiThreshold: a binary search over each channel's sorted thresholds.

reference.threshold defines out[c] = base[c] + sum_k steps[c, k] * (x[c] >= thr[c, k]). The
plain circuit (hdl/units/threshold.py `threshold_sum`) builds that sum: K comparators and an
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

The count by a product ("multiply" mode): a model quantizer's thresholds are the ceilings of
an affine map of the accumulator (its scale, bias and BatchNorm folded), so the count is
floor((x' * M + C) / 2**N) for integers M >= 0, C > 0 and a shift N found at compile time
(`channel_affine`: the slope interval every pair of keys allows, then the least N with an
integer M and C inside it; checked exactly against every key, x' = clamp(x - lo, -1, hi)).
Where it exists for every channel and a channel has MULTIPLY_MIN_KEYS keys or more, the L
compare stages and their key ROMs (m * kw bits per channel: 19-26 block RAMs for one 64-channel
8-bit layer of a ResNet-8) become one product per lane (M and C per channel in ROMs) and two
stages: x' * M registered, then + C, >> N. When some key breaks the affine pattern (a
quantizer rounding half to even, non-unit steps) the search stays. The FINN way is the
thresholds alone; hls4ml requantizes with a multiplier: this is the multiplier, chosen so
the thresholds are met exactly.

`fold_thresholds` is the choice between the two circuits (the streamed lowering and the
estimate both call it): the search from FOLD_MIN_THRESHOLDS thresholds per channel on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from amaranth.hdl import Array, Const, Module, Mux, Signal, Value, signed, unsigned

from ...graphs.types import FixedType
from ..units.arith import fit, shape_of
from ..units.base import Unit
from ..units.rom_text import rom
from ..units.threshold import FOLD_MIN_THRESHOLDS, channel_search, fold_thresholds

# from this many keys in a channel on, the product replaces the search where it is exact: below
# it the search's key ROMs are small (a 4-bit quantizer: 15 keys) and need no multiplier
MULTIPLY_MIN_KEYS = 64
MAX_SHIFT = 64  # the product's shift tried up to this (a 24-bit span needs about 48)


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


@lru_cache(maxsize=4096)
def channel_affine(keys: tuple[int, ...], hi: int) -> tuple[int, int, int] | None:
    """(M, C, N) with floor((x * M + C) / 2**N) == #{u in keys : u <= x} for every integer x
    in [-1, hi], M >= 0 and C > 0 (so the sum is never negative); keys strictly increasing
    from 0, hi >= keys[-1]. None when no such affine count exists (module docstring).

    The count is j on [u_j, u_{j+1} - 1] (u_0 = -1, u_{m+1} - 1 = hi); a monotone f meets it
    iff f(u_j) >= j and f(u_{j+1} - 1) <= j for every j. For a slope s and offset c that is
    s * u_j + c >= j and s * (u_{k+1} - 1) + c < k + 1: every pair (j, k) bounds s, the
    interval's middle is tried at growing N, and C is checked exactly in integers."""
    m = len(keys)
    if m == 0:
        return (0, 1, 0)
    u = np.asarray(keys, dtype=np.int64)
    lo_pts = np.concatenate([[-1], u])  # f(lo_pts[j]) >= j
    up_pts = np.concatenate([u - 1, [hi]])  # f(up_pts[j]) <= j
    j = np.arange(m + 1, dtype=np.int64)
    d = up_pts[None, :] - lo_pts[:, None]
    r = (j[None, :] + 1 - j[:, None]).astype(np.float64)
    if np.any((d == 0) & (r <= 0)):
        return None
    pos, neg = d > 0, d < 0
    s_hi = float(np.min(r[pos] / d[pos])) if pos.any() else float("inf")
    s_lo = max(0.0, float(np.max(r[neg] / d[neg]))) if neg.any() else 0.0
    if not s_lo < s_hi or s_hi == float("inf"):
        return None
    lo_o, up_o, j_o = (a.astype(object) for a in (lo_pts, up_pts, j))  # Python ints
    for n in range(MAX_SHIFT + 1):
        one = 1 << n
        for mm in sorted({int(np.floor(s_lo * one)) + 1, int(np.ceil(s_hi * one)) - 1,
                          int((s_lo + s_hi) / 2 * one)}):
            if mm < 0:
                continue
            c_lo = max(j_o * one - lo_o * mm)
            c_hi = min((j_o + 1) * one - up_o * mm) - 1
            if c_lo <= c_hi:
                return (mm, max(c_lo, 1), n)
    return None


def multiply_params(rows: list[ChannelSearch]) -> tuple[list[int], list[int], int] | None:
    """Per channel (M, C) at one shift N (each channel's own scaled up to the largest: the
    same floor), or None when a channel has no affine count or none reaches
    MULTIPLY_MIN_KEYS keys (the search is the cheaper circuit then)."""
    if not rows or max(r.m for r in rows) < MULTIPLY_MIN_KEYS:
        return None
    found = []
    for r in rows:
        if r.step() is None:
            return None
        a = channel_affine(tuple(r.keys[:r.m]), r.hi)
        if a is None:
            return None
        found.append(a)
    n = max(a[2] for a in found)
    return ([a[0] << (n - a[2]) for a in found], [a[1] << (n - a[2]) for a in found], n)


def search_levels(m: int) -> int:
    """Compare stages for m keys: the least L with 2**L - 1 >= m."""
    return int(m).bit_length()


def _wrap(v: int, t: FixedType) -> int:
    """v in t's W bits (two's complement wrap, as `fit`)."""
    v &= (1 << t.width) - 1
    return v - (1 << t.width) if t.signed and v >> (t.width - 1) else v


class ThresholdFold(Unit):
    """MultiThreshold by binary search, or by a product where that is exact, over n channels
    (one pixel per start): thr (rows, K) with rows 1 (every channel) or n, steps broadcast
    to thr, base (rows,) or one value; `lanes` channels at a time (module docstring)."""

    def __init__(self, tin: FixedType, n: int, thr: np.ndarray, steps: np.ndarray,
                 base: np.ndarray, tout: FixedType, lanes: int | None = None,
                 multiply: bool = True):
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
        # multiply=False: the search whatever the keys (tests compare the two circuits)
        self.multiply = multiply_params(self.rows) if self.affine and multiply else None
        # pipeline stages of the count: L compares, or the product and the shift
        self.stages = 2 if self.multiply else self.levels
        self.ii = self.steps_
        self.latency = self.stages + self.steps_ + 2 + (0 if self.affine else 1)
        self.thresholds = int(thr.shape[1])
        self.in_place = False  # read_in_place

    def read_in_place(self) -> None:
        """Told by a ChainUnit (hdl/streamed/units.py) that channel c of x0 stays as it was
        at start until its step reads it (cycle start + 1 + c // lanes): no copy of x0."""
        self.in_place = True

    def read_cycle(self, c: int) -> int:
        """Enabled cycles from start to the cycle channel c is read."""
        return 1 + c // self.lanes

    @property
    def mode(self) -> str:
        return "multiply" if self.multiply else "search"

    def product_widths(self) -> tuple[int, int] | None:
        """(x', M) widths of the multiply mode's product (x' signed: the clamp's -1)."""
        if not self.multiply:
            return None
        return self.key_width + 1, max(1, max(self.multiply[0]).bit_length())

    def comparators(self) -> int:
        return 0 if self.multiply else self.lanes * self.levels

    def memories(self) -> list[tuple[int, int]]:
        """(width, depth) of every ROM: per lane, the keys of each stage (the multiply mode:
        M and C) and the values unless affine."""
        if self.multiply:
            ms, cs, _ = self.multiply
            out = [(max(1, max(ms).bit_length()), self.steps_),
                   (max(1, max(cs).bit_length()), self.steps_)] * self.lanes
            return [(w, d) for w, d in out if d > 1]
        out = [(self.key_width, self.steps_ << s) for s in range(self.levels)] * self.lanes
        if not self.affine:
            out += [(self.tout.width, self.steps_ << self.levels)] * self.lanes
        return out

    def describe(self) -> dict[str, object]:
        d = {**super().describe(), "kind": f"threshold {self.mode}", "levels": self.levels,
             "lanes": self.lanes, "thresholds": self.thresholds,
             "comparators": self.comparators()}
        if self.multiply:
            d["product"] = list(self.product_widths() or ())
            d["shift"] = self.multiply[2]
        return d

    def _count_by_product(self, m: Module, p: int, x1: Value, j1: Value, v1: Value,
                          en: Value
                          ) -> tuple[Value, Value, Value]:
        """The multiply mode's two stages on lane p: x' * M (M read from a ROM at the step
        while x' is registered), then (+ C) >> N; returns (count, step, valid)."""
        assert self.multiply is not None
        ms, cs, n_sh = self.multiply
        n, L = self.steps_, self.levels
        idx = [jj * self.lanes + p for jj in range(n)]
        mw = max(1, max(ms).bit_length())
        cw = max(1, max(cs).bit_length())
        row = [(c if len(self.rows) > 1 else 0) if c < self.n else None for c in idx]
        mwords = [ms[r] if r is not None else 0 for r in row]
        cwords = [cs[r] if r is not None else 1 for r in row]
        xa, ja, va = self.regs(m, [x1, j1, v1], f"mx{p}_", [x1.shape(), j1.shape(), 1])
        mv: Value = (Const(mwords[0], unsigned(mw)) if len(set(mwords)) == 1
                     else rom(m, f"m{p}", unsigned(mw), mwords, j1, en))
        pw = len(x1) + mw + 1
        pb, jb, vb = self.regs(m, [xa * mv, ja, va], f"mp{p}_",
                               [signed(pw), ja.shape(), 1])
        cv: Value = (Const(cwords[0], unsigned(cw)) if len(set(cwords)) == 1
                     else rom(m, f"c{p}", unsigned(cw), cwords, ja, en))
        total = Signal(signed(max(pw, cw + 1) + 1), name=f"mt{p}")
        m.d.comb += total.eq(pb + cv)
        return fit(total >> n_sh, L, False), jb, vb

    def _ch(self, j: int, p: int) -> ChannelSearch | None:
        c = j * self.lanes + p
        return self.chan[c] if c < self.n else None

    def elaborate(self, platform: object) -> Module:
        m = Module()
        en, L, P, n, t = self.en, self.levels, self.lanes, self.steps_, self.tin
        kw = self.key_width
        xs = self.inputs()
        # the pixel, held while its n steps run (read in place where the chain keeps it)
        hold: list[Value] = list(xs) if self.in_place else [
            Signal(shape_of(t), name=f"h{c}", reset_less=True) for c in range(self.n)]
        run = Signal(name="run")
        j = Signal(range(max(2, n)), name="j")
        with m.If(en):
            with m.If(self.start):
                if not self.in_place:
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
            if self.multiply:
                pos, jq, vq = self._count_by_product(m, p, x1, j1, v1, en)
            for s in range(0 if self.multiply else L):
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


__all__ = ["FOLD_MIN_THRESHOLDS", "MULTIPLY_MIN_KEYS", "ThresholdFold", "channel_affine",
           "channel_search", "fold_thresholds", "multiply_params"]
