"""Quantizing constants (passes/constants.py)."""

from __future__ import annotations

import numpy as np

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder


def test_leaky_relu_scalar_alpha_constant_compiles():
    """A 0-d constant (the LeakyRelu alpha) goes through quantize/overflow as a 0-d array."""
    b = GraphBuilder("lr")
    x = b.input("x", 1)
    b.output(b.leaky_relu(b.dense(x, np.array([[0.088]]), None, name="d"), alpha=0.125))
    c = mc.compile(b.build(), precision="ufixed<3,0>")
    assert mc.run(c, np.array([[0.5]]), codes=True).shape == (1, 1)

