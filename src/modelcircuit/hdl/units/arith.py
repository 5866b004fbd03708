"""Fixed-point arithmetic as Amaranth expressions: the numeric contract of
`graphs/fixed.py` and `graphs/reference.py`, rewritten for circuits, bit for bit.

Amaranth values are exact integers (every operator widens its result), so products and sums
here are exact; only an assignment into a narrower signal truncates. Codes are Amaranth
values whose signedness is the FixedType's.
"""

from __future__ import annotations

import math

from amaranth.hdl import Cat, Const, Mux, Shape, Value, signed, unsigned

from ...graphs.types import FixedType, Overflow, Rounding
from ..errors import HdlError


def shape_of(t: FixedType) -> Shape:
    return signed(t.width) if t.signed else unsigned(t.width)


def check_fixed(t: object, where: str) -> FixedType:
    if not isinstance(t, FixedType):
        raise HdlError(f"{where}: type {t} is not fixed point; the HDL backend needs a "
                       "fixed-point precision (e.g. --precision fixed<16,6>)")
    return t


def fit(v: Value, width: int, is_signed: bool) -> Value:
    """The low `width` bits of v (two's complement wrap), read with the given signedness."""
    v = Value.cast(v)
    n = len(v)
    if n < width:
        pad = v[-1].replicate(width - n) if v.shape().signed and n else Const(0, width - n)
        v = Cat(v, pad)
    low = v[:width]
    return low.as_signed() if is_signed else low


def shift_right(v: Value, s: int) -> Value:
    """v >> s (arithmetic, s >= 0 a constant) as a slice, never a shifter cell: `v >> s`
    with an integer s is a $sshr cell in Amaranth's netlist, whose every output bit depends
    on every input bit (its comb-cycle check and RTLIL walk all of them: most of an R = 1
    export's netlist time went to the requantization's shifts). The value is the same;
    the width is len(v) - s (at least one bit)."""
    y = Value.cast(v).shift_right(s)
    return y if len(y) else Const(0, 1)


def shift_round(v: Value, s: int, rounding: Rounding) -> Value:
    """Drop s >= 0 fractional bits (s < 0: add -s zero bits), as fixed.shift_round."""
    v = Value.cast(v)
    if s < 0:
        return v << -s
    if s == 0:
        return v
    if rounding == Rounding.TRN:
        return shift_right(v, s)
    half = 1 << (s - 1)
    if rounding == Rounding.RND:
        return shift_right(v + half, s)
    fl = shift_right(v, s)
    low = fit(v, s, False)
    up = (low > half) | ((low == half) & fl[0])
    return fl + up


def _at_least_pow2(v: Value, k: int) -> Value:
    """v >= 2**k (k >= 0) as a test of v's high bits (a reduction, no carry chain)."""
    n, sgn = len(v), v.shape().signed
    top = n - 1 if sgn else n  # v's magnitude bits are [0, top)
    if k >= top:
        return Const(0, 1)
    hi = v[k:top].any()
    return hi & ~v[n - 1] if sgn else hi


def _below_neg_pow2(v: Value, k: int) -> Value:
    """v < -2**k (k >= 0): negative and not all of bits [k, n-1) set."""
    n = len(v)
    if not v.shape().signed or k >= n - 1:
        return Const(0, 1)
    return v[n - 1] & ~v[k:n - 1].all()


def _saturates(v: Value, t: FixedType) -> tuple[Value, Value]:
    """(v > t.qmax, v < t.qmin). The usual ranges (qmax = 2**k - 1, qmin = 0 or -2**k) as
    bit tests: comparisons are carry chains, and after the rounding this decision is the
    requantization's critical path on an ECP5. Narrow (QONNX) ranges compare."""
    if t.narrow:
        return v > t.qmax, v < t.qmin
    if t.signed:
        return _at_least_pow2(v, t.width - 1), _below_neg_pow2(v, t.width - 1)
    neg = v[-1] if v.shape().signed else Const(0, 1)
    return _at_least_pow2(v, t.width), neg


def overflow(v: Value, t: FixedType) -> Value:
    """Bring an exact integer into t's W bits (saturate or wrap), as fixed.overflow."""
    v = Value.cast(v)
    if t.overflow == Overflow.SAT:
        above, below = _saturates(v, t)
        y = Mux(above, t.qmax, Mux(below, t.qmin, v))
        return fit(y, t.width, t.signed)
    low = fit(v, t.width, t.signed)
    if t.narrow:  # wrapping can land on the dropped code (either end): clamp that one code
        return fit(Mux(low < t.qmin, t.qmin, Mux(low > t.qmax, t.qmax, low)), t.width, t.signed)
    return low


def requantize(v: Value, frac_in: int, t: FixedType) -> Value:
    """Codes at `frac_in` fractional bits -> codes of t: round, then overflow."""
    return overflow(shift_round(v, frac_in - t.frac, t.rounding), t)


def relu(v: Value) -> Value:
    v = Value.cast(v)
    if not v.shape().signed:
        return v
    return Mux(v[-1], 0, v)  # the sign bit: v < 0 without a comparator


def overflow_relu(v: Value, t: FixedType, relu_: bool) -> Value:
    """relu(overflow(v, t)) when relu_ (else overflow(v, t)). Saturating, the two share one
    decision: above qmax -> qmax, negative -> 0 (qmin is <= 0, so the ReLU maps every code
    below it to 0 too), else v. One multiplexer and the sign bit instead of three
    multiplexers and the qmin test (the same codes for every v)."""
    v = Value.cast(v)
    if not relu_:
        return overflow(v, t)
    if t.overflow != Overflow.SAT or t.qmax < 0 or t.qmin > 0:
        return relu(overflow(v, t))
    above, _ = _saturates(v, t)
    return fit(Mux(above, t.qmax, relu(v)), t.width, t.signed)


def table_index(q: Value, lo: int, shift: int, size: int) -> Value:
    """reference.table_index: clip into [lo, lo + (size << shift) - 1], subtract lo, >> shift."""
    hi = lo + (size << shift) - 1
    c = Mux(q < lo, lo, Mux(q > hi, hi, q))
    return fit(shift_right(c - lo, shift), max(1, (size - 1).bit_length()), False)


def const_mul(x: Value, c: int) -> tuple[Value | None, str]:
    """x * c for a constant c: None for 0, a shift (and negation) for a power of two, a real
    multiplier otherwise. Returns (value, kind) with kind in zero|shift|mul."""
    c = int(c)
    if c == 0:
        return None, "zero"
    a = abs(c)
    if a & (a - 1) == 0:
        k = a.bit_length() - 1
        y = Value.cast(x) << k
        return (-y if c < 0 else y), "shift"
    return Value.cast(x) * c, "mul"


def min_signed_width(lo: int, hi: int) -> int:
    """Bits of the smallest signed type holding [lo, hi]."""
    w = 1
    while not (-(1 << (w - 1)) <= lo and hi <= (1 << (w - 1)) - 1):
        w += 1
    return w


def tree_levels(n_terms: int) -> int:
    """Adder levels of a balanced tree over n_terms values."""
    return max(0, math.ceil(math.log2(n_terms))) if n_terms > 1 else 0
