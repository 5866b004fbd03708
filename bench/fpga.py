"""FPGA benchmark (slow: whole-model synthesis and place-and-route, minutes per model).

Jet tagger three_layer_keras at fixed<16,6> and qkeras_jettagging at its own (QONNX) types,
on ecp5-85k with --reuse auto, out of context (`name@device` picks another device; the
bundled digits_mlp runs at fixed<6,3>, calibrated on its test split; on an iCE40 inside the
UART wrapper): reuse per layer, II, latency in cycles, Fmax,
latency in ns, LUT/FF/DSP/BRAM and the wall time of each tool, beside hls4ml's published
figures for the same model (13 cycles, II 1, 3915 DSP at 200 MHz on xczu3eg — which has 360
DSPs, so that design does not fit that part). Prints a table and writes JSON
(bench/results/fpga.json by default).

Run: .venv/bin/python bench/fpga.py [--models digits_mlp@ice40-up5k,digits_mlp@ecp5-25k,
                                             three_layer_keras,qkeras_jettagging]
     [--device ecp5-85k] [--json FILE] [--keep DIR] [--merge] [--seeds 1,2]

An item is `model[=precision]@device[:board]`: `three_layer_keras=fixed<8,3>@gw1nr-9`, the
digits MLP on the Tang Nano 9K board (pins, clock, bitstream) `digits_mlp@gw1nr-9:tang-nano-9k`
(items are split at commas outside <>). With --merge the JSON file's rows for other
(model, device, precision, board) are kept, and the file is written after every run, so a
series of slow runs under an outer time box keeps the ones that finished (a row is replaced
only by a run of the same item with the same --reuse and --pipeline).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest  # noqa: F401  (the marker below documents that this is a slow run)

import modelcircuit as mc
from modelcircuit.api import compile
from modelcircuit.hdl.flow import FlowError, build

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT.parent / "shared" / "models"
HLS4ML = {"model": "three_layer_keras (jet tagger)", "latency_cycles": 13, "ii": 1, "dsp": 3915,
          "clock_mhz": 200, "device": "xczu3eg (360 DSP: does not fit)",
          "source": "hls4ml paper / tutorial, fixed<16,6>, ReuseFactor 1"}
PRECISION = {"three_layer_keras": "fixed<16,6>", "qkeras_jettagging": None,
             "digits_mlp": "fixed<6,3>"}
DATA = ROOT / "src" / "modelcircuit" / "data"


def model_path(name: str) -> Path:
    return DATA / f"{name}.onnx" if (DATA / f"{name}.onnx").exists() else MODELS / f"{name}.onnx"


def parse_item(item: str, default_device: str) -> tuple[str, str | None, str, str | None]:
    """`model[=precision]@device[:board]` -> (model, precision or None, device, board)."""
    head, _, where = item.partition("@")
    name, _, prec = head.partition("=")
    device, _, board = (where or default_device).partition(":")
    return name, prec or PRECISION.get(name), device, board or None


def split_items(text: str) -> list[str]:
    """Items separated by commas outside <> (fixed<8,3> keeps its comma)."""
    return [t.strip() for t in re.split(r",(?![^<>]*>)", text) if t.strip()]


def run_one(name: str, device: str, keep: Path | None, precision: str | None = None,
            board: str | None = None, reuse: object = "auto", pipeline: str | None = None,
            seed: int = 1) -> dict:
    import numpy as np

    g = mc.load_onnx(model_path(name))
    cal = None
    if name == "digits_mlp":  # calibrated: 96.9 % test accuracy at fixed<6,3>, as float
        cal = np.load(DATA / "digits_test.npz")["x"].astype(np.float32)
    t0 = time.perf_counter()
    c = compile(g, precision=precision, profile=device, calibrate=cal)
    compile_s = time.perf_counter() - t0
    tag = f"{name}-{device}" + (f"-{board}" if board else "") + (f"-s{seed}" if seed != 1 else "")
    out = (keep or Path(tempfile.mkdtemp(prefix="bench-fpga-"))) / tag
    t0 = time.perf_counter()
    try:
        rep = build(c, device, out, board=board, reuse=reuse, pipeline=pipeline, seed=seed,
                    progress=lambda s: print(f"  {name}: {s}", file=sys.stderr, flush=True))
    except FlowError as e:
        return {"model": name, "device": device, "precision": precision, "board": board,
                "error": str(e).splitlines()[0], "compile_s": round(compile_s, 2),
                "wall_s": round(time.perf_counter() - t0, 1)}
    m = rep["model"]
    return {"model": name, "device": device, "board": board, "precision": m["precision"],
            "seed": seed,
            "yosys_cells": rep.get("yosys_cells"),
            "reuse": m["reuse"], "wall_s": round(time.perf_counter() - t0, 1),
            "files": rep.get("files"),
            "pipeline": m.get("pipeline"), "adder_levels": m.get("adder_levels"),
            "ii": m["ii"], "latency_cycles": m["latency_cycles"], "fmax_mhz": rep["fmax_mhz"],
            "latency_ns": m["latency_ns"], **rep["resources"],
            "tool_wall_s": rep["tool_wall_s"], "compile_s": round(compile_s, 2),
            "fit_estimate": m.get("fit", {}).get("estimate"), "critical_path": rep["critical_path"][-6:],
            "out": str(out)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="digits_mlp@ice40-up5k,digits_mlp@ecp5-25k,"
                    "three_layer_keras,qkeras_jettagging")
    ap.add_argument("--device", default="ecp5-85k")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "fpga.json"))
    ap.add_argument("--keep", help="keep the build directories here")
    ap.add_argument("--reuse", default="auto",
                    help="auto (default), N, or a JSON object {layer: N} for every item")
    ap.add_argument("--pipeline", help="register schedule (default: the device family's)")
    ap.add_argument("--seeds", default="1",
                    help="nextpnr placer seeds, comma-separated: one row per seed (Fmax "
                         "is quoted over more than one placement)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the JSON file's other rows; write it after every run")
    a = ap.parse_args(argv)
    rows: list[dict] = []
    kept: list[dict] = []
    if a.merge and Path(a.json).exists():
        kept = json.loads(Path(a.json).read_text()).get("rows", [])

    def ident(r: dict) -> tuple:
        asked = r.get("asked") or {}
        return (r.get("model"), r.get("device"), r.get("precision"), r.get("board"),
                str(asked.get("reuse", "auto")), asked.get("pipeline"), r.get("seed", 1))

    def write() -> None:
        mine = {ident(r) for r in rows}
        allrows = [r for r in kept if ident(r) not in mine] + rows
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"rows": allrows, "hls4ml": HLS4ML}, indent=1,
                                           default=str) + "\n")

    for item in split_items(a.models):
        name, prec, device, board = parse_item(item, a.device)
        if not model_path(name).exists():
            print(f"skip {name}: {model_path(name)} is absent", file=sys.stderr)
            continue
        reuse = (a.reuse if a.reuse == "auto" else int(a.reuse) if a.reuse.isdigit()
                 else json.loads(a.reuse))
        for seed in [int(v) for v in a.seeds.split(",")]:
            row = run_one(name, device, Path(a.keep) if a.keep else None, prec, board, reuse,
                          a.pipeline, seed)
            row["asked"] = {"reuse": a.reuse, "pipeline": a.pipeline}
            rows.append(row)
            if a.merge:
                write()
    hdr = f"{'model':20s} {'device':11s} {'seed':>4s} {'II':>4s} {'cycles':>6s} {'Fmax':>7s} {'lat ns':>8s} {'LUT':>7s} {'FF':>7s} {'DSP':>4s} {'BRAM':>4s}  reuse / tool s"
    print(hdr)
    for r in rows:
        if "error" in r:
            print(f"{r['model']:20s} {r['device']:11s} error: {r['error']}")
            continue
        print(f"{r['model']:20s} {r['device']:11s} {r.get('seed', 1):>4} {r['ii']:>4} {r['latency_cycles']:>6} {r['fmax_mhz']:>7.1f} "
              f"{r['latency_ns']:>8.1f} {r['lut']:>7} {r['ff']:>7} {r['dsp']:>4} {r['bram']:>4}  "
              f"{r['reuse']} / {r['tool_wall_s']}")
    h = HLS4ML
    print(f"{'hls4ml (published)':20s} {'xczu3eg':11s} {'':>4} {h['ii']:>4} {h['latency_cycles']:>6} {h['clock_mhz']:>7.1f} "
          f"{1e3 * h['latency_cycles'] / h['clock_mhz']:>8.1f} {'-':>7} {'-':>7} {h['dsp']:>4} {'-':>4}  {h['device']}")
    write()
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
