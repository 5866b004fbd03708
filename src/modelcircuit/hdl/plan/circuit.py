"""The circuit plan: everything the circuit is built with, resolved once.

`resolve_plan` is the one reader of the compiled graph's HDL options ("reuse", "strategy")
and of its profile's register-schedule defaults: it turns what the user gave (a reuse factor,
a per-layer mapping, or a `ReusePlan` that the FPGA flow fitted to a device for `--reuse
auto`) into a `CircuitPlan`. The tops (hdl/vector/top.py, hdl/streamed/lower.py), the export
and the FPGA flow take that plan and never read the options again; the flow makes its plan
for a device (hdl/flow/fit.py `plan_circuit`, hdl/flow/build.py `plan_build`) through this
same function, then hands it to the export and the build, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import HdlError
from .reuse import Reuse, ReusePlan, resolve_reuse
from .schedule import Schedule, resolve_schedule


@dataclass(frozen=True)
class CircuitPlan:
    """`schedule_name`: the register schedule's preset ("latency", "area", "fmax");
    `schedule`: that preset as resolved for the graph's profile (adder levels, the soft
    product width); `reuse`: Dense/Conv node -> reuse factor, validated and within the size
    limits; `strategy`: "mult" | "da" for every layer, or per layer; `fit`: what `--reuse auto`
    decided from (device, budget, estimate), written under "fit" in the export's JSON."""

    schedule_name: str
    schedule: Schedule
    reuse: Mapping[str, int]
    strategy: str | Mapping[str, str] = "mult"
    fit: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def adder_levels(self) -> int:
        return self.schedule.adder_levels

    def strategy_of(self, node: str) -> str:
        return self.strategy if isinstance(self.strategy, str) else \
            self.strategy.get(node, "mult")


def resolve_plan(compiled: Any, reuse: CircuitPlan | Reuse | str | None = None,
                 pipeline: str | None = None, adder_levels: int | None = None) -> CircuitPlan:
    """The circuit plan of `compiled`. `reuse`: None (the compiled graph's "reuse" option),
    an int, a per-layer mapping, a `ReusePlan` (the flow's fit), or a plan already resolved
    (returned as is). "auto" is refused here: the FPGA flow fits it to a device first
    (hdl/flow/fit.plan_circuit). `pipeline` / `adder_levels`: the register schedule (None:
    the profile's default, schedule.resolve_schedule). Raises HdlError for a bad option."""
    if isinstance(reuse, CircuitPlan):
        if pipeline is not None or adder_levels is not None:
            raise HdlError("the circuit plan is already resolved (its register schedule "
                           "included); give pipeline/adder_levels when it is made")
        return reuse
    name, sched = resolve_schedule(compiled, pipeline, adder_levels)
    if reuse is None:
        reuse = compiled.options.get("reuse", 1)
    layers = resolve_reuse(compiled, reuse)
    # Dense strategy: the flow's per-layer choice for a device, else the compiled option;
    # "auto" without a device: adder graphs (no DSP budget to spend)
    strategy: str | Mapping[str, str] = compiled.options.get("strategy", "mult")
    if isinstance(reuse, ReusePlan) and reuse.strategy is not None:
        strategy = dict(reuse.strategy)
    elif strategy == "auto":
        strategy = "da"
    fit = reuse.fit if isinstance(reuse, ReusePlan) else None
    return CircuitPlan(name, sched, layers, strategy, fit)
