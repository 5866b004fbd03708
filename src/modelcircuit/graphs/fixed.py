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
    if s >= 63:
        # Everything below the point: the result is 0 or -1 (TRN), or rounds to 0.
        if rounding == Rounding.TRN:
            return np.where(q < 0, -1, 0).astype(np.int64)
        return np.zeros_like(q)
    if rounding == Rounding.TRN:
        return _floor_div_pow2(q, s)
    half = np.int64(1) << np.int64(s - 1)
    if rounding == Rounding.RND:
        return _floor_div_pow2(q + half, s)
    # half to even
    fl = _floor_div_pow2(q, s)
    rem = q - np.left_shift(fl, s)
    up = (rem > half) | ((rem == half) & ((fl & 1) == 1))
    return fl + up.astype(np.int64)


def overflow(q: np.ndarray, t: FixedType) -> np.ndarray:
    """Bring integer codes into t's W bits by saturation or two's complement wrap."""
    q = np.asarray(q, dtype=np.int64)
    if t.overflow == Overflow.SAT:
        return np.clip(q, t.qmin, t.qmax)
    if t.width >= 64:
        return q
    mask = (np.int64(1) << np.int64(t.width)) - 1
    low = q & mask
    if t.signed:
        sign = np.int64(1) << np.int64(t.width - 1)
        low = np.where(low >= sign, low - (mask + 1), low)
    # narrow types never produce qmin-1 by wrapping to the dropped code: clamp that one code
    return np.maximum(low, t.qmin) if t.narrow else low


def requantize(q: np.ndarray, frac_in: int, t: FixedType) -> np.ndarray:
    """Codes at `frac_in` fractional bits -> codes of type t (round, then overflow)."""
    return overflow(shift_round(q, frac_in - t.frac, t.rounding), t)


def quantize(x: np.ndarray, t: FixedType) -> np.ndarray:
    """Float -> codes of type t. Exact: the scaling by 2**frac is exact in float64."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError("cannot quantize NaN or Inf")
    y = np.ldexp(x, t.frac)
    if t.rounding == Rounding.TRN:
        r = np.floor(y)
    elif t.rounding == Rounding.RND:
        r = np.floor(y + 0.5)
    else:
        r = np.round(y)  # numpy rounds half to even
    # clip in float first so huge values cannot overflow the int64 conversion
    r = np.clip(r, -(2.0**62), 2.0**62)
    return overflow(r.astype(np.int64), t)


def to_float(q: np.ndarray, t: FixedType) -> np.ndarray:
    """Codes -> float64 values (exact for widths up to 53 bits)."""
    return np.ldexp(np.asarray(q, dtype=np.float64), -t.frac)


def align(q: np.ndarray, frac_in: int, frac_out: int) -> np.ndarray:
    """Exact shift of codes to more fractional bits (frac_out >= frac_in)."""
    assert frac_out >= frac_in, "align only adds fractional bits"
    return np.left_shift(np.asarray(q, dtype=np.int64), frac_out - frac_in)
