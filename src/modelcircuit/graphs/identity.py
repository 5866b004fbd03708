"""Graph id: sha256 of a canonical serialisation of the compiled graph (structure, types,
constants, schedule, options, profile). Same inputs on any machine give the same id."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .ir import Graph


def canonical(g: Graph) -> dict[str, Any]:
    return {
        "name": g.name,
        "inputs": list(g.inputs),
        "outputs": list(g.outputs),
        "nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs),
                   "outputs": list(n.outputs), "attrs": {k: _jsonable(v) for k, v in n.attrs}}
                  for n in g.nodes],
        "tensors": {k: {"shape": list(t.shape), "type": None if t.dtype is None else str(t.dtype)}
                    for k, t in sorted(g.tensors.items())},
    }


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def graph_id(g: Graph, options: Mapping[str, Any], head: Graph | None = None,
             tail: Graph | None = None) -> str:
    """The id of the circuit's graph and of the host parts around it (graphs/host.py)."""
    h = hashlib.sha256()
    doc: dict[str, Any] = {"graph": canonical(g), "options": dict(options)}
    for key, part in (("head", head), ("tail", tail)):
        if part is not None:
            doc[key] = canonical(part)
    h.update(json.dumps(doc, sort_keys=True, default=str).encode())
    for part in (g, head, tail):
        if part is None:
            continue
        for name in sorted(part.constants):
            a = np.ascontiguousarray(part.constants[name])
            h.update(f"{name}|{a.dtype.str}|{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()
