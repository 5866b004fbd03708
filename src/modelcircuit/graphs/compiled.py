"""CompiledGraph: what the compiler hands every backend. Pure data (graph + options + pass
log + id + the analyses' plans + host parts); loading, running and exporting are functions
in each backend. Apart from pipeline.py so that a backend can name the type without
importing every pass."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .ir import Graph


@dataclass(frozen=True)
class CompiledGraph:
    graph: Graph
    options: Mapping[str, Any]
    pass_log: tuple[tuple[str, float, int], ...]  # (pass, milliseconds, nodes after)
    graph_id: str
    profile: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # backend plans (reuse, memory…)
    head: Graph | None = None  # float pre-processing + first quantizer, run on the host
    tail: Graph | None = None  # float affine after the last integer tensor, on the host
