"""Static arena plan and stream assignment: properties on random DAGs, and on real graphs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from modelcircuit.graphs.analysis.memory_plan import END, START, memory_plan, plan_arena
from modelcircuit.graphs.analysis.streams import assign_streams
from modelcircuit.graphs.ir import Graph, Node, Tensor
from modelcircuit.graphs.types import FixedType

from .conftest import compiled


@st.composite
def dags(draw):
    n_in = draw(st.integers(1, 3))
    n_nodes = draw(st.integers(1, 14))
    # tensors 0..n_in-1 are inputs; tensor n_in+i is the output of node i
    preds, readers = [], [[] for _ in range(n_in + n_nodes)]
    for i in range(n_nodes):
        avail = n_in + i
        ins = draw(st.lists(st.integers(0, avail - 1), min_size=1, max_size=3, unique=True))
        for t in ins:
            readers[t].append(i)
        preds.append(sorted({t - n_in for t in ins if t >= n_in}))
    outs = draw(st.lists(st.integers(0, n_in + n_nodes - 1), max_size=3, unique=True))
    for t in range(n_in + n_nodes):
        if t in outs or (t >= n_in and not readers[t]):
            readers[t].append(END)
    sizes = draw(st.lists(st.integers(1, 300), min_size=n_in + n_nodes,
                          max_size=n_in + n_nodes))
    producers = [START] * n_in + list(range(n_nodes))
    return sizes, producers, readers, preds


def _reach(preds):
    anc = []
    for ps in preds:
        s = set()
        for p in ps:
            s |= anc[p] | {p}
        anc.append(s)
    return anc


def _dead_before(a, b, producers, readers, anc):
    """Is tensor a dead before tensor b is written, in every execution of the DAG?"""
    if producers[b] == START:
        return False
    rs = readers[a] or [producers[a]]
    return all(r != END and (r == START or r in anc[producers[b]]) for r in rs)


@settings(max_examples=150, deadline=None)
@given(dags())
def test_plan_properties(dag):
    sizes, producers, readers, preds = dag
    offsets, arena = plan_arena(sizes, producers, readers, preds)
    anc = _reach(preds)
    n = len(sizes)
    for a in range(n):
        for b in range(a + 1, n):
            overlap = offsets[a] < offsets[b] + sizes[b] and offsets[b] < offsets[a] + sizes[a]
            if overlap:
                assert _dead_before(a, b, producers, readers, anc) or \
                    _dead_before(b, a, producers, readers, anc), (a, b, offsets)
    assert all(o % 8 == 0 for o in offsets)
    assert max(o + s for o, s in zip(offsets, sizes, strict=True)) <= arena
    assert arena <= sum(-(-s // 8) * 8 for s in sizes)
    assert plan_arena(sizes, producers, readers, preds) == (offsets, arena)


def test_chain_reuses_memory():
    plan = memory_plan(compiled("three_layer_keras", "fixed<16,6>").graph)
    assert plan["arena_bytes_per_sample"] < plan["naive_bytes_per_sample"]
    assert memory_plan(compiled("three_layer_keras", "fixed<16,6>").graph) == plan


def _diamond() -> Graph:
    t = FixedType(16, 6)
    ts = {n: Tensor(n, (8,), t) for n in ("x", "a", "b", "y", "c1", "c2")}
    nodes = (
        Node.make("n_a", "Mul", ["x", "c1"], ["a"]),
        Node.make("n_b", "Mul", ["x", "c2"], ["b"]),
        Node.make("n_y", "Add", ["a", "b"], ["y"]),
    )
    consts = {"c1": np.full(8, 3, np.int64), "c2": np.full(8, -5, np.int64)}
    return Graph("diamond", ("x",), ("y",), nodes, ts, consts)


def test_branches_get_streams_and_disjoint_buffers():
    g = _diamond()
    s = assign_streams(g)
    assert s["streams"] == 2
    assert s["node_stream"]["n_a"] != s["node_stream"]["n_b"]
    assert s["waits"] == {"n_y": ["n_b"]} and s["fork"] == [1] and s["join"] == [1]
    p = memory_plan(g)["tensors"]
    # a and b may run at once: they must not share bytes, nor with the input x they read
    spans = {k: (v["offset"], v["offset"] + v["bytes"]) for k, v in p.items()}
    for u, v in (("a", "b"), ("a", "x"), ("b", "x")):
        assert spans[u][1] <= spans[v][0] or spans[v][1] <= spans[u][0]


def test_chain_is_one_stream():
    s = assign_streams(compiled("TFC_2W2A", None).graph)
    assert s["streams"] == 1 and s["waits"] == {} and s["fork"] == []
