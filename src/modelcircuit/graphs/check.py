"""The graph check: what every well-formed graph satisfies, verified after every pass
(pipeline.py) so that a pass that breaks the IR is named at once, not three passes later.

Checked: every op is in the vocabulary (ops.Op), with the attributes of its schema (no
unknown key, none missing, each of its kind) and the number and kind of inputs of its spec
(ops.SPECS); every tensor named anywhere has an entry; every node input is a graph input, a
constant or the output of an earlier node (topological order); no tensor is produced twice
or produced over an input or a constant; every graph output is produced (or is an input).

`coverage_problems` checks a backend's op tables against the vocabulary (tests/graphs/test_ops.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum, StrEnum
from typing import Any

from .ir import Graph, GraphError, Node
from .ops import SPECS, attrs, op_error


def _at(n: Node) -> str:
    return f"node {n.name} ({n.op})"


def verify_graph(g: Graph) -> Graph:
    """Return g unchanged if well formed, else raise a GraphError that names the fault."""
    tensors, consts = g.tensors, g.constants
    for kind, names in (("input", g.inputs), ("output", g.outputs), ("constant", consts)):
        for t in names:
            if t not in tensors:
                raise GraphError(f"graph {kind} {t!r} has no tensor entry")
    available = set(g.inputs)
    if len(available) != len(g.inputs) or available & consts.keys():
        dup = sorted(t for t in available if g.inputs.count(t) > 1 or t in consts)
        raise GraphError(f"graph input {dup[0]!r} is listed twice or is also a constant")
    available |= consts.keys()
    names: set[str] = set()
    for n in g.nodes:
        if n.name in names:
            raise GraphError(f"{_at(n)}: a second node named {n.name!r}")
        names.add(n.name)
        spec = SPECS.get(n.op)  # type: ignore[call-overload]
        if spec is None:
            raise GraphError(f"node {n.name}: {op_error(n.op)}")
        attrs(n)
        if spec.counts is not None and len(n.inputs) not in spec.counts:
            raise GraphError(f"{_at(n)}: {len(n.inputs)} inputs; {n.op} takes ({spec.signature})")
        if not n.inputs or len(n.outputs) != 1:
            raise GraphError(f"{_at(n)}: {len(n.inputs)} inputs and {len(n.outputs)} outputs; "
                             f"{n.op} takes ({spec.signature}) and has one output")
        for k, i in enumerate(n.inputs):
            if i not in tensors:
                raise GraphError(f"{_at(n)}: input {i!r} has no tensor entry")
            if i not in available:
                raise GraphError(f"{_at(n)}: input {i!r} is neither a graph input, a constant "
                                 "nor the output of an earlier node")
            const = i in consts
            if const and (k == 0 or spec.consts == "none"):
                raise GraphError(f"{_at(n)}: input {k} ({i!r}) is a constant; {n.op} takes "
                                 f"({spec.signature}) with activations there")
            if not const and k > 0 and spec.consts == "rest":
                raise GraphError(f"{_at(n)}: input {k} ({i!r}) is an activation; {n.op} takes "
                                 f"({spec.signature}) with constants after the first")
        for o in n.outputs:
            if o not in tensors:
                raise GraphError(f"{_at(n)}: output {o!r} has no tensor entry")
            if o in available:
                raise GraphError(f"{_at(n)}: output {o!r} is produced twice (or is a graph "
                                 "input or a constant)")
            available.add(o)
    for o in g.outputs:
        if o not in available or o in consts:
            raise GraphError(f"graph output {o!r} is not produced by any node")
    return g


def coverage_problems(vocab: Iterable[StrEnum], lowering: Mapping[Any, Any],
                      refused: Mapping[Any, str], table: str = "table") -> list[str]:
    """What is wrong with one backend's op tables against the vocabulary (empty: nothing):
    every op lowered or refused with a reason, none both, none outside the vocabulary, every
    key a vocabulary member (not a bare string)."""
    ops = {str(o): o for o in vocab}
    problems = []
    for kind, t in (("lowering", lowering), ("refused", refused)):
        for k in t:
            if not isinstance(k, Enum):
                problems.append(f"{table}: {kind} key {k!r} is a plain string, not an Op")
            if str(k) not in ops:
                problems.append(f"{table}: {kind} lists {str(k)!r}, which is not in the vocabulary")
    lowered, refusing = {str(k) for k in lowering}, {str(k) for k in refused}
    for name in sorted(ops):
        if name in lowered and name in refusing:
            problems.append(f"{table}: {name} is both lowered and refused")
        elif name not in lowered and name not in refusing:
            problems.append(f"{table}: {name} is neither lowered nor refused with a reason")
    for k, reason in refused.items():
        if not isinstance(reason, str) or not reason.strip():
            problems.append(f"{table}: {str(k)} is refused without a reason")
    return problems
