"""The op vocabulary: every backend table covers it (lowered, or refused with a reason), the
reference defines every op, and the typed attribute schemas read what passes write."""

from __future__ import annotations

import importlib
from enum import StrEnum

import numpy as np
import pytest

from modelcircuit.graphs import ops, reference
from modelcircuit.graphs.check import coverage_problems
from modelcircuit.graphs.ir import GraphError, Node
from modelcircuit.graphs.ops import (
    SPECS,
    DenseAttrs,
    GatherAttrs,
    LutAttrs,
    Op,
    SoftmaxAttrs,
    SubAttrs,
    attrs,
)
from modelcircuit.graphs.types import FixedType

# backend -> the modules that may hold its lowering and refused tables (first found wins),
# and the tables' names there
BACKENDS = {
    "hdl": ("modelcircuit.hdl.vector.lower",),
    "hdl-streamed": ("modelcircuit.hdl.streamed.lower",),
    "gpu_backend": ("modelcircuit.gpu_backend.codegen", "modelcircuit.gpu_backend.lowering"),
}
TABLE_NAMES = {"hdl-streamed": ("STREAM_LOWERING", "STREAM_REFUSED")}


def _tables(backend: str) -> tuple[str, dict, dict]:
    low, ref = TABLE_NAMES.get(backend, ("LOWERING", "REFUSED"))
    for mod in BACKENDS[backend]:
        m = importlib.import_module(mod)
        if hasattr(m, low) and hasattr(m, ref):
            return mod, getattr(m, low), getattr(m, ref)
    pytest.skip(f"{backend}: none of {', '.join(BACKENDS[backend])} defines both LOWERING and "
                "REFUSED yet (the backend's restructuring has not landed)")


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_backend_tables_cover_the_vocabulary(backend: str) -> None:
    mod, lowering, refused = _tables(backend)
    assert coverage_problems(Op, lowering, refused, mod) == []


def test_reference_defines_every_op() -> None:
    assert coverage_problems(Op, reference.OPS, {}, "reference.OPS") == []


def test_every_op_has_a_spec_and_lut_funcs_are_defined() -> None:
    assert set(SPECS) == set(Op) == ops.ALL
    assert all(s.attrs.OP == op for op, s in SPECS.items())
    assert set(reference.FLOAT_FUNCS) == ops.LUT_FUNCS


def test_categories_are_within_the_vocabulary() -> None:
    for name in ("LINEAR", "ELEMENTWISE_BINARY", "ADDITIVE", "ACTIVATION", "TABLE_OPS",
                 "QUANTIZERS", "MOVEMENT", "LAYOUT", "FLOAT_CHAIN", "EXACT_PRODUCERS"):
        cat = getattr(ops, name)
        assert cat and cat <= ops.ALL, name


# -- the coverage check itself fails when it should ----------------------------------------
class Extended(StrEnum):
    """The vocabulary plus one op nobody lowers yet."""

    DENSE = "Dense"
    CONV2D = "Conv2D"


def test_an_op_added_without_lowering_fails_the_coverage_check() -> None:
    lowering = {Op.DENSE: object()}
    assert coverage_problems([Op.DENSE], lowering, {}) == []
    assert coverage_problems(Extended, lowering, {}, "hdl") == [
        "hdl: Conv2D is neither lowered nor refused with a reason"]
    # every real backend table, given a vocabulary with one more op, is caught the same way
    extended = list(Op) + [Extended.CONV2D]
    assert coverage_problems(extended, reference.OPS, {}, "reference") == [
        "reference: Conv2D is neither lowered nor refused with a reason"]
    assert coverage_problems(extended, lowering, {Extended.CONV2D: "later"}, "t")[:1] == [
        "t: Add is neither lowered nor refused with a reason"]


def test_coverage_check_catches_each_fault() -> None:
    lowering = {Op.DENSE: object(), Extended.CONV2D: object()}
    refused = {Op.DENSE: "why", Op.ADD: " "}
    got = coverage_problems([Op.DENSE, Op.ADD, Op.RELU], lowering, refused, "t")
    assert got == [
        "t: lowering lists 'Conv2D', which is not in the vocabulary",
        "t: Dense is both lowered and refused",
        "t: Relu is neither lowered nor refused with a reason",
        "t: Add is refused without a reason",
    ]
    got = coverage_problems([Op.DENSE], {"Dense": object()}, {}, "t")
    assert got == ["t: lowering key 'Dense' is a plain string, not an Op"]


