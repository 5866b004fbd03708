"""The FPGA flow for a whole model: `modelcircuit build` (`build`), `compile --target fpga`
(`run_flow`), and the check before either (`plan_build`).

Flow for one design (a `wiring.Component`, written as RTLIL): yosys (yosys.py: prep, then
synthesis with the DSP budget respected), nextpnr (nextpnr.py: out of context, or inside the
UART wrapper on a family without an out-of-context mode, iCE40), a packer for a bitstream
(board builds, boards.py; iCE40 out of context too). Numbers come from the tools' own output
(reports.py). Every tool's output goes to a log file in the artifact (`fpga/logs/*.log`).
Errors the user can act on (unknown device or board, design too big, a tool that fails —
with its log's last lines) are `FlowError`, a ValueError: the CLI prints `error: …` and
exits 2. Outputs are written into a temp dir and renamed, so a failed run leaves no
bitstream behind.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from ...graphs.check import require_fixed_point
from ...graphs.compiled import CompiledGraph
from ...graphs.ops import Op
from ...util.atomic import atomic_dir
from ..plan.circuit import CircuitPlan, resolve_plan
from ..plan.reuse import ReusePlan, resolve_reuse
from ..plan.schedule import default_schedule, resolve_schedule
from ..vector.top import build_top
from .devices import family, fpga_profile
from .fit import FitPlan, check_plan, choose_strategy, fit_reuse
from .nextpnr import clock_mhz, place_and_route
from .reports import report, stable, write_reports
from .tools import FitError, FlowError, Progress, Runner
from .yosys import check_fit, dsp_budget_for, synthesize, write_design


def plan_build(compiled: CompiledGraph, prof: dict[str, Any], reuse: Any = None,
               pipeline: str | None = None, adder_levels: int | None = None
               ) -> tuple[CircuitPlan, FitPlan]:
    """The circuit plan of a build on `prof`, checked before any elaboration or synthesis:
    the register schedule (default: the device's, schedule.default_schedule: "area" on
    iCE40, "fmax" on ECP5), the HDL backend's size limits and the fit estimate: "auto" is
    fit.fit_reuse (FitError when no reuse fits), an explicit reuse whose estimate exceeds
    the device is refused (fit.check_plan); `--strategy auto` picks per layer for this
    device. A CircuitPlan given (the export's) is only checked against the device. Returns
    (the plan, the estimate as a fit.FitPlan)."""
    require_fixed_point(compiled.graph, "the FPGA flow")  # before any estimate
    if isinstance(reuse, CircuitPlan):
        return reuse, check_plan(compiled, prof, dict(reuse.reuse), reuse.schedule_name)
    chosen = pipeline
    if pipeline is None:
        pipeline = default_schedule(prof["name"])
    resolve_schedule(compiled, pipeline, adder_levels)  # a bad schedule option fails first
    if reuse is None:
        reuse = compiled.options.get("reuse", 1) if hasattr(compiled, "options") else 1
    if isinstance(reuse, str) and reuse == "auto":
        fp, pipeline = _fit_with_fallback(compiled, prof, pipeline, chosen is None)
        from .stream_fit import refusal  # streamed FIFOs that would need external memory

        why = refusal(compiled, fp)
        if why:
            raise FitError(why)
        layers, fit = resolve_reuse(compiled, fp.reuse), fp.to_json()
    else:
        layers, fit = resolve_reuse(compiled, reuse), None
        fp = check_plan(compiled, prof, layers, pipeline)
    strategy = (choose_strategy(compiled, prof, layers)
                if compiled.options.get("strategy") == "auto" else None)
    plan = resolve_plan(compiled, ReusePlan(layers, fit, strategy), pipeline, adder_levels)
    return plan, fp


def _fit_with_fallback(compiled: CompiledGraph, prof: dict[str, Any], pipeline: str,
                       may_fall_back: bool) -> tuple[FitPlan, str]:
    """fit_reuse with `pipeline`; where no plan fits with the family's default schedule
    (not one the user chose) and the family names a "fallback_schedule" (Gowin: "area",
    whose valid chain is a few counters, not a register per cycle of latency), the fit
    with that one. Returns (the plan, the schedule it is for); the FitError of the default
    schedule, with the fallback's outcome added, when neither fits."""
    try:
        return fit_reuse(compiled, prof, pipeline=pipeline), pipeline
    except FitError as first:
        alt = family(prof["family"]).get("fallback_schedule")
        if not may_fall_back or not alt or alt == pipeline:
            raise
        try:
            return fit_reuse(compiled, prof, pipeline=alt), alt
        except FitError as second:
            why = str(second)
            raise FitError(f"{first} (with the {alt!r} schedule: "
                           f"{why[why.find('estimated'):] if 'estimated' in why else why})"
                           ) from None


def _say_estimate(runner: Runner, prof: dict[str, Any], plan: dict[str, int],
                  fit: dict[str, Any] | None, fp: FitPlan) -> None:
    if fit is not None:
        runner.say(f"[fit] reuse {plan} (II {fit['ii']}), estimate {fit['estimate']}")
        return
    est = fp.estimate
    share = est["lut"] / max(1, int(prof["lut"]))
    runner.say(f"[fit] reuse {plan}: estimate {est['lut']} {fp.lut_unit} ({share:.0%} of "
               f"{prof['name']}), {est['ff']} FF, {est['dsp']} DSP, {est.get('bram', 0)} BRAM")
    if share > fp.margin:
        runner.say(f"[fit] warning: over the {fp.margin:.0%} that --reuse auto keeps to; "
                   "place and route may take very long or fail to route")


def run_component(component: Any, prof: dict[str, Any], out: Path, runner: Runner,
                  what: str = "design", dsp_budget: int | None = None,
                  target_mhz: float | None = None, bitstream: bool = False,
                  seed: int = 1) -> dict[str, Any]:
    """Out-of-context synth + place-and-route of one component into out/ (work files in
    out/work). Returns the report dict."""
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    runner.say(f"[rtlil] elaborating {what}")
    t0 = time.monotonic()
    design = write_design(component, work / "design.il")
    runner.times["elaborate"] = round(time.monotonic() - t0, 2)
    st = synthesize(design, prof, work, runner, dsp_budget)
    check_fit(st, prof, what)
    pnr = place_and_route(prof, work, runner, True, target_mhz, what, seed=seed)
    files: dict[str, str] = {}
    if bitstream and prof["family"] == "ice40":
        runner.run("icepack", "icepack", ["top.asc", "top.bin"], work)
        shutil.move(str(work / "top.bin"), out / "top.bin")
        files["bitstream"] = "top.bin"
    return report(prof, st, pnr, runner, ooc=True, board=None, files=files)


def wrap_uart(core: Any, info: dict[str, Any], clk_hz: float, baud: int = 115200) -> Any:
    """The model behind the UART of hdl/uart.py (2 pins)."""
    from ..uart import UartWrapper

    return UartWrapper(core, in_bits=len(core.i.payload), out_bits=len(core.o.payload),
                       divisor=max(4, round(clk_hz / baud)), ii=int(info.get("ii") or 1))


def _model_summary(info: dict[str, Any], fmax: float | None) -> dict[str, Any]:
    lat = info.get("latency")
    ii = info.get("ii")
    out = {"latency_cycles": lat, "ii": ii,
           "latency_ns": round(lat * 1e3 / fmax, 2) if lat is not None and fmax else None,
           "throughput_mvps": round(fmax / ii, 3) if ii and fmax else None}
    if info.get("streamed"):  # hdl/streamed/units.py: ii per pixel, latency per frame
        fc = info.get("frame_cycles")
        out.update(streamed=True, frame_cycles=fc, ii_unit="cycles per input pixel",
                   throughput_mvps=round(fmax / fc, 3) if fc and fmax else None)
    return out


def _place(core: Any, info: dict[str, Any], prof: dict[str, Any], out: Path, runner: Runner,
           what: str, board: str | None, freq_mhz: float | None,
           dsp_budget: int | None = None, seed: int = 1) -> dict[str, Any]:
    """The model synthesized, placed and routed: on a board, else out of context (inside
    the UART wrapper on a family without an out-of-context mode). `dsp_budget`: at most
    this many DSP blocks (yosys.dsp_budget_for: 0 for `--strategy da`)."""
    if board is not None:
        from .boards import build_board

        return build_board(core, info, prof, board, out, runner, what, dsp_budget=dsp_budget)
    if not family(prof["family"]).get("out_of_context", True):
        wrapped = wrap_uart(core, info, clock_mhz(prof, freq_mhz) * 1e6)
        rep = run_component(wrapped, prof, out, runner, what, dsp_budget=dsp_budget,
                            target_mhz=freq_mhz, bitstream=True, seed=seed)
        rep["wrapper"] = (f"uart: {prof['family']} has no out-of-context mode in nextpnr and "
                          "too few pins for the stream ports; the model is placed inside the "
                          "UART wrapper (2 pins, unconstrained)")
        return rep
    return run_component(core, prof, out, runner, what, dsp_budget=dsp_budget, seed=seed,
                         target_mhz=freq_mhz)


def run_model(compiled: CompiledGraph, prof: dict[str, Any], out: Path, reuse: Any = None,
              board: str | None = None, progress: Progress = None,
              target_mhz: float | None = None, pipeline: str | None = None,
              adder_levels: int | None = None,
              preflight: tuple[CircuitPlan, FitPlan] | None = None,
              seed: int = 1) -> dict[str, Any]:
    """Out-of-context (board=None) or board build of a compiled model into `out` (which
    must be a fresh directory). Writes report.json, report.txt, logs/. Returns the report.
    `preflight`: what plan_build returned for these arguments (else it is run here, before
    anything is written)."""
    if preflight is None:  # before anything is written or elaborated
        preflight = plan_build(compiled, prof, reuse, pipeline, adder_levels)
    plan, fp = preflight
    layers, fit = dict(plan.reuse), plan.fit
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(out / "logs", progress)
    _say_estimate(runner, prof, layers, fit, fp)
    core, info = build_top(compiled, plan)
    asked = reuse if reuse is not None else compiled.options.get("reuse", 1)
    if fit is None and isinstance(asked, int) and not isinstance(asked, bool):
        plan_shown: Any = asked  # a single explicit reuse is reported as given
    else:
        plan_shown = layers
    what = f"model {getattr(compiled.graph, 'name', '?')} (reuse {plan_shown})"
    rep = _place(core, info, prof, out, runner, what, board, target_mhz,
                 dsp_budget_for(compiled), seed)
    rep["model"] = {"name": getattr(compiled.graph, "name", None),
                    "graph_id": getattr(compiled, "graph_id", None),
                    "precision": compiled.options.get("precision"),
                    "reuse": plan_shown, "pipeline": info.get("pipeline"),
                    "adder_levels": info.get("adder_levels"),
                    **_model_summary(info, rep["fmax_mhz"])}
    if fit is not None:
        rep["model"]["fit"] = fit
    if isinstance(info.get("layers"), list):
        rep["model"]["layers"] = [{k: v for k, v in lay.items() if k in (
            "node", "op", "reuse", "ii", "latency", "multipliers", "shifts", "fold")}
            for lay in info["layers"] if lay.get("op") in (Op.DENSE, Op.CONV)]
    rep["tool_wall_s"] = dict(runner.times)
    write_reports(rep, out)
    return rep


def run_flow(compiled: CompiledGraph, plan: CircuitPlan, fpga_dir: Path, progress: Progress = None,
             device: str | None = None) -> dict[str, Any]:
    """`compile --target fpga`: out-of-context flow for the compiled model's profile into
    fpga_dir (inside the artifact's temp dir, so atomic with it), built with the plan the
    export was made with (the same circuit). Returns the deterministic part of the report
    for the manifest."""
    prof = fpga_profile(device or getattr(compiled, "profile", None))
    rep = run_model(compiled, prof, Path(fpga_dir), reuse=dict(plan.reuse), progress=progress,
                    preflight=plan_build(compiled, prof, plan))
    return stable(rep)


def check_profile(profile: str | None, device: str) -> None:
    """FlowError unless a graph compiled for `profile` (None: none) may be built for
    `device`: it must be that device's, or none. The circuit is planned for the compiled
    profile (hdl/plan/schedule.resolve_schedule: distributed or block RAM, logic-built
    products), so a circuit planned for one family and synthesized for another failed deep
    in yosys (ECP5's distributed RAM has no iCE40 mapping)."""
    if profile is not None and profile != device:
        raise FlowError(f"the model was compiled for profile {profile!r}, not for the device "
                        f"{device!r} being built: the circuit is planned for the compiled "
                        f"profile; compile for {device!r} (build: leave --profile out or "
                        f"give --profile {device})")


def build(compiled: CompiledGraph, device: str, out: Path, board: str | None = None, reuse: Any = None,
          progress: Progress = None, pipeline: str | None = None,
          adder_levels: int | None = None, seed: int = 1) -> dict[str, Any]:
    """`modelcircuit build`: out-of-context or board build into `out`, atomically (an
    existing folder that is not one of ours is refused: graphs.atomic.check_out_dir).
    `seed`: nextpnr's placer seed (out of context)."""
    prof = fpga_profile(device)
    check_profile(getattr(compiled, "profile", None), prof["name"])
    if board is not None:
        from .boards import board_for

        board_for(board, prof)  # fail fast on a bad board/device pair
    # size limits and the fit estimate: refused here, before the build folder exists
    pre = plan_build(compiled, prof, reuse, pipeline, adder_levels)
    return atomic_dir(Path(out), lambda d: run_model(compiled, prof, d, reuse=reuse,
                                                     board=board, progress=progress,
                                                     pipeline=pipeline,
                                                     adder_levels=adder_levels,
                                                     preflight=pre, seed=seed))
