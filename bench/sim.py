"""Simulation benchmark: Verilator (and Icarus where installed) on the jet tagger.

For three_layer_keras at fixed<16,6>, R=1: Verilog export time, simulator build time (in a
fresh folder), and vectors/s through the cocotb bench once built (back to back: no gaps, no
backpressure; every output still checked bit-exact against the golden model). Prints a table
and writes JSON (bench/results/sim.json by default). Absolute times on a shared machine mean
little; the target is >= 5,000 vectors/s after the build.
Run: .venv/bin/python bench/sim.py [--vectors N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import modelcircuit as mc
from modelcircuit.graphs import reference
from modelcircuit.sim import rtl

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT.parent / "shared" / "models" / "three_layer_keras.onnx"


def one(compiled, codes: np.ndarray, simulator: str, cache: Path) -> dict:
    folder = rtl.model_folder(compiled, None, simulator, cache)
    t0 = time.perf_counter()
    with rtl._locked(folder):
        verilog, info = rtl.export_model(compiled, None, folder)
    export_s = time.perf_counter() - t0
    r = rtl.execute(compiled, codes, simulator=simulator, cache_dir=cache, gaps=0.0,
                    backpressure=0.0, seed=0)
    n = len(codes)
    return {"simulator": simulator, "vectors": n, "verilog_lines": info.get("verilog_lines"),
            "export_s": round(export_s, 2), "build_s": round(r["build_s"], 2),
            "sim_process_s": round(r["process_wall_s"], 2),
            "vectors_per_s": round(r["vectors_per_s"], 1),
            "vectors_per_s_with_startup": round(n / r["process_wall_s"], 1),
            "cycles": r["cycles"], "cycles_per_s": round(r["cycles"] / r["bench_wall_s"], 1),
            "latency": r["latency"], "latency_expected": r["latency_expected"],
            "ii": r["ii"], "ii_expected": r["ii_expected"],
            "bit_exact": r["checks"]["bit_exact"], "ok": r["ok"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=int, default=20000)
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "sim.json"))
    a = ap.parse_args()
    if not MODEL.exists():
        print(f"error: {MODEL} is absent", file=sys.stderr)
        return 2
    c = mc.compile(mc.load_onnx(MODEL), precision="fixed<16,6>", reuse=1)
    g = c.graph
    shape = g.tensor(g.inputs[0]).shape
    x = np.random.default_rng(0).standard_normal((a.vectors,) + tuple(shape)).astype(np.float32)
    codes = reference.quantize_inputs(g, [x])[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="mc-simbench-") as cache:
        for sim in rtl.SIMULATORS:
            if not rtl.available(sim):
                rows.append({"simulator": sim, "skipped": "not installed"})
                continue
            rows.append(one(c, codes, sim, Path(cache)))
    print(f"jet tagger three_layer_keras, fixed<16,6>, R=1, {a.vectors} vectors "
          f"(graph id {c.graph_id[:16]})")
    print(f"{'simulator':10s} {'lines':>7s} {'export s':>9s} {'build s':>8s} {'vec/s':>9s} "
          f"{'vec/s+start':>11s} {'cyc/s':>9s} {'lat':>4s} {'II':>3s} bit-exact")
    for r in rows:
        if "skipped" in r:
            print(f"{r['simulator']:10s} ({r['skipped']})")
            continue
        print(f"{r['simulator']:10s} {r['verilog_lines']:>7} {r['export_s']:>9.1f} "
              f"{r['build_s']:>8.1f} {r['vectors_per_s']:>9.0f} "
              f"{r['vectors_per_s_with_startup']:>11.0f} {r['cycles_per_s']:>9.0f} "
              f"{r['latency']:>4} {r['ii']:>3} {'yes' if r['bit_exact'] else 'no'}"
              f"{'' if r['latency'] == r['latency_expected'] and r['ii'] == r['ii_expected'] else '  (timing differs from compile time!)'}")
    out = {"model": MODEL.name, "precision": "fixed<16,6>", "reuse": 1, "graph_id": c.graph_id,
           "target_vectors_per_s": 5000, "results": rows}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
