"""CNN benchmark: per model, compile time, golden (and gpu-emu) throughput, agreement with the
float model, and — with --fpga — the placed design on ecp5-85k / ice40-up5k (--reuse auto:
II per pixel, latency per frame, LUT/FF/DSP/BRAM, post-route Fmax), side by side with
hls4ml's bit-accurate C simulation of conv2d_small_keras (io_stream, same precision) run in
its own environment (HLS4ML_PYTHON=/path/to/venv/bin/python with hls4ml>=1.3 and qonnx;
skipped with a reason otherwise). Prints a table and writes bench/results/cnn.json.

Issue 29's models (tests/data/exporters/zoo: MLPerf Tiny ResNet-8 and DS-CNN, float and brevitas
8-bit; a `_q8` model runs at its own QONNX types, its onnxruntime figure is its float twin's):
onnxruntime single-thread frames/s beside the golden model's in the same run, and the circuit's
compile-time II per pixel, frame latency and resource estimate for --reuse auto on ecp5-85k
(hdl/flow plan_circuit + hdl plan_top: nothing is built), or the one-line refusal.

FINN's flagships from brevitas_examples (CNV 1W1A, ResNet-18 4W4A, MobileNet-v1 4b; untrained,
made by tests/exporters/zoo.py into --zoo-dir, too big to commit): `--models finn`.

Beside our rows, the published figures of the field (their numbers, their boards, their
harnesses; not measured here), each with its source (PUBLISHED).

Run: .venv/bin/python bench/cnn.py [--models conv2d_small_keras,conv1d_small_keras,digits_cnn]
     [--precision fixed<16,6>] [--frames 2000] [--fpga] [--json FILE]
     .venv/bin/python bench/cnn.py --models zoo --frames 200
     /work/expvenv/bin/python tests/exporters/zoo.py --out /tmp/zoo \
         --only cnv_1w1a,resnet18_4w4a,mobilenet_v1_4b
     .venv/bin/python bench/cnn.py --models finn --zoo-dir /tmp/zoo --frames 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import modelcircuit as mc
from modelcircuit.api import compile

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT.parent / "shared" / "models"
DATA = ROOT / "src" / "modelcircuit" / "data"
ZOO = ROOT / "tests" / "data" / "exporters" / "zoo"
ZOO_MODELS = ["resnet8", "resnet8_dynamo", "resnet8_q8", "dscnn", "dscnn_q8"]
FINN_MODELS = ["cnv_1w1a", "resnet18_4w4a", "mobilenet_v1_4b"]
PLAN_DEVICE = "ecp5-85k"
ZOO_DIR: list[Path] = []  # --zoo-dir: where tests/exporters/zoo.py wrote the big models

# Published throughputs of the field, to read beside ours: their models (trained), their
# boards, their harnesses (MLPerf Tiny's runs a frame at a time through the board's host
# link, which bounds the small models' figures). Not comparable one to one with a circuit's
# II: a row says what was measured where.
_V07 = ("https://github.com/mlcommons/tiny_results_v0.7/blob/"
        "8813eded7403f4167867d305f8d997597f06181a/open/hls4ml-finn/results/pynq-z2/")
PUBLISHED = [
    {"who": "hls4ml-finn (MLPerf Tiny v0.7, open)", "model": "RN07 (ResNet, CIFAR-10)",
     "ours": "resnet8_q8", "board": "PYNQ-Z2 (xc7z020)", "frames_per_s": 36.596,
     "measure": "median throughput, MLPerf Tiny performance mode",
     "source": _V07 + "ic/RN07/performance/results.txt"},
    {"who": "hls4ml-finn (MLPerf Tiny v0.7, open)", "model": "CNV-W1A1 (CIFAR-10)",
     "ours": "cnv_1w1a", "board": "PYNQ-Z2 (xc7z020)", "frames_per_s": 661.473,
     "measure": "median throughput, MLPerf Tiny performance mode",
     "source": _V07 + "ic/CNV-W1A1/performance/results.txt"},
    {"who": "hls4ml-finn (MLPerf Tiny v0.7, open)", "model": "AD08 (FC autoencoder)",
     "ours": "autoencoder_q8", "board": "PYNQ-Z2 (xc7z020)", "frames_per_s": 53365.414,
     "measure": "median throughput, MLPerf Tiny performance mode",
     "source": _V07 + "ad/AD08/performance/results.txt"},
    {"who": "hls4ml-finn (MLPerf Tiny v0.7, open)", "model": "KWS-W3A3 (MLP on MFCCs)",
     "ours": "dscnn_q8 (a DS-CNN, not their MLP)", "board": "PYNQ-Z2 (xc7z020)",
     "frames_per_s": 57268.135, "measure": "median throughput, MLPerf Tiny performance mode",
     "source": _V07 + "kws/KWS-W3A3/performance/results.txt"},
    {"who": "FINN (finn-examples, bnn-pynq)", "model": "cnv-w1a1", "ours": "cnv_1w1a",
     "board": "AUP-ZU3", "frames_per_s": 5310.9, "measure": "throughput [im/s], PYNQ driver",
     "source": "https://github.com/Xilinx/finn-examples/pull/118"},
    {"who": "FINN (finn-examples, bnn-pynq)", "model": "cnv-w2a2", "ours": "-",
     "board": "AUP-ZU3", "frames_per_s": 3030.7, "measure": "throughput [im/s], PYNQ driver",
     "source": "https://github.com/Xilinx/finn-examples/pull/118"},
]


def model_path(name: str) -> Path:
    for p in (DATA / f"{name}.onnx", ZOO / f"{name}.onnx", *(d / f"{name}.onnx" for d in ZOO_DIR)):
        if p.exists():
            return p
    return MODELS / f"{name}.onnx"


def ort_single_thread(path: Path, x: np.ndarray) -> tuple[np.ndarray, float]:
    """onnxruntime on one thread, a frame per call (as the golden model is timed): outputs
    and the best of 3 wall times."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name

    def run() -> np.ndarray:
        return np.concatenate([sess.run(None, {name: x[i:i + 1]})[0].reshape(1, -1)
                               for i in range(len(x))])
    return timed(run)


