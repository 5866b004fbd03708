"""Credit-based flow control (the "fmax" schedule, issue 13): no global clock enable.

The pipeline always runs; an output FIFO of ceil(latency / II) + 1 entries takes what the
consumer does not; the input is let in only while fewer vectors than that are in flight or
waiting. Checked here, in Amaranth's simulator and in yosys's netlist:
- bit-exact under random input gaps and output backpressure, whole-vector and folded;
- nothing waits when the consumer is always ready: accepts every II cycles, outputs after
  exactly the compiled latency (the credits cover the whole pipeline);
- a consumer that never takes anything: exactly `credits` vectors are accepted, none lost
  after it starts taking again, none duplicated;
- the pipeline's registers have no enable (what the credits are for: on an ECP5 the shared
  enable's fan-out to every flip-flop set the clock): after yosys `proc; opt`, the enabled
  flip-flop bits are the FIFO's and the counters', not the datapath's.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from modelcircuit.api import compile as mc_compile
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.hdl.plan.circuit import resolve_plan
from modelcircuit.hdl.vector.top import VectorDesign, build_top, plan_top
from modelcircuit.sim.amaranth_sim import simulate

from ..helpers import check, golden


def _mlp(seed: int = 3, widths: tuple[int, ...] = (6, 5, 4)):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"credits{seed}")
    h = b.input("x", widths[0])
    for k in range(len(widths) - 1):
        h = b.dense(h, rng.normal(0, 0.6, size=(widths[k], widths[k + 1])),
                    rng.normal(0, 0.2, size=widths[k + 1]))
        if k < len(widths) - 2:
            h = b.relu(h)
    b.output(h)
    return mc_compile(b.build(), precision="fixed<10,4>", table_bits=6)


def _inputs(c, n: int, seed: int = 1) -> np.ndarray:
    t = c.graph.tensor(c.graph.inputs[0])
    w = t.dtype.width
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if t.dtype.signed else (0, (1 << w) - 1)
    return np.random.default_rng(seed).integers(lo, hi + 1, size=(n, t.size))


@pytest.mark.parametrize("reuse", [1, 3])
def test_credits_bit_exact_and_full_rate(reuse):
    c = _mlp()
    x = _inputs(c, 40)
    info, _ = check(c, x, reuse=reuse, gap=0.3, backpressure=0.5, seed=5, pipeline="fmax")
    lat, ii = info["latency"], info["ii"]
    assert info["credits"] == max(2, -(-lat // ii) + 1)
    # an always-ready consumer never holds the input off: the compiled II and latency
    _, res = check(c, x[:12], reuse=reuse, pipeline="fmax")
    assert np.diff(res.accepted).tolist() == [ii] * 11
    assert [d - a for a, d in zip(res.accepted, res.delivered, strict=True)] == [lat] * 12


def test_credits_hold_the_input_while_the_output_is_stalled():
    """A consumer that takes nothing: exactly `credits` vectors get in (then i.ready stays
    low); when it starts taking, every one of them comes out once, in order, and the rest
    follow."""
    c = _mlp(4)
    top, info = build_top(c, 1, pipeline="fmax")
    x = _inputs(c, info["credits"] + 6, seed=2)
    stalled = simulate(top, info, x, backpressure=1.0, max_cycles=info["latency"] * 4 + 50)
    assert len(stalled.accepted) == info["credits"] and stalled.delivered == []
    top, info = build_top(c, 1, pipeline="fmax")
    res = simulate(top, info, x, backpressure=0.85, seed=9)
    assert np.array_equal(res.outputs, golden(c, x))


def _enabled_ff_bits(top, work) -> tuple[int, int]:
    """(flip-flop bits with an enable, all flip-flop bits) after yosys `proc; flatten; opt`
    (yosys's own cell kinds: $dffe, $sdffe, $sdffce, ... have an enable)."""
    from amaranth.back import rtlil

    from modelcircuit.hdl.flow.tools import Runner

    work.mkdir()
    (work / "top.il").write_text(rtlil.convert(top, name="top"))
    Runner(work / "logs").run("stat", "yosys", ["-q", "-p", "read_rtlil top.il; hierarchy "
                              "-auto-top; proc; flatten; opt; tee -o stat.txt stat -width"], work)
    en = tot = 0
    for count, kind, width in re.findall(r"^\s+(\d+)\s+\$(\w*dff\w*)_(\d+)\s*$",
                                         (work / "stat.txt").read_text(), re.M):
        bits = int(count) * int(width)
        tot += bits
        en += bits if kind.endswith("e") else 0
    return en, tot


def test_fmax_datapath_has_no_clock_enable(tmp_path):
    c = _mlp(5, (8, 8, 6))
    fmax, info = build_top(c, 1, pipeline="fmax")
    en_f, tot_f = _enabled_ff_bits(fmax, tmp_path / "fmax")
    en_l, tot_l = _enabled_ff_bits(build_top(c, 1, pipeline="latency")[0], tmp_path / "lat")
    assert tot_f > 100 and tot_l > 50, (tot_f, tot_l)
    # "latency" keeps one shared enable: (nearly) every flip-flop has it
    assert en_l > 0.8 * tot_l, (en_l, tot_l)
    # credits: only the output FIFO's bookkeeping (its data sits in a memory) and the counter
    assert en_f <= 40, (en_f, tot_f, info["credits"])


@pytest.mark.parametrize("precision,reuse", [("fixed<6,3>", 4), ("ufixed<8,3>", 3),
                                             ("fixed<7,2,RND>", 12)])
def test_soft_products_split_in_halves(precision, reuse):
    """On an ECP5 ("fmax", products of operands <= 8 bits built in logic) a folded product
    is two registered halves, x * c[:k] and x * c[k:], summed before the second product
    register: the same latency as without the split, the golden model's numbers."""
    rng = np.random.default_rng(11)
    b = GraphBuilder("soft")
    h = b.dense(b.input("x", 7), rng.normal(0, 0.9, size=(7, 6)), rng.normal(0, 0.3, size=6))
    h = b.dense(b.relu(h), rng.normal(0, 0.9, size=(6, 3)), None)
    b.output(h)
    c = mc_compile(b.build(), precision=precision, table_bits=6, profile="ecp5-25k")
    design = VectorDesign(c, resolve_plan(c, reuse, "fmax"))  # the plan as data
    info = design.info()
    dense = [u for _, n, u, _ in design.units if n.op == "Dense"]
    assert dense and all(d.split_k >= 2 for d in dense), [d.split_k for d in dense]
    plain = plan_top(mc_compile(b.build(), precision=precision, table_bits=6), reuse,
                     pipeline="fmax")
    assert info["latency"] == plain["latency"] and info["ii"] == plain["ii"]
    x = _inputs(c, 30, seed=4)
    x[0], x[1] = x.min(), x.max()
    check(c, x, reuse=reuse, gap=0.2, backpressure=0.4, seed=2, pipeline="fmax")


def test_area_valid_delays_as_counters_end_in_a_register():
    """The "area" schedule carries a long valid delay as down-counters (top.delay_pulse),
    whose pulse now leaves from a flip-flop: the latency is still exactly the compiled one,
    back to back at the II and under stalls."""
    from amaranth.back import rtlil

    c = _mlp(6, (12, 10, 3))
    top, info = build_top(c, 30, pipeline="area")
    text = rtlil.convert(top, name="top")
    assert re.search(r"wire .*\\vd\d+_c0\b", text), "no valid-delay counter in this design"
    x = _inputs(c, 10, seed=8)
    _, res = check(c, x, reuse=30, pipeline="area")
    assert [d - a for a, d in zip(res.accepted, res.delivered, strict=True)] == \
        [info["latency"]] * len(x)
    assert np.diff(res.accepted).tolist() == [info["ii"]] * (len(x) - 1)
    check(c, x, reuse=30, gap=0.4, backpressure=0.5, seed=3, pipeline="area")
