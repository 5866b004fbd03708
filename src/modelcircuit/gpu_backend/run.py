"""Run a batch through the lowered program: on the CPU emulator (the shipped kernel source
built with g++) or on a CUDA device (runtime.py)."""

from __future__ import annotations

import numpy as np

from ..graphs.compiled import CompiledGraph
from . import emulator, runtime
from .codegen import lower
from .kernel import GpuError


def execute(compiled: CompiledGraph, inputs: list[np.ndarray], emulate: bool) -> dict[str, np.ndarray]:
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
    prog = lower(compiled)
    if emulate:
        shapes = {o: g.tensor(o).shape for o in g.outputs}
        return emulator.run(prog, g.name, xs, shapes)
    return runtime.load(compiled).run_all(xs)