def circuit_plan(g, precision: str | None) -> dict:
    """--reuse auto on PLAN_DEVICE at compile time: II, latency, estimate; or the refusal."""
    from modelcircuit.hdl import plan_top
    from modelcircuit.hdl.flow import plan_circuit

    try:
        c = compile(g, precision, profile=PLAN_DEVICE, reuse="auto")
        t0 = time.perf_counter()
        plan = plan_circuit(c, "auto")
        info = plan_top(c, plan)
        est = (plan.fit or {}).get("estimate", {})
        return {"device": PLAN_DEVICE, "ii": info.get("ii"), "latency": info.get("latency"),
                "frame_cycles": info.get("frame_cycles"), "plan_s": round(time.perf_counter() - t0, 2),
                **{k: est[k] for k in ("lut", "ff", "dsp", "bram") if k in est}}
    except Exception as e:  # noqa: BLE001 — a bench reports the refusal, it does not stop
        return {"device": PLAN_DEVICE, "refused": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}


def inputs_for(name: str, path: Path, frames: int) -> np.ndarray:
    import onnx  # the shape from the file: onnxruntime cannot open a QONNX model

    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    shp = [d.dim_value if d.dim_value > 0 else 1 for d in dims][1:]
    if name.startswith("digits"):
        x = np.load(DATA / "digits_test.npz")["x"].astype(np.float32)
        reps = -(-frames // len(x))
        return np.tile(x, (reps, 1))[:frames].reshape([frames, *shp])
    return np.random.default_rng(0).normal(size=[frames, *shp]).astype(np.float32)


def float_model(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return np.concatenate([sess.run(None, {name: x[i:i + 1]})[0].reshape(1, -1)
                           for i in range(len(x))])


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a.reshape(len(a), -1).argmax(1) == b.reshape(len(b), -1).argmax(1)))


