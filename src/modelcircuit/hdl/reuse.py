"""Reuse factors per Dense layer (hls4ml's ReuseFactor): R=1 fully parallel, II=1; R>1
time-shares about N/R multipliers, II=R. `auto` picks, per layer, the smallest R whose
multipliers fit the layer's share of the FPGA profile's DSP blocks."""

from __future__ import annotations

from collections.abc import Mapping
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


def fold_multipliers(w: np.ndarray, r: int) -> int:
    """Time-shared multipliers of a Dense with weights w (N_in, N_out) at reuse r."""
    n_in = w.shape[0]
    r_in = min(r, n_in)
    c = -(-n_in // r_in)
    pad = np.zeros((r_in * c, w.shape[1]), dtype=np.int64)
    pad[:n_in] = w
    lanes = pad.reshape(r_in, c, -1)  # chunk, lane, output
    if r == 1:
        a = np.abs(w)
        return int(((a != 0) & ((a & (a - 1)) != 0)).sum())
    nonzero = (lanes != 0).any(axis=0)
    same = (lanes == lanes[0:1]).all(axis=0)
    a = np.abs(lanes[0])
    pow2 = same & ((a & (a - 1)) == 0)
    return int((nonzero & ~pow2).sum())


def _auto(compiled: CompiledGraph, dense: dict[str, np.ndarray]) -> dict[str, int]:
    from ..graphs.profiles import get_profile

    if not compiled.profile:
        return {n: 1 for n in dense}
    prof = get_profile(compiled.profile)
    dsp = prof.get("dsp") if isinstance(prof, Mapping) else getattr(prof, "dsp", None)
    if not dsp:
        return {n: 1 for n in dense}
    full = {n: max(1, fold_multipliers(w, 1)) for n, w in dense.items()}
    total = sum(full.values())
    out = {}
    for n, w in dense.items():
        budget = max(1, int(dsp * full[n] / total))
        limit = w.shape[0]  # folding is over the inputs: a larger R saves nothing more
        r = 1
        while r < limit and fold_multipliers(w, r) > budget:
            r += 1
        out[n] = r
    return out


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
            return _auto(compiled, dense)
    if isinstance(reuse, Mapping):
        unknown = sorted(set(reuse) - set(dense))
        if unknown:
            raise HdlError(f"reuse given for {unknown[0]!r}, which is not a Dense node; Dense "
                           f"nodes: {', '.join(dense) or 'none'}")
        return {n: _check(reuse.get(n, 1), f"node {n}", w.size) for n, w in dense.items()}
    if not dense:
        _check(reuse, "the model", 1 << 62)
    return {n: _check(reuse, f"node {n}", w.size) for n, w in dense.items()}
