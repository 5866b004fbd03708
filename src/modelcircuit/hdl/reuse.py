"""Reuse factors per Dense layer (hls4ml's ReuseFactor): R=1 fully parallel, II=1; R>1
time-shares about N/R multipliers, II=R (the inputs are folded first, then the outputs).
`auto` is fit.fit_reuse against the compiled graph's FPGA profile (default ecp5-85k)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graphs.pipeline import CompiledGraph
from .arith import HdlError


def _check(r: Any, where: str, limit: int) -> int:
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
        raise HdlError(f"reuse factor for {where} must be an integer, got {r!r}")
    if r < 1:
        raise HdlError(f"reuse factor for {where} must be at least 1, got {r}")
    if r > limit:
        raise HdlError(f"reuse factor {r} for {where} is larger than its fan-in product "
                       f"{limit} (inputs x outputs)")
    return int(r)


@dataclass(frozen=True)
class Fold:
    """How a Dense of weights (N_in, N_out) is time-shared at reuse r (hdl/dense.py).

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


def fold_multipliers(w: np.ndarray, r: int) -> int:
    """Time-shared multipliers of a Dense with weights w (N_in, N_out) at reuse r."""
    if r == 1:
        a = np.abs(w)
        return int(((a != 0) & ((a & (a - 1)) != 0)).sum())
    f = fold_shape(w.shape[0], w.shape[1], r)
    return int((lane_kinds(fold_lanes(np.asarray(w, dtype=np.int64), f)) == 2).sum())


DEFAULT_FIT_DEVICE = "ecp5-85k"


def fit_profile(compiled: CompiledGraph) -> dict[str, Any]:
    """The FPGA profile `--reuse auto` fits: the compiled graph's profile when it is an FPGA
    with LUT/FF/DSP figures, else ecp5-85k."""
    from ..graphs.profiles import all_profiles

    profs = all_profiles()
    name = compiled.profile
    p = profs.get(name) if name else None
    if not (p and p.get("kind") == "fpga" and all(p.get(k) for k in ("lut", "ff", "dsp"))):
        name, p = DEFAULT_FIT_DEVICE, profs[DEFAULT_FIT_DEVICE]
    return dict(p, name=name)


def auto_plan(compiled: CompiledGraph) -> tuple[dict[str, int], dict[str, Any]]:
    """`--reuse auto`: the plan of fit.fit_reuse (the one used everywhere: export, inspect,
    the FPGA flow) for the compiled graph's FPGA profile. Returns (reuse per Dense, fit
    block for the JSON)."""
    from .fit import fit_reuse

    plan = fit_reuse(compiled, fit_profile(compiled))
    return dict(plan.reuse), plan.to_json()


def resolve_plan(compiled: CompiledGraph, reuse: int | Mapping[str, int] | str
                 ) -> tuple[dict[str, int], dict[str, Any] | None]:
    """(Dense node name -> validated reuse factor, the fit block when reuse was 'auto')."""
    if isinstance(reuse, str) and reuse == "auto":
        plan, fit = auto_plan(compiled)
        return resolve_reuse(compiled, plan), fit
    return resolve_reuse(compiled, reuse), None


def resolve_reuse(compiled: CompiledGraph, reuse: int | Mapping[str, int] | str) -> dict[str, int]:
    """Dense node name -> validated reuse factor."""
    g = compiled.graph
    dense = {n.name: np.asarray(g.constants[n.inputs[1]], dtype=np.int64)
             for n in g.nodes if n.op == "Dense" and n.inputs[1] in g.constants}
    if isinstance(reuse, str):
        if reuse != "auto":
            try:
                reuse = int(reuse)
            except ValueError:
                raise HdlError(f"reuse must be an integer or 'auto', got {reuse!r}") from None
        else:
            return resolve_plan(compiled, reuse)[0]
    if isinstance(reuse, Mapping):
        unknown = sorted(set(reuse) - set(dense))
        if unknown:
            raise HdlError(f"reuse given for {unknown[0]!r}, which is not a Dense node; Dense "
                           f"nodes: {', '.join(dense) or 'none'}")
        return {n: _check(reuse.get(n, 1), f"node {n}", w.size) for n, w in dense.items()}
    if not dense:
        _check(reuse, "the model", 1 << 62)
    return {n: _check(reuse, f"node {n}", w.size) for n, w in dense.items()}
