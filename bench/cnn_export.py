"""Full-model RTL export of the 8-bit zoo CNNs (tests/data/exporters/zoo): per model, in a
process of its own, the wall time of each phase (import + compile, `--reuse auto` plan,
Verilog/RTLIL export), the process's CPU time (what a loaded machine does not inflate) and
peak RSS, with the plan's II per pixel and frame
latency and the Verilog's size. The plan is the one `verify --reuse auto` simulates (the
simulation budget, hdl/flow/fit.simulation_profile) or, with --device, that FPGA's.

Run: .venv/bin/python bench/cnn_export.py [--models resnet8_q8,dscnn_q8] [--device ecp5-85k]
     [--timeout 1500] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchio import write_json

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "data" / "exporters" / "zoo"


def one(name: str, device: str | None) -> dict:
    """Runs in the child: the phases of one model's export."""
    import modelcircuit as mc
    from modelcircuit.api import compile
    from modelcircuit.hdl.export import export_verilog
    from modelcircuit.hdl.flow.fit import plan_circuit

    t0 = time.perf_counter()
    g = mc.load_onnx(str(ZOO / f"{name}.onnx"))
    c = compile(g, profile=device) if device else compile(g)
    t1 = time.perf_counter()
    plan = plan_circuit(c, "auto", simulation=device is None)
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        info = export_verilog(c, d, plan)
        vbytes = (Path(d) / "top.v").stat().st_size
    t3 = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"model": name, "plan_for": device or "simulation", "compile_s": round(t1 - t0, 2),
            "plan_s": round(t2 - t1, 2), "export_s": round(t3 - t2, 2),
            "total_s": round(t3 - t0, 2), "ii": info.get("ii"), "latency": info.get("latency"),
            "verilog_mb": round(vbytes / 1e6, 2), "verilog_lines": info.get("verilog_lines"),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 1), "peak_rss_mb": round(ru.ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet8_q8,dscnn_q8")
    ap.add_argument("--device", default=None)
    ap.add_argument("--timeout", type=float, default=1500)
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "cnn_export.json"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.child, a.device)))
        return
    rows = []
    for name in a.models.split(","):
        cmd = [sys.executable, __file__, "--child", name] + (
            ["--device", a.device] if a.device else [])
        t = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                               env={**os.environ, "AMARANTH_USE_YOSYS": "builtin"})
            row = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else \
                {"model": name, "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
        except subprocess.TimeoutExpired:
            row = {"model": name, "error": f"over the {a.timeout:g} s time box",
                   "total_s": round(time.perf_counter() - t, 1)}
        rows.append(row)
        print(row, flush=True)
    keys = ["model", "plan_for", "compile_s", "plan_s", "export_s", "total_s", "cpu_s",
            "peak_rss_mb",
            "ii", "latency", "verilog_mb"]
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(str(r.get(k, r.get("error", ""))) for k in keys))
    write_json(a.json, {"rows": rows})


if __name__ == "__main__":
    main()