def timed(fn, *args, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return out, best


def hls4ml_peer(path: Path, x: np.ndarray, precision: str) -> dict:
    py = os.environ.get("HLS4ML_PYTHON")
    if not py or not Path(py).exists():
        return {"skipped": "HLS4ML_PYTHON is not set to a Python with hls4ml>=1.3 and qonnx"}
    with tempfile.TemporaryDirectory(prefix="bench-hls4ml-") as d:
        np.save(f"{d}/x.npy", x)
        r = subprocess.run([py, str(ROOT / "bench" / "hls4ml_peer.py"), str(path), f"{d}/x.npy",
                            precision, d], capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            return {"skipped": f"hls4ml failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"}
        info = json.loads(r.stdout.strip().splitlines()[-1])
        info["y"] = np.load(f"{d}/y.npy")
        return info


def fpga(c, name: str, device: str) -> dict:
    from modelcircuit.hdl.flow import FlowError, build

    with tempfile.TemporaryDirectory(prefix="bench-cnn-") as d:
        try:
            rep = build(c, device, Path(d) / "out", reuse="auto",
                        progress=lambda s: print(f"  {name}@{device}: {s}", file=sys.stderr,
                                                 flush=True))
        except FlowError as e:
            return {"device": device, "error": str(e).splitlines()[0]}
    m = rep["model"]
    keep = ("reuse", "ii", "latency_cycles", "latency_ns", "ii_per_pixel", "pixels_per_cycle")
    return {"device": device, **{k: m[k] for k in keep if k in m},
            "fmax_mhz": rep["fmax_mhz"], **rep["resources"], "tool_wall_s": rep["tool_wall_s"]}


def run_one(name: str, precision: str | None, frames: int, with_fpga: bool,
            plan: bool = True) -> dict:
    path = model_path(name)
    qonnx = name.endswith("_q8") or name in FINN_MODELS
    if qonnx:
        precision = None  # the QONNX model's own types
    twin = model_path(name[:-3]) if name.endswith("_q8") else None if qonnx else path
    x = inputs_for(name, path, frames)
    g = mc.load_onnx(path)
    c, compile_s = timed(compile, g, precision, repeat=1)
    y_float, ort_s = (ort_single_thread(twin, x) if twin is not None and twin.exists()
                      else (None, float("nan")))
    y_golden, golden_s = timed(mc.run, c, x)
    row = {"model": name, "precision": precision or "model", "frames": frames,
           "compile_s": round(compile_s, 3),
           "golden_frames_per_s": round(frames / golden_s, 1),
           "ort_1thread_frames_per_s": round(frames / ort_s, 1),
           "ort_model": twin.name if twin is not None else "-"}
    if twin == path:
        row.update(golden_vs_float_argmax=agreement(y_golden, y_float),
                   golden_vs_float_max_abs=float(np.max(np.abs(
                       y_golden.reshape(frames, -1) - y_float))))
    row["circuit"] = (circuit_plan(g, precision) if plan else
                      {"device": PLAN_DEVICE, "skipped": "--no-plan"})
    try:
        y_emu, emu_s = timed(mc.run, c, x, "gpu-emu", repeat=2)
        row.update(gpu_emu_frames_per_s=round(frames / emu_s, 1),
                   gpu_emu_bit_exact=bool(np.array_equal(y_emu, y_golden)))
    except Exception as e:  # noqa: BLE001 — a bench reports, it does not stop
        row["gpu_emu"] = f"failed: {e}"
    if name == "conv2d_small_keras":
        peer = hls4ml_peer(path, x, precision)
        if "y" in peer:
            y_h = peer.pop("y")
            peer.update(vs_float_argmax=agreement(y_h, y_float),
                        vs_float_max_abs=float(np.max(np.abs(y_h - y_float))),
                        vs_golden_argmax=agreement(y_h, y_golden))
        row["hls4ml"] = peer
    if with_fpga:
        row["fpga"] = [fpga(compile(g, precision, profile=dev), name, dev)
                       for dev in ("ice40-up5k", "ecp5-85k")]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="conv2d_small_keras,conv1d_small_keras,digits_cnn",
                    help="comma-separated; 'zoo' for issue 29's models")
    ap.add_argument("--precision", default="fixed<16,6>")
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--fpga", action="store_true", help="synthesise, place and route (slow)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "cnn.json"))
    ap.add_argument("--zoo-dir", action="append", default=[], type=Path,
                    help="a folder with tests/exporters/zoo.py's big models (repeatable)")
    ap.add_argument("--no-plan", action="store_true",
                    help="skip the circuit plan (--reuse auto on ecp5-85k)")
    a = ap.parse_args(argv)
    ZOO_DIR[:] = a.zoo_dir
    rows = []
    names = {"zoo": ZOO_MODELS, "finn": FINN_MODELS}.get(a.models) or a.models.split(",")
    for name in names:
        if not model_path(name).exists():
            print(f"skip {name}: {model_path(name)} is absent", file=sys.stderr)
            continue
        rows.append(run_one(name, a.precision, a.frames, a.fpga, not a.no_plan))
        r = rows[-1]
        agree = (f"  argmax vs float {r['golden_vs_float_argmax']:.4f}  max|d| "
                 f"{r['golden_vs_float_max_abs']:.2e}" if "golden_vs_float_argmax" in r else "")
        print(f"{r['model']:<22} compile {r['compile_s']:>7.2f} s  golden "
              f"{r['golden_frames_per_s']:>9.1f} fr/s  ort(1 thread, {r['ort_model']}) "
              f"{r['ort_1thread_frames_per_s']:>9.1f} fr/s  gpu-emu "
              f"{r.get('gpu_emu_frames_per_s', '-'):>9} fr/s{agree}")
        cp = r["circuit"]
        print(f"{'  circuit ' + cp['device']:<22} " + ", ".join(
            f"{k}={v}" for k, v in cp.items() if k != "device"))
        if "hls4ml" in r:
            h = r["hls4ml"]
            if "skipped" in h:
                print(f"{'  hls4ml':<22} skipped: {h['skipped']}")
            else:
                print(f"{'  hls4ml ' + h['hls4ml']:<22} compile {h['compile_s']:>7.2f} s  csim "
                      f"{h['frames_per_s']:>9.1f} fr/s  argmax vs float {h['vs_float_argmax']:.4f}"
                      f"  max|d| {h['vs_float_max_abs']:.2e}  argmax vs ours {h['vs_golden_argmax']:.4f}")
        for f in r.get("fpga", []):
            print(f"{'  ' + f['device']:<22} " + ", ".join(f"{k}={v}" for k, v in f.items()
                                                             if k != "device"))
    print("\npublished figures (theirs: trained models, their boards and harnesses; not run here)")
    for p in PUBLISHED:
        print(f"  {p['who']:<38} {p['model']:<26} {p['board']:<18} {p['frames_per_s']:>11,.1f} "
              f"fr/s  (ours: {p['ours']})  {p['source']}")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"rows": rows, "published": PUBLISHED}, indent=1,
                                       sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
