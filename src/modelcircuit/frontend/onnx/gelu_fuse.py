"""Gelu as a table: an element-wise sub-graph of one tensor x around an Erf or Tanh whose
values are those of Gelu (erf form) or its tanh approximation, checked on a grid in float64,
becomes one `Lut` node of DOMAIN (func gelu / gelu_tanh).

Why a module of its own: it shares only the graph view (frontend/onnx/fuse_graph.py) with
the attention fusion; `fuse` (frontend/onnx/attention.py) runs both in one pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from .fuse_graph import DOMAIN, Fused, OnnxModel

ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sqrt", "Neg",
                         "Identity"})
GELU_TOL = 1e-5


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


_FUNCS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"gelu": _gelu, "gelu_tanh": _gelu_tanh}


def _elementwise(m: OnnxModel, n: onnx.NodeProto) -> bool:
    return n.op_type in ELEMENTWISE and all(
        m.is_const(i) and m.value(i).size == 1 for i in n.input if i and i not in m.dynamic)


def _region(m: OnnxModel, z: str, x: str) -> list[onnx.NodeProto] | None:
    """The element-wise nodes computing z from x and scalar constants alone (None: z reads
    another activation)."""
    seen: dict[int, onnx.NodeProto] = {}
    todo = [z]
    while todo:
        t = todo.pop()
        if t == x or not m.dynamic.__contains__(t):
            continue
        n = m.producer.get(t)
        if n is None or not _elementwise(m, n):
            return None
        if id(n) not in seen:
            seen[id(n)] = n
            todo.extend(i for i in n.input if i)
    return [n for n in m.model.graph.node if id(n) in seen]


def _ancestors(m: OnnxModel, t: str, limit: int = 12) -> list[str]:
    out, todo = [], [t]
    while todo and len(out) < limit:
        s = todo.pop(0)
        n = m.producer.get(s)
        if n is None or not _elementwise(m, n):
            continue
        for i in n.input:
            if i in m.dynamic and i not in out:
                out.append(i)
                todo.append(i)
    return out


def gelu_fuse(m: OnnxModel, n: onnx.NodeProto, out: Fused) -> None:
    chain, t = [], n.output[0]
    while len(m.cons(t)) == 1 and t not in m.outputs and _elementwise(m, m.cons(t)[0]):
        t = m.cons(t)[0].output[0]
        chain.append(t)
    for z in reversed(chain):
        for x in _ancestors(m, n.input[0]):
            reg = _region(m, z, x)
            if reg is None or not any(r is n for r in reg):
                continue
            inner = {o for r in reg for o in r.output} - {z}
            if any(c not in reg for o in inner for c in m.cons(o)) or inner & m.outputs:
                continue
            grid = np.concatenate([np.linspace(-8, 8, 641), [-30.0, -12.0, 12.0, 30.0]])
            try:
                sub = OnnxModel(m.model, m.base_dir)
                got = sub.evaluate([z], {x: grid})[0].astype(np.float64)
            except Exception:
                continue
            for func, f in _FUNCS.items():
                if got.shape == grid.shape and np.all(
                        np.abs(got - f(grid)) <= GELU_TOL * (1.0 + np.abs(grid))):
                    for r in reg:
                        out.remove.add(id(r))
                    out.new_nodes.append((reg[0], [helper.make_node(
                        "Lut", [x], [z], name=reg[-1].name or f"gelu_{z}", domain=DOMAIN,
                        func=func)]))
                    return
            return
