"""The primary backends of a server, prepared once at load: `run(codes)` then only copies in,
runs a pre-built program at a compile-time batch bucket, and copies out.

- `gpu`: the CuPy runtime (gpu_backend/runtime.py): weights uploaded once, one arena, one
  CUDA graph captured per bucket at load.
- `gpu-emu`: the same kernel source built once with g++ (gpu_backend/emulator.py) and
  called through ctypes on one pre-allocated arena per bucket.
- `golden`: the golden model (graphs/reference.py), padded to the same buckets.

Buckets are the GPU runtime's (`DEFAULT_BUCKETS`) up to the first one that holds
`--max-batch`; a batch of n rows runs at the smallest bucket >= n, the padding rows are zero
codes and are dropped from the answer. Inputs and outputs are in the circuit's
representation (int64 codes for fixed point, float32 for float graphs).
"""

from __future__ import annotations

import ctypes
from typing import Protocol

import numpy as np

from ..graphs import golden_plan
from ..graphs.compiled import CompiledGraph

MAX_BATCH = 65536


def buckets_for(max_batch: int) -> tuple[int, ...]:
    """The compile-time buckets a server loads for --max-batch: those below it and the first
    that holds it (the runtime captures one CUDA graph per bucket)."""
    from ..gpu_backend.runtime import DEFAULT_BUCKETS

    out = []
    for b in sorted(DEFAULT_BUCKETS):
        out.append(b)
        if b >= max_batch:
            break
    return tuple(out)


def bucket_of(buckets: tuple[int, ...], n: int) -> int:
    for b in buckets:
        if n <= b:
            return b
    return buckets[-1]


class Engine(Protocol):
    """A prepared primary backend. `run` takes at most `buckets[-1]` rows."""

    name: str
    buckets: tuple[int, ...]

    def prepare(self) -> None: ...

    def run(self, codes: np.ndarray) -> np.ndarray: ...


def _out_shape(compiled: CompiledGraph) -> tuple[int, ...]:
    g = compiled.graph
    return tuple(g.tensor(g.outputs[0]).shape)


class GoldenEngine:
    """The golden model at the buckets' fixed shapes (a zeroed input buffer per bucket)."""

    name = "golden"

    def __init__(self, compiled: CompiledGraph, buckets: tuple[int, ...]):
        self.compiled, self.buckets = compiled, buckets
        self.g = compiled.graph
        self.bufs: dict[int, np.ndarray] = {}

    def prepare(self) -> None:
        t = self.g.tensor(self.g.inputs[0])
        dt = np.float32 if t.dtype is None or t.dtype.is_float else np.int64
        self.bufs = {b: np.zeros((b,) + tuple(t.shape), dt) for b in self.buckets}

    def run(self, codes: np.ndarray) -> np.ndarray:
        n = codes.shape[0]
        buf = self.bufs[bucket_of(self.buckets, n)]
        buf[:n] = codes.reshape((n,) + buf.shape[1:])
        buf[n:] = 0
        return golden_plan.execute(self.g, [buf], inputs_are_codes=True)[self.g.outputs[0]][:n]


class EmuEngine:
    """The shipped CUDA kernels on the CPU: built once (g++, cached by source hash), one arena
    per bucket allocated here, each call one `mc_forward` through ctypes."""

    name = "gpu-emu"

    def __init__(self, compiled: CompiledGraph, buckets: tuple[int, ...]):
        self.compiled, self.buckets = compiled, buckets
        self.out_shape = _out_shape(compiled)

    def prepare(self) -> None:
        from ..gpu_backend import emulator
        from ..gpu_backend.codegen import lower

        prog = self.prog = lower(self.compiled)
        path = emulator.build(emulator.emulator_source(prog, self.compiled.graph.name))
        lib = ctypes.CDLL(str(path))
        lib.mc_forward.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
        lib.mc_forward.restype = ctypes.c_int
        self.lib = lib
        per = prog.plan["arena_bytes_per_sample"]
        self.arenas = {b: np.zeros(max(1, per * b), np.uint8) for b in self.buckets}
        self.weights = (np.frombuffer(prog.weights_blob, np.uint8).copy() if prog.weights_blob
                        else np.zeros(16, np.uint8))
        self.inputs = {b: [emulator.tensor_view(prog, self.arenas[b], n, b) for n in prog.inputs]
                       for b in self.buckets}
        self.output = {b: emulator.tensor_view(prog, self.arenas[b], prog.outputs[0], b)
                       for b in self.buckets}
        self.out_float = prog.is_float[prog.outputs[0]]

    def run(self, codes: np.ndarray) -> np.ndarray:
        n = codes.shape[0]
        b = bucket_of(self.buckets, n)
        view = self.inputs[b][0]
        flat = codes.reshape(n, -1)
        if view.dtype.kind != "f" and flat.size:
            info = np.iinfo(view.dtype)
            if flat.min() < info.min or flat.max() > info.max:
                raise ValueError("input codes outside the range of the kernel's input type")
        view[:n] = flat
        view[n:] = 0
        rc = self.lib.mc_forward(self.arenas[b].ctypes.data, self.weights.ctypes.data, b)
        if rc != 0:
            raise RuntimeError(f"gpu-emu: mc_forward returned {rc}")
        out = self.output[b][:n]
        out = out.astype(np.float32) if self.out_float else out.astype(np.int64)
        return out.reshape((n,) + self.out_shape)


class GpuEngine:
    """A CUDA device through CuPy: gpu_backend.runtime.load captures one CUDA graph per
    bucket; each call copies into pinned memory, replays, copies out."""

    name = "gpu"

    def __init__(self, compiled: CompiledGraph, buckets: tuple[int, ...]):
        self.compiled, self.buckets = compiled, buckets
        self.out_shape = _out_shape(compiled)

    def prepare(self) -> None:
        from ..gpu_backend.runtime import load

        self.model = load(self.compiled, buckets=self.buckets)
        self.buckets = tuple(self.model.buckets)  # the runtime drops those that do not fit

    def run(self, codes: np.ndarray) -> np.ndarray:
        n = codes.shape[0]
        return np.asarray(self.model.run(codes)).reshape((n,) + self.out_shape)


ENGINES: dict[str, type] = {"golden": GoldenEngine, "gpu-emu": EmuEngine, "gpu": GpuEngine}


def make_engine(backend: str, compiled: CompiledGraph, buckets: tuple[int, ...]) -> Engine:
    return ENGINES[backend](compiled, buckets)
