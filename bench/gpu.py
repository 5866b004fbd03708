"""GPU benchmark (needs a CUDA device; without one it says so and writes the reason to JSON).

Models: the jet tagger (three_layer_keras at fixed<16,6> and float32, qkeras_jettagging with
its own types) and the digits MLP (fixed<16,6>, float32). Batches 1, 64, 4096, 65536.
For each: end-to-end latency host->host (median) and device time (CUDA events, median) of
  replay   our CUDA graph replay
  launch   the same kernels launched one by one, no graph
  cupy     an eager CuPy version (cupy.matmul + element-wise ops; float32 only)
  torch    PyTorch eager, and torch-graph: PyTorch CUDA-graph replay (float32, if installed)

    python bench/gpu.py [--json bench_gpu.json] [--batches 1,64,4096,65536] [--repeat 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT.parent / "shared" / "models"
CASES = [("jet:three_layer_keras", MODELS / "three_layer_keras.onnx", "fixed<16,6>"),
         ("jet:three_layer_keras", MODELS / "three_layer_keras.onnx", "float32"),
         ("jet:qkeras_jettagging", MODELS / "qkeras_jettagging.onnx", None),
         ("digits_mlp", ROOT / "src" / "modelcircuit" / "data" / "digits_mlp.onnx", "fixed<16,6>"),
         ("digits_mlp", ROOT / "src" / "modelcircuit" / "data" / "digits_mlp.onnx", "float32")]


def _median_s(fn, repeat: int) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _events_ms(cp, fn, repeat: int) -> float:
    s = cp.cuda.get_current_stream()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    fn()
    ts = []
    for _ in range(repeat):
        a.record(s)
        fn()
        b.record(s)
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(ts))


def _dense_chain(g):
    """[(W, b, relu)] + softmax flag for Dense/Relu/Softmax chains, else None."""
    layers, softmax = [], False
    for n in g.nodes:
        if n.op == "Dense":
            b = g.constants[n.inputs[2]] if len(n.inputs) > 2 else None
            layers.append([np.asarray(g.constants[n.inputs[1]], np.float32),
                           None if b is None else np.asarray(b, np.float32), bool(n.get("relu"))])
        elif n.op == "Relu" and layers:
            layers[-1][2] = True
        elif n.op == "Softmax":
            softmax = True
        else:
            return None
    return layers, softmax


def _cupy_eager(cp, chain):
    layers, softmax = chain
    dev = [(cp.asarray(w), None if b is None else cp.asarray(b), r) for w, b, r in layers]

    def fwd(x):
        for w, b, r in dev:
            x = cp.matmul(x, w)
            if b is not None:
                x = x + b
            if r:
                x = cp.maximum(x, 0)
        if softmax:
            e = cp.exp(x - x.max(axis=1, keepdims=True))
            x = e / e.sum(axis=1, keepdims=True)
        return x
    return fwd


def _torch(chain):
    try:
        import torch
    except Exception:  # noqa: BLE001
        return None
    if not torch.cuda.is_available():
        return None
    layers, softmax = chain
    mods = []
    for w, b, r in layers:
        lin = torch.nn.Linear(w.shape[0], w.shape[1], bias=b is not None)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
            if b is not None:
                lin.bias.copy_(torch.from_numpy(b))
        mods += [lin] + ([torch.nn.ReLU()] if r else [])
    if softmax:
        mods.append(torch.nn.Softmax(dim=1))
    return torch, torch.nn.Sequential(*mods).cuda().eval()


def bench_case(label, path, precision, batches, repeat):
    import cupy as cp

    import modelcircuit as mc
    from modelcircuit import gpu_backend as gb
    from modelcircuit.graphs import reference

    c = mc.compile(mc.load_onnx(str(path)), precision=precision)
    g = c.graph
    m = gb.load(c, buckets=tuple(batches))
    rows = []
    rng = np.random.default_rng(0)
    chain = _dense_chain(g) if precision == "float32" else None
    eager = _cupy_eager(cp, chain) if chain else None
    tch = _torch(chain) if chain else None
    for b in batches:
        x = rng.normal(0, 1, size=(b,) + g.tensor(g.inputs[0]).shape)
        xs = reference.quantize_inputs(g, [x])
        rows.append(_row(cp, m, g, label, precision, b, xs, eager, tch, repeat))
    return rows


def _row(cp, m, g, label, precision, b, xs, eager, tch, repeat):
    from modelcircuit.graphs import reference

    want = reference.execute(g, xs, inputs_are_codes=True)[g.outputs[0]]
    got = m.run_all(xs)[g.outputs[0]]
    exact = bool(np.array_equal(got, want)) if precision != "float32" else \
        bool(np.allclose(got, want, rtol=1e-5, atol=1e-6))
    row = {"model": label, "precision": precision or "model", "batch": b, "ok": exact,
           "replay_e2e_us": 1e6 * _median_s(lambda: m.run_all(xs), repeat),
           "replay_dev_us": 1e3 * m.device_time_ms(b, True, repeat),
           "launch_e2e_us": 1e6 * _median_s(lambda: m.run_all(xs, graph=False), repeat),
           "launch_dev_us": 1e3 * m.device_time_ms(b, False, repeat)}
    if eager is not None:
        xf = xs[0].reshape(b, -1).astype(np.float32)
        xd = cp.asarray(xf)
        row["cupy_e2e_us"] = 1e6 * _median_s(lambda: cp.asnumpy(eager(cp.asarray(xf))), repeat)
        row["cupy_dev_us"] = 1e3 * _events_ms(cp, lambda: eager(xd), repeat)
    if tch is not None:
        torch, net = tch
        xt = torch.from_numpy(xs[0].reshape(b, -1).astype(np.float32)).pin_memory()
        xg = xt.cuda()
        with torch.no_grad():
            row["torch_e2e_us"] = 1e6 * _median_s(lambda: net(xt.cuda(non_blocking=True)).cpu(), repeat)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    net(xg)
            torch.cuda.current_stream().wait_stream(s)
            cg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cg):
                yg = net(xg)

            def tg():
                xg.copy_(xt, non_blocking=True)
                cg.replay()
                return yg.cpu()
            row["torch_graph_e2e_us"] = 1e6 * _median_s(tg, repeat)
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ts = []
            for _ in range(repeat):
                ev0.record()
                cg.replay()
                ev1.record()
                ev1.synchronize()
                ts.append(ev0.elapsed_time(ev1))
            row["torch_graph_dev_us"] = 1e3 * float(np.median(ts))
    row["replay_vs_launch_b1"] = row["launch_e2e_us"] / row["replay_e2e_us"]
    if "torch_graph_dev_us" in row:
        row["throughput_vs_torch"] = row["torch_graph_dev_us"] / row["replay_dev_us"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="bench_gpu.json")
    ap.add_argument("--batches", default="1,64,4096,65536")
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args(argv)
    batches = [int(b) for b in a.batches.split(",")]
    sys.path.insert(0, str(ROOT / "src"))
    from modelcircuit.gpu_backend import GpuError
    from modelcircuit.gpu_backend.runtime import device_info

    try:
        info = device_info(0)
    except GpuError as e:
        print(f"bench/gpu.py: no GPU here: {e}")
        Path(a.json).write_text(json.dumps({"device": None, "error": str(e), "rows": []}, indent=1))
        return 0
    rows = []
    for label, path, prec in CASES:
        if not path.exists():
            print(f"skip {label}: {path} not found")
            continue
        rows += bench_case(label, path, prec, batches, a.repeat)
    cols = ["model", "precision", "batch", "ok", "replay_e2e_us", "replay_dev_us", "launch_e2e_us",
            "launch_dev_us", "cupy_dev_us", "torch_e2e_us", "torch_graph_e2e_us",
            "torch_graph_dev_us", "replay_vs_launch_b1", "throughput_vs_torch"]
    print(f"device: {info['name']} (profile {info['profile']})")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.1f}" if isinstance(r.get(c), float) else str(r.get(c, "-"))
                         for c in cols))
    Path(a.json).write_text(json.dumps({"device": info, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
