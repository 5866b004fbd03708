"""Accumulator widths (passes/accumulators.py)."""

from __future__ import annotations

import numpy as np

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder


def test_accumulator_width_is_exact_range():
    b = GraphBuilder("acc")
    x = b.input("x", 3)
    b.output(b.dense(x, np.array([[1.0], [-2.0], [0.5]]), None, name="d"))
    c = mc.compile(b.build(), precision="fixed<8,4>")
    # codes: x in [-128, 127], w = 16, -32, 8 (frac 4) -> sum in [-7168, 7112] at frac 8
    assert c.graph.node("d").get("acc") == "fixed<14,6>"

