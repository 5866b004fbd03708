"""What the sweep's modules share, built on the layers below the API (the API and the
command line import this package, so it imports neither). The golden run, the trace, the
model file and one-line errors come from the same layers the API uses (graphs/host.py,
data.load_model, graphs/userio.one_line)."""

from __future__ import annotations

from typing import Any


def compile_model(graph: Any, **options: Any) -> Any:
    """api.compile without the API module (same function underneath)."""
    from ..graphs.check import require_single_io
    from ..graphs.pipeline import compile_graph

    return compile_graph(require_single_io(graph), **options)
