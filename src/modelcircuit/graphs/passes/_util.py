"""Small helpers shared by passes: rewiring consumers, single-consumer checks."""

from __future__ import annotations

import dataclasses

from ..ir import Graph, Node


def single_consumer(g: Graph, tensor: str) -> Node | None:
    cons = g.consumers(tensor)
    if len(cons) == 1 and tensor not in g.outputs:
        return cons[0]
    return None


def rename_input(node: Node, old: str, new: str) -> Node:
    return dataclasses.replace(node, inputs=tuple(new if i == old else i for i in node.inputs))


def splice(g: Graph, drop: set[str], replace: dict[str, Node]) -> tuple[Node, ...]:
    """Nodes of g without those named in `drop`, with those in `replace` swapped in."""
    return tuple(replace.get(n.name, n) for n in g.nodes if n.name not in drop)
