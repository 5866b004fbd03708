"""The reuse plan the circuit is built with: Dense node name -> reuse factor (hdl/plan/fold.py).

The circuit takes a resolved plan: one reuse for every Dense layer (an int), a factor per
layer (a mapping; missing layers take 1), or a `ReusePlan` (a mapping plus the fit block
that `--reuse auto` reports). "auto" is not resolved here: the FPGA flow fits it to a device
(hdl/flow/fit.py, `plan_circuit`) and hands the circuit the plan. Every plan is validated and
checked against the HDL backend's size limits (hdl/plan/size.py) before anything is elaborated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import HdlError
from .size import check_circuit_size, dense_weights


@dataclass(frozen=True)
class ReusePlan:
    """A resolved per-layer plan. `fit`: what `--reuse auto` decided it from (the device,
    budget and estimate; written under "fit" in the export's JSON), None otherwise."""

    layers: Mapping[str, int]
    fit: dict[str, Any] | None = field(default=None, compare=False)
    # Dense node name -> "mult" | "da" (strategy "auto" resolved by the flow); None: the
    # compiled graph's strategy option for every layer
    strategy: Mapping[str, str] | None = None


Reuse = int | Mapping[str, int] | ReusePlan


def _check(r: Any, where: str, limit: int) -> int:
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
        raise HdlError(f"reuse factor for {where} must be an integer, got {r!r}")
    if r < 1:
        raise HdlError(f"reuse factor for {where} must be at least 1, got {r}")
    if r > limit:
        raise HdlError(f"reuse factor {r} for {where} is larger than its fan-in product "
                       f"{limit} (inputs x outputs)")
    return int(r)


def resolve_reuse(compiled: Any, reuse: Reuse | str) -> dict[str, int]:
    """Dense node name -> validated reuse factor, within the size limits. A string must be
    an integer's text; "auto" is refused (the flow resolves it: hdl/flow/fit.plan_circuit)."""
    if isinstance(reuse, ReusePlan):
        reuse = reuse.layers
    dense = dense_weights(compiled.graph)
    if isinstance(reuse, str):
        if reuse == "auto":
            raise HdlError("reuse 'auto' is fitted to a device by the FPGA flow before the "
                           "circuit is built (modelcircuit.hdl.flow.plan_circuit); the circuit "
                           "takes the plan it returns")
        try:
            reuse = int(reuse)
        except ValueError:
            raise HdlError(f"reuse must be an integer or 'auto', got {reuse!r}") from None
    if isinstance(reuse, Mapping):
        unknown = sorted(set(reuse) - set(dense))
        if unknown:
            raise HdlError(f"reuse given for {unknown[0]!r}, which is not a Dense node; Dense "
                           f"nodes: {', '.join(dense) or 'none'}")
        plan = {n: _check(reuse.get(n, 1), f"node {n}", w.size) for n, w in dense.items()}
    else:
        if not dense:
            _check(reuse, "the model", 1 << 62)
        plan = {n: _check(reuse, f"node {n}", w.size) for n, w in dense.items()}
    check_circuit_size(compiled, plan, dense)
    return plan
