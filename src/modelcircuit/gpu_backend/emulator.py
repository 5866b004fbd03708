"""gpu-emu: the shipped CUDA kernel source, compiled for the CPU with g++ through a small
shim header (templates/cuda/shim.h.j2) and called through ctypes. Builds are cached by the
hash of their source under ~/.cache/modelcircuit/emu (or $MODELCIRCUIT_CACHE/emu)."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import numpy as np

from ..util import native
from .codegen import render
from .kernel import BLOCK, GpuError, Program

CXXFLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-fno-fast-math", "-ffp-contract=off",
            "-w"]


def cache_dir() -> Path:
    return native.cache_root() / "emu"


def emulator_source(prog: Program, graph_name: str) -> str:
    calls = [{"kname": k.kname, "per_sample": k.per_sample, "args": k.params}
             for k in prog.kernels]
    return "\n".join([render("shim.h.j2"), prog.source,
                      render("emu_main.cpp.j2", graph_name=graph_name, calls=calls,
                             block=BLOCK)])


def build(source: str) -> Path:
    """Compile the emulator library (cached by source hash); returns the .so path."""
    cxx = native.compiler("CXX", "g++", "c++")
    if not cxx:
        raise GpuError("the gpu-emu backend needs a C++ compiler (g++), none found on PATH")
    try:
        return native.shared_library(source, cc=cxx, flags=CXXFLAGS, kind="emu", suffix=".cpp")
    except native.BuildError as e:
        raise GpuError(f"g++ failed to build the emulator: {e}") from None


@cache
def _load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.mc_forward.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    lib.mc_forward.restype = ctypes.c_int
    return lib


def run(prog: Program, graph_name: str, inputs: list[np.ndarray],
        shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Run one batch: inputs in the graph's representation (codes or float32)."""
    lib = _load(str(build(emulator_source(prog, graph_name))))
    batch = int(np.asarray(inputs[0]).shape[0]) if inputs else 1
    arena = np.zeros(max(1, prog.plan["arena_bytes_per_sample"] * batch), dtype=np.uint8)
    for name, x in zip(prog.inputs, inputs, strict=True):
        view = tensor_view(prog, arena, name, batch)
        x = np.asarray(x).reshape(batch, -1)
        if not np.issubdtype(view.dtype, np.floating):
            info = np.iinfo(view.dtype)
            if x.size and (x.min() < info.min or x.max() > info.max):
                raise GpuError(f"input {name!r}: codes outside the range of its type")
        view[...] = x.reshape(view.shape).astype(view.dtype)
    weights = np.frombuffer(prog.weights_blob, dtype=np.uint8) if prog.weights_blob else \
        np.zeros(16, dtype=np.uint8)
    rc = lib.mc_forward(arena.ctypes.data, weights.ctypes.data, batch)
    if rc != 0:
        raise GpuError(f"emulator returned {rc}")
    out = {}
    for name in prog.outputs:
        v = tensor_view(prog, arena, name, batch)
        v = v.astype(np.float32) if prog.is_float[name] else v.astype(np.int64)
        out[name] = v.reshape((batch,) + tuple(shapes[name]))
    return out


def tensor_view(prog: Program, arena: np.ndarray, name: str, batch: int) -> np.ndarray:
    p = prog.plan["tensors"][name]
    dt = np.float32 if p["float"] else {8: np.int8, 16: np.int16, 32: np.int32,
                                        64: np.int64}[p["bits"]]
    off = p["offset"] * batch
    return arena[off: off + p["bytes"] * batch].view(dt).reshape(batch, -1)
