"""The IR: one static graph, per sample (the batch dimension is not part of any shape).

Small frozen dataclasses. Passes never mutate a Graph; they build a new one with
`Graph.replace` / `dataclasses.replace`. Constants live in `Graph.constants` by tensor name:
float64 values before `quantize_constants`, int64 codes of their FixedType after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..util.errors import GraphError
from .types import NumType


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: NumType | None = None  # None until assign_types decides

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def __repr__(self) -> str:
        return f"{self.name}: {self.dtype or '?'}{list(self.shape)}"


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


@dataclass(frozen=True)
class Node:
    """One op. `inputs` lists activations first, then constants (weights, tables).

    `op` is an `ops.Op` (a str enum) or the equal text; `attrs` holds plain JSON values
    (types as their text), read typed through `ops.attrs(node)`; ops.SPECS says which."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def make(name: str, op: str, inputs: Iterable[str], outputs: Iterable[str],
             **attrs: Any) -> Node:
        return Node(name, op, tuple(inputs), tuple(outputs),
                    tuple(sorted((k, _freeze(v)) for k, v in attrs.items())))

    @property
    def attr(self) -> dict[str, Any]:
        return dict(self.attrs)

    def get(self, key: str, default: Any = None) -> Any:
        return self.attr.get(key, default)

    def with_attrs(self, **changes: Any) -> Node:
        a = self.attr
        a.update({k: _freeze(v) for k, v in changes.items()})
        return dataclasses.replace(self, attrs=tuple(sorted(a.items())))

    def __repr__(self) -> str:
        at = ", ".join(f"{k}={v}" for k, v in self.attrs)
        return f"{self.name}: {self.op}({', '.join(self.inputs)}{'; ' + at if at else ''}) -> {', '.join(self.outputs)}"


@dataclass(frozen=True)
class Graph:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    tensors: Mapping[str, Tensor]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    meta: tuple[tuple[str, Any], ...] = ()  # e.g. ("source", "onnx"), ("typed_by_model", True)

    def replace(self, **changes: Any) -> Graph:
        return dataclasses.replace(self, **changes)

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no tensor {name!r}") from None

    def is_const(self, name: str) -> bool:
        return name in self.constants

    def producer(self, name: str) -> Node | None:
        for n in self.nodes:
            if name in n.outputs:
                return n
        return None

    def consumers(self, name: str) -> list[Node]:
        return [n for n in self.nodes if name in n.inputs]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise GraphError(f"graph {self.name!r} has no node {name!r}")

    def get_meta(self, key: str, default: Any = None) -> Any:
        return dict(self.meta).get(key, default)

    def with_meta(self, **changes: Any) -> Graph:
        m = dict(self.meta)
        m.update({k: _freeze(v) for k, v in changes.items()})
        return self.replace(meta=tuple(sorted(m.items())))

    def activations(self, node: Node) -> list[str]:
        return [i for i in node.inputs if i and not self.is_const(i)]

    def __repr__(self) -> str:
        lines = [f"graph {self.name}({', '.join(repr(self.tensors[i]) for i in self.inputs)})"]
        for n in self.nodes:
            outs = ", ".join(repr(self.tensors[o]) for o in n.outputs)
            lines.append(f"  {n!r}   [{outs}]")
        lines.append(f"  return {', '.join(self.outputs)}")
        return "\n".join(lines)


def toposort(nodes: Iterable[Node], available: Iterable[str]) -> tuple[Node, ...]:
    """Stable topological order (original order among ready nodes): the schedule."""
    pending = list(nodes)
    have = set(available)
    out: list[Node] = []
    while pending:
        for i, n in enumerate(pending):
            if all((not x) or x in have for x in n.inputs):
                out.append(n)
                have.update(n.outputs)
                del pending[i]
                break
        else:
            missing = sorted({x for n in pending for x in n.inputs if x and x not in have})
            raise GraphError(f"graph has a cycle or undefined tensors: {missing[:5]}")
    return tuple(out)


def prune(graph: Graph) -> Graph:
    """Drop nodes, tensors and constants no output depends on."""
    need = set(graph.outputs)
    keep: list[Node] = []
    for n in reversed(graph.nodes):
        if any(o in need for o in n.outputs):
            keep.append(n)
            need.update(i for i in n.inputs if i)
    keep.reverse()
    need.update(graph.inputs)
    return graph.replace(
        nodes=tuple(keep),
        tensors={k: v for k, v in graph.tensors.items() if k in need},
        constants={k: v for k, v in graph.constants.items() if k in need},
    )
