"""Attention benchmark (transformer encoders, issue 25): per model, sequences/s of the golden
model (float32 and fixed point) and of gpu-emu (the shipped CUDA kernels built for the CPU)
beside onnxruntime in the same run (same batch, one intra-op thread), whether gpu-emu is
bit-exact with golden, and the fixed-point model's agreement with the float one.
Models: the encoders of tests/data/exporters (models.json entries whose import has an
Attention node: both torch exporters, float and brevitas QAT) and the graph-API encoders of
tests/graphs/test_attention_types.py (no ONNX file: no onnxruntime column). Prints a table
and writes bench/results/attention.json.

Run: .venv/bin/python bench/attention.py [--batch 512] [--precision fixed<16,6>]
     [--models SUBSTRING] [--onnx MORE.onnx ...] [--no-builder] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from benchio import write_json

import modelcircuit as mc

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "exporters"
sys.path.insert(0, str(ROOT))  # tests.graphs.test_attention_types.encoder

BUILDER = {  # graph-API encoders: name -> encoder(...) arguments
    "api_encoder_t8_d16_h2": {},
    "api_encoder_t16_d32_h4_l2": {"heads": 4, "d": 32, "tokens": 16, "layers": 2},
}


def onnx_models(substring: str) -> list[str]:
    """models.json files whose import has an Attention node (imported once to see)."""
    meta = json.loads((DATA / "models.json").read_text())["models"]
    out = []
    for m in meta:
        if substring not in m["file"] or not {"Softmax", "LayerNormalization"} & set(m["ops"]):
            continue
        try:
            g = mc.load_onnx(str(DATA / m["file"]))
        except ValueError:
            continue
        if any(n.op == "Attention" for n in g.nodes):
            out.append(m["file"])
    return sorted(out)


def timed(fn, *args, repeat: int = 5):
    """(output, best wall time of `repeat` runs): the best, since this machine is shared."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return out, best


def qonnx(path: Path) -> bool:
    """A QONNX model (custom Quant ops): onnxruntime cannot run it."""
    import onnx

    return any(n.domain.startswith("qonnx") for n in onnx.load(str(path)).graph.node)


def ort_session(model):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ort_runner(path: Path, x: np.ndarray):
    """(run(x) -> outputs, how): the whole batch in one call where the model's batch axis is
    free or can be freed (dim 0 of the input and output made symbolic), else one call per
    sequence (an export that fixed the batch at 1 inside its Reshapes)."""
    import onnx

    m = onnx.load(str(path))
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "N"
    try:
        sess = ort_session(m.SerializeToString())
        name = sess.get_inputs()[0].name
        sess.run(None, {name: x[:2]})
        return (lambda xs: sess.run(None, {name: xs})[0]), "batched"
    except Exception:  # noqa: BLE001 - a batch axis fixed inside the graph
        sess = ort_session(str(path))
        name = sess.get_inputs()[0].name
        return (lambda xs: np.concatenate([sess.run(None, {name: xs[i:i + 1]})[0]
                                           for i in range(len(xs))])), "one call per sequence"


def run_one(name: str, g, path: Path | None, precision: str, batch: int) -> dict:
    shp = g.tensor(g.inputs[0]).shape
    x = np.random.default_rng(0).normal(size=(batch,) + tuple(shp)).astype(np.float32)
    cf = mc.compile(g, precision=precision if "float" in precision else "float32")
    c = mc.compile(g, precision=None if precision == "model" else precision)
    y_f32, f32_s = timed(mc.run, cf, x)
    y_fx, fx_s = timed(mc.run, c, x)
    mc.run(c, x[:1], "gpu-emu")  # the emulator's kernel build, not timed
    y_emu, emu_s = timed(mc.run, c, x, "gpu-emu")
    y_f32, y_fx, y_emu = (np.asarray(v, dtype=np.float64).reshape(batch, -1)
                          for v in (y_f32, y_fx, y_emu))
    row = {"model": name, "input": list(shp),
           "precision": str(c.options.get("precision") or "model's own"),
           "batch": batch, "nodes": len(c.graph.nodes),
           "golden_float32_seq_per_s": round(batch / f32_s, 1),
           "golden_fixed_seq_per_s": round(batch / fx_s, 1),
           "gpu_emu_seq_per_s": round(batch / emu_s, 1),
           "gpu_emu_bit_exact": bool(np.array_equal(y_emu, y_fx)),
           "fixed_vs_float_max_abs": float(np.abs(y_fx - y_f32).max()),
           "fixed_vs_float_argmax": float((y_fx.argmax(1) == y_f32.argmax(1)).mean()),
           "onnxruntime_seq_per_s": None, "float32_vs_ort_max_abs": None}
    if path is not None and not qonnx(path):
        run, row["onnxruntime_calls"] = ort_runner(path, x)
        y_ort, ort_s = timed(run, x)
        row["onnxruntime_seq_per_s"] = round(batch / ort_s, 1)
        row["float32_vs_ort_max_abs"] = float(np.abs(y_f32 - np.asarray(y_ort, np.float64)
                                                     .reshape(batch, -1)).max())
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--precision", default="fixed<16,6>",
                    help="fixed-point precision of the golden/gpu-emu runs ('model': the "
                         "model's own quantizers, for QAT models)")
    ap.add_argument("--models", default="", help="only ONNX files whose name contains this")
    ap.add_argument("--onnx", nargs="*", default=[], help="more ONNX encoder files")
    ap.add_argument("--no-builder", action="store_true", help="skip the graph-API encoders")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "attention.json"))
    a = ap.parse_args(argv)
    rows = []
    for path in [DATA / f for f in onnx_models(a.models)] + [Path(p) for p in a.onnx]:
        g = mc.load_onnx(str(path))
        qat = bool(g.get_meta("typed_by_model", False))
        rows.append(run_one(path.name, g, path, "model" if qat else a.precision, a.batch))
    if not a.no_builder:
        from tests.graphs.test_attention_types import encoder

        for name, kw in BUILDER.items():
            rows.append(run_one(name, encoder(**kw), None, a.precision, a.batch))
    print(f"{'model':<44} {'precision':<14} {'ort':>8} {'gold f32':>9} {'gold fx':>8} "
          f"{'gpu-emu':>8} {'exact':>5} {'argmax':>6}")
    for r in rows:
        ort_v = "-" if r["onnxruntime_seq_per_s"] is None else f"{r['onnxruntime_seq_per_s']:.0f}"
        print(f"{r['model']:<44} {r['precision']:<14} {ort_v:>8} "
              f"{r['golden_float32_seq_per_s']:>9.0f} {r['golden_fixed_seq_per_s']:>8.0f} "
              f"{r['gpu_emu_seq_per_s']:>8.0f} {'yes' if r['gpu_emu_bit_exact'] else 'NO':>5} "
              f"{r['fixed_vs_float_argmax']:>6.3f}")
    for r in rows:
        if r["onnxruntime_seq_per_s"] is None and r["model"].endswith(".onnx"):
            print(f"  {r['model']}: QONNX (custom Quant ops): no onnxruntime column")
        if r.get("onnxruntime_calls") == "one call per sequence":
            print(f"  {r['model']}: the export fixes the batch at 1; onnxruntime ran one call "
                  "per sequence")
    print(f"sequences/s, batch {a.batch} (onnxruntime: one intra-op thread); gpu-emu bit-exact "
          f"with golden: {all(r['gpu_emu_bit_exact'] for r in rows)}")
    write_json(a.json, {"bench": "attention", "precision": a.precision, "batch": a.batch,
                        "rows": rows})
    return 0 if all(r["gpu_emu_bit_exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
