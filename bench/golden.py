"""Golden-model benchmark: compile time, fixed-point throughput beside onnxruntime, fidelity.

Prints a table and writes JSON (bench/results/golden.json by default). Ratios are measured
side by side in one run; absolute times on a shared machine mean little.
Run: .venv/bin/python bench/golden.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import modelcircuit as mc
from modelcircuit.graphs import reference

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT.parent / "shared" / "models"


def best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def ort_session(path: Path) -> ort.InferenceSession:
    m = onnx.load(str(path))
    for vi in list(m.graph.input) + list(m.graph.output):
        d = vi.type.tensor_type.shape.dim
        if d:
            d[0].ClearField("dim_value")
            d[0].dim_param = "N"
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def logits(c, x):
    sm = next((n for n in c.graph.nodes if n.op == "Softmax"), None)
    if sm is None:
        return mc.run(c, x)
    return mc.run(c, x, trace=True)[sm.inputs[0]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "golden.json"))
    ap.add_argument("--batch", type=int, default=10_000)
    a = ap.parse_args()
    path = MODELS / "three_layer_keras.onnx"
    if not path.exists():
        print(f"skip: {path} absent", file=sys.stderr)
        return 0
    g = mc.load_onnx(path)
    compile_times = []
    for _ in range(5):
        t0 = time.perf_counter()
        c16 = mc.compile(mc.load_onnx(path), precision="fixed<16,6>")
        compile_times.append(time.perf_counter() - t0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, 16)).astype(np.float32)
    codes = reference.quantize_inputs(c16.graph, [x])
    t_fixed = best_of(lambda: reference.execute(c16.graph, codes, inputs_are_codes=True))
    t_fixed_e2e = best_of(lambda: mc.run(c16, x))
    sess = ort_session(path)
    name = sess.get_inputs()[0].name
    t_ort = best_of(lambda: sess.run(None, {name: x}))
    # fidelity: argmax of the logits against float, 1,000 standard-normal inputs
    xf = rng.standard_normal((1000, 16)).astype(np.float32)
    cal = rng.standard_normal((1000, 16)).astype(np.float32)
    yf = logits(mc.compile(g, precision="float32"), xf)
    fid = {}
    for label, kw in [("fixed<16,6>", {"precision": "fixed<16,6>"}),
                      ("fixed<8,3>", {"precision": "fixed<8,3>"}),
                      ("fixed<8,3> --calibrate", {"precision": "fixed<8,3>", "calibrate": cal})]:
        fid[label] = float(np.mean(logits(mc.compile(g, **kw), xf).argmax(-1) == yf.argmax(-1)))
    res = {
        "model": "three_layer_keras",
        "compile_s_median": statistics.median(compile_times),
        "batch": a.batch,
        "fixed_golden_samples_per_s": a.batch / t_fixed,
        "fixed_golden_e2e_samples_per_s": a.batch / t_fixed_e2e,
        "onnxruntime_float_samples_per_s_1thread": a.batch / t_ort,
        "ratio_fixed_over_ort": t_ort / t_fixed,
        "target_samples_per_s": 1_000_000,
        "fidelity_argmax_vs_float": fid,
        "hls4ml_reference": {"fixed<16,6>": 0.986, "ap_fixed<8,3>": 0.264},
    }
    print(f"{'metric':44s} value")
    print(f"{'compile ONNX -> CompiledGraph (median of 5)':44s} {res['compile_s_median'] * 1e3:.1f} ms")
    print(f"{'fixed<16,6> golden, codes in/out':44s} {res['fixed_golden_samples_per_s']:,.0f} samples/s")
    print(f"{'fixed<16,6> golden, float in/out (quantize)':44s} {res['fixed_golden_e2e_samples_per_s']:,.0f} samples/s")
    print(f"{'onnxruntime float32 (1 thread)':44s} {res['onnxruntime_float_samples_per_s_1thread']:,.0f} samples/s")
    print(f"{'ratio golden / onnxruntime':44s} {res['ratio_fixed_over_ort']:.2f}x")
    for k, v in fid.items():
        print(f"{'argmax agreement ' + k:44s} {v:.3f}")
    out = Path(a.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
