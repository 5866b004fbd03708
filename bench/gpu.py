"""GPU benchmark: our CUDA-graph replay beside PyTorch eager, PyTorch with a CUDA graph and
onnxruntime's CUDA EP (enable_cuda_graph), all in one run, with the device's own floor.

Why each part: batch-1 latency (host->host, p50/p99 over >= 10k calls) is what a trigger or
a serving loop pays; batch-64k throughput is what offline scoring pays. The physical
reference (a device-to-device copy's bandwidth, an empty kernel's launch, an empty graph's
replay, a 64-byte pinned round trip) says how far each number is from what the chip allows.

Models: the jet tagger (../shared/models/three_layer_keras.onnx), the bundled digits CNN and a
larger CNN made here with onnx.helper (3x32x32 in, three conv blocks, 10 out); ours at float32
and fixed<16,6>, the peers at float32 (they have no fixed point). Every part that needs
something this machine lacks (CUDA, torch, the CUDA EP, a model file) is recorded as
`skipped` with the reason; a part that raises is recorded as `error` and the exit status is 1,
and the rest still runs. The JSON is rewritten after every part, so a timeout keeps what ran.

    python bench/gpu.py [--json bench_gpu.json] [--dry] [--budget 200]

--dry runs the same code on the CPU (gpu-emu for ours, torch and onnxruntime on the CPU) with
tiny counts, so bench/device_check.sh can prove the plumbing before a GPU is lent.
Where the third-party models are: $MODELCIRCUIT_SHARED_MODELS, else ../shared/models.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchio import machine, write_json  # noqa: E402

DATA = ROOT / "src" / "modelcircuit" / "data"
PRECISIONS = ("float32", "fixed<16,6>")


class Skip(Exception):
    """A part this machine cannot run (no CUDA, no torch, no model): recorded, not an error."""


def shared_models() -> Path:
    return Path(os.environ.get("MODELCIRCUIT_SHARED_MODELS") or ROOT.parent / "shared" / "models")


def big_cnn_onnx(path: Path, seed: int = 0) -> Path:
    """A CIFAR-sized channels-first CNN: 3x32x32 -> 3 x (3x3 conv + ReLU + 2x2 max pool) with
    16/32/64 channels -> 1024 -> Gemm 10. Larger than the digits CNN by ~100x in work."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes, x, cin = [], [], "x", 3
    for i, cout in enumerate((16, 32, 64)):
        w = rng.normal(0, (2.0 / (9 * cin)) ** 0.5, (cout, cin, 3, 3)).astype(np.float32)
        b = rng.normal(0, 0.05, cout).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                   kernel_shape=[3, 3]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
                  helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2],
                                   strides=[2, 2])]
        x, cin = f"p{i}", cout
    wf = rng.normal(0, (1.0 / 1024) ** 0.5, (1024, 10)).astype(np.float32)
    inits += [numpy_helper.from_array(wf, "wf"),
              numpy_helper.from_array(np.zeros(10, np.float32), "bf")]
    nodes += [helper.make_node("Flatten", [x], ["f"], axis=1),
              helper.make_node("Gemm", ["f", "wf", "bf"], ["y"])]
    g = helper.make_graph(nodes, "big_cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def batch_free(src: Path, dst: Path) -> Path:
    """The same ONNX model with a symbolic batch dimension (the jet tagger's is fixed at 1),
    so the peers can run batch 64k."""
    import onnx

    m = onnx.load(str(src))
    inits = {i.name for i in m.graph.initializer}
    for v in list(m.graph.input) + list(m.graph.output):
        if v.name in inits:
            continue
        d = v.type.tensor_type.shape.dim
        if len(d):
            d[0].Clear()
            d[0].dim_param = "N"
    del m.graph.value_info[:]
    onnx.save(m, str(dst))
    return dst


def stats_us(ts: list[float]) -> dict[str, float]:
    a = np.asarray(ts) * 1e6
    return {"p50_us": float(np.percentile(a, 50)), "p99_us": float(np.percentile(a, 99)),
            "calls": len(ts)}


def time_calls(fn: Callable[[], Any], n: int, warm: int = 3) -> list[float]:
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


class Bench:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.dry = a.dry
        self.t0 = time.monotonic()
        self.rows: list[dict[str, Any]] = []
        self.physical: dict[str, Any] = {}
        self.errors = 0
        self.device: Any = None
        self.cuda_reason = ""

    # -- bookkeeping ----------------------------------------------------------------------
    def left(self) -> float:
        return self.a.budget - (time.monotonic() - self.t0)

    def part(self, row: dict[str, Any], fn: Callable[[], dict[str, Any]]) -> None:
        """Run one part fail-soft: a Skip or an exception is recorded and the run goes on."""
        t = time.monotonic()
        if self.left() <= 0:
            row.update(status="skipped", reason="bench budget spent")
        else:
            try:
                row.update(fn(), status="ok")
            except Skip as e:
                row.update(status="skipped", reason=str(e))
            except Exception as e:  # noqa: BLE001 - recorded; the rest of the run goes on
                self.errors += 1
                first = (str(e).strip().splitlines() or [""])[0]
                row.update(status="error", reason=f"{type(e).__name__}: {first}",
                           traceback=traceback.format_exc(limit=6))
        row["seconds"] = round(time.monotonic() - t, 3)
        self.rows.append(row)
        print(f"  {row.get('model', '-'):10} {row.get('precision', '-'):12} "
              f"{row.get('impl', '-'):14} {row['status']:7} {row['seconds']:7.2f}s "
              f"{row.get('reason', '')}", flush=True)
        self.save()

    def save(self, final: bool = False) -> None:
        """The JSON so far (quietly after each part; benchio's write, with its line, at the end)."""
        payload = {"bench": "gpu", "dry": self.dry, "device": self.device,
                   "cuda": self.cuda_reason or "ok", "counts": self.counts(),
                   "physical": self.physical, "rows": self.rows,
                   "acceptance": acceptance(self.rows), "errors": self.errors}
        if final:
            write_json(self.a.json, payload)
        else:
            Path(self.a.json).parent.mkdir(parents=True, exist_ok=True)
            Path(self.a.json).write_text(json.dumps({**payload, **machine()}, default=str))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out

    def need_cuda(self) -> Any:
        if self.cuda_reason:
            raise Skip(self.cuda_reason)
        import cupy as cp

        return cp

    # -- the device ------------------------------------------------------------------------
    def probe(self) -> None:
        from modelcircuit.gpu_backend import GpuError
        from modelcircuit.gpu_backend.runtime import device_info

        if self.dry:
            self.cuda_reason = "dry run: CUDA parts skipped"
            return
        try:
            self.device = device_info(0)
        except GpuError as e:
            self.cuda_reason = str(e)

    def physical_reference(self) -> None:
        for name, fn in (("d2d_copy", self.d2d_copy), ("launch_floor", self.launch_floor)):
            row: dict[str, Any] = {"model": "physical", "impl": name}
            self.part(row, fn)
            self.physical[name] = row

    def d2d_copy(self) -> dict[str, Any]:
        cp = self.need_cuda()
        n = 1 << 30
        a, b = cp.empty(n, cp.uint8), cp.empty(n, cp.uint8)
        a.fill(1)
        cp.cuda.runtime.deviceSynchronize()
        s = cp.cuda.Stream(non_blocking=True)
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        kind = cp.cuda.runtime.memcpyDeviceToDevice
        for _ in range(3):
            cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, n, kind, s.ptr)
        ms = []
        for _ in range(10):
            e0.record(s)
            cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, n, kind, s.ptr)
            e1.record(s)
            e1.synchronize()
            ms.append(cp.cuda.get_elapsed_time(e0, e1))
        t = float(np.median(ms)) / 1e3
        return {"bytes": n, "ms": t * 1e3, "read_plus_write_GBps": 2 * n / t / 1e9,
                "copied_GBps": n / t / 1e9}

    def launch_floor(self) -> dict[str, Any]:
        cp = self.need_cuda()
        k = cp.RawKernel('extern "C" __global__ void mc_empty() {}', "mc_empty")
        s = cp.cuda.Stream(non_blocking=True)
        n = self.a.b1_calls

        def one():
            with s:
                k((1,), (1,), ())
            s.synchronize()
        launch_sync = stats_us(time_calls(one, n))
        t0 = time.perf_counter()
        with s:
            for _ in range(n):
                k((1,), (1,), ())
        s.synchronize()
        back_to_back = (time.perf_counter() - t0) / n * 1e6
        s.begin_capture()
        with s:
            k((1,), (1,), ())
        g = s.end_capture()

        def replay():
            g.launch(stream=s)
            s.synchronize()
        graph = stats_us(time_calls(replay, n))
        h = __import__("cupyx").empty_pinned((16,), np.float32)
        d = cp.empty(16, cp.float32)
        rt = cp.cuda.runtime

        def roundtrip():
            rt.memcpyAsync(d.data.ptr, h.ctypes.data, 64, rt.memcpyHostToDevice, s.ptr)
            rt.memcpyAsync(h.ctypes.data, d.data.ptr, 64, rt.memcpyDeviceToHost, s.ptr)
            s.synchronize()
        copy = stats_us(time_calls(roundtrip, n))
        return {"empty_kernel_launch_sync": launch_sync, "empty_kernel_back_to_back_us": back_to_back,
                "empty_graph_replay_sync": graph, "pinned_64B_roundtrip": copy}

    # -- models ----------------------------------------------------------------------------
    def cases(self, tmp: Path) -> list[tuple[str, Path | None, str]]:
        jet = shared_models() / "three_layer_keras.onnx"
        out = [("jet", jet if jet.exists() else None, f"{jet} is absent"),
               ("digits_cnn", DATA / "digits_cnn.onnx", ""),
               ("big_cnn", big_cnn_onnx(tmp / "big_cnn.onnx"), "")]
        keep = set(self.a.models.split(",")) if self.a.models else None
        return [c for c in out if keep is None or c[0] in keep]

    def run_model(self, label: str, path: Path | None, why: str, tmp: Path) -> None:
        import modelcircuit as mc

        for prec in PRECISIONS:
            made: dict[str, Any] = {}  # one compile (and so one gb.load) for both impls
            for impl in (("mc-emu",) if self.dry else ("mc-replay", "mc-launch")):
                row = {"model": label, "precision": prec, "impl": impl}

                def go(prec=prec, impl=impl, made=made):
                    if path is None:
                        raise Skip(why)
                    if "c" not in made:
                        made["c"] = mc.compile(mc.load_onnx(str(path)), precision=prec)
                    return self.ours(made["c"], impl)
                self.part(row, go)
        if path is None:
            return
        free = batch_free(path, tmp / f"{label}_n.onnx")
        for impl, fn in (("torch-eager", self.torch_eager), ("torch-graph", self.torch_graph),
                         ("ort-cuda-graph", self.ort_cuda), ("ort-cpu", self.ort_cpu)):
            row = {"model": label, "precision": "float32", "impl": impl}
            self.part(row, lambda fn=fn: fn(free))

    def inputs(self, g: Any, n: int, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.normal(0, 1, size=(n,) + g.tensor(i).shape).astype(np.float32)
                for i in g.inputs]

    def ours(self, c: Any, impl: str) -> dict[str, Any]:
        from modelcircuit import gpu_backend as gb
        from modelcircuit.graphs import reference

        if impl != "mc-emu":
            self.need_cuda()
        g = c.graph
        fixed = not g.tensor(g.inputs[0]).dtype.is_float
        big, n1 = self.a.big_batch, self.a.b1_calls

        def prep(xs):  # ours takes codes for fixed point: quantized once, outside the timing
            return reference.quantize_inputs(g, xs) if fixed else xs
        check = prep(self.inputs(g, 64, seed=1))
        want = reference.execute(g, check, inputs_are_codes=fixed)
        x1, xb = prep(self.inputs(g, 1)), prep(self.inputs(g, big))
        if impl == "mc-emu":
            def run(xs):
                return gb.execute(c, xs, emulate=True)
            dev_ms = None
        else:
            m = gb.load(c, buckets=(1, 64, big))
            graph = impl == "mc-replay"

            def run(xs):
                return m.run_all(xs, graph=graph)
            dev_ms = m.device_time_ms(big, graph, self.a.big_repeat)
        got = run(check)
        o = g.outputs[0]
        if fixed:
            ok = bool(np.array_equal(got[o], want[o]))
        else:
            ok = bool(np.allclose(got[o], want[o], rtol=1e-4, atol=1e-5))
        b1 = stats_us(time_calls(lambda: run(x1), n1))
        tb = float(np.median(time_calls(lambda: run(xb), self.a.big_repeat, warm=1)))
        out = {"ok": ok, "b1": b1, "big_batch": big, "big_e2e_ms": tb * 1e3,
               "big_samples_per_s": big / tb}
        if dev_ms is not None:
            out.update(big_dev_ms=dev_ms, big_dev_samples_per_s=big / (dev_ms / 1e3))
        return out

    # -- peers ------------------------------------------------------------------------------
    def _torch(self) -> Any:
        try:
            import torch
        except Exception as e:  # noqa: BLE001
            raise Skip(f"torch not importable ({type(e).__name__})") from None
        return torch

    def _torch_net(self, path: Path, dev: str) -> tuple[Any, Any, list[int]]:
        import onnx

        torch = self._torch()
        m = onnx.load(str(path))
        net = OnnxTorch(torch, m).to(dev).eval()
        dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim][1:]
        return torch, net, dims

    def torch_eager(self, path: Path) -> dict[str, Any]:
        if self.dry or self.cuda_reason:
            torch, net, dims = self._torch_net(path, "cpu")
            dev = "cpu"
        else:
            torch, net, dims = self._torch_net(path, "cuda")
            dev = "cuda"
        ok = self._torch_check(torch, net, path, dev, dims)
        rng = np.random.default_rng(0)
        res: dict[str, Any] = {"device": dev, "ok": ok}
        for n, key in ((1, "b1"), (self.a.big_batch, "big")):
            xh = torch.from_numpy(rng.normal(0, 1, (n, *dims)).astype(np.float32))
            if dev == "cuda":
                xh = xh.pin_memory()

            def call(xh=xh):
                with torch.inference_mode():
                    return net(xh.to(dev, non_blocking=True)).cpu()
            if key == "b1":
                res["b1"] = stats_us(time_calls(call, self.a.b1_calls))
            else:
                t = float(np.median(time_calls(call, self.a.big_repeat, warm=1)))
                res.update(big_batch=n, big_e2e_ms=t * 1e3, big_samples_per_s=n / t)
        return res

    def torch_graph(self, path: Path) -> dict[str, Any]:
        torch = self._torch()
        if self.dry or self.cuda_reason or not torch.cuda.is_available():
            raise Skip("torch CUDA graphs need CUDA: " + (self.cuda_reason or
                                                          "torch.cuda.is_available() is False"))
        torch, net, dims = self._torch_net(path, "cuda")
        rng = np.random.default_rng(0)
        res: dict[str, Any] = {"device": "cuda", "ok": self._torch_check(torch, net, path,
                                                                         "cuda", dims)}
        for n, key in ((1, "b1"), (self.a.big_batch, "big")):
            xh = torch.from_numpy(rng.normal(0, 1, (n, *dims)).astype(np.float32)).pin_memory()
            xs = xh.cuda()
            with torch.inference_mode():
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        net(xs)
                torch.cuda.current_stream().wait_stream(s)
                cg = torch.cuda.CUDAGraph()
                with torch.cuda.graph(cg):
                    ys = net(xs)

            def call(xh=xh, xs=xs, ys=ys, cg=cg):
                xs.copy_(xh, non_blocking=True)
                cg.replay()
                return ys.cpu()
            if key == "b1":
                res["b1"] = stats_us(time_calls(call, self.a.b1_calls))
            else:
                t = float(np.median(time_calls(call, self.a.big_repeat, warm=1)))
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ms = []
                for _ in range(self.a.big_repeat):
                    e0.record()
                    cg.replay()
                    e1.record()
                    e1.synchronize()
                    ms.append(e0.elapsed_time(e1))
                dev_ms = float(np.median(ms))
                res.update(big_batch=n, big_e2e_ms=t * 1e3, big_samples_per_s=n / t,
                           big_dev_ms=dev_ms, big_dev_samples_per_s=n / (dev_ms / 1e3))
        return res

    def _torch_check(self, torch: Any, net: Any, path: Path, dev: str, dims: list[int]) -> bool:
        """The peer computes the model: torch == onnxruntime CPU within float32 rounding."""
        import onnxruntime as ort

        x = np.random.default_rng(2).normal(0, 1, (8, *dims)).astype(np.float32)
        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        want = s.run(None, {s.get_inputs()[0].name: x})[0]
        with torch.inference_mode():
            got = net(torch.from_numpy(x).to(dev)).cpu().numpy()
        return bool(np.allclose(got, want, rtol=1e-3, atol=1e-4))

    def _ort(self, path: Path, providers: list[Any]) -> Any:
        import onnxruntime as ort

        return ort, ort.InferenceSession(str(path), providers=providers)

    def ort_cuda(self, path: Path) -> dict[str, Any]:
        import onnxruntime as ort

        if self.dry or self.cuda_reason:
            raise Skip("onnxruntime CUDA EP needs CUDA: " + self.cuda_reason)
        have = ort.get_available_providers()
        if "CUDAExecutionProvider" not in have:
            raise Skip(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider "
                       f"(has {have}; the CUDA EP is in the onnxruntime-gpu wheel)")
        rng = np.random.default_rng(0)
        res: dict[str, Any] = {"device": "cuda", "ort": ort.__version__}
        for n, key in ((1, "b1"), (self.a.big_batch, "big")):
            # one session per shape: a session with enable_cuda_graph captures one graph
            sess = ort.InferenceSession(str(path), providers=[
                ("CUDAExecutionProvider", {"enable_cuda_graph": "1"})])
            if sess.get_providers()[0] != "CUDAExecutionProvider":
                raise Skip(f"CUDA EP did not load (session providers {sess.get_providers()})")
            i, o = sess.get_inputs()[0], sess.get_outputs()[0]
            dims = [d if isinstance(d, int) else n for d in i.shape]
            dims[0] = n
            x = rng.normal(0, 1, dims).astype(np.float32)
            xo = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
            oshape = [n] + [d for d in o.shape[1:]]
            yo = ort.OrtValue.ortvalue_from_shape_and_type(oshape, np.float32, "cuda", 0)
            io = sess.io_binding()
            io.bind_ortvalue_input(i.name, xo)
            io.bind_ortvalue_output(o.name, yo)
            sess.run_with_iobinding(io)  # the first run captures the graph

            def call(x=x, xo=xo, yo=yo, io=io, sess=sess):
                xo.update_inplace(x)
                sess.run_with_iobinding(io)
                return yo.numpy()
            if key == "b1":
                res["b1"] = stats_us(time_calls(call, self.a.b1_calls))
            else:
                t = float(np.median(time_calls(call, self.a.big_repeat, warm=1)))
                res.update(big_batch=n, big_e2e_ms=t * 1e3, big_samples_per_s=n / t)
        return res

    def ort_cpu(self, path: Path) -> dict[str, Any]:
        ort, sess = self._ort(path, ["CPUExecutionProvider"])
        i = sess.get_inputs()[0]
        dims = [d if isinstance(d, int) else 1 for d in i.shape]
        rng = np.random.default_rng(0)
        res: dict[str, Any] = {"device": "cpu", "ort": ort.__version__}
        # the CPU EP is the reference point only: its big batch is capped to keep the run short
        for n, key in ((1, "b1"), (min(self.a.big_batch, 4096), "big")):
            x = rng.normal(0, 1, [n] + dims[1:]).astype(np.float32)
            feed = {i.name: x}
            if key == "b1":
                res["b1"] = stats_us(time_calls(lambda feed=feed: sess.run(None, feed),
                                                min(self.a.b1_calls, 2000)))
            else:
                t = float(np.median(time_calls(lambda feed=feed: sess.run(None, feed),
                                                max(1, self.a.big_repeat // 4), warm=1)))
                res.update(big_batch=n, big_e2e_ms=t * 1e3, big_samples_per_s=n / t)
        return res


class OnnxTorch:
    """An ONNX graph run op by op with torch functions (MLPs and CNNs), made by a factory so
    that importing this file needs no torch: the peer computes what onnxruntime computes."""

    def __new__(cls, torch: Any, model: Any) -> Any:  # noqa: D102
        from onnx import numpy_helper

        F = torch.nn.functional
        consts = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
                  for i in model.graph.initializer}
        nodes = list(model.graph.node)
        for n in nodes:
            if n.op_type == "Constant":
                consts[n.output[0]] = torch.from_numpy(
                    numpy_helper.to_array(n.attribute[0].t).copy())

        def attrs(n):
            from onnx import helper
            return {a.name: helper.get_attribute_value(a) for a in n.attribute}

        def pads2d(p):
            if not p:
                return 0
            if len(p) == 4 and p[0] == p[2] and p[1] == p[3]:
                return (p[0], p[1])
            raise Skip(f"asymmetric pads {p}")

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                for k, v in enumerate(consts.values()):
                    self.register_buffer(f"c{k}", v)
                self.names = {name: f"c{k}" for k, name in enumerate(consts)}

            def forward(self, x):
                env = {model.graph.input[0].name: x}
                env.update({n: getattr(self, b) for n, b in self.names.items()})
                for n in nodes:
                    a, ins = attrs(n), [env[i] if i else None for i in n.input]
                    op = n.op_type
                    if op == "Constant":
                        continue
                    if op == "MatMul":
                        y = ins[0] @ ins[1]
                    elif op == "Gemm":
                        w = ins[1].t() if a.get("transB") else ins[1]
                        xa = ins[0].t() if a.get("transA") else ins[0]
                        y = a.get("alpha", 1.0) * (xa @ w)
                        if len(ins) > 2 and ins[2] is not None:
                            y = y + a.get("beta", 1.0) * ins[2]
                    elif op in ("Add", "Sub", "Mul", "Div"):
                        y = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul,
                             "Div": torch.div}[op](ins[0], ins[1])
                    elif op == "Relu":
                        y = torch.relu(ins[0])
                    elif op == "Sigmoid":
                        y = torch.sigmoid(ins[0])
                    elif op == "Tanh":
                        y = torch.tanh(ins[0])
                    elif op == "Softmax":
                        y = torch.softmax(ins[0], dim=a.get("axis", -1))
                    elif op == "Conv":
                        y = F.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None,
                                     stride=tuple(a.get("strides", [1, 1])),
                                     padding=pads2d(a.get("pads")), groups=a.get("group", 1),
                                     dilation=tuple(a.get("dilations", [1, 1])))
                    elif op == "MaxPool":
                        y = F.max_pool2d(ins[0], tuple(a["kernel_shape"]),
                                         tuple(a.get("strides", a["kernel_shape"])),
                                         padding=pads2d(a.get("pads")))
                    elif op == "AveragePool":
                        y = F.avg_pool2d(ins[0], tuple(a["kernel_shape"]),
                                         tuple(a.get("strides", a["kernel_shape"])),
                                         padding=pads2d(a.get("pads")))
                    elif op == "GlobalAveragePool":
                        y = ins[0].mean(dim=(2, 3), keepdim=True)
                    elif op == "Flatten":
                        y = torch.flatten(ins[0], a.get("axis", 1))
                    elif op == "Transpose":
                        y = ins[0].permute(*a["perm"])
                    elif op == "Reshape":  # the shape from the CPU copy: no sync in a capture
                        if n.input[1] not in consts:
                            raise Skip("the torch peer needs a constant Reshape shape")
                        shp = [int(v) for v in consts[n.input[1]].tolist()]
                        y = ins[0].reshape([ins[0].shape[0]] + shp[1:])
                    else:
                        raise Skip(f"the torch peer has no ONNX {op}")
                    env[n.output[0]] = y
                return env[model.graph.output[0].name]
        return Net()


def acceptance(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's two bars, from whatever rows ran: jet batch-1 replay p50 <= torch CUDA
    graph's, and float32 batch-64k throughput >= 0.8x the onnxruntime CUDA EP's."""
    def find(model, prec, impl):
        for r in rows:
            if (r.get("model"), r.get("precision"), r.get("impl"), r.get("status")) == \
                    (model, prec, impl, "ok"):
                return r
        return None
    out: dict[str, Any] = {}
    tg = find("jet", "float32", "torch-graph")
    for prec, key in (("float32", "float32"), ("fixed<16,6>", "fixed16_6")):
        ours = find("jet", prec, "mc-replay")
        if ours and tg:  # <= 1 meets the bar
            out[f"jet_b1_p50_ours_{key}_over_torch_graph"] = \
                ours["b1"]["p50_us"] / tg["b1"]["p50_us"]
    for model in ("jet", "digits_cnn", "big_cnn"):
        o, p = find(model, "float32", "mc-replay"), find(model, "float32", "ort-cuda-graph")
        if o and p:
            out[f"{model}_big_throughput_ours_over_ort_cuda"] = \
                o["big_samples_per_s"] / p["big_samples_per_s"]
    return out


def table(rows: list[dict[str, Any]]) -> None:
    print(f"{'model':10} {'precision':12} {'impl':14} {'status':7} {'ok':5} {'b1 p50 us':>10} "
          f"{'b1 p99 us':>10} {'batch':>6} {'e2e Msamp/s':>11} {'dev Msamp/s':>11}")
    for r in rows:
        if r.get("model") == "physical":
            continue
        b1 = r.get("b1") or {}

        def f(v, scale=1.0):
            return f"{v * scale:.3f}" if isinstance(v, float) else "-"
        print(f"{r['model']:10} {r['precision']:12} {r['impl']:14} {r['status']:7} "
              f"{str(r.get('ok', '-')):5} {f(b1.get('p50_us')):>10} {f(b1.get('p99_us')):>10} "
              f"{r.get('big_batch', '-')!s:>6} {f(r.get('big_samples_per_s'), 1e-6):>11} "
              f"{f(r.get('big_dev_samples_per_s'), 1e-6):>11}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="bench_gpu.json")
    ap.add_argument("--dry", action="store_true", help="CPU only, tiny counts (plumbing check)")
    ap.add_argument("--b1-calls", type=int, default=None, help="batch-1 calls (default 10000)")
    ap.add_argument("--big-batch", type=int, default=None, help="throughput batch (65536)")
    ap.add_argument("--big-repeat", type=int, default=None, help="throughput repeats (10)")
    ap.add_argument("--models", default="", help="comma list of jet,digits_cnn,big_cnn")
    ap.add_argument("--budget", type=float, default=400.0,
                    help="seconds; parts not started by then are recorded as skipped")
    a = ap.parse_args(argv)
    dflt = (20, 64, 2) if a.dry else (10000, 65536, 10)
    a.b1_calls = a.b1_calls or dflt[0]
    a.big_batch = a.big_batch or dflt[1]
    a.big_repeat = a.big_repeat or dflt[2]
    b = Bench(a)
    b.probe()
    print(f"bench/gpu.py: device {b.device or '-'}; {b.cuda_reason or 'CUDA ok'}", flush=True)
    b.physical_reference()
    with tempfile.TemporaryDirectory() as tmp:
        for label, path, why in b.cases(Path(tmp)):
            b.run_model(label, path, why, Path(tmp))
    table(b.rows)
    for k, v in b.physical.items():
        print(f"physical {k}: {v['status']} "
              f"{ {x: y for x, y in v.items() if x not in ('model', 'impl', 'traceback')} }")
    print(f"acceptance: {acceptance(b.rows)}")
    b.save(final=True)
    return 1 if b.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
