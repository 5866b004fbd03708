"""Register schedule (schedule.plan_stages, the "latency" and "fmax" presets), folding over
outputs, coefficient ROMs and `--reuse auto` through flow.fit.fit_reuse: the latency computed at
compile time is the simulated one, results stay bit-exact."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from modelcircuit.hdl import build_top, plan_top
from modelcircuit.hdl.plan.fold import fold_multipliers, fold_shape
from modelcircuit.hdl.plan.schedule import SCHEDULES, plan_stages
from modelcircuit.sim.amaranth_sim import simulate

from ..helpers import check
from ..units.test_components import dense_case

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def test_plan_stages():
    assert plan_stages([1, 1, 1, 1, 1], 2) == [False, True, False, True, False]
    assert plan_stages([2, 1, 1, 1, 1], 2) == [True, False, True, False, False]
    assert plan_stages([1, 1, 1, 0, 0], 4) == [False] * 5  # requantization free
    assert plan_stages([3, 1, 1, 1, 1], 3) == [True, False, False, True, False]


@pytest.mark.parametrize("pipeline", sorted(SCHEDULES))
@pytest.mark.parametrize("reuse,levels", [(1, 1), (1, 2), (1, 3), (3, 1), (4, 2), (13, 1),
                                          (24, 2), (24, 3)])
def test_latency_is_exact(pipeline, reuse, levels):
    """Simulated latency == reported latency for every preset, 1..3 levels per stage, input
    and output folding (R=13, 24 > N_in=6: outputs folded too); bit-exact with stalls."""
    c, x = dense_case("fixed<10,4>", "fixed<8,2>", "fixed<10,4>", "fixed<10,4>", 6, 4, True, 2)
    top, info = build_top(c, reuse, adder_levels=levels, pipeline=pipeline)
    assert info["pipeline"] == pipeline and info["adder_levels"] == levels
    res = simulate(top, info, x[:3])
    assert [b - a for a, b in zip(res.accepted, res.delivered, strict=True)] == \
        [info["latency"]] * 3
    assert np.diff(res.accepted).tolist() == [reuse] * 2
    check(c, x[:8], reuse=reuse, gap=0.3, backpressure=0.3, seed=reuse, adder_levels=levels)


def test_fold_over_outputs_cuts_multipliers():
    c, _ = dense_case("fixed<10,4>", "fixed<8,2>", "fixed<10,4>", "fixed<10,4>", 6, 4, True, 2)
    w = np.asarray(c.graph.constants["w"])
    assert fold_shape(6, 4, 24).r_out == 4 and fold_shape(6, 4, 13).r_out == 2
    assert fold_multipliers(w, 6) <= 4 and fold_multipliers(w, 24) <= 1
    info = plan_top(c, 24)
    assert info["layers"][0]["fold"]["rom"] == {"depth": 24, "width": 9, "style": "block"}


def test_default_pipeline_follows_the_target():
    c, _ = dense_case("fixed<10,4>", "fixed<8,2>", "fixed<10,4>", "fixed<10,4>", 6, 4, True, 2)
    assert plan_top(c, 1)["pipeline"] == "latency"  # no FPGA profile: fewest cycles
    info = plan_top(dataclasses.replace(c, profile="ecp5-25k"), 1)
    assert info["pipeline"] == "fmax" and info["adder_levels"] == SCHEDULES["fmax"].adder_levels
    # "fmax": constants of <= 3 signed digits are shift-add leaves, not multipliers
    assert info["layers"][0]["shift_add"] > 0
    assert info["multipliers"] < plan_top(c, 1)["multipliers"]


def test_reuse_auto_is_the_fit_plan():
    from modelcircuit.hdl.flow import fit_reuse, fpga_profile, plan_circuit

    c, _ = dense_case("fixed<10,4>", "fixed<8,2>", "fixed<10,4>", "fixed<10,4>", 6, 4, True, 2)
    c = dataclasses.replace(c, profile="ice40-up5k")
    info = plan_top(c, plan_circuit(c, "auto"))
    plan = fit_reuse(c, fpga_profile("ice40-up5k"))
    assert info["fit"] == plan.to_json() and info["fit"]["device"] == "ice40-up5k"
    assert [lay["reuse"] for lay in info["layers"]] == [plan.reuse["fc"]]
    c = dataclasses.replace(c, profile=None)  # no FPGA profile: fitted against ecp5-85k
    assert plan_top(c, plan_circuit(c, "auto"))["fit"]["device"] == "ecp5-85k"


def test_the_circuit_takes_a_resolved_plan():
    """The circuit never fits: "auto" (given, or the compiled option) is refused there and
    resolved by the flow (plan_circuit), which resolves any other reuse as given."""
    from modelcircuit.hdl import HdlError
    from modelcircuit.hdl.flow import plan_circuit

    c, _ = dense_case("fixed<10,4>", "fixed<8,2>", "fixed<10,4>", "fixed<10,4>", 6, 4, True, 2)
    with pytest.raises(HdlError, match="resolved|fitted to a device by the FPGA flow"):
        build_top(c, "auto")
    with pytest.raises(HdlError, match="fitted to a device by the FPGA flow"):
        build_top(dataclasses.replace(c, options={**c.options, "reuse": "auto"}))
    assert dict(plan_circuit(c, 3).reuse) == {"fc": 3}
    assert dict(plan_circuit(c, {"fc": 2}).reuse) == {"fc": 2}
    assert plan_circuit(c, 3).fit is None
    p = plan_circuit(dataclasses.replace(c, options={**c.options, "reuse": "auto"}))
    assert set(p.reuse) == {"fc"} and p.fit["device"] == "ecp5-85k"
    with pytest.raises(HdlError, match="already resolved"):
        build_top(c, p, pipeline="fmax")  # a resolved plan carries its schedule


def test_area_registers_the_block_ram_read_and_the_products():
    """"area" (iCE40): a lean fold whose coefficient ROM is a block RAM registers the read
    and the products before the tree (Schedule.bram_reg), so the RAM's clock-to-out, a logic
    product and the accumulator never share a stage: two cycles over "latency" at the same
    levels per stage (whose R=24 fold, one input per step, puts no register there); a ROM in
    LUTs (R=3, 2 words) changes nothing. Exact latency and bit-exactness with stalls:
    test_latency_is_exact."""
    c, _ = dense_case("fixed<10,4>", "fixed<8,2>", "fixed<10,4>", "fixed<10,4>", 6, 4, True, 2)
    assert SCHEDULES["area"].bram_reg and not SCHEDULES["latency"].bram_reg
    area = plan_top(c, 24, pipeline="area")
    lean = plan_top(c, 24, pipeline="latency", adder_levels=SCHEDULES["area"].adder_levels)
    assert area["layers"][0]["fold"]["rom"]["style"] == "block"
    # + the read, the products, and the rounding (Schedule.round_reg: every folded layer)
    assert SCHEDULES["area"].round_reg and not SCHEDULES["latency"].round_reg
    assert area["latency"] == lean["latency"] + 3
    area3 = plan_top(c, 3, pipeline="area")
    assert area3["layers"][0]["fold"]["rom"]["style"] == "logic"
    assert area3["latency"] == plan_top(c, 3, pipeline="latency", adder_levels=6)["latency"] + 1


@pytest.mark.parametrize("pipeline", ["area", "fmax"])
@pytest.mark.parametrize("dsp", [0, 1, 3])
def test_split_products_the_plan_left_without_a_dsp(dsp, pipeline):
    """Lanes the circuit plan gives no DSP block (CircuitPlan.dsp_lanes) are built as
    registered coefficient slices (no `$mul` left for yosys to move to logic as one deep
    array multiplier): "area" sums them in the next stage (the same latency), "fmax" feeds
    every slice to the output's adder tree (deeper by the levels it needs). Bit-exact with
    gaps and back-pressure, the simulated latency the planned one, and exactly the planned
    number of `$mul` cells in the netlist."""
    from modelcircuit.hdl.export import convert
    from modelcircuit.hdl.plan.circuit import resolve_plan

    # R=8 < N_in: 2 inputs a step, 8 lanes (two per output); R=16: one, 4 lanes
    for reuse in (8, 16):
        c, x = dense_case("fixed<10,4>", "fixed<8,2>", "fixed<10,4>", "fixed<10,4>", 16, 4,
                          True, 2)
        base = resolve_plan(c, reuse, pipeline=pipeline)
        assert base.dsp_lanes is None  # no FPGA profile: nothing planned
        plan = dataclasses.replace(base, dsp_lanes={"fc": dsp})
        want, got = plan_top(c, base), plan_top(c, plan)
        lay = got["layers"][0]
        assert lay["multipliers"] >= 4
        if pipeline == "area" and lay["fold"]["rom"]["style"] != "block":
            assert "logic_lanes" not in lay["fold"]  # the product shares its stage
            continue
        assert lay["fold"].get("logic_lanes", 0) == max(0, lay["multipliers"] - dsp)
        if pipeline == "area":
            assert got["latency"] == want["latency"]
        else:  # the slices of 4 more terms per lane
            assert got["latency"] > want["latency"]
        _, il, _ = convert(c, plan)
        assert il.count("cell $mul ") == min(dsp, lay["multipliers"])
        top, info = build_top(c, plan)
        res = simulate(top, info, x[:3])
        assert [b - a for a, b in zip(res.accepted, res.delivered, strict=True)] == \
            [info["latency"]] * 3
        check(c, x[:8], reuse=plan, gap=0.3, backpressure=0.3, seed=dsp)


def test_dsp_lanes_spend_the_device_budget():
    """The plan gives DSP blocks to folded lanes within the device's budget, widest
    products first, then in graph order; none without an FPGA profile."""
    import modelcircuit as mc
    from modelcircuit.graphs.profiles import all_profiles
    from modelcircuit.hdl.plan.circuit import resolve_plan

    g = mc.load_onnx(Path(mc.__file__).parent / "data" / "digits_mlp.onnx")
    reuse = {"fc1_matmul": 256, "fc2_matmul": 256, "fc3_matmul": 64}
    assert resolve_plan(mc.compile(g, precision="fixed<6,3>"), reuse).dsp_lanes is None
    # an ECP5 builds products of <= 8-bit operands in logic in any case: none planned
    c = mc.compile(g, precision="fixed<6,3>", profile="ecp5-25k")
    assert set(resolve_plan(c, reuse).dsp_lanes.values()) == {0}
    for dev, prec in (("ice40-up5k", "fixed<6,3>"), ("ecp5-25k", "fixed<12,4>")):
        c = mc.compile(g, precision=prec, profile=dev)
        lanes = resolve_plan(c, reuse).dsp_lanes
        layers = plan_top(c, reuse)["layers"]
        mults = [lay["multipliers"] for lay in layers]
        got = [lanes[lay["node"]] for lay in layers]
        budget = all_profiles()[dev]["dsp"]
        assert sum(got) == min(budget, sum(mults))  # one block per product (<= 16 bits)
        assert all(0 <= k <= n for k, n in zip(got, mults, strict=True))
        # equal widths: an earlier layer is full before a later one gets any
        assert all(k == n or not any(got[i + 1:])
                   for i, (k, n) in enumerate(zip(got, mults, strict=True)))


def test_dsp_lanes_leave_the_softmax_its_blocks() -> None:
    """The Softmax's product is a `$mul` as wide as a DSP block, which the flow keeps before
    a narrower Dense lane: the plan must leave it its block, or yosys builds one of the
    lanes it gave a DSP as one-cycle booth logic (the jet tagger fixed<16,6> on an
    ECP5-25k: 28 lanes and the serial Softmax's product for 28 blocks; that lane set the
    clock, 9.7 ns). Counted in the circuit itself: its `$mul`s wider than the family's
    logic width on both operands (what the flow sends to DSP blocks) fit the device."""
    import re

    from amaranth.back import rtlil

    import modelcircuit as mc
    from modelcircuit.graphs.profiles import all_profiles
    from modelcircuit.hdl.plan.circuit import resolve_plan

    jet = Path(__file__).resolve().parents[4] / "shared" / "models" / "three_layer_keras.onnx"
    if not jet.exists():
        pytest.skip(f"{jet} is absent (the shared models)")
    c = mc.compile(mc.load_onnx(jet), precision="fixed<16,6>", profile="ecp5-25k")
    names = [n.name for n in c.graph.nodes if n.op == "Dense"]
    plan = resolve_plan(c, dict(zip(names, (128, 128, 128, 32), strict=True)))
    top, _ = build_top(c, plan)
    il = rtlil.convert(top, name="top", emit_src=False)
    wide = 0
    for body in re.findall(r"cell \$mul .*?\n(.*?)\n\s*end\n", il, re.S):
        a = int(re.search(r"\\A_WIDTH (\d+)", body).group(1))
        b = int(re.search(r"\\B_WIDTH (\d+)", body).group(1))
        wide += min(a, b) > 8  # ECP5: products of <= 8-bit operands are logic (fpga.json)
    assert 0 < wide <= all_profiles()["ecp5-25k"]["dsp"], (wide, plan.dsp_lanes)
