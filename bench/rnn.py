"""Recurrent benchmark (LSTM / GRU, issue 24): per model, sequences/s of the golden model
(float32 and fixed point) and of gpu-emu beside onnxruntime in the same run (same batch, one
intra-op thread), agreement with the float model, and the circuit's compile-time timing
(step II and latency per sequence, hdl/streamed/recurrent.py) at a few reuse factors; with
--fpga, the placed design on ecp5-85k with --reuse auto (LUT/FF/DSP, post-route Fmax).
Models: the rnn group of tests/data/exporters (tests/exporters/generate.py --rnn). Prints a
table and writes bench/results/rnn.json.

Run: .venv/bin/python bench/rnn.py [--batch 256] [--precision fixed<16,6>] [--reuse 1,4,16]
     [--fpga] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from benchio import write_json

import modelcircuit as mc
from modelcircuit.hdl import plan_top
from modelcircuit.hdl.plan.circuit import resolve_plan

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "exporters"


def rnn_models() -> list[str]:
    meta = json.loads((DATA / "models.json").read_text())["models"]
    return sorted(m["file"] for m in meta if {"LSTM", "GRU"} & set(m["ops"]))


def timed(fn, *args, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return out, best


def fpga(c, name: str, device: str) -> dict:
    from modelcircuit.hdl.flow import FlowError, build

    with tempfile.TemporaryDirectory(prefix="bench-rnn-") as d:
        try:
            rep = build(c, device, Path(d) / "out", reuse="auto",
                        progress=lambda s: print(f"  {name}@{device}: {s}", file=sys.stderr,
                                                 flush=True))
        except FlowError as e:
            return {"device": device, "error": str(e).splitlines()[0]}
    m = rep["model"]
    keep = ("reuse", "ii", "latency_cycles", "latency_ns")
    return {"device": device, **{k: m[k] for k in keep if k in m},
            "fmax_mhz": rep["fmax_mhz"], **rep["resources"], "tool_wall_s": rep["tool_wall_s"]}


def run_one(name: str, precision: str, batch: int, reuses: list[int], with_fpga: bool) -> dict:
    path = DATA / name
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    t, f = sess.get_inputs()[0].shape[1:]
    x = np.random.default_rng(0).normal(size=(batch, t, f)).astype(np.float32)
    feed = {sess.get_inputs()[0].name: x}
    y_ort, ort_s = timed(lambda: sess.run(None, feed)[0])
    g = mc.load_onnx(path)
    cf = mc.compile(g, precision="float32")
    c = mc.compile(g, precision=precision)
    y_f32, f32_s = timed(mc.run, cf, x)
    y_fx, fx_s = timed(mc.run, c, x)
    mc.run(c, x[:1], "gpu-emu")  # the emulator's kernel build, not timed
    y_emu, emu_s = timed(mc.run, c, x, "gpu-emu", repeat=2)
    y_f32, y_fx, y_emu = (np.asarray(v, dtype=np.float64) for v in (y_f32, y_fx, y_emu))
    row = {"model": name, "T": int(t), "F": int(f), "precision": precision, "batch": batch,
           "onnxruntime_seq_per_s": round(batch / ort_s, 1),
           "golden_float32_seq_per_s": round(batch / f32_s, 1),
           "golden_fixed_seq_per_s": round(batch / fx_s, 1),
           "gpu_emu_seq_per_s": round(batch / emu_s, 1),
           "gpu_emu_bit_exact": bool(np.array_equal(y_emu, y_fx)),
           "float32_vs_ort_max_abs": float(np.abs(y_f32 - y_ort).max()),
           "fixed_vs_float_max_abs": float(np.abs(y_fx - y_ort).max()),
           "fixed_vs_float_argmax": float((y_fx.argmax(1) == y_ort.argmax(1)).mean()),
           "rtl": []}
    for r in reuses:
        try:
            info = plan_top(c, resolve_plan(c, r))
        except Exception as e:  # noqa: BLE001 — a bench reports, it does not stop
            row["rtl"].append({"reuse": r, "error": str(e).splitlines()[0]})
            continue
        rnn = [u for u in info["layers"] if u["op"] in ("LSTM", "GRU")][0]
        row["rtl"].append({"reuse": r, "step_ii": rnn["step_ii"],
                           "sequence_latency_cycles": info["latency"],
                           "multipliers": rnn["multipliers"]})
    if with_fpga:
        row["fpga"] = fpga(mc.compile(g, precision=precision, profile="ecp5-85k"), name,
                           "ecp5-85k")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", default="fixed<16,6>")
    ap.add_argument("--reuse", default="1,4,16")
    ap.add_argument("--fpga", action="store_true", help="synthesise, place and route (slow)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "rnn.json"))
    a = ap.parse_args(argv)
    reuses = [int(v) for v in a.reuse.split(",")]
    rows = [run_one(n, a.precision, a.batch, reuses, a.fpga) for n in rnn_models()]
    print(f"{'model':<36} {'T':>3} {'ort':>9} {'gold f32':>9} {'gold fx':>9} {'gpu-emu':>9} "
          f"{'argmax':>7}  RTL (reuse: step II / latency per sequence, cycles)")
    for r in rows:
        rtl = "  ".join(f"{q['reuse']}: {q['step_ii']}/{q['sequence_latency_cycles']}"
                        if "step_ii" in q else f"{q['reuse']}: {q['error']}" for q in r["rtl"])
        print(f"{r['model']:<36} {r['T']:>3} {r['onnxruntime_seq_per_s']:>9.0f} "
              f"{r['golden_float32_seq_per_s']:>9.0f} {r['golden_fixed_seq_per_s']:>9.0f} "
              f"{r['gpu_emu_seq_per_s']:>9.0f} {r['fixed_vs_float_argmax']:>7.3f}  {rtl}")
    print("sequences/s, batch", a.batch, "(onnxruntime: one intra-op thread); gpu-emu bit-exact:",
          all(r["gpu_emu_bit_exact"] for r in rows))
    write_json(a.json, {"bench": "rnn", "precision": a.precision, "batch": a.batch,
                        "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
