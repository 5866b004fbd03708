"""MultiThreshold on a whole vector (the vector style's Threshold): one value per channel in
the unit's one cycle (`Threshold`, latency 1, as the element-wise units).

reference.threshold defines out[c] = base[c] + sum_k steps[c, k] * (x[c] >= thr[c, k]).
Written as that sum (`threshold_sum`: K comparators and an adder chain per channel) an 8-bit
quantizer (K = 255) of a 32-channel layer is 8,160 comparators and a 255-deep adder chain per
channel: a quantized MLP's export took 6 to 15 minutes, nearly all of it in Amaranth's
netlist build (its combinational-cycle check walks those chains bit by bit). From
FOLD_MIN_THRESHOLDS thresholds per channel on, the same integer is computed from the
channel's distinct keys (`channel_search`, done once at compile time): out = V[#{u_j <= x}]
with u_1 < ... < u_m the thresholds inside the input's range whose steps do not cancel.

- An input of at most TABLE_MAX_BITS bits: a table of out over every input code (256 words
  for an 8-bit input), read by one word select; a quantizer of an 8-bit code is a table.
- A wider one: the count by a binary search, unrolled: L = ceil(log2(m + 1)) comparisons,
  comparison s against the key of the search tree's level s picked by the bits found so far
  (keys padded to 2**L - 1 with qmax + 1, which never counts), then V[count] (V[0] + s *
  count when V is affine in the count, else a word select). L comparators per channel, not
  K, and no adder chain.

The streamed style registers every search stage (hdl/streamed/threshold.py); here the unit
keeps its latency of 1, so the register bits of a design do not change.
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed

from ...graphs.types import FixedType
from .base import Unit

# from this many thresholds per channel on, the keys (a table or a search) replace the sum
FOLD_MIN_THRESHOLDS = 16
TABLE_MAX_BITS = 8  # an input this narrow or narrower reads a table of every code


def fold_thresholds(k: int) -> bool:
    """Whether a Threshold with k thresholds per channel is computed from its keys."""
    return int(k) >= FOLD_MIN_THRESHOLDS


def channel_search(thr: np.ndarray, steps: np.ndarray, base: int, qmin: int, qmax: int
                   ) -> tuple[list[int], list[int]]:
    """(u, V) of one channel: the thresholds are clipped to [qmin, qmax] (one at or below
    qmin always counts, one above qmax never does), u are the distinct ones in (qmin, qmax]
    whose steps do not cancel, strictly increasing; len(V) = len(u) + 1, V[j] = base + the
    steps of every threshold <= u_j (V[0]: those <= qmin)."""
    thr = np.asarray(thr, dtype=np.int64).reshape(-1)
    steps = np.broadcast_to(np.asarray(steps, dtype=np.int64), thr.shape).reshape(-1)
    v0 = int(base) + int(steps[thr <= qmin].sum())
    inside = (thr > qmin) & (thr <= qmax)
    u, inv = np.unique(thr[inside], return_inverse=True)
    per = np.zeros(len(u), dtype=np.int64)
    np.add.at(per, inv.reshape(-1), steps[inside])
    nz = per != 0  # a key whose steps cancel changes nothing
    return [int(k) for k in u[nz]], [v0] + [v0 + int(v) for v in np.cumsum(per)[nz]]


def _words(values: list[int], width: int) -> Value:
    """The values as one constant, word i in bits [i * width, (i + 1) * width)."""
    return Cat(*[Const(v & ((1 << width) - 1), width) for v in values])


def threshold_table(q: Value, tin: FixedType, keys: list[int], vals: list[int],
                    tout: FixedType) -> Value:
    """V[#{u <= q}] read from a table of every input code (index q - qmin, W bits)."""
    codes = np.arange(tin.qmin, tin.qmax + 1, dtype=np.int64)
    table = np.asarray(vals, dtype=np.int64)[np.searchsorted(np.asarray(keys, dtype=np.int64),
                                                             codes, side="right")]
    index = (q.as_unsigned() ^ (1 << (tin.width - 1))) if tin.signed else q.as_unsigned()
    word = _words([int(v) for v in table], tout.width).word_select(index[:tin.width],
                                                                     tout.width)
    return word.as_signed() if tout.signed else word


def _pick(level: list[int], kw: int, prefix: Value) -> Value:
    """level[prefix] (signed, kw bits) bit by bit: bit j is a 2**s-entry table of one bit
    read at prefix (a constant bit where every key agrees), which yosys maps as one logic
    function of the s bits; one word select of the whole level would be a shifter by
    prefix * kw over all its bits, for yosys to fold (minutes for a 255-key search)."""
    bits = []
    for j in range(kw):
        col = [(v >> j) & 1 for v in level]
        word = sum(b << p for p, b in enumerate(col))
        bits.append(Const(col[0], 1) if all(b == col[0] for b in col)
                    else Const(word, len(col)).bit_select(prefix, 1))
    return Cat(*bits).as_signed()


def threshold_search(m: Module, name: str, q: Value, tin: FixedType, keys: list[int],
                     vals: list[int], tout: FixedType) -> Value:
    """V[#{u <= q}] by an unrolled binary search over the sorted keys (module docstring).
    Each bit found is a signal: as an expression, every later level would copy the whole
    search before it (2**L comparators again)."""
    levels = len(keys).bit_length()  # the least L with 2**L - 1 >= m
    size = (1 << levels) - 1
    padded = keys + [tin.qmax + 1] * (size - len(keys))
    kw = tin.width + 2  # signed: holds qmin and qmax + 1 of either signedness
    x = q.as_signed() if tin.signed else Cat(q, Const(0, 1)).as_signed()
    found: list[Value] = []  # the count's bits, most significant first
    for s in range(levels):
        b = levels - 1 - s
        # prefix p (the s bits found) -> key at pos = (p << (b + 1)) + 2**b - 1
        level = [padded[(p << (b + 1)) + (1 << b) - 1] for p in range(1 << s)]
        key = _pick(level, kw, Cat(*reversed(found))) if s else Const(level[0], signed(kw))
        bit = Signal(name=f"{name}s{s}")
        m.d.comb += bit.eq(x >= key)
        found.append(bit)
    count = Cat(*reversed(found))
    step = vals[1] - vals[0]
    if all(v == vals[0] + step * j for j, v in enumerate(vals)):
        return vals[0] + step * count if step >= 0 else vals[0] - (-step) * count
    word = _words(vals + [vals[-1]] * (size + 1 - len(vals)), tout.width).word_select(
        count, tout.width)
    return word.as_signed() if tout.signed else word


def threshold_sum(q: Value, thr: np.ndarray, steps: np.ndarray, base: int) -> Value:
    """base + sum_k steps[k] * (q >= thr[k]): K comparators and an adder chain (few K)."""
    acc: Value = Value.cast(int(base))
    for t, st in zip(thr, steps, strict=True):
        if int(st):
            acc = acc + Mux(q >= int(t), int(st), 0)
    return acc


class Threshold(Unit):
    """Threshold over n channels, then the output register (latency 1): thr (rows, K) with
    rows 1 (every channel) or n, steps broadcast to it, base (rows,) or one value."""

    def __init__(self, tin: FixedType, n: int, thr: np.ndarray, steps: np.ndarray,
                 base: np.ndarray, tout: FixedType):
        super().__init__([(tin, n)], (tout, n))
        thr = np.asarray(thr, dtype=np.int64)
        thr = thr.reshape(1, -1) if thr.ndim < 2 else thr.reshape(thr.shape[0], -1)
        self.thr, self.steps = np.broadcast_arrays(thr, np.asarray(steps, dtype=np.int64))
        self.base = np.asarray(base, dtype=np.int64).reshape(-1)
        self.tin, self.tout = tin, tout
        self.latency = 1

    def channel(self, m: Module, c: int, q: Value) -> Value:
        r = c if self.thr.shape[0] > 1 else 0
        b = int(self.base[c] if self.base.size > 1 else self.base[0])
        if not fold_thresholds(self.thr.shape[1]):
            return threshold_sum(q, self.thr[r], self.steps[r], b)
        keys, vals = channel_search(self.thr[r], self.steps[r], b, self.tin.qmin,
                                    self.tin.qmax)
        if not keys:
            return Const(vals[0])
        if self.tin.width <= TABLE_MAX_BITS:
            return threshold_table(q, self.tin, keys, vals, self.tout)
        return threshold_search(m, f"c{c}_", q, self.tin, keys, vals, self.tout)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        self.out_regs(m, [self.channel(m, c, q) for c, q in enumerate(self.inputs())])
        return m
