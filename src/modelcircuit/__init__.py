"""modelcircuit: one compiled static graph, lowered to CUDA kernels and FPGA circuits."""

from __future__ import annotations

from .api import compile, load_onnx, run, sweep  # noqa: A004
from .graphs.compiled import CompiledGraph
from .graphs.ir import Graph, GraphError

__all__ = ["CompiledGraph", "Graph", "GraphError", "compile", "load_onnx", "run", "sweep"]
__version__ = "0.1.0"
