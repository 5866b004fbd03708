"""The graph check (graphs/check.py): one test per kind of malformation, each with its message,
and the pipeline naming the pass (or the importer) that produced a malformed graph."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.graphs import pipeline
from modelcircuit.graphs.check import verify_graph
from modelcircuit.graphs.ir import Graph, GraphError, Node, Tensor


def small() -> Graph:
    """x -> Dense(W, b) -> Relu -> y"""
    b = GraphBuilder("m")
    x = b.input("x", 4)
    b.output(b.relu(b.dense(x, np.ones((4, 3)), np.zeros(3), name="d"), name="r"))
    return b.build()


def _node(g: Graph, which: str, **changes) -> Graph:
    return g.replace(nodes=tuple(dataclasses.replace(n, **changes) if n.name == which else n
                                 for n in g.nodes))


def _tensors_without(g: Graph, name: str) -> Graph:
    return g.replace(tensors={k: v for k, v in g.tensors.items() if k != name})


def test_a_well_formed_graph_passes() -> None:
    g = small()
    assert verify_graph(g) is g
    compiled = pipeline.compile_graph(g, precision="fixed<12,4>").graph
    assert verify_graph(compiled) is compiled


CASES: list[tuple[str, Callable[[Graph], Graph], str]] = [
    ("unknown op", lambda g: _node(g, "r", op="RNN"),
     "node r: unknown op 'RNN'; the vocabulary: Dense, Add,"),
    ("unknown attribute", lambda g: _node(g, "d", attrs=(("bias", True),)),
     "node d (Dense): unknown attribute 'bias'; Dense has: acc, relu, exact"),
    ("attribute of the wrong kind", lambda g: _node(g, "d", attrs=(("relu", "yes"),)),
     "node d (Dense): attribute 'relu': 'yes' is not a bool"),
    ("malformed type text", lambda g: _node(g, "d", attrs=(("acc", "fixed<8"),)),
     "node d (Dense): attribute 'acc': malformed precision 'fixed<8'"),
    ("missing attribute", lambda g: _node(g, "r", op="LeakyRelu"),
     "node r (LeakyRelu): missing attribute 'alpha'"),
    ("too few inputs", lambda g: _node(g, "d", inputs=("x",)),
     "node d (Dense): 1 inputs; Dense takes (x, W[, b])"),
    ("too many inputs", lambda g: _node(g, "r", inputs=("d", "d")),
     "node r (Relu): 2 inputs; Relu takes (x)"),
    ("two outputs", lambda g: _node(g, "r", outputs=("r", "x")),
     "node r (Relu): 1 inputs and 2 outputs; Relu takes (x) and has one output"),
    ("activation where a constant belongs", lambda g: _node(g, "d", inputs=("x", "x", "d_b")),
     "node d (Dense): input 1 ('x') is an activation; Dense takes (x, W[, b]) with constants "
     "after the first"),
    ("constant as the first input", lambda g: _node(g, "r", inputs=("d_W",)),
     "node r (Relu): input 0 ('d_W') is a constant; Relu takes (x) with activations there"),
    ("input used before it is produced",
     lambda g: g.replace(nodes=tuple(reversed(g.nodes))),
     "node r (Relu): input 'd' is neither a graph input, a constant nor the output of an "
     "earlier node"),
    ("input never produced", lambda g: _node(g, "r", inputs=("ghost",)).replace(
        tensors={**g.tensors, "ghost": Tensor("ghost", (3,))}),
     "node r (Relu): input 'ghost' is neither a graph input, a constant nor the output of an "
     "earlier node"),
    ("input without a tensor entry", lambda g: _node(g, "r", inputs=("ghost",)),
     "node r (Relu): input 'ghost' has no tensor entry"),
    ("output without a tensor entry", lambda g: _tensors_without(g, "d"),
     "node d (Dense): output 'd' has no tensor entry"),
    ("tensor produced twice", lambda g: _node(g, "r", outputs=("d",)),
     "node r (Relu): output 'd' is produced twice (or is a graph input or a constant)"),
    ("output over a graph input", lambda g: _node(g, "r", outputs=("x",)),
     "node r (Relu): output 'x' is produced twice (or is a graph input or a constant)"),
    ("graph output not produced", lambda g: g.replace(outputs=("d_b",)),
     "graph output 'd_b' is not produced by any node"),
    ("graph output without a tensor entry", lambda g: g.replace(outputs=("nowhere",)),
     "graph output 'nowhere' has no tensor entry"),
    ("graph input without a tensor entry", lambda g: _tensors_without(g, "x"),
     "graph input 'x' has no tensor entry"),
    ("constant without a tensor entry", lambda g: _tensors_without(g, "d_b"),
     "graph constant 'd_b' has no tensor entry"),
    ("input listed twice", lambda g: g.replace(inputs=("x", "x")),
     "graph input 'x' is listed twice or is also a constant"),
    ("two nodes of one name", lambda g: _node(g, "r", name="d"),
     "node d (Relu): a second node named 'd'"),
]


@pytest.mark.parametrize("mutate, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verify_graph_rejects(mutate: Callable[[Graph], Graph], message: str) -> None:
    bad = mutate(small())
    with pytest.raises(GraphError) as e:
        verify_graph(bad)
    assert str(e.value).startswith(message), str(e.value)


def test_a_constant_in_a_concat_is_rejected() -> None:
    g = small()
    n = Node.make("c", "Concat", ["r", "d_b"], ["c"], axis=0)
    g = g.replace(nodes=g.nodes + (n,), outputs=("c",),
                  tensors={**g.tensors, "c": Tensor("c", (6,))})
    with pytest.raises(GraphError, match=r"^node c \(Concat\): input 1 \('d_b'\) is a constant; "
                       r"Concat takes \(x1, x2, \.\.\.\) with activations there"):
        verify_graph(g)


def test_an_op_given_as_its_text_is_accepted() -> None:
    g = _node(small(), "r", op="Relu")  # what the importer emits: the text, not the Op
    assert verify_graph(g) is g


# -- the pipeline names who broke the graph --------------------------------------------------
def _drop_relu_keep_output(g: Graph) -> Graph:
    """A broken pass: removes the Relu but leaves the graph output pointing at its tensor."""
    return g.replace(nodes=tuple(n for n in g.nodes if n.op != "Relu"))


def test_a_pass_producing_a_malformed_graph_is_named(monkeypatch) -> None:
    real = pipeline.passes

    def broken(*a, **k):
        plist = real(*a, **k)
        i = [name for name, _ in plist].index("fold_requant")
        return plist[:i + 1] + [("drop_relu", _drop_relu_keep_output)] + plist[i + 1:]

    monkeypatch.setattr(pipeline, "passes", broken)
    with pytest.raises(GraphError) as e:
        pipeline.compile_graph(small(), precision="fixed<12,4>")
    assert str(e.value) == ("pass drop_relu produced a malformed graph: graph output 'r' is not "
                            "produced by any node")


def test_a_real_pass_that_breaks_the_graph_is_named(monkeypatch) -> None:
    from modelcircuit.graphs.passes import fuse

    def fuse_and_break(g: Graph) -> Graph:
        g = fuse.fuse_dense_relu(g)
        return _node(g, "d", attrs=(("relu", "yes"),))

    monkeypatch.setattr(pipeline, "fuse_dense_relu", fuse_and_break)
    with pytest.raises(GraphError, match=r"^pass fuse_dense_relu produced a malformed graph: "
                       r"node d \(Dense\): attribute 'relu': 'yes' is not a bool$"):
        pipeline.compile_graph(small(), precision="fixed<12,4>")


@pytest.mark.parametrize("source, who", [("onnx", "the importer"),
                                         ("builder", "the graph builder"), (None, "the input")])
def test_a_malformed_input_graph_is_refused_before_the_first_pass(source, who) -> None:
    g = _node(small(), "r", op="RNN").replace(meta=(("source", source),) if source else ())
    with pytest.raises(GraphError) as e:
        pipeline.compile_graph(g)
    assert str(e.value).startswith(f"{who} produced a malformed graph: node r: unknown op 'RNN'")


def test_imported_models_are_well_formed(digits_model) -> None:
    from modelcircuit.frontend.onnx.importer import load_onnx

    g = load_onnx(digits_model)
    assert verify_graph(g) is g
    for prec in (None, "float32", "fixed<8,3>"):
        c = pipeline.compile_graph(g, precision=prec)
        assert verify_graph(c.graph) is c.graph
