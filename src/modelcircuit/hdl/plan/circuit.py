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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
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
    # folded Dense node -> how many of its multiplier lanes get a DSP block (the rest are
    # built in logic); None: no device budget to spend (no FPGA profile). `dsp_lanes`.
    dsp_lanes: Mapping[str, int] | None = None

    @property
    def adder_levels(self) -> int:
        return self.schedule.adder_levels

    def strategy_of(self, node: str) -> str:
        return self.strategy if isinstance(self.strategy, str) else \
            self.strategy.get(node, "mult")


def resolve_plan(compiled: CompiledGraph, reuse: CircuitPlan | Reuse | str | None = None,
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
    plan = CircuitPlan(name, sched, layers, strategy, fit)
    return replace(plan, dsp_lanes=dsp_lanes(compiled, plan))


def dsp_lanes(compiled: CompiledGraph, plan: CircuitPlan) -> dict[str, int] | None:
    """Which folded products get the device's DSP blocks, decided here rather than by the
    synthesis: a product the unit knows to be logic can be built for logic (split into
    registered coefficient slices under the lean schedules, hdl/units/dense.py), where a
    `$mul` that yosys moves to logic after the fact is one deep array multiplier in the
    stage the DSP would have had (the iCE40 digits MLP: 17 lanes, 8 DSPs, its clock set
    by a 6 x 6 logic product). The widest products first, as the flow keeps them
    (hdl/flow/yosys.soft_products), then in graph order; a product below the family's
    minimum DSP widths is logic anyway. The products of the attention circuits (Attention,
    LayerNorm: hdl/streamed/attention.fixed_products), always `$mul`s, take their blocks
    first where they are at least as wide as a Dense lane (issue 25: the small encoder's 82
    blocks of them had left 74 of the 156 to the 144 Dense lanes the plan gave DSPs, and yosys
    moved 70 of those lanes to booth logic, ~500 LUT4 each). None without an FPGA profile."""
    from ...graphs.profiles import fpga_families, usable_dsp
    from .fold import coef_width, flat_fold, fold_lane_counts
    from .schedule import fpga_profile_of

    prof = fpga_profile_of(compiled.profile)
    if prof is None or not prof.get("dsp"):
        return None
    fam = fpga_families().get(prof.get("family") or "", {})
    amin, bmin, ymin = fam.get("dsp_min_widths", (0, 0, 0))
    mx = int(fam.get("dsp_max_width", 18))
    narrow = int(fam.get("soft_multiplier_max_width", 0))  # logic in any case (the flow)
    g = compiled.graph

    def dsp_blocks(a: int, b: int) -> int:
        small = a < amin or b < bmin or a + b < ymin or max(a, b) <= narrow
        return 0 if small else -(-a // mx) * -(-b // mx)

    # (-width, 0: a fixed product / 1: a Dense lane, order, node, count, blocks)
    wants: list[tuple[int, int, int, str, int, int]] = []
    from ..streamed.attention import fixed_products

    for order, (name, a, b, n) in enumerate(fixed_products(g, plan.reuse)):
        wants.append((-max(a, b), 0, order, name, n, dsp_blocks(a, b)))
    # the Softmax's products (hdl/units/softmax.py: the serial unit's one split 16 x 16
    # block, the parallel one's e * r): `$mul`s as wide as a block, which the flow keeps
    # before any narrower Dense lane, so they take their blocks first (uncounted, the jet
    # tagger's serial Softmax on an ECP5-25k left one of the 28 Dense lanes the plan had
    # given a DSP to yosys's booth logic: a 16 x 12 array multiplier in one cycle, 9.7 ns,
    # its clock)
    from ..units.softmax import softmax_cost, softmax_nodes

    geom = tuple(fam.get("bram_rom", (16, 256)))
    for order, nd in enumerate(softmax_nodes(g)):
        n = int(softmax_cost(g, nd, plan.reuse, geom, mx)["dsp"])
        if n:
            wants.append((-mx, 0, -1 - order, nd.name, n, 1))
    from ..streamed.kind import flat_source

    for order, nd in enumerate(g.nodes):
        r = plan.reuse.get(nd.name, 1)
        if nd.op != "Dense" or r <= 1 or plan.strategy_of(nd.name) != "mult":
            continue
        flat = flat_source(g, nd)
        if flat is not None:  # FlatDense (hdl/streamed/dense.py): C * m `$mul`s of its own
            w = np.asarray(g.constants[nd.inputs[1]], dtype=np.int64)
            dt = g.tensor(nd.inputs[0]).dtype
            if w.ndim == 2 and hasattr(dt, "width"):
                pixels, c = flat
                a, b = int(dt.width), coef_width(w)
                wants.append((-max(a, b), 0, -1, nd.name,
                              flat_fold(c, w.shape[1], int(r) // pixels).products,
                              dsp_blocks(a, b)))
            continue
        w = np.asarray(g.constants[nd.inputs[1]], dtype=np.int64)
        dt = g.tensor(nd.inputs[0]).dtype
        if w.ndim != 2 or not hasattr(dt, "width"):
            continue
        _, n_mul, cw = fold_lane_counts(w, r)
        if not n_mul:
            continue
        wants.append((-max(int(dt.width), cw), 1, order, nd.name, n_mul,
                      dsp_blocks(int(dt.width), cw)))
    left = usable_dsp(prof)  # the family's share of the device's blocks
    out: dict[str, int] = {}
    for _, dense, _, name, n, blocks in sorted(wants):
        k = min(n, left // blocks) if blocks else 0
        if dense:
            out[name] = k
        left -= k * blocks
    return out
