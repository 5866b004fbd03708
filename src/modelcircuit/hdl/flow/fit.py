"""`--reuse auto`: per-layer reuse factors that fit an FPGA profile at the least II, and the
check of an explicit reuse against the device (estimate.py gives the numbers).

Search: the model's II is the largest layer R. For II = 1, 2, … (each layer at
min(II, N_in * N_out), its cheapest fold at that II) the first II whose estimate fits the
budget (DSP blocks, block RAMs, and LUTs x the family's `lut_margin` for routing headroom)
wins; then each layer takes the smallest R <= II that still fits (lower latency). No fit
even at the largest reuse: FitError naming the budget and the estimate. Only plans within
the HDL backend's size limits (graphs/limits.py, size.hdl_limit) are tried; layers over
FULL_SEARCH_WEIGHTS weights try only the reuse factors that start a new fold shape
(`candidates`).

An explicit reuse (`check_plan`, run by the FPGA flow before anything is elaborated) is
refused when its estimate, with multipliers made of logic at their least cost, exceeds the
device itself (LUTs, flip-flops, block RAM): digits at R=1 on an ECP5-25k (48.8k LUT4
estimated, 41k measured on an 85k) stops there instead of running yosys for 99 s and 4 GiB.

Margins (fpga.json "families" -> "fit" -> "lut_margin"; measured on 2 cores, nextpnr 0.11):
iCE40 at 0.85 of its cells (digits at 81 % placed and routed in 27 s, 37 MHz). ECP5 at 0.6
of its LUTs: the jet tagger at 79 % (66.6k COMB) placed in 18 min and had not routed after
20 more. Gowin keeps its flip-flops to "ff_margin" (0.8) of the device, not lut_margin:
they are its scarcer resource (estimate.py has the calibration). Gowin's LUTs stay at 0.6
(issue 27): a margin of 0.68, the most a Gowin build had placed at (the jet tagger fixed<8,3>
"area" R 352/384/352/160, 5895 of the GW1NR-9's 8640 LUT4, 6 min), left no room for the
estimate's error: the digits MLP at fixed<8,3> (calibrated) planned "area" R 192/192/160 at
5698 LUT estimated (66 %) synthesized to 6785 LUT4 + ALU (79 %) and found no legal
placement. At 0.6 the jet tagger plans "area" R 512/512/512/96 (5025 estimated; 4361 in
synthesis). Nexus keeps 0.6 too (LIFCL-40: the jet tagger at 63 % placed and routed in 4.4
min, but an earlier digits plan did not route in 15 min on a loaded machine).

`plan_circuit` is what every caller of the circuit without a device of its own uses (the
export, verify's RTL): it fits "auto" against the compiled graph's FPGA profile and returns
the circuit plan (hdl/plan/circuit.py, resolved there once). A build for a device plans
through hdl/flow/build.py `plan_build`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...graphs.check import require_fixed_point
from ...graphs.compiled import CompiledGraph
from ...graphs.ops import LINEAR
from ...graphs.profiles import all_profiles, usable_dsp
from ..errors import HdlError
from ..plan.circuit import CircuitPlan, resolve_plan
from ..plan.fold import coef_width, size_bound
from ..plan.reuse import Reuse, ReusePlan
from ..plan.schedule import SCHEDULES, family_schedule
from ..plan.size import beyond_any_reuse, check_circuit_size, hdl_limit, other_size
from ..vector.top import check_io
from .attention_cost import attention_costs
from .devices import family, soft_max_width
from .estimate import estimate, recurrent_costs, softmax_costs
from .layer_cost import LayerCost, dense_layers, layer_cost
from .threshold_cost import vector_threshold_costs
from .tools import FitError, FlowError  # noqa: F401 - FitError: this module's error


@dataclass
class FitPlan:
    reuse: dict[str, int]
    ii: int
    device: str
    budget: dict[str, int]
    estimate: dict[str, int]
    layers: list[dict[str, Any]] = field(default_factory=list)
    lut_unit: str = "LUT4"
    margin: float = 0.0
    # a streamed model (hdl/flow/stream_fit.py): II per pixel, frame latency, memories,
    # FIFOs that would need external memory
    stream: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"reuse": dict(self.reuse), "ii": self.ii, "device": self.device,
                "budget": dict(self.budget), "estimate": dict(self.estimate),
                "lut_unit": self.lut_unit, "margin": self.margin,
                "layers": list(self.layers),
                **({"stream": self.stream} if self.stream is not None else {})}


def _fits(est: dict[str, int], prof: dict[str, Any], margin: float, overhead: int,
          ff_margin: float | None = None) -> bool:
    return (est.get("route", est["lut"]) + overhead <= prof["lut"] * margin
            and est["ff"] + overhead <= prof["ff"] * (margin if ff_margin is None else ff_margin)
            and est.get("bram", 0) <= int(prof.get("bram") or 0))


@dataclass
class _Fit:
    """What fit_reuse and check_plan share: the device, its budget, the per-layer costs."""

    compiled: CompiledGraph
    prof: dict[str, Any]
    layers: list[dict[str, Any]]
    family: str
    lut_margin: float
    lean: bool
    io: tuple[int, int]
    name: str
    budget: dict[str, int]
    unit: str
    overhead: int
    cache: dict[tuple[str, int], LayerCost] = field(default_factory=dict)
    # "da" or "auto": layers at R = 1 costed as adder graphs ("auto" may then give some
    # back to DSPs that are free, which only lowers the LUTs)
    strategy: str = "mult"
    # the share of the device's flip-flops a plan may use (the family's "ff_margin", where
    # it has one: Gowin, whose flip-flops are the scarcer resource; else lut_margin)
    ff_margin: float | None = None
    # what a vector model adds beside its Dense layers whatever the plan (its Thresholds,
    # threshold_cost.vector_threshold_costs); a streamed model costs its own (stream_fit)
    fixed: list[LayerCost] = field(default_factory=list)

    def cost(self, lay: dict[str, Any], r: int) -> LayerCost:
        key = (lay["node"], r)
        if key not in self.cache:
            self.cache[key] = layer_cost(lay, r, self.lean,
                                         "da" if self.strategy in ("da", "auto") else "mult")
            self.cache[key].soft = bool(lay["soft"])
        return self.cache[key]

    def costs(self, plan: dict[str, int]) -> list[LayerCost]:
        return ([self.cost(lay, plan[lay["node"]]) for lay in self.layers]
                + softmax_costs(self.compiled, plan, self.family)
                + recurrent_costs(self.compiled, self.family)
                + attention_costs(self.compiled, plan, self.family) + self.fixed)

    def estimate(self, plan: dict[str, int]) -> dict[str, int]:
        return estimate(self.costs(plan), self.budget["dsp"], self.family, self.io,
                        lean=self.lean)

    def fits(self, plan: dict[str, int]) -> bool:
        return self.fits_estimate(self.estimate(plan))

    def fits_estimate(self, est: dict[str, int]) -> bool:
        """An estimate within the device's budget and this fit's margin (the streamed plan
        search, hdl/flow/stream_fit.py, adds its glue before asking)."""
        return _fits(est, self.prof, self.lut_margin, self.overhead, self.ff_margin)

    def no_fit(self, compiled: CompiledGraph, search: Any, any_within: bool) -> ValueError:
        """The error when no plan fits (see _no_fit)."""
        return _no_fit(compiled, self, search, any_within)

    def plan(self, plan: dict[str, int], least: bool = False) -> FitPlan:
        costs = self.costs(plan)
        est = estimate(costs, self.budget["dsp"], self.family, self.io, least, self.lean)
        est["lut"] += self.overhead
        return FitPlan(dict(plan), max(plan.values(), default=1), self.name, self.budget, est,
                       [c.to_json() for c in costs], lut_unit=self.unit, margin=self.lut_margin)

    def empty(self, est_lut: int = 0) -> FitPlan:
        return FitPlan({}, 1, self.name, self.budget,
                       {"lut": est_lut, "ff": 0, "dsp": 0, "bram": 0},
                       lut_unit=self.unit, margin=self.lut_margin)


def _context(compiled: CompiledGraph, prof: dict[str, Any], lut_margin: float | None,
             overhead_lut: int | None, pipeline: str | None) -> _Fit:
    g = compiled.graph
    fam_name = prof.get("family", "ecp5")
    fam = family(fam_name)
    ff_margin = fam["fit"].get("ff_margin") if lut_margin is None else None
    if lut_margin is None:
        lut_margin = fam["fit"]["lut_margin"]
    if pipeline is None:
        pipeline = family_schedule(fam_name)
    lean = SCHEDULES[pipeline].lean if pipeline in SCHEDULES else False
    # a layer too large for the HDL backend at any reuse is refused before any estimate
    # (the estimate's own work is proportional to its weights, once per candidate reuse)
    if any(int(np.asarray(g.constants[n.inputs[1]]).size) > hdl_limit("dense_weights")
           for n in g.nodes if n.op in LINEAR and n.inputs[1] in g.constants):
        check_circuit_size(compiled, {})
    layers = dense_layers(compiled)
    io = (layers[0]["wx"] * layers[0]["w"].shape[0],
          layers[-1]["wo"] * layers[-1]["w"].shape[1]) if layers else (0, 0)
    geom = tuple(fam["bram_rom"])
    narrow = soft_max_width(fam_name)
    amin, bmin, ymin = fam.get("dsp_min_widths", (0, 0, 0))
    sched = SCHEDULES.get(pipeline)
    for lay in layers:
        lay["bram_geom"] = geom
        if sched is not None:  # what DenseGraph (strategy "da") builds under this schedule
            lay["graph_cluster"], lay["adder_levels"] = sched.graph_cluster, sched.adder_levels
        # products in logic as the circuit plan decides it (plan/circuit.dsp_lanes): the
        # input width and the widest coefficient the weights need, not the weight type's
        # (issue 27: fixed<8,3> weights of 8 bits fit the soft width 8 of Gowin and ECP5,
        # and the circuit built every product of the jet tagger in logic while the
        # estimate had given 14 of them a DSP)
        a, b = lay["wx"], coef_width(lay["w"])
        lay["soft"] = a < amin or b < bmin or a + b < ymin or max(a, b) <= narrow
    name = prof.get("name", prof.get("title", "?"))
    budget = {"lut": int(prof["lut"]), "ff": int(prof["ff"]), "dsp": usable_dsp(prof),
              "bram": int(prof.get("bram") or 0)}
    # stream glue, other ops, the UART on small parts: a few hundred LUTs (in logic cells:
    # the estimate's wrapper term)
    overhead = overhead_lut if overhead_lut is not None else int(fam["fit"]["overhead_lut"])
    from ..streamed.kind import is_streamed

    # (not in a simulation's fit: they are the same at every plan, and the simulation
    # bounds the Dense structure Verilator compiles, not a device they could overflow)
    fixed = ([] if is_streamed(g) or name == SIMULATION_FIT
             else vector_threshold_costs(compiled))
    return _Fit(compiled, prof, layers, fam_name, lut_margin, lean, io, name, budget,
                fam["lut_unit"], overhead,
                strategy=str(compiled.options.get("strategy", "mult")), ff_margin=ff_margin,
                fixed=fixed)


def _model_name(compiled: CompiledGraph) -> str:
    return str(getattr(compiled.graph, "name", "?"))


# layers with more weights than this try only the reuse factors that start a new fold
# shape (each estimate costs time in proportion to the weights: a 1024 x 1024 layer took
# 37 s over all 2,047 factors, 2 s over these 126)
FULL_SEARCH_WEIGHTS = 1 << 16


def candidates(n_in: int, n_out: int) -> list[int]:
    """Reuse factors that change a layer's fold: 1..N_in (input chunks), then N_in * k
    (k output groups); others cost the same as the next smaller one at a larger II. Over
    FULL_SEARCH_WEIGHTS weights, only the least factor of each chunk size c = ceil(N_in / R)
    and group size m = ceil(N_out / k): the same lanes in fewer steps."""
    if n_in * n_out <= FULL_SEARCH_WEIGHTS:
        return list(range(1, n_in + 1)) + [n_in * k for k in range(2, n_out + 1)]
    rin = {-(-n_in // c) for c in range(1, n_in + 1)}
    rout = {n_in * -(-n_out // m) for m in range(1, n_out + 1)} - {n_in}
    return sorted(rin | rout)


class _Search:
    """The plans fit_reuse tries: per layer its candidate reuse factors, and whether a plan
    is within the HDL backend's size limits (by size.size_bound)."""

    def __init__(self, compiled: CompiledGraph, layers: list[dict[str, Any]]):
        self.layers = layers
        self.lim_p, self.lim_rom = hdl_limit("products"), hdl_limit("rom_bits")
        self.other = other_size(compiled.graph)
        for lay in layers:
            lay["nnz"] = int(np.count_nonzero(lay["w"]))
            lay["cw"] = coef_width(lay["w"])
        self.cands = {lay["node"]: candidates(*lay["w"].shape) for lay in layers}

    def within(self, plan: dict[str, int]) -> bool:
        b = [size_bound(*lay["w"].shape, plan[lay["node"]], lay["nnz"], lay["cw"])
             for lay in self.layers]
        ops, tbits = self.other
        return (sum(p for p, _ in b) + ops <= self.lim_p
                and sum(x for _, x in b) + tbits <= self.lim_rom)

    def at(self, ii: int) -> dict[str, int]:
        """Every layer at its largest candidate <= ii."""
        return {n: c[bisect.bisect_right(c, ii) - 1] for n, c in self.cands.items()}

    def iis(self) -> list[int]:
        return sorted({r for c in self.cands.values() for r in c})


