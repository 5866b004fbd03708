"""GPU backend: fused CUDA kernels from templates/cuda, a static arena, streams, CUDA graph
replay (runtime.py, CuPy) and a CPU emulator of the very same kernel source (emulator.py).

Imports modelcircuit.graphs only. Public functions: execute, load, write_artifact,
compile_ptx, generate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .artifact import write_artifact
from .codegen import LOWERING, GpuError, Program, generate
from .nvrtc import compile_ptx

__all__ = ["GpuError", "LOWERING", "Program", "compile_ptx", "execute", "generate", "load",
           "program", "write_artifact"]


def program(compiled: Any) -> Program:
    """The lowered program of a CompiledGraph (cached on the object's identity)."""
    cached = _PROGRAMS.get(id(compiled))
    if cached is not None and cached[0] is compiled:
        return cached[1]
    extra = getattr(compiled, "extra", None) or {}
    prog = generate(compiled.graph, compiled.graph_id, extra.get("memory_plan"),
                    extra.get("streams"))
    if len(_PROGRAMS) > 32:
        _PROGRAMS.clear()
    _PROGRAMS[id(compiled)] = (compiled, prog)
    return prog


_PROGRAMS: dict[int, tuple[Any, Program]] = {}


def execute(compiled: Any, inputs: list[np.ndarray], emulate: bool) -> dict[str, np.ndarray]:
    """Run a batch. Inputs and outputs in the graph's representation (int64 codes for fixed
    point, float32 for float), as reference.execute(..., inputs_are_codes=True)."""
    g = compiled.graph
    if len(inputs) != len(g.inputs):
        raise GpuError(f"graph {g.name!r} takes {len(g.inputs)} inputs, got {len(inputs)}")
    xs = []
    for name, x in zip(g.inputs, inputs, strict=True):
        x = np.asarray(x)
        shp = g.tensor(name).shape
        if x.ndim == len(shp):
            x = x[None]
        if int(np.prod(x.shape[1:], dtype=np.int64)) != g.tensor(name).size:
            raise GpuError(f"input {name!r} of shape {list(x.shape)} does not match the "
                           f"per-sample shape {list(shp)}")
        xs.append(x)
    shapes = {o: g.tensor(o).shape for o in g.outputs}
    prog = program(compiled)
    if emulate:
        from . import emulator

        return emulator.run(prog, g.name, xs, shapes)
    from .runtime import load as _load

    return _load(compiled).run_all(xs)


def load(compiled: Any, device: int = 0, force: bool = False, **kw: Any) -> Any:
    """Load onto a CUDA device: weights once, one arena, streams, pinned buffers, CUDA graphs.
    Raises GpuError (one line) when there is no usable GPU."""
    from .runtime import load as _load

    return _load(compiled, device=device, force=force, **kw)
