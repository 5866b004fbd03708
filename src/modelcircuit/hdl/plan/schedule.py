"""The register schedule: where a unit puts its pipeline registers.

Every step of a datapath has a weight in "adder levels" (an adder graph, strategy "da", is
one level per adder of its depth) and a register is placed wherever
the next step would push a stage past `adder_levels` levels (`plan_stages`). The steps of a
Dense (hdl/units/dense.py) are: the products (a real multiplier weighs `mul_levels`), the
adder-tree levels (1 each), the accumulate (folded only), the rounding and the
overflow/ReLU of the requantization (`requant_levels` each). The output register always
follows.

Presets (`SCHEDULES`; the CLI's `--pipeline` and the JSON key "pipeline" name them):
"latency" (multiplier 1, requantization free, 4 levels, lean folds) is the shortest schedule
(the jet tagger at R=1 in 12 cycles, R=2 in 28); "area" is the same with 6 levels per stage
(iCE40); "fmax" (products alone in their stage, rounding and overflow each a stage of their own,
2 levels per stage, 7-stage folds, credit flow control instead of a clock enable, logic
products split in halves) aims at >= 150 MHz on an ECP5. An FPGA family's default is
profile data (graphs/profiles/fpga.json, "families": "schedule").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...graphs.compiled import CompiledGraph
from ..errors import HdlError

# folded Dense: load, ROM read, 2 coefficient/chunk registers, 2 product registers,
# accumulator
FOLD_STAGES = 7
# lean folded: load, ROM read, accumulator; the product register is planned with the tree
# (plan_stages: the product weighs `mul_levels`), so at most 4
LEAN_FOLD_STAGES = 3


@dataclass(frozen=True)
class Schedule:
    adder_levels: int = 4
    mul_levels: int | None = 1  # None: the products are registered on their own
    requant_levels: int = 0
    csd_digits: int = 0  # R=1: constants with at most this many signed digits -> shift-add
    # area first (iCE40: every flip-flop is a logic cell unless a LUT drives it): folded
    # layers without the extra coefficient/chunk/product registers, folded units load on
    # the input handshake itself, and long valid chains become counters (hdl/vector/top.py)
    lean: bool = False
    # flow control by credits instead of one global clock enable (hdl/vector/top.py): the pipeline
    # never stalls, an input is accepted only while the output FIFO has room for everything
    # in flight; no enable fans out to every flip-flop (on ECP5 that net set the clock)
    credits: bool = False
    # operands at most this wide make a product the device builds in logic (its family's
    # "soft_multiplier_max_width"; resolve_schedule fills it in from the profile): with
    # the extra fold registers ("fmax") such a folded product is split in two registered
    # halves summed in the next stage (the same latency, half the logic depth)
    soft_width: int = 0
    # a folded layer's coefficient ROM at least this deep goes to block RAM, shallower ones
    # to LUTs ("fmax": an ECP5 block RAM's clock-to-out, 5.8 ns, alone is most of a
    # 150 MHz cycle; a LUT ROM costs about a LUT4 per 16 words per bit)
    rom_bram_depth: int = 16
    # streamed line and row buffers shallower than this go to LUT RAM, deeper ones (and all
    # where 0: iCE40 has none) to block RAM (the family's "lutram_depth"; an 8-bit
    # ResNet-8's 10-deep, 512-bit line buffers took 15 DP16KD each on an ECP5, 8 % full)
    lutram_depth: int = 0
    # the device's 16 x 4 LUT-RAM cells (ECP5: TRELLIS_DPR16X4, one per 32 LUTs: 2,613 on an
    # 85k; nextpnr fails "unable to find legal placement" past them): the streamed design's
    # shallow FIFOs come first, line and row buffers take LUT RAM only within what is left
    lutram_cells: int = 0
    # lean folds whose coefficient ROM is a block RAM: its read registered once more and
    # the products registered before the tree ("area", iCE40: the digits MLP's clock was set
    # by an SB_RAM40's clock-to-out, 4 ns of routing, a logic product and the accumulator
    # in one stage, 34.9 MHz on an UP5K); one cycle more per such layer, plus the product
    # register the plan may have put later
    bram_reg: bool = False
    # folded layers register the rounding before the overflow clamp ("area", iCE40: the
    # accumulator, the rounding's carry chain and the clamp's LUT levels were 21.9 ns on an
    # UP5K, the digits MLP's clock once its products were split); +1 cycle per folded layer
    round_reg: bool = False
    # R = 1 adder graphs (--strategy da) of more output columns than this: one graph per
    # cluster of this many columns, each reading its own registered copy of the inputs, +1
    # cycle a layer (0: one graph). "fmax", 8: the qkeras jet tagger's 64 x 32 layer alone on
    # an ECP5-85k, 66 -> 121 MHz (one shared graph: routes of 6-9 ns from inputs and shared
    # nodes to adders across the die; 4 columns: 118 MHz), 12.6 % more carry-chain bits
    graph_cluster: int = 0

    @property
    def fold_stages(self) -> int:
        return LEAN_FOLD_STAGES if self.lean else FOLD_STAGES


# "latency": fewest cycles (lean folds: the extra fold registers only help an ECP5 reach
# its DSP columns); "area": the same with deeper stages (fewer registers; iCE40 at 24 MHz);
# "fmax": >= 150 MHz on an ECP5.
SCHEDULES = {"latency": Schedule(4, 1, 0, 0, lean=True),
             "fmax": Schedule(2, None, 2, 3, credits=True, rom_bram_depth=128, graph_cluster=8),
             "area": Schedule(6, 1, 0, 0, lean=True, bram_reg=True, round_reg=True)}
DEFAULT_ADDER_LEVELS = SCHEDULES["latency"].adder_levels  # 4
FPGA_ADDER_LEVELS = SCHEDULES["fmax"].adder_levels


def plan_stages(weights: list[int], adder_levels: int) -> list[bool]:
    """Register after step i? A register goes before a step that would take the current
    stage past `adder_levels` levels; the last step feeds the output register (False)."""
    regs = [False] * len(weights)
    depth = 0
    for i, w in enumerate(weights):
        if depth > 0 and depth + w > adder_levels:
            regs[i - 1] = True
            depth = 0
        depth += w
    return regs


def family_schedule(family: str | None) -> str:
    """The default schedule of an FPGA family (its "schedule" in fpga.json: "area" on iCE40,
    5k logic cells at 24 MHz, where every register costs a cell; "fmax", >= 100 MHz, on an
    ECP5); "fmax" for a family without one."""
    from ...graphs.profiles import fpga_families

    return str(fpga_families().get(family or "", {}).get("schedule", "fmax"))


def fpga_profile_of(profile: str | None) -> dict[str, Any] | None:
    """The profile's data when it is an FPGA's, else None."""
    if not profile:
        return None
    from ...graphs.profiles import all_profiles

    p = all_profiles().get(profile, {})
    return p if p.get("kind") == "fpga" else None


def default_schedule(profile: str | None) -> str:
    """The register schedule for a profile: an FPGA's family default (family_schedule),
    else "latency" (fewest cycles: the jet tagger at R=1 in 12)."""
    p = fpga_profile_of(profile)
    return family_schedule(p.get("family")) if p is not None else "latency"


def _family_int(profile: str | None, key: str) -> int:
    """An integer of the profile's FPGA family (0: absent / no FPGA)."""
    p = fpga_profile_of(profile)
    if p is None:
        return 0
    from ...graphs.profiles import fpga_families

    fam = fpga_families().get(p.get("family") or "", {})
    return int(fam.get(key, 0))


