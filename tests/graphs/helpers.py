"""Shared helpers of the graph tests: small hand-built graphs."""

from __future__ import annotations

import numpy as np

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder


def mlp(seed: int = 0) -> mc.Graph:
    """6 -> Dense(5) -> ReLU -> Dense(3), normal random weights from `seed`."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("mlp")
    x = b.input("x", 6)
    h = b.relu(b.dense(x, rng.normal(size=(6, 5)), rng.normal(size=5), name="fc1"), name="r1")
    b.output(b.dense(h, rng.normal(size=(5, 3)), None, name="fc2"))
    return b.build()

