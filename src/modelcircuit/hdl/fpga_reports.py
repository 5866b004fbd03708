"""Reading the FPGA tools' own output: nextpnr's utilisation, Fmax (the last line is the
post-route one) and critical path, yosys `stat -json` cell counts, multiplier widths; and the
short text table of a report."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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
