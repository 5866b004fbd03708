"""Whole models in amaranth.sim: bit-exact against the golden model with random input gaps
and output backpressure; latency and II as reported."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.hdl import build_top
from modelcircuit.sim.amaranth_sim import simulate
from tests.conftest import shared_model

from .helpers import check, extremes

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


@pytest.fixture(scope="module")
def jet():
    return mc.compile(mc.load_onnx(str(shared_model("three_layer_keras"))), precision="fixed<16,6>")


@pytest.fixture(scope="module")
def digits():
    p = resources.files("modelcircuit") / "data" / "digits_mlp.onnx"
    if not p.is_file():
        pytest.skip("digits model not packaged yet")
    return mc.compile(mc.load_onnx(str(p)), precision="fixed<16,6>")


def _inputs(c, k, seed=0):
    g = c.graph
    t = g.tensor(g.inputs[0]).dtype
    return extremes(t, g.tensor(g.inputs[0]).size, np.random.default_rng(seed), k)


def test_jet_r1_latency_ii_and_bit_exact(jet):
    top, info = build_top(jet, 1)
    assert info["ii"] == 1 and info["latency"] <= 13
    x = _inputs(jet, 3)
    res = simulate(top, info, x)  # no gaps, no backpressure: one vector per cycle
    assert [b - a for a, b in zip(res.accepted, res.delivered, strict=True)] == [info["latency"]] * len(x)
    assert np.diff(res.accepted).tolist() == [1] * (len(x) - 1)
    check(jet, x, reuse=1, gap=0.4, backpressure=0.5, seed=7)


@pytest.mark.parametrize("reuse", [2, 4])
def test_jet_folded(jet, reuse):
    top, info = build_top(jet, reuse)
    assert info["ii"] == reuse
    x = _inputs(jet, 2, seed=reuse)
    res = simulate(top, info, x)
    assert np.diff(res.accepted).tolist() == [reuse] * (len(x) - 1)
    assert res.delivered[0] - res.accepted[0] == info["latency"]
    check(jet, x[:5], reuse=reuse, gap=0.3, backpressure=0.4, seed=reuse)


def test_jet_per_layer_reuse(jet):
    names = [n.name for n in jet.graph.nodes if n.op == "Dense"]
    info, _ = check(jet, _inputs(jet, 1)[:4], reuse={names[1]: 8, names[2]: 3},
                    backpressure=0.3)
    assert info["ii"] == 8
    assert [lay["reuse"] for lay in info["layers"] if lay["op"] == "Dense"] == [1, 8, 3, 1]


def test_digits_mlp(digits):
    info, _ = check(digits, _inputs(digits, 4), reuse=1, gap=0.3, backpressure=0.4, seed=3)
    assert info["ii"] == 1
    assert info["input"]["elements"] == 64 and info["output"]["elements"] == 10


def test_digits_real_inputs(digits):
    p = resources.files("modelcircuit") / "data" / "digits_test.npz"
    if not p.is_file():
        pytest.skip("digits test data not packaged")
    with np.load(str(p)) as d:
        x = np.asarray(d[sorted(d.files)[0]], dtype=np.float64)[:6].reshape(6, -1)
    from modelcircuit.graphs import reference

    codes = reference.quantize_inputs(digits.graph, [x])[0]
    check(digits, codes, reuse=2, backpressure=0.3)


@pytest.mark.slow
@pytest.mark.parametrize("reuse", [1, 2, 4, 8])
def test_jet_many_vectors(jet, reuse):
    check(jet, _inputs(jet, 60, seed=11), reuse=reuse, gap=0.3, backpressure=0.3, seed=reuse)
