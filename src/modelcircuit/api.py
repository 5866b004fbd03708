"""The Python API of DESIGN.md ("Interfaces"): load_onnx, compile, run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .frontend.onnx.importer import load_onnx
from .graphs import host
from .graphs.check import require_single_io
from .graphs.compiled import CompiledGraph
from .graphs.ir import Graph, GraphError
from .graphs.pipeline import compile_graph
from .graphs.types import NumType
from .sim.backends import BACKENDS as BACKEND_TABLE
from .sim.backends import run_backend

__all__ = ["compile", "load_onnx", "run", "sweep", "BACKENDS"]
BACKENDS = tuple(BACKEND_TABLE)


def compile(graph: Graph | str | os.PathLike, precision: str | NumType | None = None,  # noqa: A001
            reuse: int | str = 1, profile: str | None = None,
            per_layer: Mapping[str, Any] | None = None, calibrate: np.ndarray | None = None,
            table_bits: int = 10, strategy: str = "mult") -> CompiledGraph:
    """Compile ahead of time: shapes, types, tables, schedule are all fixed here.
    `graph` may also be an ONNX file's path (what a first try passes; it died inside the
    pipeline with an AttributeError). `strategy`: how the HDL backend builds Dense layers at
    R = 1 (mult | da | auto)."""
    if isinstance(graph, (str, os.PathLike)):
        graph = load_onnx(os.fspath(graph))
    elif not isinstance(graph, Graph):
        raise GraphError("compile takes a Graph (load_onnx, the graph builder) or an ONNX "
                         f"file's path, got {type(graph).__name__}")
    return compile_graph(graph, precision=precision, per_layer=per_layer, calibrate=calibrate,
                         reuse=reuse, profile=profile, table_bits=table_bits,
                         strategy=strategy)


def run(compiled: CompiledGraph, x: np.ndarray, backend: str = "golden", trace: bool = False,
        codes: bool = False) -> Any:
    """Run a batch (first dimension) through a backend.

    Returns float values of the (first) output, the host tail included; `codes=True` gives
    the circuit's integer output codes for fixed point; `trace=True` returns {tensor: array}
    for every intermediate tensor of head, circuit and tail (golden only).
    """
    if backend not in BACKENDS:
        raise GraphError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    require_single_io(compiled.graph)  # several: graphs.reference.execute takes a list
    g = compiled.graph
    x = np.asarray(x)
    shp = host.input_shape(compiled)
    if tuple(x.shape) == tuple(shp):  # one sample; (N, size) is a batch even if 2-D
        x = x[None]
    if tuple(x.shape[1:]) != shp and int(np.prod(x.shape[1:])) != int(np.prod(shp)):
        raise GraphError(f"input of shape {list(x.shape)} does not match the model's per-sample "
                         f"shape {list(shp)}")
    x = x.reshape((x.shape[0],) + tuple(shp))
    if trace and backend != "golden":
        raise GraphError("trace=True is only available on the golden backend")
    if trace:
        return host.trace(compiled, x) if codes else host.float_trace(compiled, x)
    if backend == "golden" and not codes:
        return host.golden(compiled, x)
    codes_in = host.encode(compiled, x)
    if backend == "golden":
        from .graphs import golden_plan  # not with the module: compile and export need none of it

        out = golden_plan.execute(g, [codes_in], inputs_are_codes=True)[g.outputs[0]]
    else:
        out, _notes = run_backend(backend, compiled, codes_in)
    out = np.asarray(out)
    return out if codes else host.decode(compiled, out)


def sweep(model: str | None = None, **options: Any) -> dict[str, Any]:
    """Design-space exploration (`modelcircuit sweep`): precision x reuse x device on Ray
    (extra [sweep]); options as modelcircuit.explore.run.sweep. Imported lazily: Ray and
    matplotlib load only when a sweep runs."""
    from .explore.run import sweep as run_sweep

    return run_sweep(model, **options)