def fit_reuse(compiled: CompiledGraph, prof: dict[str, Any], lut_margin: float | None = None,
              overhead_lut: int | None = None, pipeline: str | None = None) -> FitPlan:
    """The least-II plan that fits `prof` (an FPGA profile dict with name, lut, ff, dsp)
    built with `pipeline` (the register schedule; default: the device family's). Only plans
    within the HDL backend's size limits (size.hdl_limit, by size.size_bound) are
    considered."""
    fx = _context(compiled, prof, lut_margin, overhead_lut, pipeline)
    if not fx.layers:
        return fx.empty()
    search = _Search(compiled, fx.layers)
    from ..streamed.kind import is_streamed

    if is_streamed(compiled.graph):  # frame time decides a streamed plan
        from .stream_fit import fit_streamed

        return fit_streamed(compiled, fx, search, pipeline)
    plan, any_within = None, False
    for ii in search.iis():
        trial = search.at(ii)
        if not search.within(trial):
            continue
        any_within = True
        if fx.fits(trial):
            plan = trial
            break
    if plan is None:
        raise _no_fit(compiled, fx, search, any_within)
    # lower latency: each layer takes the smallest R <= II that still fits
    for lay in sorted(fx.layers, key=lambda x: x["w"].size):
        for r in [c for c in search.cands[lay["node"]] if c < plan[lay["node"]]]:
            trial = dict(plan, **{lay["node"]: r})
            if search.within(trial) and fx.fits(trial):
                plan = trial
                break
    return fx.plan(plan)


