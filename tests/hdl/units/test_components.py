"""Every component in amaranth.sim, bit-exact against reference.py, at several widths,
rounding/overflow modes and reuse factors, on random and extreme codes."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.graphs.ir import Node

from ..helpers import T, check, compiled_from, extremes

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def _weights(rng, tw, n_in, n_out):
    w = rng.integers(tw.qmin, tw.qmax + 1, size=(n_in, n_out))
    mask = rng.random(w.shape)
    w[mask < 0.2] = 0  # zero weights cost nothing
    w[(mask >= 0.2) & (mask < 0.3)] = 1 << int(rng.integers(0, tw.width - 1))  # shifts
    w[(mask >= 0.3) & (mask < 0.35)] = -(1 << int(rng.integers(0, tw.width - 1)))
    w[0, 0], w[-1, -1] = tw.qmin, tw.qmax
    return w


def dense_case(tx, tw, tb, tout, n_in, n_out, relu, seed=0):
    rng = np.random.default_rng(seed)
    tx, tw, tout = T(tx), T(tw), T(tout)
    tensors = {"x": ((n_in,), str(tx)), "w": ((n_in, n_out), str(tw)), "y": ((n_out,), str(tout))}
    consts = {"w": _weights(rng, tw, n_in, n_out)}
    ins = ["x", "w"]
    if tb is not None:
        tb = T(tb)
        tensors["b"] = ((n_out,), str(tb))
        consts["b"] = rng.integers(tb.qmin, tb.qmax + 1, size=n_out)
        ins.append("b")
    node = Node.make("fc", "Dense", ins, ["y"], relu=relu)
    return compiled_from([node], tensors, consts, ["x"], ["y"], "dense"), extremes(tx, n_in, rng)


DENSE = [
    ("fixed<16,6>", "fixed<16,6>", "fixed<16,6>", "fixed<16,6>", True),
    ("fixed<8,3>", "fixed<6,1>", "fixed<12,2>", "fixed<8,4,RND,WRAP>", False),
    ("ufixed<6,0,RND_CONV,SAT>", "fixed<5,1>", None, "fixed<7,2,RND_CONV,SAT,NARROW>", True),
    ("fixed<4,4>", "fixed<3,1>", "fixed<10,8>", "fixed<6,6,TRN,WRAP,NARROW>", False),
    ("fixed<12,2>", "fixed<9,-1>", "fixed<14,3>", "ufixed<8,2,RND,SAT>", False),
]


@pytest.mark.parametrize("types", DENSE, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("reuse", [1, 3])
def test_dense(types, reuse):
    c, x = dense_case(*types[:4], n_in=7, n_out=5, relu=types[4])
    info, _ = check(c, x, reuse=reuse)
    assert info["ii"] == reuse


@pytest.mark.parametrize("reuse,adder_levels", [(2, 1), (6, 2), (9, 3), (20, 4)])
def test_dense_reuse_edges(reuse, adder_levels):
    """Even and uneven chunks, R larger than the fan-in, 1..4 adder levels per stage."""
    c, x = dense_case("fixed<10,4>", "fixed<8,2>", "fixed<10,4>", "fixed<10,4>", 6, 4, True, 1)
    info, res = check(c, x, reuse=reuse, adder_levels=adder_levels, gap=0.2, backpressure=0.3)
    assert info["ii"] == reuse
    assert all(b - a >= reuse for a, b in zip(res.accepted, res.accepted[1:], strict=False))


def _chain():
    """x -> Relu -> Mul(const) -> Add(const) -> LeakyRelu -> Requant -> Sub(., x) -> Bipolar?
    Sub uses the graph input directly: the two operands arrive at different times."""
    n = 6
    f = "fixed<10,4>"
    nodes = [
        Node.make("r", "Relu", ["x"], ["a"]),
        Node.make("m", "Mul", ["a", "c"], ["b"]),
        Node.make("ad", "Add", ["b", "k"], ["d"]),
        Node.make("lr", "LeakyRelu", ["d", "alpha"], ["e"]),
        Node.make("rq", "Requant", ["e"], ["h"]),
        Node.make("s", "Sub", ["h", "x"], ["y"]),
    ]
    tensors = {"x": ((n,), f), "a": ((n,), "ufixed<8,3>"), "c": ((n,), "fixed<6,2>"),
               "b": ((n,), "fixed<9,4,RND,SAT>"), "k": ((n,), "fixed<8,5>"),
               "d": ((n,), "fixed<10,4,RND_CONV,WRAP>"), "alpha": ((1,), "fixed<8,0>"),
               "e": ((n,), "fixed<11,5>"), "h": ((n,), "fixed<6,3,RND,SAT,NARROW>"),
               "y": ((n,), "fixed<7,4,TRN,WRAP>")}
    consts = {"c": [7, -8, 4, 0, 31, -32], "k": [127, -128, 3, 0, -5, 64], "alpha": [26]}
    return compiled_from(nodes, tensors, consts, ["x"], ["y"], "chain"), T(f), n


def test_elementwise_chain_and_operand_alignment():
    c, t, n = _chain()
    info, _ = check(c, extremes(t, n, np.random.default_rng(2), 20), gap=0.3, backpressure=0.3)
    assert info["latency"] == 6


def test_add_two_activations_and_transpose():
    nodes = [Node.make("tr", "Transpose", ["x"], ["xt"], perm=(1, 0)),
             Node.make("rs", "Reshape", ["xt"], ["xf"], shape=(6,)),
             Node.make("rl", "Relu", ["x2"], ["a"]),
             Node.make("ad", "Add", ["xf", "a"], ["y"])]
    nodes.insert(0, Node.make("rs0", "Reshape", ["x"], ["x2"], shape=(6,)))
    tensors = {"x": ((2, 3), "fixed<8,3>"), "xt": ((3, 2), "fixed<8,3>"),
               "xf": ((6,), "fixed<8,3>"), "x2": ((6,), "fixed<8,3>"),
               "a": ((6,), "fixed<6,2,RND,SAT>"), "y": ((6,), "fixed<8,4,RND_CONV,SAT>")}
    c = compiled_from(nodes, tensors, {}, ["x"], ["y"], "add2")
    check(c, extremes(T("fixed<8,3>"), 6, np.random.default_rng(3), 16).reshape(-1, 2, 3))


@pytest.mark.parametrize("func,tin,tout", [("sigmoid", "fixed<16,6>", "fixed<16,6>"),
                                           ("tanh", "fixed<8,3>", "fixed<8,1,RND,SAT>"),
                                           ("selu", "fixed<12,4>", "fixed<10,4>")])
def test_lut(func, tin, tout):
    n = 5
    node = Node.make("act", "Lut", ["x"], ["y"], func=func)
    c = compiled_from([node], {"x": ((n,), tin), "y": ((n,), tout)}, {}, ["x"], ["y"], func)
    info, _ = check(c, extremes(T(tin), n, np.random.default_rng(4), 30))
    assert info["latency"] == 1


@pytest.mark.parametrize("pipeline", ["latency", "fmax"])
@pytest.mark.parametrize("tin,n", [("fixed<16,6>", 5), ("fixed<8,4>", 10), ("fixed<12,7,RND,SAT>", 3),
                                   ("fixed<8,4>", 1), ("ufixed<6,2>", 8), ("fixed<4,2>", 2)])
def test_softmax(tin, n, pipeline):
    """"fmax" registers the max (2 <= n <= 8: all differences, then the argmax's selection;
    else every level of its tree and x - max), every 2 levels of the sum tree and the
    products too (the jet tagger's softmax set its clock on an ECP5); ties, extremes and
    stalls bit-exact."""
    levels = (n - 1).bit_length()
    max_stages = 2 if 2 <= n <= 8 else levels + 1
    latency = 4 if pipeline == "latency" else max_stages + -(-levels // 2) + 7
    node = Node.make("sm", "Softmax", ["x"], ["y"])
    c = compiled_from([node], {"x": ((n,), tin), "y": ((n,), "fixed<16,6>")}, {}, ["x"], ["y"],
                      "softmax")
    x = extremes(T(tin), n, np.random.default_rng(5), 30)
    info, _ = check(c, x, gap=0.2, backpressure=0.2, pipeline=pipeline)
    assert info["latency"] == latency and info["ii"] == 1
    _, res = check(c, x[:4], pipeline=pipeline)  # no stalls: the simulated latency
    assert [b - a for a, b in zip(res.accepted, res.delivered, strict=True)] == [latency] * 4


def test_threshold_and_bipolar():
    n, k = 4, 3
    rng = np.random.default_rng(6)
    thr = np.sort(rng.integers(-40, 40, size=(n, k)), axis=1)
    nodes = [Node.make("th", "Threshold", ["x", "thr", "st", "base"], ["q"]),
             Node.make("bp", "Bipolar", ["q"], ["y"])]
    tensors = {"x": ((n,), "fixed<8,8>"), "thr": ((n, k), "fixed<8,8>"),
               "st": ((n, k), "fixed<4,4>"), "base": ((n,), "fixed<4,4>"),
               "q": ((n,), "fixed<4,4>"), "y": ((n,), "fixed<2,2>")}
    consts = {"thr": thr, "st": np.ones((n, k)), "base": np.full(n, -1)}
    c = compiled_from(nodes, tensors, consts, ["x"], ["y"], "thr")
    c1 = compiled_from(nodes[:1], tensors, consts, ["x"], ["q"], "thr1")
    x = extremes(T("fixed<8,8>"), n, rng, 30)
    check(c, x)
    check(c1, x)
