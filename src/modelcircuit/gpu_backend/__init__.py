"""GPU backend: fused CUDA kernels from templates/cuda, a static arena, streams, CUDA graph
replay (runtime.py, CuPy) and a CPU emulator of the very same kernel source (emulator.py).

Imports modelcircuit.graphs only. The jobs, as on the HDL side: `lower` (compiled graph ->
Program: kernels, plan, weights; codegen.py, one function per op in lowering.py) and
`export` (write the gpu/ folder; artifact.py). Then `execute` (run.py) and `load`
(runtime.py). This file only re-exports.
"""

from __future__ import annotations

from .artifact import export, write_artifact
from .codegen import generate, lower, program
from .kernel import GpuError, Program
from .lowering import LOWERING, REFUSED
from .nvrtc import compile_ptx
from .run import execute
from .runtime import load

__all__ = ["GpuError", "LOWERING", "Program", "REFUSED", "compile_ptx", "execute", "export",
           "generate", "load", "lower", "program", "write_artifact"]
