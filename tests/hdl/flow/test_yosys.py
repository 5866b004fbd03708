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

