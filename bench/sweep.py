"""Sweep benchmark: wall time of `mc.sweep` on a local Ray against its worker count.

1. estimate stage, 12 points (fixed<8,3>, fixed<6,3>, fixed<5,3> x reuse 256, auto x
   ice40-up5k, ecp5-25k) of the bundled digits MLP with 1 and 2 workers (and the serial
   engine for reference);
2. build stage (place and route with yowasp yosys/nextpnr), 4 points (fixed<6,3>, fixed<5,3>
   x reuse 256, auto on ice40-up5k) with 2 workers against the serial engine.

Each run writes a fresh store (nothing from the store is reused). "total" is the whole call
(a local Ray started and stopped inside it); "points" is from the plan line to the last
point (Ray's start-up and worker imports included, report excluded: report=False);
"first" is the plan line to the first point (where Ray's start-up shows), "per point" the
mean time per point after the first.
Prints a table and writes JSON (bench/results/sweep.json by default).
Run: .venv/bin/python bench/sweep.py [--skip-build] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchio import write_json

import modelcircuit as mc

ROOT = Path(__file__).resolve().parents[1]
EST = {"precision": ["fixed<8,3>", "fixed<6,3>", "fixed<5,3>"], "reuse": ["256", "auto"],
       "device": ["ice40-up5k", "ecp5-25k"]}
BUILD = {"precision": ["fixed<6,3>", "fixed<5,3>"], "reuse": ["256", "auto"],
         "device": ["ice40-up5k"]}


def timed(stage: str, space: dict, engine: str, workers: int) -> dict:
    marks: list[float] = []

    def say(s: str) -> None:
        if s.startswith("[sweep]"):
            marks.append(time.perf_counter())
        print(f"    {s}", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="mc-bench-sweep-") as tmp:
        t0 = time.perf_counter()
        res = mc.sweep(engine=engine, workers=workers, stage=stage, out=Path(tmp) / "s",
                       report=False, say=say, **space)
        total = time.perf_counter() - t0
    recs = res["points"]
    row = {"stage": stage, "engine": engine, "workers": workers if engine != "serial" else 1,
           "points": len(recs), "failed": sum(r["status"] != "done" for r in recs),
           "total_s": round(total, 2),
           "points_s": round(marks[-1] - marks[0], 2) if len(marks) > 1 else None,
           # Ray's start-up and the workers' imports end with the first point; after it,
           # the time per point of the rest
           "first_point_s": round(marks[1] - marks[0], 2) if len(marks) > 1 else None,
           "per_point_after_first_s": (round((marks[-1] - marks[1]) / (len(marks) - 2), 3)
                                       if len(marks) > 2 else None)}
    if stage == "build":
        row["built"] = [{k: r.get(k) for k in ("precision", "reuse", "status", "error")}
                        | {k: (r.get("build") or {}).get(k) for k in ("lut", "fmax_mhz",
                                                                       "latency_ns")}
                        for r in recs]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-build", action="store_true", help="estimate stage only")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "sweep.json"))
    a = ap.parse_args()
    rows = []
    for engine, workers in (("serial", 1), ("local", 1), ("local", 2)):
        print(f"estimate, {engine}, {workers} worker(s)", file=sys.stderr)
        rows.append(timed("estimate", EST, engine, workers))
    if not a.skip_build:
        for engine, workers in (("serial", 1), ("local", 2)):
            print(f"build, {engine}, {workers} worker(s)", file=sys.stderr)
            rows.append(timed("build", BUILD, engine, workers))
    print(f"{'stage':9s} {'engine':7s} {'workers':>7s} {'points':>6s} {'failed':>6s} "
          f"{'total s':>8s} {'points s':>8s} {'first s':>8s} {'per point s':>11s}")
    for r in rows:
        print(f"{r['stage']:9s} {r['engine']:7s} {r['workers']:7d} {r['points']:6d} "
              f"{r['failed']:6d} {r['total_s']:8.2f} {r['points_s'] or 0:8.2f} "
              f"{r['first_point_s'] or 0:8.2f} {r['per_point_after_first_s'] or 0:11.3f}")
    est = {(r["engine"], r["workers"]): r for r in rows if r["stage"] == "estimate"}
    ratios = {"estimate_1_over_2_workers_total":
              round(est[("local", 1)]["total_s"] / est[("local", 2)]["total_s"], 2),
              "estimate_1_over_2_workers_points":
              round(est[("local", 1)]["points_s"] / est[("local", 2)]["points_s"], 2)}
    bld = {(r["engine"], r["workers"]): r for r in rows if r["stage"] == "build"}
    if bld:
        ratios["build_serial_over_2_workers_total"] = round(
            bld[("serial", 1)]["total_s"] / bld[("local", 2)]["total_s"], 2)
    for k, v in ratios.items():
        print(f"{k}: {v}")
    write_json(a.json, {"rows": rows, "ratios": ratios,
                        "note": "ratios from one side-by-side run on this machine; a loaded "
                                "machine (load average over its CPU count) compresses them"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