# -- typed attributes ------------------------------------------------------------------------
def test_op_is_its_text() -> None:
    assert Op.DENSE == "Dense" and f"{Op.LEAKY_RELU}" == "LeakyRelu"
    n = Node.make("d", Op.DENSE, ["x", "W"], ["y"])
    assert n.op == "Dense" and reference.OPS.get("Dense") is reference.dense


def test_attrs_parse_the_stored_text_once() -> None:
    n = Node.make("d", "Dense", ["x", "W"], ["y"], acc="fixed<20,8>", relu=True)
    a = DenseAttrs.of(n)
    assert a == DenseAttrs(acc=FixedType(20, 8), relu=True, exact=False)
    assert attrs(n) is a  # cached per node
    assert n.attrs == (("acc", "fixed<20,8>"), ("relu", True))  # stored as before
    assert SubAttrs.of(Node.make("s", "Sub", ["a", "b"], ["c"], exact=True)).exact
    g = GatherAttrs.of(Node.make("g", "Gather", ["x"], ["y"], axis=1, indices=[[2, 0]],
                                 indices_shape=[1, 2]))
    assert g.index_array().tolist() == [[2, 0]] and g.indices_shape == (1, 2)
    s = SoftmaxAttrs.of(Node.make("s", "Softmax", ["x"], ["y"]))
    assert s.exp_type is None and s.exp_lo is None


@pytest.mark.parametrize("node, message", [
    (Node.make("d", "Dense", ["x", "W"], ["y"], bias=1),
     "node d (Dense): unknown attribute 'bias'; Dense has: acc, relu, exact"),
    (Node.make("d", "Dense", ["x", "W"], ["y"], acc="float32"),
     "node d (Dense): attribute 'acc': 'float32' is not a fixed-point type"),
    (Node.make("d", "Dense", ["x", "W"], ["y"], acc="fixed<20>"),
     "node d (Dense): attribute 'acc': malformed precision 'fixed<20>'"),
    (Node.make("d", "Dense", ["x", "W"], ["y"], relu=1),
     "node d (Dense): attribute 'relu': 1 is not a bool"),
    (Node.make("r", "Reshape", ["x"], ["y"], shape=[2, "3"]),
     "node r (Reshape): attribute 'shape': (2, '3') is not a tuple of ints"),
    (Node.make("c", "Concat", ["x"], ["y"]), "node c (Concat): missing attribute 'axis'"),
    (Node.make("l", "Lut", ["x"], ["y"], func=3), "node l (Lut): attribute 'func': 3 is not a str"),
    (Node.make("c", "RNN", ["x"], ["y"]), "node c: unknown op 'RNN'; the vocabulary: Dense,"),
])
def test_attrs_refuse_what_the_schema_does_not_say(node: Node, message: str) -> None:
    with pytest.raises(GraphError) as e:
        attrs(node)
    assert str(e.value).startswith(message)


def test_of_refuses_another_op() -> None:
    with pytest.raises(GraphError, match=r"node r \(Relu\) is not a Lut"):
        LutAttrs.of(Node.make("r", "Relu", ["x"], ["y"]))


def test_compiled_graph_attributes_read_typed(tmp_path) -> None:
    """What the passes write is what the schemas say: a compiled graph reads back typed."""
    from modelcircuit.frontend.builder import GraphBuilder
    from modelcircuit.graphs.pipeline import compile_graph

    b = GraphBuilder("m")
    x = b.input("x", 4)
    h = b.relu(b.dense(x, np.ones((4, 3)), np.zeros(3)))
    b.output(b.softmax(b.activation(h, "tanh")))
    g = compile_graph(b.build(), precision="fixed<12,4>").graph
    by_op = {n.op: attrs(n) for n in g.nodes}
    assert by_op[Op.DENSE].relu and isinstance(by_op[Op.DENSE].acc, FixedType)
    assert isinstance(by_op[Op.LUT], LutAttrs) and by_op[Op.LUT].shift is not None
    assert isinstance(by_op[Op.SOFTMAX].recip_type, FixedType)