def _no_fit(compiled: CompiledGraph, fx: _Fit, search: _Search, any_within: bool) -> ValueError:
    """Why no plan fits: the HDL backend's size limits (HdlError), else the device (FitError)."""
    plan = {lay["node"]: lay["w"].size for lay in fx.layers}
    if not any_within:
        why = beyond_any_reuse({lay["node"]: lay["w"] for lay in fx.layers}, search.other,
                               search.lim_p, search.lim_rom)
        return HdlError(f"--reuse auto: no reuse plan keeps the circuit for model "
                        f"{_model_name(compiled)} within the HDL backend's limits: "
                        + (why or f"{search.lim_p:,} products, {search.lim_rom:,} bits of "
                                  "coefficient ROM and lookup tables"))
    est, budget, margin = fx.estimate(plan), fx.budget, fx.lut_margin
    ffm = margin if fx.ff_margin is None else fx.ff_margin
    prec = compiled.options.get("precision")
    fixed = sum(c.lut for c in fx.fixed)  # the vector Thresholds: the same at every reuse
    return FitError(
        f"model {_model_name(compiled)}{f' at {prec}' if prec else ''} "
        f"does not fit {fx.name} even at the largest reuse ({', '.join(f'{k}={v}' for k, v in plan.items())}, "
        f"II {max(plan.values())}): estimated {est['lut'] + fx.overhead} LUT"
        f"{f' ({fixed} of them its Thresholds, at any reuse)' if fixed else ''}, {est['ff']} FF, "
        f"{est['bram']} BRAM "
        f"against a budget of {int(budget['lut'] * margin)} LUT ({margin:.0%} of "
        f"{budget['lut']}), {int(budget['ff'] * ffm)} FF ({ffm:.0%} of {budget['ff']}), {budget['dsp']} DSP, {budget['bram']} BRAM; try a narrower "
        f"--precision or a larger device")


