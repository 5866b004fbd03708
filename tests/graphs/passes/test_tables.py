"""Lookup tables (passes/tables.py): the index slice, Softmax's tables."""

from __future__ import annotations

import numpy as np

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.graphs import reference


def test_lut_index_is_documented_slice():
    b = GraphBuilder("sig")
    x = b.input("x", 4)
    b.output(b.activation(x, "sigmoid", name="s"))
    c = mc.compile(b.build(), precision="fixed<16,6>", table_bits=10)
    n = c.graph.node("s")
    lo, shift, size = n.get("lo"), n.get("shift"), n.get("size")
    assert lo % (1 << shift) == 0 and size <= 1025
    codes = np.array([[-32768, -1, 0, 32767]])
    got = reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]
    table = c.graph.constants[n.inputs[1]]
    assert got[0, 0] == table[0] and got[0, 3] == table[-1]
    # sigmoid(0) ~ 0.5 within the table step
    assert abs(got[0, 2] / 2**10 - 0.5) < 2 ** -4


def test_softmax_sums_to_one_and_matches_float():
    b = GraphBuilder("sm")
    x = b.input("x", 5)
    b.output(b.softmax(x, name="sm"))
    c = mc.compile(b.build(), precision="fixed<16,6>")
    cf = mc.compile(b.build(), precision="float32")
    xs = np.random.default_rng(3).normal(size=(200, 5)) * 3
    yq, yf = mc.run(c, xs), mc.run(cf, xs)
    assert np.max(np.abs(yq - yf)) < 0.01
    assert np.max(np.abs(yq.sum(-1) - 1)) < 0.01

