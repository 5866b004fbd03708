"""Timing-driven register placement and the no-DSP flow of `--strategy da` (issue 13):

- the deep ("fmax") Softmax with its products in logic (`--strategy da`: no DSP block) splits
  every e * r into registered partial products over 6-bit slices of r, summed in a registered
  tree; bit-exact against the golden model, with the latency the unit declares and the
  simulation measures;
- `--strategy da` gives yosys a DSP budget of 0 (every product to logic, `synth_ecp5 -nodsp`),
  `mult`/`auto` keep the device's budget;
- nextpnr's router option and its refusal of an unknown router.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from modelcircuit.graphs.ir import Node
from modelcircuit.graphs.ops import SoftmaxAttrs
from modelcircuit.graphs.types import parse_type as T
from modelcircuit.hdl.flow import fpga_profile
from modelcircuit.hdl.flow.nextpnr import nextpnr_args
from modelcircuit.hdl.flow.tools import FlowError, Runner
from modelcircuit.hdl.flow.yosys import dsp_budget_for, synthesize, write_design
from modelcircuit.hdl.units.softmax import SOFT_PRODUCT_SLICE, SOFT_SUM_LEVELS
from modelcircuit.hdl.vector.top import build_top, plan_top

from ..helpers import check, compiled_from, extremes


def _softmax(tin: str, n: int, strategy: str):
    node = Node.make("sm", "Softmax", ["x"], ["y"])
    c = compiled_from([node], {"x": ((n,), tin), "y": ((n,), "fixed<16,6>")}, {}, ["x"], ["y"],
                      "softmax")
    return dataclasses.replace(c, options={**c.options, "strategy": strategy})


@pytest.mark.parametrize("tin,n", [("fixed<16,6>", 5), ("fixed<8,4>", 3)])
def test_softmax_split_products_bit_exact(tin, n):
    """`--strategy da` + "fmax": partial products of 2-bit slices of the reciprocal, their
    sum tree registered every SOFT_SUM_LEVELS levels (an 18-bit reciprocal: 9 slices, 4
    levels, 2 stages); the latency grows by exactly those stages, the results are the
    golden model's (with stalls and gaps too)."""
    c = _softmax(tin, n, "da")
    levels = (n - 1).bit_length()
    top, info = build_top(c, None, pipeline="fmax")
    unit = top.units[0][2]
    rw = T(SoftmaxAttrs.of(c.graph.nodes[0]).recip_type).width
    k, per = SOFT_PRODUCT_SLICE, SOFT_SUM_LEVELS
    assert unit.split == k and unit.slices == -(-rw // k) >= 2
    x = extremes(T(tin), n, np.random.default_rng(7), 30)
    info, _ = check(c, x, gap=0.2, backpressure=0.2, pipeline="fmax")
    max_stages = 2 if 2 <= n <= 8 else levels + 1  # pairwise differences, selection
    assert info["latency"] == (max_stages + -(-levels // 2) + 7
                               + -(-(unit.slices - 1).bit_length() // per))
    _, res = check(c, x[:4], pipeline="fmax")  # no stalls: the simulated latency
    assert [b - a for a, b in zip(res.accepted, res.delivered, strict=True)] == \
        [info["latency"]] * 4
    # the products are not split under "mult" (a DSP block takes the whole product)
    info_mult = plan_top(_softmax(tin, n, "mult"), None, pipeline="fmax")
    assert info_mult["latency"] == max_stages + -(-levels // 2) + 7 < info["latency"]


def test_dsp_budget_follows_strategy():
    assert dsp_budget_for(_softmax("fixed<8,4>", 3, "da")) == 0
    assert dsp_budget_for(_softmax("fixed<8,4>", 3, "mult")) is None
    assert dsp_budget_for(_softmax("fixed<8,4>", 3, "auto")) is None


@pytest.mark.slow
def test_da_softmax_synthesizes_without_dsp(tmp_path):
    """The Softmax's exp x reciprocal products with a DSP budget of 0 (what `--strategy da`
    asks): no MULT18X18D; with the device's budget they take DSP blocks (yosys's own count).
    Slow: two syntheses of three 18 x 18 products, about 30 s each on a loaded machine."""
    prof = fpga_profile("ecp5-25k")
    c = _softmax("fixed<8,4>", 3, "da")
    counts = {}
    for name, budget in (("none", 0), ("device", None)):
        work = tmp_path / name
        work.mkdir()
        design = write_design(build_top(c, None, pipeline="latency")[0], work / "design.il")
        st = synthesize(design, prof, work, Runner(tmp_path / f"logs-{name}"), budget)
        counts[name] = st["dsp"]
        if budget == 0:
            assert "-nodsp" in (work / "synth.ys").read_text()
    assert counts["none"] == 0 and counts["device"] >= 1, counts


def test_nextpnr_router_option():
    prof = fpga_profile("ecp5-85k")
    a = nextpnr_args(prof, 150, True, "router2")
    assert a[a.index("--router") + 1] == "router2" and "--out-of-context" in a
    assert "--router" not in nextpnr_args(prof, 150, True)
    with pytest.raises(FlowError, match="router must be one of"):
        nextpnr_args(prof, 150, True, "router3")


def test_nextpnr_seed_option():
    """The placer's seed is fixed (repeatable builds) and can be chosen (bench/fpga.py
    --seeds quotes Fmax over more than one placement)."""
    for dev in ("ecp5-85k", "ice40-up5k"):
        prof = fpga_profile(dev)
        a = nextpnr_args(prof, 50, True)
        assert a[a.index("--seed") + 1] == "1"
        b = nextpnr_args(prof, 50, True, seed=7)
        assert b[b.index("--seed") + 1] == "7" and b.count("--seed") == 1


def test_synth_script_without_dsp():
    """A DSP budget of 0 turns DSP inference off in the family's synthesis command."""
    from modelcircuit.hdl.flow.yosys import render

    def cmd(family: str, dsp: bool) -> str:
        text = render("synth.ys.j2", family=family, top="top", soft=False, dsp=dsp)
        return next(ln for ln in text.splitlines() if ln.startswith("synth_"))

    assert cmd("ecp5", False).startswith("synth_ecp5 -nodsp ")
    assert "-nodsp" not in cmd("ecp5", True)
    assert cmd("ice40", True).startswith("synth_ice40 -dsp ")
    assert "-dsp" not in cmd("ice40", False)
