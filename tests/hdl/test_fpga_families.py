"""The Gowin (nextpnr himbaechel, apycula's gowin_pack) and Nexus (nextpnr-nexus) flows run
for real on a tiny model: minutes of place and route each on a shared 2-core machine, so
`slow` (measured on a busy 2-core machine: GW1NR-9 wrapped run 3.4 min, LIFCL-40 1.7 min,
the Tang Nano 9K board build 11 min). Numbers must come from
the tools and lie within the device."""

from __future__ import annotations

import pytest

from modelcircuit.hdl.flow import build, fpga_profile

from .test_fpga import tiny_compiled

pytestmark = pytest.mark.slow


def _check(rep: dict, device: str) -> None:
    tot = fpga_profile(device)
    for k in ("lut", "ff"):
        assert 0 < rep["resources"][k] <= tot[k], (k, rep["resources"])
    assert rep["fmax_mhz"] and rep["fmax_mhz"] == rep["fmax_lines"][-1]["mhz"]
    assert rep["utilisation"] and rep["tool_wall_s"]["nextpnr"] > 0


@pytest.mark.parametrize("device, lc", [("gw1nr-9", "LUT4"), ("lifcl-40", "OXIDE_COMB")])
def test_wrapped_out_of_context(tmp_path, device: str, lc: str) -> None:
    rep = build(tiny_compiled(profile=device), device, tmp_path / device, reuse=2)
    _check(rep, device)
    assert rep["resources"]["lut"] == rep["utilisation"][lc][0]
    assert "no out-of-context mode" in rep["wrapper"] and rep["model"]["ii"] == 2


def test_tang_nano_9k_bitstream(tmp_path) -> None:
    out = tmp_path / "tn9k"
    rep = build(tiny_compiled(profile="gw1nr-9"), "gw1nr-9", out, board="tang-nano-9k",
                reuse=2)
    _check(rep, "gw1nr-9")
    fs = (out / "top.fs").read_text()  # gowin_pack writes the bitstream as text of 0/1 rows
    assert rep["files"]["bitstream"] == "top.fs" and len(fs) > 100_000
    assert set(fs.replace("\n", "").replace("\r", "")) <= {"0", "1"} or fs.startswith("//")
    assert rep["uart"]["clk_hz"] == 27e6 and rep["fmax_mhz"] >= 27