# An explicit reuse is the user's choice: refused only when the estimate is over the
# device itself (--reuse auto keeps to the family's lut_margin of it, for routing).
EXPLICIT_MARGIN = 1.0


def _plan_text(plan: dict[str, int]) -> str:
    vals = set(plan.values())
    if len(vals) == 1:
        return f"reuse {vals.pop()}"
    return "reuse " + ", ".join(f"{k}={v}" for k, v in plan.items())


def check_plan(compiled: CompiledGraph, prof: dict[str, Any], plan: dict[str, int],
               pipeline: str | None = None) -> FitPlan:
    """The estimate of an explicit reuse plan on `prof`; FitError, before any synthesis,
    when it exceeds the device (LUTs, flip-flops or block RAM). Returns the estimate (a
    FitPlan; its `margin` is what --reuse auto would keep to)."""
    fx = _context(compiled, prof, None, None, pipeline)
    missing = [lay["node"] for lay in fx.layers if lay["node"] not in plan]
    plan = {**{n: 1 for n in missing}, **{k: int(v) for k, v in plan.items()}}
    plan = {lay["node"]: plan[lay["node"]] for lay in fx.layers}
    # the estimate shown is the one --reuse auto would make of this plan; the refusal is on
    # the least (multipliers in logic at their least cost)
    fp = fx.plan(plan) if plan else fx.empty(fx.overhead)
    low = fx.plan(plan, least=True).estimate if plan else fp.estimate
    from ..streamed.kind import is_streamed

    if plan and is_streamed(compiled.graph):  # + windows, line buffers, FIFOs
        from .stream_fit import check_streamed

        low = check_streamed(compiled, fx, fp, plan, pipeline) or low
    est, b = low, fx.budget
    over = []
    if est["lut"] > b["lut"] * EXPLICIT_MARGIN:
        over.append("LUT")
    if est["ff"] + fx.overhead > b["ff"] * EXPLICIT_MARGIN:
        over.append("FF")
    if est.get("bram", 0) > b["bram"]:
        over.append("BRAM")
    if over:
        unit = "logic cells" if family(fx.family)["fit"]["logic_cells"] else "LUT4"
        raise FitError(
            f"model {_model_name(compiled)} at {_plan_text(plan)} needs an estimated "
            f"{est['lut']:,} {unit} ({est['dsp']} DSP, {est['ff']:,} FF, {est.get('bram', 0)} "
            f"BRAM); device {fx.name} has {b['lut']:,} {unit}, {b['ff']:,} FF, {b['dsp']} DSP, "
            f"{b['bram']} BRAM (over: {', '.join(over)}); try --reuse auto (it plans within "
            f"{fx.lut_margin:.0%} of the device's {unit}) or a larger device")
    return fp


