"""Differential testing: random small MLPs, golden == RTL bit for bit (and in time).

Each example is a fresh Verilator build (~6-15 s here), so the default suite runs a few;
`-m slow` runs many more."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelcircuit.api import compile as mc_compile
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.sim import rtl
from modelcircuit.sim.codes import Port

pytestmark = pytest.mark.xdist_group("sim")

ACTS = ("none", "relu", "leaky_relu", "sigmoid", "tanh")


@st.composite
def mlps(draw):  # noqa: ANN001, ANN201
    """(graph, precision, reuse, seed, profile, strategy): 1-3 Dense layers of width 1-8, an activation after
    each, signed or unsigned types from 3 to 16 bits, sometimes a narrow model quantizer."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    depth = draw(st.integers(1, 3))
    widths = [draw(st.integers(1, 8)) for _ in range(depth + 1)]
    signed = draw(st.booleans())
    w = draw(st.integers(3, 16))
    i = draw(st.integers(1 if signed else 0, w))
    rnd = draw(st.sampled_from(["", ",RND", ",RND_CONV"]))
    ovf = draw(st.sampled_from(["", ",WRAP"]))
    precision = f"{'fixed' if signed else 'ufixed'}<{w},{i}{rnd}{ovf}>"
    b = GraphBuilder(f"rand{seed}")
    h = b.input("x", widths[0])
    for k in range(depth):
        h = b.dense(h, rng.normal(0, 0.7, size=(widths[k], widths[k + 1])),
                    rng.normal(0, 0.3, size=widths[k + 1]) if draw(st.booleans()) else None)
        act = draw(st.sampled_from(ACTS))
        if act == "relu":
            h = b.relu(h)
        elif act == "leaky_relu":
            h = b.leaky_relu(h, 0.125)
        elif act in ("sigmoid", "tanh"):
            h = b.activation(h, act)
        if draw(st.integers(0, 4)) == 0:  # a narrow model quantizer
            qw = draw(st.integers(2, 6))
            h = b.quant(h, f"{'fixed' if draw(st.booleans()) else 'ufixed'}<{qw},{qw // 2}>")
    b.output(h)
    # a reuse factor cannot exceed a layer's multiplier count (inputs x outputs)
    reuse = min(draw(st.sampled_from([1, 1, 2, 3, 4, 24])),
                *(widths[k] * widths[k + 1] for k in range(depth)))
    # the profile picks the register schedule: latency (none), area (iCE40), fmax (ECP5)
    profile = draw(st.sampled_from([None, "ice40-up5k", "ecp5-25k"]))
    # Dense at R=1 as products, as shared adder graphs (hdl/plan/cmvm.py), or chosen per layer
    strategy = draw(st.sampled_from(["mult", "da", "auto"]))
    return b.build(), precision, reuse, seed, profile, strategy


def _check(case, cache) -> None:  # noqa: ANN001
    graph, precision, reuse, seed, profile, strategy = case
    c = mc_compile(graph, precision=precision, reuse=reuse, table_bits=6, profile=profile,
                   strategy=strategy)
    g = c.graph
    t = g.tensor(g.inputs[0]).dtype
    port = Port(g.tensor(g.inputs[0]).size, t.width, t.signed, t.frac, g.tensor(g.inputs[0]).shape)
    rng = np.random.default_rng(seed)
    x = rng.integers(port.lo, port.hi + 1, size=(24, port.elements))
    x[0], x[1] = port.lo, port.hi  # the extremes: saturation and wrap paths
    r = rtl.execute(c, x, cache_dir=cache, seed=seed % 1000)
    assert r["checks"]["bit_exact"], (precision, reuse, profile, strategy,
                                      r["checks"]["first_mismatch"])
    assert r["checks"]["latency_ok"] and r["checks"]["ii_ok"] is not False, r
    assert r["ok"]


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=mlps())
def test_random_mlp_golden_equals_rtl(case, sim_cache) -> None:  # noqa: ANN001
    _check(case, sim_cache)


@pytest.mark.slow
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=mlps())
def test_random_mlp_golden_equals_rtl_many(case, sim_cache) -> None:  # noqa: ANN001
    _check(case, sim_cache)
