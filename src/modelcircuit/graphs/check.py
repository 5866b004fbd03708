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
            if const and (k < spec.activations or spec.consts == "none"):
                raise GraphError(f"{_at(n)}: input {k} ({i!r}) is a constant; {n.op} takes "
                                 f"({spec.signature}) with activations there")
            if not const and k >= spec.activations and spec.consts == "rest":
                raise GraphError(f"{_at(n)}: input {k} ({i!r}) is an activation; {n.op} takes "
                                 f"({spec.signature}) with constants after the "
                                 f"{'first' if spec.activations == 1 else spec.activations}")
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


MAX_NAMED = 4  # names listed in a one-line refusal before "…"


def _names(names: Iterable[str]) -> str:
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:MAX_NAMED])
    return shown + (f", … ({len(names)} in all)" if len(names) > MAX_NAMED else "")


def require_single_io(g: Graph) -> Graph:
    """The product handles models with one input and one output: the circuit's stream, the
    server's request and answer, verify's vectors, the artifact's self-check and `mc.run`
    each carry one tensor. Every command (cli.compile_from_args, the sweep), artifact writing
    and `mc.run` refuse a model with several here, naming them, before any work (not half-way
    in a backend; and a second output is never dropped silently). The compiler and the golden
    interpreter handle several (`mc.compile` + `graphs.reference.execute(graph, [a, b])`, as
    the ONNX conformance adapter uses them)."""
    for kind, names in (("inputs", g.inputs), ("outputs", g.outputs)):
        if len(names) != 1:
            raise GraphError(
                f"model {g.name}: {len(names)} {kind} ({_names(names) or 'none'}); modelcircuit "
                f"compiles models with exactly one input and one output (merge the {kind} "
                "into one tensor, e.g. with a Concat, before export)")
    return g


def require_fixed_point(g: Graph, what: str) -> Graph:
    """Circuits compute on fixed-point codes only. Every hardware command (`build`, `compile
    --target verilog|fpga`, `verify --backends rtl`, `sweep`) calls this right after the
    compile, before any estimate, fit, elaboration or file, so that a float precision — from
    --precision, a per-layer file's default or entry, or a weight/bias type — is one refusal
    naming the first float tensor, on every path. Untyped constants (shapes) are allowed; the
    host's float head and tail are not part of `g` (graphs/host.py)."""
    def bad(name: str) -> bool:
        t = g.tensors[name].dtype
        if t is None:
            return not g.is_const(name)
        return bool(t.is_float)

    for name in g.inputs:
        if bad(name):
            return _not_fixed(g, f"input {name!r}", name, what)
    for n in g.nodes:
        for name in list(n.inputs) + list(n.outputs):
            if name and bad(name):
                return _not_fixed(g, f"{_at(n)}, tensor {name!r}", name, what)
    return g


def _not_fixed(g: Graph, where: str, name: str, what: str) -> Graph:
    t = g.tensors[name].dtype
    raise GraphError(f"{what}: {where} has type {t or 'none'}; circuits compute in fixed point "
                     "only: give a fixed-point --precision (e.g. fixed<16,6>) and no float "
                     "entry in a per-layer precision file")