def lutram_cells(profile: str | None) -> int:
    """The profile's device's 16 x 4 LUT-RAM cells (0: none / no FPGA)."""
    p = fpga_profile_of(profile)
    if p is None:
        return 0
    from ...graphs.profiles import fpga_families

    fam = fpga_families().get(p.get("family") or "", {})
    return int(int(p.get("lut", 0)) * float(fam.get("lutram_cells_per_lut", 0)))


def _soft_width(profile: str | None) -> int:
    """The profile's FPGA family's widest logic-built product operand (0: none / no FPGA)."""
    return _family_int(profile, "soft_multiplier_max_width")


def resolve_schedule(compiled: CompiledGraph, name: str | None, adder_levels: int | None
                     ) -> tuple[str, Schedule]:
    """The register schedule preset `name` (None: default_schedule of the graph's profile)
    with `adder_levels` per stage (None: the preset's)."""
    if name is None:
        name = default_schedule(compiled.profile)
    if name not in SCHEDULES:
        raise HdlError(f"pipeline must be one of {', '.join(sorted(SCHEDULES))}, got {name!r}")
    sched = SCHEDULES[name]
    soft = _soft_width(compiled.profile)
    if soft:
        sched = dataclasses.replace(sched, soft_width=soft)
    lutram = _family_int(compiled.profile, "lutram_depth")
    if lutram:
        sched = dataclasses.replace(sched, lutram_depth=lutram,
                                    lutram_cells=lutram_cells(compiled.profile))
    if adder_levels is None:
        adder_levels = sched.adder_levels
    if isinstance(adder_levels, bool) or not isinstance(adder_levels, int) or adder_levels < 1:
        raise HdlError(f"adder_levels must be a positive integer, got {adder_levels!r}")
    return name, dataclasses.replace(sched, adder_levels=adder_levels)
