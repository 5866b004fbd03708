"""What the sweep's modules share, built on the layers below the API (the API and the
command line import this package, so it imports neither): compile, the golden model's
float outputs, the model file, one-line errors."""

from __future__ import annotations

from typing import Any

import numpy as np


def compile_model(graph: Any, **options: Any) -> Any:
    """api.compile without the API module (same function underneath)."""
    from ..graphs.pipeline import compile_graph

    return compile_graph(graph, **options)


def golden(compiled: Any, x: np.ndarray) -> np.ndarray:
    """api.run(compiled, x): the model's float outputs (host head and tail included)."""
    from ..graphs import host, reference

    g = compiled.graph
    codes = host.encode(compiled, np.asarray(x))
    out = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
    return np.asarray(host.decode(compiled, np.asarray(out)))


def trace(compiled: Any, x: np.ndarray) -> dict[str, np.ndarray]:
    """api.run(compiled, x, trace=True): every intermediate tensor, as float values."""
    from ..graphs import host

    env = host.trace(compiled, np.asarray(x))
    return {k: host.values(compiled, k, v) for k, v in env.items()}


def load_model(path: str | None) -> Any:
    """The ONNX model at path, else the bundled digits MLP."""
    from ..data import DEFAULT_MODEL, bundled
    from ..graphs.onnx_import import load_onnx

    return load_onnx(path if path is not None else bundled(DEFAULT_MODEL))


def one_line(msg: object) -> str:
    """The first line of a message, other control characters escaped (as cli.one_line)."""
    line = str(msg).split("\n", 1)[0].strip()
    return "".join(ch if ch == " " or (ch.isprintable() and ch not in "\x85\u2028\u2029")
                   else ch.encode("unicode_escape").decode("ascii") for ch in line)
