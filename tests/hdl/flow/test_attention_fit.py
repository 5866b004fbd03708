"""Issue 25: the small builder encoder (8 tokens, d 16, 2 heads, FFN 32, 5 classes,
fixed<16,6>) on ecp5-85k. The products of the attention circuits are counted as the circuit
writes them (hdl/streamed/attention.fixed_products: the `$mul`s yosys listed after prep's
opt_merge), the circuit plan gives them their DSP blocks before the Dense lanes
(plan/circuit.dsp_lanes), the estimate counts their blocks (flow/attention_cost.py), and an
explicit plan shows the estimate --reuse auto makes of it (fit.check_plan)."""

from __future__ import annotations

import pytest

import modelcircuit as mc
from modelcircuit.hdl.flow.devices import fpga_profile
from modelcircuit.hdl.flow.fit import check_plan, plan_circuit
from modelcircuit.hdl.flow.yosys import render
from modelcircuit.hdl.streamed.attention import fixed_products
from tests.graphs.test_attention_types import encoder

R16 = {"l0_q": 16, "l0_k": 16, "l0_v": 16, "l0_out": 16, "l0_ff1": 16, "l0_ff2": 16,
       "classifier": 5}
# LayerNorm lanes at R 16: the token budget is the attention's 22 cycles (more than R 16),
# the fold's II 2P + 9 (every product registered on both sides) -> P <= 6, ceil(16 / 6) = 3
# lanes (2 when the fold was 2P + 5, as yosys listed it in issue 25)
LN_LANES = 3


@pytest.fixture(scope="module")
def compiled():
    return mc.compile(encoder(tokens=8, d=16, heads=2, ffn=32, classes=5),
                      precision="fixed<16,6>", profile="ecp5-85k")


def test_fixed_products_are_the_muls_yosys_lists(compiled) -> None:
    """The widths and counts yosys 0.70 listed for this encoder after prep (issue 25, muls.txt
    with opt_merge): 16 q.k 16 x 16, 2 scale 35 x 17, 2 e * r 18 x 18, 16 p * v 17 x 16; per
    LayerNorm lane d ** 2 25 x 25, d * R 25 x 22, t * g 47 x 16."""
    got = sorted(fixed_products(compiled.graph, R16))
    want = sorted([("l0_attn", 16, 16, 16), ("l0_attn", 35, 17, 2), ("l0_attn", 18, 18, 2),
                   ("l0_attn", 17, 16, 16)]
                  + [(ln, a, b, LN_LANES) for ln in ("l0_ln1", "l0_ln2")
                     for a, b in ((25, 25), (25, 22), (47, 16))])
    assert got == want


def test_dsp_lanes_leave_the_attention_products_their_blocks(compiled) -> None:
    """104 blocks for the attention circuits (38 + 2 x 3 lanes x 11: 4 + 4 + 3 per lane) and
    16 for the classifier's FlatDense `$mul`s leave 36 of the 156 to the folded Dense lanes,
    the widest first in graph order (2 LayerNorm lanes: 82 blocks, 58 left, l0_v 16, l0_out
    10)."""
    plan = plan_circuit(compiled, R16)
    assert dict(plan.dsp_lanes) == {"l0_q": 16, "l0_k": 16, "l0_v": 4, "l0_out": 0,
                                    "l0_ff1": 0, "l0_ff2": 0}


def test_explicit_plan_shows_the_auto_estimate(compiled) -> None:
    """The plan --reuse auto picks, given explicitly, has the same estimate (check_plan used
    to show the least-cost one: 44,214 against auto's 51,727 for the same plan)."""
    prof = fpga_profile("ecp5-85k")
    auto = plan_circuit(mc.compile(encoder(tokens=8, d=16, heads=2, ffn=32, classes=5),
                                   precision="fixed<16,6>", profile="ecp5-85k",
                                   reuse="auto"), "auto")
    fp = check_plan(compiled, prof, dict(auto.reuse))
    assert fp.estimate == auto.fit["estimate"]
    # R 16 is over the 60 % that auto keeps to (synthesis: 44,612 LUT4 + 4,692 CCU2C), so
    # auto folds the Dense layers to R 32
    est = check_plan(compiled, prof, R16).estimate
    assert est["lut"] > 0.6 * prof["lut"] and est["dsp"] == prof["dsp"]
    # as yosys moved to logic with 2 LayerNorm lanes (to_logic 70), and the 22 Dense lanes
    # the third lanes' blocks take (l0_v 16 -> 4, l0_out 10 -> 0)
    assert est["soft_multipliers"] == 70 + 22
    # the classifier (a Flatten of 8 tokens x 16 into 5 classes) at R 80: 10 cycles a token,
    # one class a cycle over two chunks of 8 channels (8 products, plan/fold.FlatFold), not
    # R 5's 80 products: the frame time is the Dense layers' either way
    assert auto.reuse["classifier"] == 80
    assert set(auto.reuse.values()) == {32, 80}


def test_prep_merges_products_before_listing_them() -> None:
    prep = render("prep.ys.j2", family="ecp5", design="d.il", rtlil=True, top="top")
    assert prep.index("opt_merge") < prep.index("dump t:$mul")
