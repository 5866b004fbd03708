"""Yosys scripts (hdl/flow/yosys.py) come from templates."""

from __future__ import annotations

import pytest


def test_yosys_scripts_come_from_templates():
    import jinja2

    from modelcircuit.hdl.flow.yosys import render

    assert render("synth.ys.j2", family="ice40", top="top", soft=False, dsp=True) == (
        "read_rtlil prep.il\nsynth_ice40 -dsp -top top -json synth.json\n"
        "tee -q -o stat.json stat -json\n")
    prep = render("prep.ys.j2", family="ecp5", design="d.v", rtlil=False, top="m")
    assert prep.startswith("read_verilog -lib -specify +/lattice/cells_sim_ecp5.v "
                           "+/lattice/cells_bb_ecp5.v\nread_verilog -sv d.v\nhierarchy -check -top m\n")
    with pytest.raises(jinja2.UndefinedError):  # StrictUndefined: nothing missing goes unseen
        render("prep.ys.j2", family="ecp5", top="top")



def test_check_fit_counts_carry_cells_as_lut_sites():
    """A design whose LUT1-4 fit but whose carry cells take the rest of the LUT sites is
    refused after synthesis, not by nextpnr minutes later (the s48 sweep: brevitas w2a7 on a
    GW1NR-9, 12,883 LUT1-4 plus its ALUs): a Gowin ALU takes a LUT, an ECP5 CCU2C two; an
    iCE40 carry shares its LUT's logic cell."""
    import pytest

    from modelcircuit.hdl.flow.devices import fpga_profile
    from modelcircuit.hdl.flow.tools import DoesNotFit
    from modelcircuit.hdl.flow.yosys import check_fit

    for dev, refused in (("gw1nr-9", True), ("ecp5-25k", True), ("ice40-up5k", False)):
        prof = dict(fpga_profile(dev), name=dev)
        st = {"lut": prof["lut"] // 2, "carry": prof["lut"] * 2 // 3, "ff": 0, "bram": 0}
        if refused:
            with pytest.raises(DoesNotFit, match=rf"does not fit {dev}: .*carry cells"):
                check_fit(st, prof, "m")
        else:
            check_fit(st, prof, "m")
        check_fit(dict(st, carry=prof["lut"] // 4), prof, "m")  # half + a quarter: fits
