"""Reading the FPGA tools' own output: nextpnr's utilisation, Fmax (the last line is the
post-route one) and critical path, yosys `stat -json` cell counts, multiplier widths; the
report of a build (`report`), its text table and its files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .devices import family
from .tools import Runner

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
    # Gowin: LUT1..LUT4, DFF*, ALU, MULT*, (S)DPB/SP(X9)/pROM(X9) (RAM16SDP4: LUT RAM); Nexus: LUT4, FD1P3*, CCU2, MULT*, *16K
    lut = sum(v for k, v in cells.items() if k in ("SB_LUT4", "LUT4", "$lut", "LUT1", "LUT2",
                                                   "LUT3"))
    ff = sum(v for k, v in cells.items()
             if re.match(r"^(SB_DFF\w*|TRELLIS_FF|\$_DFF\w*|FD1\w*|DFF[A-Z]*)$", k))
    carry = sum(v for k, v in cells.items() if k in ("SB_CARRY", "CCU2C", "CCU2", "ALU"))
    dsp = sum(v for k, v in cells.items() if k in ("SB_MAC16", "MULT18X18D", "MULT9X9",
                                                   "MULT18X18", "MULT18X36", "MULT36X36"))
    bram = sum(v for k, v in cells.items() if k in ("SB_RAM40_4K", "DP16KD", "PDPW16KD", "SDPB",
                                                    "DPB", "SP", "SDPX9B", "DPX9B", "pROM",
                                                    "SPX9", "pROMX9",
                                                    "DP16K", "PDP16K", "SP16K", "PDPSC16K"))
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


def report_numbers(st: dict[str, Any], pnr: dict[str, Any], prof: dict[str, Any]) -> dict[str, Any]:
    cells = family(prof["family"])["nextpnr_cells"]
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


def report(prof: dict[str, Any], st: dict[str, Any], pnr: dict[str, Any], runner: Runner,
           ooc: bool, board: str | None, files: dict[str, str]) -> dict[str, Any]:
    """The report of one placed and routed design (synthesis numbers `st`, nextpnr's `pnr`)."""
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


def write_reports(rep: dict[str, Any], out: Path) -> None:
    (out / "report.json").write_text(json.dumps(rep, indent=1, sort_keys=True, default=str) + "\n")
    (out / "report.txt").write_text(text_table(rep))


def stable(rep: dict[str, Any]) -> dict[str, Any]:
    """The deterministic part of a report (for manifests: no wall times)."""
    return {k: v for k, v in rep.items() if k not in ("tool_wall_s",)}
