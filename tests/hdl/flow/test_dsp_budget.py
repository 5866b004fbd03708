"""The DSP blocks a design may use (graphs.profiles.usable_dsp): on Nexus half the device's
MULT18s, so that any mix of MULT18X18 and MULTADDSUB18X18 that synthesis makes places (the
s48 sweep's GRU on a LIFCL-40: 44 + 12 of them in the 56 planned, 124 of 112 REG18 sites,
nextpnr found no place for a PREADD9_CORE after 9 minutes)."""

from __future__ import annotations

from pathlib import Path

from modelcircuit.graphs.profiles import all_profiles, usable_dsp

GRU = Path(__file__).resolve().parents[2] / "data" / "exporters" / "torch_gru_f3_h12_t10_hn.onnx"


def _prof(name: str) -> dict:
    return dict(all_profiles()[name], name=name)


def test_nexus_budget_fits_any_mix_of_dsp_macros() -> None:
    p = _prof("lifcl-40")
    n, sites = usable_dsp(p), int(p["dsp"])
    assert 0 < n < sites
    for macs in range(n + 1):  # a MULT18X18 takes one MULT18 site, a MULTADDSUB18X18 two
        assert (n - macs) + 2 * macs <= sites
    assert 44 + 2 * 12 > sites  # the sweep's GRU, which did not place


def test_other_families_keep_every_block() -> None:
    for name in ("ecp5-25k", "gw1nr-9", "ice40-up5k"):
        assert usable_dsp(_prof(name)) == int(_prof(name)["dsp"])


def test_fit_and_synthesis_spend_the_usable_blocks_only() -> None:
    from modelcircuit.api import compile
    from modelcircuit.hdl.flow.fit import fit_reuse
    from modelcircuit.hdl.flow.yosys import synth_dsp_budget
    from modelcircuit.hdl.plan.circuit import resolve_plan

    p = _prof("lifcl-40")
    assert synth_dsp_budget(p) == usable_dsp(p) and synth_dsp_budget(p, 3) == 3
    c = compile(str(GRU), profile="lifcl-40")
    fp = fit_reuse(c, p)
    assert fp.budget["dsp"] == usable_dsp(p) and fp.estimate["dsp"] <= usable_dsp(p)
    lanes = resolve_plan(c, dict(fp.reuse)).dsp_lanes or {}
    assert sum(lanes.values()) <= usable_dsp(p)
