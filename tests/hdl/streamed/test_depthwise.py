"""Depthwise stream units (hdl/streamed/depthwise.py) under Verilator, bit-exact against the
golden model: a 3x3 depthwise Conv with channel multiplier 2 folded at reuse 3 (one Dense
lane per output channel) and at reuse 20 and 54 (DepthwiseFold: the channels folded too,
3 lanes of 2 channels in 18 steps, and one lane of all 6), and a global depthwise Conv (kernel = the frame, weights varying
over it: the coefficient ROM) into a Dense. One small build; random gaps and backpressure;
simulated latency and II equal the compile-time figures."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.graphs import reference
from modelcircuit.graphs.pipeline import compile_graph
from modelcircuit.hdl import plan_top
from modelcircuit.sim import rtl

from .test_stream import _G

pytestmark = pytest.mark.xdist_group("sim")

REUSE = {"dw1": 3}


def graph_dw():
    g = _G(5)
    x = g.tensor("x", (5, 4, 3))
    d1 = g.conv("dw1", x, (3, 3), 6, (5, 4, 6), (1, 1), (1, 1, 1, 1), group=3)
    r1 = g.node("Relu", "r1", [d1], (5, 4, 6))
    d2 = g.conv("dw2", r1, (5, 4), 6, (1, 1, 6), (1, 1), (0, 0, 0, 0), group=6)  # global
    fl = g.node("Reshape", "fl", [d2], (6,), shape=(6,))
    w = g.const("fc_w", g.rng.normal(0, 0.5, (6, 2)))
    y = g.node("Dense", "fc", [fl, w], (2,))
    return g.graph("dwnet", x, y)


@pytest.fixture(scope="module")
def dwnet():
    return compile_graph(graph_dw(), precision="fixed<10,4>")


def test_depthwise_units_are_planned(dwnet) -> None:
    info = plan_top(dwnet, REUSE)
    lay = {x.get("node"): x for x in info["layers"]}
    inner = lay["dw1"]["inner"]
    assert inner["kind"] == "depthwise" and inner["lanes"] == 6 and inner["ii"] == 3
    assert inner["multipliers"] <= 6 * 3  # ceil(9 / 3) per channel, no zero lanes
    assert lay["dw2"]["kind"] == "global depthwise" and lay["dw2"]["rom"]["depth"] == 20


@pytest.mark.parametrize("r,lanes,steps", [(18, 3, 18), (20, 3, 18), (27, 2, 27),
                                           (54, 1, 54)])
def test_depthwise_fold_plan(dwnet, r, lanes, steps) -> None:
    inner = {x.get("node"): x for x in plan_top(dwnet, {"dw1": r})["layers"]}["dw1"]["inner"]
    assert inner["kind"] == "depthwise fold"
    assert (inner["lanes"], inner["steps"], inner["ii"]) == (lanes, steps, r)
    assert inner["multipliers"] <= lanes and inner["latency"] == steps + 3


@pytest.mark.slow
@pytest.mark.parametrize("reuse", [REUSE, {"dw1": 20}, {"dw1": 54}],
                         ids=["dense", "fold3", "fold1"])  # one Verilator build: ~40 s (the R = 1 depthwise lanes are in
# test_stream.py's fast 2-D net)
def test_depthwise_bit_exact(dwnet, reuse, tmp_path) -> None:
    t = dwnet.graph.tensor(dwnet.graph.inputs[0])
    x = np.random.default_rng(1).integers(t.dtype.qmin, t.dtype.qmax + 1, (6, *t.shape))
    r = rtl.execute(dwnet, x, reuse=reuse, cache_dir=tmp_path, seed=2, gaps=0.3,
                    backpressure=0.3)
    c = r["checks"]
    assert c["bit_exact"] and c["complete"] and r["ok"], c
    exp = reference.execute(dwnet.graph, [x], inputs_are_codes=True)[dwnet.graph.outputs[0]]
    assert np.array_equal(r["outputs"], exp)
    info = plan_top(dwnet, reuse)
    assert c["latency_ok"] and c["ii_ok"]
    assert (r["latency"], r["ii"]) == (info["latency"], info["ii"])
