"""The CUDA runtime (CuPy, imported lazily): load once, then run = copy in, replay, copy out.

`load` compiles the module, uploads the weights once, allocates one arena (sized for the
largest batch bucket: the plan's offsets are per sample and scale with the batch), creates
the compile-time streams and events, pins host buffers and captures the forward pass into
one CUDA graph per batch bucket. Nothing is allocated or decided per call.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..graphs.compiled import CompiledGraph
from .codegen import lower
from .kernel import BLOCK, GpuError, Program

DEFAULT_BUCKETS = (1, 64, 4096, 65536)
_NP = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def fit_buckets(buckets: tuple[int, ...], arena_bytes_per_sample: int,
                mem_bytes: int, share: float = 0.25) -> tuple[int, ...]:
    """The batch buckets whose arena fits in `share` of the device memory (a 256x256 CNN
    needs megabytes per sample: 65,536 of them would not fit), else batch 1 alone; larger
    batches run in chunks of the largest bucket kept."""
    limit = int(mem_bytes * share)
    kept = tuple(b for b in sorted(set(int(b) for b in buckets))
                 if b * max(1, arena_bytes_per_sample) <= limit)
    return kept or (1,)


def _cupy() -> Any:
    try:
        import cupy as cp
    except Exception as e:  # noqa: BLE001 - any import failure means: no GPU runtime here
        raise GpuError(f"no GPU runtime: CuPy is not importable ({type(e).__name__}); install "
                       "modelcircuit[gpu] on a machine with a CUDA device, or use gpu-emu") from None
    return cp


def device_info(device: int = 0) -> dict[str, Any]:
    """Name, compute capability and profile of a CUDA device; GpuError without one."""
    cp = _cupy()
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GpuError(f"no CUDA device available ({msg}); use the gpu-emu backend") from None
    if n == 0:
        raise GpuError("no CUDA device available; use the gpu-emu backend")
    if not 0 <= device < n:
        raise GpuError(f"CUDA device {device} does not exist (this machine has {n})")
    from ..graphs.profiles import gpu_profile_for

    p = cp.cuda.runtime.getDeviceProperties(device)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    return {"device": device, "name": name, "sm": f"{p['major']}{p['minor']}",
            "sms": int(p["multiProcessorCount"]), "mem_bytes": int(p["totalGlobalMem"]),
            "profile": gpu_profile_for(name)}


class GpuModel:
    """A compiled graph resident on one device. Use `run(x)`; `run_all` returns every output."""

    def __init__(self, compiled: CompiledGraph, prog: Program, device: int, force: bool,
                 buckets: tuple[int, ...]):
        cp = self.cp = _cupy()
        self.info = device_info(device)
        want = getattr(compiled, "profile", None)
        if want and self.info["profile"] != want and not force:
            raise GpuError(f"this graph was compiled for profile {want!r} but device "
                           f"{self.info['name']!r} is {self.info['profile'] or 'unknown'!r}; "
                           "recompile for it or load with force=True")
        self.profile = self.info["profile"]
        self.compiled, self.prog = compiled, prog
        self.asked = tuple(sorted(set(int(b) for b in buckets)))
        self.g = compiled.graph
        self.buckets = fit_buckets(buckets, prog.plan["arena_bytes_per_sample"],
                                   self.info["mem_bytes"])
        self.device = cp.cuda.Device(device)
        with self.device:
            try:
                mod = cp.RawModule(code=prog.source, options=("-std=c++17",))
                self.fns = {k.kname: mod.get_function(k.kname) for k in prog.kernels}
            except Exception as e:  # noqa: BLE001
                raise GpuError(f"CUDA module failed to load: {str(e).splitlines()[0]}") from None
            blob = prog.weights_blob or b"\0" * 16
            self.weights = cp.asarray(np.frombuffer(blob, dtype=np.uint8))  # uploaded once
            top = self.buckets[-1]
            self.arena = cp.zeros(max(16, prog.plan["arena_bytes_per_sample"] * top), cp.uint8)
            st = prog.streams
            self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(st["streams"])]
            self.done = {k.node: cp.cuda.Event(disable_timing=True) for k in prog.kernels}
            self.fork_ev = cp.cuda.Event(disable_timing=True)
            self.join_ev = [cp.cuda.Event(disable_timing=True) for _ in st["join"]]
            self.args = {b: self._args(b) for b in self.buckets}
            import cupyx

            self.pin_in = {n: cupyx.empty_pinned((top, self._size(n)), self._dtype(n))
                           for n in prog.inputs}
            self.pin_out = {n: cupyx.empty_pinned((top, self._size(n)), self._dtype(n))
                            for n in prog.outputs}
            self.graphs = {b: self._capture(b) for b in self.buckets}

    # -- layout --------------------------------------------------------------------------
    def _size(self, name: str) -> int:
        return self.g.tensor(name).size

    def _dtype(self, name: str) -> Any:
        p = self.prog.plan["tensors"][name]
        return np.float32 if p["float"] else _NP[p["bits"]]

    def _view(self, name: str, batch: int) -> Any:
        p = self.prog.plan["tensors"][name]
        off = p["offset"] * batch
        return self.arena[off: off + p["bytes"] * batch].view(self._dtype(name))

    def _args(self, batch: int) -> list[tuple[Any, tuple, tuple]]:
        out = []
        for k in self.prog.kernels:
            n = batch * k.per_sample
            args: list[Any] = [np.int64(n)]
            for p in k.params:
                if p.const:
                    w = self.prog.weights[p.tensor]
                    args.append(self.weights[p.offset: p.offset + w["bytes"]])
                else:
                    args.append(self._view(p.tensor, batch))
            out.append((self.fns[k.kname], (max(1, math.ceil(n / BLOCK)),), tuple(args)))
        return out

    # -- launching -----------------------------------------------------------------------
    def enqueue(self, batch: int) -> None:
        """Launch the forward pass on the compile-time streams, joined by events."""
        st = self.prog.streams
        main = self.streams[0]
        self.fork_ev.record(main)
        for s in st["fork"]:
            self.streams[s].wait_event(self.fork_ev)
        for k, (fn, grid, args) in zip(self.prog.kernels, self.args[batch], strict=True):
            s = self.streams[st["node_stream"][k.node]]
            for p in st["waits"].get(k.node, []):
                s.wait_event(self.done[p])
            with s:  # RawKernel launches on the current stream
                fn(grid, (BLOCK,), args)
            self.done[k.node].record(s)
        for ev, s in zip(self.join_ev, st["join"], strict=True):
            ev.record(self.streams[s])
            main.wait_event(ev)

    def _capture(self, batch: int) -> Any:
        main = self.streams[0]
        try:
            main.begin_capture()
            self.enqueue(batch)
            return main.end_capture()
        except Exception as e:  # noqa: BLE001
            raise GpuError(f"CUDA graph capture failed: {str(e).splitlines()[0]}") from None

    def bucket(self, batch: int) -> int:
        for b in self.buckets:
            if batch <= b:
                return b
        return self.buckets[-1]

    def _copy_in(self, xs: list[np.ndarray], lo: int, hi: int, b: int) -> None:
        cp, main = self.cp, self.streams[0]
        for name, x in zip(self.prog.inputs, xs, strict=True):
            pin = self.pin_in[name]
            pin[: hi - lo] = x[lo:hi].reshape(hi - lo, -1)
            if hi - lo < b:
                pin[hi - lo: b] = 0
            dst = self._view(name, b)
            cp.cuda.runtime.memcpyAsync(dst.data.ptr, pin.ctypes.data, dst.nbytes, 1, main.ptr)

    def _copy_out(self, lo: int, hi: int, b: int, out: dict[str, np.ndarray]) -> None:
        cp, main = self.cp, self.streams[0]
        for name in self.prog.outputs:
            src = self._view(name, b)
            pin = self.pin_out[name]
            cp.cuda.runtime.memcpyAsync(pin.ctypes.data, src.data.ptr, src.nbytes, 2, main.ptr)
        main.synchronize()
        for name in self.prog.outputs:
            out[name][lo:hi] = self.pin_out[name][: hi - lo].reshape(out[name][lo:hi].shape)

    def run_all(self, xs: list[np.ndarray], graph: bool = True) -> dict[str, np.ndarray]:
        """Copy in, replay (or launch one by one when graph=False), copy out. Inputs and
        outputs in the graph's representation (codes or float32)."""
        xs = [np.asarray(x) for x in xs]
        batch = int(xs[0].shape[0])
        out = {o: np.empty((batch,) + self.g.tensor(o).shape,
                           np.float32 if self.prog.is_float[o] else np.int64)
               for o in self.prog.outputs}
        top = self.buckets[-1]
        with self.device:
            for lo in range(0, batch, top):
                hi = min(batch, lo + top)
                b = self.bucket(hi - lo)
                self._copy_in(xs, lo, hi, b)
                if graph:
                    self.graphs[b].launch(stream=self.streams[0])
                else:
                    self.enqueue(b)
                self._copy_out(lo, hi, b, out)
        return out

    def run(self, x: np.ndarray, graph: bool = True) -> np.ndarray:
        return self.run_all([x], graph)[self.prog.outputs[0]]

    def device_time_ms(self, batch: int, graph: bool = True, repeat: int = 20) -> float:
        """Device time of one forward pass at a bucket size (CUDA events, median)."""
        cp, main = self.cp, self.streams[0]
        b = self.bucket(batch)
        t0, t1 = cp.cuda.Event(), cp.cuda.Event()
        times = []
        with self.device:
            for _ in range(repeat):
                t0.record(main)
                if graph:
                    self.graphs[b].launch(stream=main)
                else:
                    self.enqueue(b)
                t1.record(main)
                t1.synchronize()
                times.append(cp.cuda.get_elapsed_time(t0, t1))
        return float(np.median(times))


_LOADED: dict[tuple[int, int], tuple[Any, GpuModel]] = {}


def load(compiled: CompiledGraph, device: int = 0, force: bool = False,
         buckets: tuple[int, ...] = DEFAULT_BUCKETS) -> GpuModel:
    """Load onto a CUDA device: weights once, one arena, streams, pinned buffers, CUDA graphs
    (cached per compiled graph and device). Raises GpuError (one line) when there is no
    usable GPU."""
    key = (id(compiled), device)
    hit = _LOADED.get(key)
    if hit is not None and hit[0] is compiled and hit[1].asked == tuple(sorted(set(buckets))):
        return hit[1]
    m = GpuModel(compiled, lower(compiled), device, force, buckets)
    _LOADED[key] = (compiled, m)
    return m
