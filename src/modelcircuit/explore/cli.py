"""Arguments and entry point of `modelcircuit sweep` (extra [sweep]: Ray, matplotlib; both
imported only when the command runs).

    modelcircuit sweep [MODEL] --precision LIST|auto --reuse LIST|auto --device LIST
        [--stage estimate|verify|build] [--data X.npy --labels y.npy]
        [--engine local|ray|serial] [--address HOST:PORT] [--workers N] [--out DIR]
        [--target-agreement 0.99] [--vectors N] [--timeout S] [--no-calibrate]

LIST: values separated by spaces, ';' or commas outside <> (`fixed<8,3>,fixed<6,3>`), or
the option repeated. Exit 0 when the sweep finished (points that failed are in the report
with their errors), 1 when a verify-stage point's RTL differs from golden, 2 bad input.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the subcommand; must not import the extra's packages."""
    p.add_argument("model", nargs="?", help="ONNX model (default: the bundled digits MLP)")
    p.add_argument("--precision", action="append", metavar="LIST",
                   help="precisions to sweep (fixed<W,I>, per-layer JSON files, or 'auto': a "
                        "per-layer search for the cheapest design meeting --target-agreement); "
                        "default fixed<8,3>")
    p.add_argument("--reuse", action="append", metavar="LIST",
                   help="reuse factors N or 'auto' (default auto)")
    p.add_argument("--device", action="append", metavar="LIST",
                   help="FPGA devices (default ice40-up5k)")
    p.add_argument("--stage", default="estimate", choices=["estimate", "verify", "build"],
                   help="estimate: compile, score, resource estimate; verify: the estimate "
                        "and golden == RTL on --vectors inputs; build: the estimate and place "
                        "and route (LUT/FF/DSP/BRAM, Fmax, latency in ns; no RTL simulation)")
    p.add_argument("--data", metavar="X.npy", help="inputs the points are scored on (default: "
                   "the bundled test split for the bundled model, else 256 random normals)")
    p.add_argument("--labels", metavar="y.npy", help="class labels of --data (adds accuracy)")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                   help="do not take integer bits from the data (default: calibrate)")
    p.add_argument("--engine", default="local", choices=["local", "ray", "serial"],
                   help="local: a Ray instance started here; ray: a cluster at --address; "
                        "serial: this process, no Ray")
    p.add_argument("--address", help="HOST:PORT (or ray://HOST:PORT) of a running Ray cluster")
    p.add_argument("--workers", type=int, default=2, help="parallel points (local Ray CPUs)")
    p.add_argument("--out", help="results store and report folder (default out/sweep-MODEL); "
                   "a rerun to the same folder skips the points already done")
    p.add_argument("--target-agreement", type=float, default=0.99,
                   help="--precision auto: least argmax agreement with the float model")
    p.add_argument("--vectors", type=int, default=64, help="verify stage: RTL input vectors")
    p.add_argument("--timeout", type=float, help="seconds per point (Ray engines)")


def run(a: argparse.Namespace) -> int:
    from .report import auto_line, text_table
    from .run import sweep

    res = sweep(a.model, precision=a.precision or ["fixed<8,3>"], reuse=a.reuse or ["auto"],
                device=a.device or ["ice40-up5k"], stage=a.stage, data=a.data,
                labels=a.labels, engine=a.engine, address=a.address, workers=a.workers,
                out=a.out, target_agreement=a.target_agreement, vectors=a.vectors,
                timeout_s=a.timeout, calibrate=a.calibrate)
    print(text_table(res), end="")
    if res["auto"]:
        print(f"wrote {res['out']}/auto_precision.json ({auto_line(res['auto'])})")
    failed = sum(r["status"] != "done" for r in res["points"])
    print(f"wrote {res['out']}/index.html, sweep.json, sweep.txt: {len(res['points'])} points, "
          f"{failed} failed, {res['computed']} computed, {res['skipped']} from the store")
    mismatch = any(r.get("verify") and not r["verify"]["bit_exact"] for r in res["points"])
    return 1 if mismatch else 0
