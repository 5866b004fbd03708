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
        assert {"schedule", "lut_unit", "bram_rom", "soft_multiplier_max_width"} <= set(fam)
        if not p.get("estimate_only"):
            assert {"dsp_min_widths", "dsp_max_width", "nextpnr_cells", "out_of_context"} <= set(fam)

