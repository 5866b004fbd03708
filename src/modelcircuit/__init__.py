"""modelcircuit: one compiled static graph, lowered to CUDA kernels and FPGA circuits.

The public names are imported on first use (PEP 562), so that `import modelcircuit.entry`
(the console command) runs in milliseconds and can set its signal handling before numpy,
onnx and the compiler load (entry.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import compile, load_onnx, run, sweep  # noqa: A004
    from .graphs.compiled import CompiledGraph
    from .graphs.ir import Graph, GraphError

__all__ = ["CompiledGraph", "Graph", "GraphError", "compile", "load_onnx", "run", "sweep"]
__version__ = "0.1.0"
_LAZY = {"compile": ".api", "load_onnx": ".api", "run": ".api", "sweep": ".api",
         "CompiledGraph": ".graphs.compiled", "Graph": ".graphs.ir", "GraphError": ".graphs.ir"}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
