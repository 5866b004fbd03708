"""Device data (hdl/flow/devices.py): family numbers are profile data."""

from __future__ import annotations


def test_device_numbers_are_profile_data():
    """Every FPGA profile's family has its data in fpga.json ("families"), which is not a
    profile itself; devices with a flow have what synthesis and the report need."""
    from modelcircuit.graphs.profiles import all_profiles
    from modelcircuit.hdl.flow.devices import family

    assert "families" not in all_profiles()
    for p in all_profiles().values():
        if p["kind"] != "fpga":
            continue
        fam = family(p["family"])
        assert {"lut_margin", "overhead_lut", "logic_cells"} <= set(fam["fit"])
        # the DSP widths are estimate data (softmax_costs, attention_cost): every family
        assert {"schedule", "lut_unit", "bram_rom", "soft_multiplier_max_width",
                "dsp_min_widths", "dsp_max_width"} <= set(fam)
        if not p.get("estimate_only"):
            assert {"nextpnr_cells", "out_of_context"} <= set(fam)


def test_reuse_auto_on_an_estimate_only_device_with_a_softmax():
    """`--reuse auto --profile xczu3eg` fits a model with a Softmax: the estimate of the
    Softmax reads the family's DSP width (was KeyError 'dsp_max_width', exit 70)."""
    import numpy as np

    from modelcircuit.api import compile
    from modelcircuit.frontend.builder import GraphBuilder
    from modelcircuit.hdl.flow import plan_circuit

    rng = np.random.default_rng(0)
    b = GraphBuilder("sm")
    b.output(b.softmax(b.dense(b.input("x", 7), rng.normal(0, 0.5, (7, 3)), None, name="fc")))
    c = compile(b.build(), precision="fixed<8,3>", reuse="auto", profile="xczu3eg")
    plan = plan_circuit(c, "auto")
    assert plan.fit["device"] == "xczu3eg" and dict(plan.reuse) == {"fc": 1}

