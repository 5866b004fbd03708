"""The schedule: a stable topological order, fixed at compile time."""

from __future__ import annotations

from ..ir import Graph, toposort


def schedule(g: Graph) -> Graph:
    return g.replace(nodes=toposort(g.nodes, list(g.inputs) + list(g.constants)))
