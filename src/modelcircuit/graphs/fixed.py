"""Vectorised fixed-point arithmetic on integer codes (numpy int64).

This is the numeric contract in code: every backend must reproduce these functions bit for
bit. Codes are plain int64 arrays; the type says where the binary point is.
"""

from __future__ import annotations

import numpy as np

from .types import FixedType, Overflow, Rounding


def _floor_div_pow2(q: np.ndarray, s: int) -> np.ndarray:
    return np.right_shift(q, s)


def shift_round(q: np.ndarray, s: int, rounding: Rounding) -> np.ndarray:
    """Drop `s` >= 0 fractional bits of integer codes with the given rounding."""
    q = np.asarray(q, dtype=np.int64)
    if s <= 0:
        return np.left_shift(q, -s) if s < 0 else q
    if s >= 64:
        # |q| <= 2**63 <= 2**(s-1): the value is within [-1/2, 1/2): 0 or -1 (TRN), else 0
        if rounding == Rounding.TRN:
            return np.where(q < 0, -1, 0).astype(np.int64)
        return np.zeros_like(q)
    fl = _floor_div_pow2(q, s)
    if rounding == Rounding.TRN:
        return fl
    # the first dropped bit says "at least half"; adding it after the shift cannot overflow
    half_bit = np.right_shift(q, s - 1) & 1
    if rounding == Rounding.RND:
        return fl + half_bit
    # half to even: round up past half, or at exactly half when the kept part is odd
    below = q & ((np.int64(1) << np.int64(s - 1)) - 1) if s > 1 else np.zeros_like(q)
    up = (half_bit == 1) & ((below != 0) | ((fl & 1) == 1))
    return fl + up.astype(np.int64)


def clamp(q: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """np.clip for int64 codes, in two passes that allocate once (np.clip is slower here)."""
    out = np.maximum(q, np.int64(lo))
    if not isinstance(out, np.ndarray) or out.ndim == 0:  # 0-d inputs give numpy scalars
        return np.asarray(np.minimum(out, np.int64(hi)))
    return np.minimum(out, np.int64(hi), out=out)


def overflow(q: np.ndarray, t: FixedType) -> np.ndarray:
    """Bring integer codes into t's W bits by saturation or two's complement wrap."""
    q = np.asarray(q, dtype=np.int64)
    if t.overflow == Overflow.SAT:
        return clamp(q, t.qmin, t.qmax)
    if t.width >= 64:
        return q
    mask = (np.int64(1) << np.int64(t.width)) - 1
    low = q & mask
    if t.signed:
        sign = np.int64(1) << np.int64(t.width - 1)
        low = np.where(low >= sign, low - (mask + 1), low)
    # narrow types: wrapping can land on the dropped code; clamp that one code
    return np.clip(low, t.qmin, t.qmax) if t.narrow else low


def requantize(q: np.ndarray, frac_in: int, t: FixedType) -> np.ndarray:
    """Codes at `frac_in` fractional bits -> codes of type t (round, then overflow)."""
    s = frac_in - t.frac
    if s < 0 and t.overflow == Overflow.SAT:
        return _widen_saturate(np.asarray(q, dtype=np.int64), -s, t)
    return overflow(shift_round(q, s, t.rounding), t)


def _widen_saturate(q: np.ndarray, k: int, t: FixedType) -> np.ndarray:
    """q * 2**k saturated to t, exactly: an int64 shift would wrap codes past 2**(63-k) and
    saturate to the wrong end (the circuits widen exactly; a property test drew a 21-bit sum
    moved up 43 bits). Wrapping types need no care: the low bits of a wrapped shift are
    right."""
    if k >= 63:  # every nonzero code is past int64 and so past t's ends
        y = np.where(q > 0, np.int64(t.qmax), np.where(q < 0, np.int64(t.qmin), np.int64(0)))
        return overflow(y, t)
    lim = np.int64(1) << np.int64(63 - k)
    y = overflow(np.left_shift(clamp(q, -lim, lim - 1), k), t)
    return np.where(q >= lim, np.int64(t.qmax), np.where(q < -lim, np.int64(t.qmin), y))


def quantize(x: np.ndarray, t: FixedType) -> np.ndarray:
    """Float -> codes of type t. Exact: the scaling by 2**frac is exact in float64."""
    x = np.asarray(x)
    if not np.isfinite(x).all():
        raise ValueError("cannot quantize NaN or Inf")
    y = np.ldexp(x.astype(np.float64, copy=False), t.frac)
    r = np.floor(y)
    if t.rounding == Rounding.RND:
        r += y - r >= 0.5  # y - floor(y) is exact; floor(y + 0.5) is not
    elif t.rounding == Rounding.RND_CONV:
        r = np.round(y)  # numpy rounds half to even, exactly
    if t.overflow == Overflow.SAT and t.width <= 53:
        # the type's ends are exact in float64: saturate there, then one conversion
        r = np.asarray(r)
        return np.asarray(np.clip(r, float(t.qmin), float(t.qmax), out=r if r.ndim else None)
                          ).astype(np.int64)
    if t.overflow == Overflow.WRAP and t.width < 64:
        m = 2.0**t.width
        r = r - m * np.floor(r / m)  # exact: the low W bits, as a float in [0, 2**W)
    # beyond int64: saturate in float first, then the type's own overflow
    big = r >= 2.0**63
    r = np.clip(np.where(big, 0.0, r), -(2.0**63), 2.0**63)
    q = r.astype(np.int64)
    q = np.where(big, np.int64(np.iinfo(np.int64).max), q)
    return overflow(q, t)


def saturate_inf(x: np.ndarray, t: FixedType) -> np.ndarray:
    """x with +-Inf replaced by a finite value past t's end on that side, for a saturating
    t: ONNX QuantizeLinear saturates x / scale, which float32 overflows to +-Inf for a large
    finite x (a host head's Div before its Requant), so quantize then gives the type's end.
    NaN is kept, and so is Inf for a wrapping type: quantize refuses both."""
    x = np.asarray(x)
    if t.overflow != Overflow.SAT or not np.isinf(x).any():
        return x
    past = np.ldexp(float(max(-t.qmin, t.qmax) + 1), -t.frac)
    return np.where(np.isposinf(x), past, np.where(np.isneginf(x), -past, x))


def to_float(q: np.ndarray, t: FixedType) -> np.ndarray:
    """Codes -> float64 values (exact for widths up to 53 bits)."""
    return np.ldexp(np.asarray(q, dtype=np.float64), -t.frac)


def align(q: np.ndarray, frac_in: int, frac_out: int) -> np.ndarray:
    """Exact shift of codes to more fractional bits (frac_out >= frac_in)."""
    assert frac_out >= frac_in, "align only adds fractional bits"
    return np.left_shift(np.asarray(q, dtype=np.int64), frac_out - frac_in)