def estimate_plan(compiled: CompiledGraph, prof: dict[str, Any], plan: dict[str, int],
                  pipeline: str | None = None) -> dict[str, int]:
    """The estimate of a reuse plan on `prof` with `pipeline` (the family's default when
    None), refused or not: what fit_reuse and check_plan compare with the budget."""
    return _context(compiled, prof, None, None, pipeline).estimate(dict(plan))


# -- `--reuse auto` for the circuit ---------------------------------------------------------
DEFAULT_FIT_DEVICE = "ecp5-85k"


def fit_profile(compiled: CompiledGraph) -> dict[str, Any]:
    """The FPGA profile `--reuse auto` fits: the compiled graph's profile when it is an FPGA
    with LUT/FF/DSP figures, else DEFAULT_FIT_DEVICE."""
    profs = all_profiles()
    name = compiled.profile
    p = profs.get(name) if name else None
    if not (p and p.get("kind") == "fpga" and all(p.get(k) for k in ("lut", "ff", "dsp"))):
        name, p = DEFAULT_FIT_DEVICE, profs[DEFAULT_FIT_DEVICE]
    return dict(p, name=name)


SIMULATION_FIT = "simulation (no device)"
# The logic a simulated design may have, in multiples of the default device's LUTs and FFs: a
# bound on the Verilog Verilator compiles (its build time grows with the netlist), not a
# device; DSPs and block RAM are free in a simulation (a '*', an array). 2: MLPerf Tiny's
# autoencoder at fixed<16,6> plans at II 896 (94.7k LUT estimated); at 4, resnet8_q8 would
# plan at II 21 (119k LUT) and its Verilog export alone ran over 10 minutes here.
SIMULATION_SCALE = 2


