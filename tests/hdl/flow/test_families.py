"""Gowin and Nexus in the flow without running the tools: profiles, nextpnr command lines,
the pins of a wrapped run, synthesis scripts, yosys cell counts. (The tools run in
tests/hdl/test_fpga_families.py, slow.)"""

from __future__ import annotations

import json

import pytest

from modelcircuit.hdl.flow import fpga_profile
from modelcircuit.hdl.flow.devices import family
from modelcircuit.hdl.flow.families import write_ooc_constraints
from modelcircuit.hdl.flow.nextpnr import nextpnr_args
from modelcircuit.hdl.flow.reports import parse_stat
from modelcircuit.hdl.flow.tools import FlowError
from modelcircuit.hdl.flow.yosys import render


@pytest.mark.parametrize("dev", ["gw1nr-9", "gw2a-18", "lifcl-40"])
def test_profiles_have_flow_data(dev: str) -> None:
    p = fpga_profile(dev)
    fam = family(p["family"])
    assert fam["out_of_context"] is False  # no --out-of-context in these nextpnrs
    assert set(p["ooc_pins"]) == {"clk", "rst", "rx", "tx"}
    for k in ("lut", "ff", "dsp", "bram"):
        assert p[k] > 0


def test_gowin_nextpnr_args(tmp_path) -> None:
    p = fpga_profile("gw1nr-9")
    a = nextpnr_args(p, 27, ooc=True)
    assert a[:4] == ["--device", "GW1NR-LV9QN88PC6/I5", "--vopt", "family=GW1N-9C"]
    assert "cst=ooc.cst" in a and a[a.index("--freq") + 1] == "27"
    assert "cst=top.cst" in nextpnr_args(p, 27, ooc=False)
    write_ooc_constraints(p, tmp_path)
    text = (tmp_path / "ooc.cst").read_text()
    assert 'IO_LOC "clk" 52;' in text and 'IO_LOC "tx" 17;' in text


def test_nexus_nextpnr_args(tmp_path) -> None:
    p = fpga_profile("lifcl-40")
    a = nextpnr_args(p, 100, ooc=True)
    assert a[:2] == ["--device", "LIFCL-40-9BG400C"] and "ooc.pdc" in a
    assert a[a.index("--router") + 1] == "router1"  # router2 failed the clock's route
    assert "--fasm" in nextpnr_args(p, 100, ooc=False)
    write_ooc_constraints(p, tmp_path)
    assert "ldc_set_location -site {L13} [get_ports clk]" in (tmp_path / "ooc.pdc").read_text()
    with pytest.raises(FlowError):
        write_ooc_constraints(dict(p, ooc_pins={}), tmp_path)


def test_synthesis_scripts() -> None:
    s = render("synth.ys.j2", family="gowin", top="top", soft=False, dsp=True,
               yosys_family="gw2a")
    assert "synth_gowin -family gw2a -top top -json synth.json" in s
    s = render("synth.ys.j2", family="nexus", top="top", soft=False, dsp=False, yosys_family="")
    assert "synth_nexus -nodsp -top top -run :map_luts" in s and "abc -lut 4" in s
    assert "-run map_cells: -json synth.json" in s
    assert "+/gowin/cells_sim.v" in render("prep.ys.j2", family="gowin", design="d.il",
                                           rtlil=True, top="top")


def test_parse_stat_gowin_and_nexus(tmp_path) -> None:
    cells = {"LUT1": 3, "LUT2": 5, "LUT4": 10, "ALU": 7, "DFFE": 4, "DFFR": 2, "MULT18X18": 1,
             "SDPB": 2, "IBUF": 3}
    (tmp_path / "g.json").write_text(json.dumps({"design": {"num_cells_by_type": cells}}))
    st = parse_stat(tmp_path / "g.json")
    assert (st["lut"], st["ff"], st["carry"], st["dsp"], st["bram"]) == (18, 6, 7, 1, 2)
    cells = {"LUT4": 9, "FD1P3IX": 4, "CCU2": 3, "MULT9X9": 2, "PDP16K": 1}
    (tmp_path / "n.json").write_text(json.dumps({"design": {"num_cells_by_type": cells}}))
    st = parse_stat(tmp_path / "n.json")
    assert (st["lut"], st["ff"], st["carry"], st["dsp"], st["bram"]) == (9, 4, 3, 2, 1)
