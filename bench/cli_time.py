"""ONNX -> Verilog as a user runs it: `modelcircuit compile MODEL --strategy da --target
verilog` for the jet taggers, the whole command (interpreter start, imports, compile, the
adder graphs, the netlist, yosys's Verilog, the artifact), wall and CPU seconds, and the
import time of the modules every command loads.

Why a bench of its own: bench/cmvm.py times the export inside one process; the issue's
"ONNX -> Verilog in 1.5 s" is the command, where imports (onnx imported ml_dtypes 0.7 in
0.7 s) and the yosys child count too. CPU seconds are the command's children's (user +
sys, from os.wait4): less sensitive to a loaded machine than wall time, but the yosys child
runs beside the main process, so on an idle machine wall time is what a user sees.

Run: .venv/bin/python bench/cli_time.py [--models qkeras,jet16] [--repeat 5] [--json FILE]
Prints a table (min and median of the runs) and writes JSON (bench/results/cli_time.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchio import write_json

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "models"
MODELS = {  # name -> compile arguments
    "qkeras": [str(SHARED / "qkeras_jettagging.onnx")],
    "jet16": [str(SHARED / "three_layer_keras.onnx"), "--precision", "fixed<16,6>"],
    "jet8": [str(SHARED / "three_layer_keras.onnx"), "--precision", "fixed<8,3>"],
}
EXE = ROOT / ".venv" / "bin" / "modelcircuit"
# the command as a user's shell runs it: Python caches each module's bytecode on first import.
# A shell with PYTHONDONTWRITEBYTECODE set (this project's development machines have it)
# compiles every module of the package from source on every run: ~0.3 s more per command,
# none of it the compiler's work
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the command and its children) of one compile into a fresh folder."""
    with tempfile.TemporaryDirectory() as d, open(Path(d) / "stderr", "w+b") as log:
        t0 = time.perf_counter()
        p = subprocess.Popen([str(EXE), "compile", *args, "--strategy", "da", "--target",
                              "verilog", "--out", str(Path(d) / "out")],
                             stdout=subprocess.DEVNULL, stderr=log, env=ENV)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        err = log.read().decode(errors="replace")
        if p.returncode != 0:
            raise SystemExit(f"error: compile {' '.join(args)} failed: {err.strip()[-300:]}")
    return wall, ru.ru_utime + ru.ru_stime


def import_s(module: str) -> float:
    """Seconds to import `module` in a fresh interpreter (python -X importtime's total)."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                       capture_output=True, text=True, check=True, env=ENV)
    last = [ln for ln in r.stderr.splitlines() if ln.rstrip().endswith(f"| {module}")][-1]
    return int(last.split("|")[1]) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qkeras,jet16")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "cli_time.json"))
    a = ap.parse_args()
    if not SHARED.is_dir():
        print(f"error: {SHARED} not found (the shared models)", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    for name in a.models.split(","):
        if name not in MODELS:
            print(f"error: unknown model {name!r} (known: {', '.join(MODELS)})", file=sys.stderr)
            return 2
        run_once(MODELS[name])  # warm: .pyc files, yosys's compiled wasm
        runs = [run_once(MODELS[name]) for _ in range(max(1, a.repeat))]
        walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
        rows.append({"model": name, "wall_min_s": round(min(walls), 3),
                     "wall_median_s": round(statistics.median(walls), 3),
                     "cpu_min_s": round(min(cpus), 3),
                     "cpu_median_s": round(statistics.median(cpus), 3), "runs": len(runs)})
    imports = {m: round(import_s(m), 3) for m in ("numpy", "onnx", "amaranth", "modelcircuit.api")}
    print(f"{'model':8} {'wall min':>9} {'median':>8} {'cpu min':>8} {'median':>8}")
    for r in rows:
        print(f"{r['model']:8} {r['wall_min_s']:9.2f} {r['wall_median_s']:8.2f} "
              f"{r['cpu_min_s']:8.2f} {r['cpu_median_s']:8.2f}")
    print("imports (s): " + ", ".join(f"{k} {v:.2f}" for k, v in imports.items()))
    write_json(a.json, {"bench": "cli_time", "rows": rows, "imports_s": imports})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
