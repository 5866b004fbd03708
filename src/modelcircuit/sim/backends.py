"""The one table of backends: name -> run(compiled, input codes, options) -> (output codes,
notes). `api.run` and `sim/verify.py` both go through it, so a backend is added in one place.

Every runner takes the graph's input representation (codes for fixed point, float32 for
float) for a batch and returns the first output in the same representation, (N, *shape).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graphs.compiled import CompiledGraph
from ..graphs.ir import GraphError


@dataclass(frozen=True)
class RunOptions:
    simulator: str = "verilator"
    seed: int = 0
    expected: np.ndarray | None = None  # golden output codes, when the caller has them


Result = tuple[np.ndarray, dict[str, Any]]
Runner = Callable[[Any, np.ndarray, RunOptions], Result]


def _golden(compiled: CompiledGraph, codes: np.ndarray, o: RunOptions) -> Result:
    g = compiled.graph
    if o.expected is not None:
        return o.expected, {"what": "golden model (graphs/reference.py)", "seconds": 0.0}
    from ..graphs import golden_plan  # here: `compile` imports this module, and needs none of it

    t0 = time.perf_counter()
    out = golden_plan.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
    return out, {"what": "golden model (graphs/reference.py)",
                 "seconds": time.perf_counter() - t0}


def _rtl(compiled: CompiledGraph, codes: np.ndarray, o: RunOptions) -> Result:
    from ..graphs.check import require_fixed_point
    from . import rtl

    require_fixed_point(compiled.graph, "the RTL simulation")
    t0 = time.perf_counter()
    r = rtl.execute(compiled, codes, simulator=o.simulator, seed=o.seed, expected=o.expected)
    notes = {"what": f"RTL simulation ({r['simulator']}, cocotb bench)",
             "seconds": time.perf_counter() - t0, "built": r["built"],
             "build_s": r["build_s"], "sim_s": r["sim_s"], "cycles": r["cycles"],
             "latency": r["latency"], "latency_expected": r["latency_expected"],
             "ii": r["ii"], "ii_expected": r["ii_expected"],
             "latency_ok": r["checks"]["latency_ok"], "ii_ok": r["checks"]["ii_ok"],
             "complete": r["checks"]["complete"],
             "stalled_fraction": r["stalled_fraction"],
             "scoreboard_first_mismatch": r["checks"]["first_mismatch"]}
    out = np.asarray(r["outputs"])
    shape = tuple(compiled.graph.tensor(compiled.graph.outputs[0]).shape)
    if out.shape[0] != codes.shape[0]:  # lost vectors: compare what came, flag the rest
        full = np.full((codes.shape[0],) + shape, np.iinfo(np.int64).min)
        full[: out.shape[0]] = out.reshape((-1,) + shape)
        out = full
    return out.reshape((codes.shape[0],) + shape), notes


def gpu_device() -> tuple[bool, str]:
    """(a real CUDA device?, description)."""
    try:
        from ..gpu_backend.runtime import device_info

        info = device_info()
        return True, f"CUDA device {info['name']}"
    except Exception as e:  # noqa: BLE001 - no CuPy, no driver, no device: use the emulator
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return False, f"CPU emulator (no CUDA device: {msg})"


def _gpu_run(compiled: CompiledGraph, codes: np.ndarray, real: bool, what: str) -> Result:
    from .. import gpu_backend

    t0 = time.perf_counter()
    g = compiled.graph
    outs = gpu_backend.execute(compiled, [codes], emulate=not real)
    shape = tuple(g.tensor(g.outputs[0]).shape)
    out = np.asarray(outs[g.outputs[0]]).reshape((codes.shape[0],) + shape)
    return out, {"what": what, "device": real, "seconds": time.perf_counter() - t0}


def _gpu(compiled: CompiledGraph, codes: np.ndarray, o: RunOptions) -> Result:
    """A CUDA device if there is one, else the CPU emulator of the same kernels."""
    real, what = gpu_device()
    return _gpu_run(compiled, codes, real, what)


def _gpu_emu(compiled: CompiledGraph, codes: np.ndarray, o: RunOptions) -> Result:
    return _gpu_run(compiled, codes, False, "CPU emulator of the CUDA kernels")


BACKENDS: dict[str, Runner] = {"golden": _golden, "rtl": _rtl, "gpu": _gpu, "gpu-emu": _gpu_emu}


def run_backend(name: str, compiled: CompiledGraph, codes: np.ndarray,
                options: RunOptions | None = None) -> Result:
    runner = BACKENDS.get(name)
    if runner is None:
        raise GraphError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return runner(compiled, np.asarray(codes), options or RunOptions())
