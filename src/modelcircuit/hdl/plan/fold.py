"""How a Dense layer is time-shared at reuse R (hls4ml's ReuseFactor): R=1 fully parallel,
II=1; R>1 time-shares about N/R multipliers, II=R (the inputs are folded first, then the
outputs). The geometry (`Fold`), the coefficients per lane and step, and the circuit's size
(products, coefficient ROM bits) exactly as hdl/units/dense.py builds it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fold:
    """How a Dense of weights (N_in, N_out) is time-shared at reuse r (hdl/units/dense.py).

    r <= N_in: R_in = r chunks of c = ceil(N_in / r) inputs, every output at once
    (m = N_out output lanes, R_out = 1). r > N_in: the inputs are walked once per output
    group, R_in = N_in, c = 1, and the outputs are folded too: R_out = min(N_out, r // N_in)
    groups of m = ceil(N_out / R_out) outputs. Steps = R_in * R_out <= r; the step
    s = g * R_in + k feeds input chunk k to output group g. Each lane (t, j') multiplies
    input t of the chunk by the coefficient of output g*m + j' at every step."""

    r: int
    r_in: int
    c: int
    r_out: int
    m: int

    @property
    def steps(self) -> int:
        return self.r_in * self.r_out


def fold_shape(n_in: int, n_out: int, r: int) -> Fold:
    if r <= n_in:
        r_in = max(1, r)
        return Fold(r, r_in, -(-n_in // r_in), 1, n_out)
    r_out = max(1, min(n_out, r // n_in))
    return Fold(r, n_in, 1, r_out, -(-n_out // r_out))


@dataclass(frozen=True)
class FlatFold:
    """How a Flatten -> Dense that takes the frame pixel by pixel (hdl/streamed/dense.py
    FlatDense) spends its d cycles per pixel on the pixel's (C, N_out) rows of W.

    d <= N_out: the outputs in `groups` of m = ceil(N_out / groups), all C channels at
    once (C * m products). d > N_out: one output a cycle (m = 1) and the channels folded
    too, in `chunks` of c = ceil(C / chunks) (c products): a Dense after a global pool
    (pixels = 1) at the reuse of a folded Dense, not 64 products for a once-a-frame layer.
    Step s of a pixel = chunk * groups + group."""

    groups: int
    m: int
    chunks: int
    c: int

    @property
    def steps(self) -> int:
        """Cycles per pixel."""
        return self.groups * self.chunks

    @property
    def products(self) -> int:
        return self.c * self.m


def flat_fold(c: int, n_out: int, d: int) -> FlatFold:
    d = max(1, int(d))
    if d <= n_out:
        return FlatFold(d, -(-n_out // d), 1, c)
    k = max(1, min(c, d // n_out))
    cc = -(-c // k)
    return FlatFold(n_out, 1, -(-c // cc), cc)


def window_memory(f: Fold, taps: int, channels: int) -> bool:
    """Whether a folded Dense over a window of `taps` pixels of `channels` codes reads its
    chunks from the window's memory (hdl/streamed/window.WindowUnit, DenseFolded.read_window):
    a chunk is part of one pixel, so one read a step; else the window is held in registers."""
    return taps > 1 and f.r_in > 1 and f.c <= channels and channels % f.c == 0


def fold_lanes(w: np.ndarray, f: Fold) -> np.ndarray:
    """Coefficients per lane and step: array (steps, c, m), zero where padded."""
    n_in, n_out = w.shape
    pad = np.zeros((f.r_in * f.c, f.r_out * f.m), dtype=np.int64)
    pad[:n_in, :n_out] = w
    # pad[k*c + t, g*m + j] -> lanes[g*R_in + k, t, j]
    a = pad.reshape(f.r_in, f.c, f.r_out, f.m).transpose(2, 0, 1, 3)
    return a.reshape(f.steps, f.c, f.m)


def lane_kinds(lanes: np.ndarray) -> np.ndarray:
    """Per lane (c, m): 0 = always zero, 1 = the same power of two (a shift), 2 = multiplier."""
    nonzero = (lanes != 0).any(axis=0)
    same = (lanes == lanes[0:1]).all(axis=0)
    a = np.abs(lanes[0])
    pow2 = same & (a != 0) & ((a & (a - 1)) == 0)
    return np.where(~nonzero, 0, np.where(pow2, 1, 2))


def fold_lane_counts(w: np.ndarray, r: int) -> tuple[int, int, int]:
    """(lanes used, multiplier lanes, the multiplier lanes' coefficient width) of a Dense
    with weights w folded at reuse r > 1, as hdl/units/dense.py builds it (the width is its
    ROM lane width; 0 without a multiplier lane)."""
    f = fold_shape(w.shape[0], w.shape[1], r)
    lanes = fold_lanes(np.asarray(w, dtype=np.int64), f)
    kinds = lane_kinds(lanes)
    mul = kinds == 2
    n_mul = int(mul.sum())
    cw = int(np.abs(lanes).max(axis=0)[mul].max()).bit_length() + 1 if n_mul else 0
    return int((kinds != 0).sum()), n_mul, cw


def fold_multipliers(w: np.ndarray, r: int) -> int:
    """Time-shared multipliers of a Dense with weights w (N_in, N_out) at reuse r."""
    if r == 1:
        a = np.abs(w)
        return int(((a != 0) & ((a & (a - 1)) != 0)).sum())
    return fold_lane_counts(w, r)[1]


def coef_width(w: np.ndarray) -> int:
    """Bits of a coefficient ROM lane holding any weight of w (as hdl/units/dense.py sizes it)."""
    return int(np.abs(w).max(initial=0)).bit_length() + 1


def layer_size(w: np.ndarray, r: int) -> tuple[int, int]:
    """(products, coefficient ROM bits) of a Dense with weights w at reuse r, exactly as
    hdl/units/dense.py builds it: R=1 one product (multiplier, shift or shift-add) per non-zero
    weight and no ROM; R>1 one per time-shared lane that is not always zero, and a ROM word
    of every multiplier lane's coefficient per step."""
    if r == 1:
        return int(np.count_nonzero(w)), 0
    used, n_mul, cw = fold_lane_counts(w, r)
    return used, n_mul * cw * fold_shape(w.shape[0], w.shape[1], r).steps


def size_bound(n_in: int, n_out: int, r: int, nnz: int, cw: int) -> tuple[int, int]:
    """Upper bounds of layer_size in closed form (every lane used, every lane a multiplier
    of the widest coefficient `cw`); exact products at R=1 (`nnz` non-zero weights)."""
    if r == 1:
        return nnz, 0
    f = fold_shape(n_in, n_out, r)
    return f.c * f.m, f.c * f.m * f.steps * cw