def simulation_profile() -> dict[str, Any]:
    """What `--reuse auto` fits when a circuit is only simulated (verify without an FPGA
    --profile): SIMULATION_SCALE times the default device's LUTs and FFs, unlimited DSPs and
    block RAM, within the HDL backend's size limits as always; the default device's family
    costs the layers."""
    p = dict(all_profiles()[DEFAULT_FIT_DEVICE])
    big = 1 << 40
    return dict(p, name=SIMULATION_FIT, lut=SIMULATION_SCALE * int(p["lut"]),
                ff=SIMULATION_SCALE * int(p["ff"]), dsp=big, bram=big)


def plan_circuit(compiled: CompiledGraph, reuse: Reuse | str | None = None,
                 pipeline: str | None = None, adder_levels: int | None = None,
                 simulation: bool = False) -> CircuitPlan:
    """The circuit plan (hdl/plan/circuit.resolve_plan) for `reuse` as given (None: the
    compiled graph's reuse option), except "auto", which becomes the plan of fit_reuse for
    the compiled graph's FPGA profile (fit_profile) with its fit block, or, for a
    `simulation` of a graph compiled for no FPGA, for simulation_profile(); `--strategy auto`
    picks per layer for that profile when it is an FPGA."""
    check_io(compiled.graph)  # the circuit's first refusal comes first, as before
    require_fixed_point(compiled.graph, "the HDL backend")  # before any estimate or circuit
    if isinstance(reuse, CircuitPlan):
        return resolve_plan(compiled, reuse, pipeline, adder_levels)
    if reuse is None:
        reuse = compiled.options.get("reuse", 1)
    auto_strategy = compiled.options.get("strategy") == "auto"
    if isinstance(reuse, str) and reuse == "auto":
        check_io(compiled.graph)  # the circuit's first refusal comes first, as before
        prof = simulation_profile() if simulation and not _is_fpga(compiled) else \
            fit_profile(compiled)
        fp = fit_reuse(compiled, prof)
        reuse = ReusePlan(dict(fp.reuse), fp.to_json(),
                          choose_strategy(compiled, prof, fp.reuse) if auto_strategy else None)
    elif auto_strategy and not isinstance(reuse, (ReusePlan, str)) and _is_fpga(compiled):
        check_io(compiled.graph)
        names = [lay["node"] for lay in dense_layers(compiled)]
        plan = ({n: reuse.get(n, 1) for n in names} if isinstance(reuse, Mapping)
                else {n: reuse for n in names})
        reuse = ReusePlan(plan, None, choose_strategy(compiled, fit_profile(compiled),
                                                      {n: int(r) for n, r in plan.items()}))
    return resolve_plan(compiled, reuse, pipeline, adder_levels)


def _is_fpga(compiled: CompiledGraph) -> bool:
    p = all_profiles().get(compiled.profile or "")
    return bool(p and p.get("kind") == "fpga")


def choose_strategy(compiled: CompiledGraph, prof: dict[str, Any], plan: dict[str, int]
                    ) -> dict[str, str]:
    """`--strategy auto` per Dense layer: DSPs where the device has them to spare, adder
    graphs elsewhere. Folded layers (R > 1) keep their multipliers. Layers at R = 1 take
    the device's DSP blocks (the budget less what the folded layers use), those that save
    the most LUTs per DSP first, while their multipliers fit; every other one is an adder
    graph (layer_cost.da_cost), which needs no DSP at all."""
    fx = _context(compiled, prof, None, None, None)
    out = {lay["node"]: "mult" for lay in fx.layers}
    left = usable_dsp(prof)
    left -= sum(layer_cost(lay, plan.get(lay["node"], 1), fx.lean).multipliers
                for lay in fx.layers if plan.get(lay["node"], 1) > 1)
    gains = []
    for lay in fx.layers:
        if plan.get(lay["node"], 1) != 1:
            continue
        m = layer_cost(lay, 1, fx.lean, "mult")
        d = layer_cost(lay, 1, fx.lean, "da")
        out[lay["node"]] = "da"
        if m.multipliers and not lay["soft"]:
            saved = d.lut - m.lut  # what the DSPs save over the adder graph
            gains.append((-saved / m.multipliers, lay["node"], m.multipliers, saved))
    for _, node, mults, saved in sorted(gains):
        if saved > 0 and mults <= left:
            out[node] = "mult"
            left -= mults
    return out
