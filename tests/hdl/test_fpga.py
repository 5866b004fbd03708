"""FPGA flow (hdl/flow/: reports, devices, fit, boards): parsing, fitting and errors without the tools
(fast), and real yosys/nextpnr runs on a tiny model (tests/hdl/test_fpga_flow.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from modelcircuit.api import compile
from modelcircuit.graphs.builder import GraphBuilder
from modelcircuit.graphs.onnx_import import load_onnx
from modelcircuit.hdl.flow import FitError, fit_reuse, fpga_profile
from modelcircuit.hdl.flow.devices import dsp_blocks
from modelcircuit.hdl.flow.reports import parse_muls, parse_nextpnr

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "src" / "modelcircuit" / "data" / "digits_mlp.onnx"


# -- small models shared with the flow and UART tests --------------------------------------
def tiny_graph(n_in: int = 16, hidden: int = 8, n_out: int = 4, seed: int = 5):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("tiny_mlp")
    x = b.input("x", n_in)
    h = b.relu(b.dense(x, rng.normal(0, 0.5, (n_in, hidden)), rng.normal(0, 0.1, hidden), name="fc1"))
    b.output(b.dense(h, rng.normal(0, 0.5, (hidden, n_out)), rng.normal(0, 0.1, n_out), name="fc2"))
    return b.build()


def wide_graph():
    """256 -> 256: does not fit an UP5K at any reuse at 16 bits."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("wide")
    b.output(b.dense(b.input("x", 256), rng.normal(0, 0.1, (256, 256)), None, name="fc"))
    return b.build()


def tiny_compiled(precision: str = "fixed<6,3>", profile: str | None = None):
    return compile(tiny_graph(), precision=precision, profile=profile)


def tiny_onnx(path: Path, graph=None) -> Path:
    import onnx

    from modelcircuit.graphs.onnx_export import to_onnx

    onnx.save(to_onnx(graph or tiny_graph()), str(path))
    return path


def cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modelcircuit.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=600)


# -- parsing -------------------------------------------------------------------------------
NEXTPNR_LOG = """\
Info: Device utilisation:
Info: 	         ICESTORM_LC:    10/ 5280     0%
Info: 	        ICESTORM_RAM:     0/   30     0%
Info: Max frequency for clock 'clk': 90.01 MHz (PASS at 12.00 MHz)
Info: Device utilisation:
Info: 	         ICESTORM_LC:  1234/ 5280    23%
Info: 	        ICESTORM_RAM:     2/   30     6%
Info: 	        ICESTORM_DSP:     8/    8   100%
Info: 	              SB_IO:     3/   96     3%

Info: Critical path report for clock 'clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  0.54  0.54 Source u.acc_SB_DFFE_Q.Q
Info:    routing  1.20  1.74 Net u.acc
Info: Max frequency for clock 'clk': 41.50 MHz (PASS at 12.00 MHz)
"""


def test_parse_nextpnr_takes_last_fmax_and_last_utilisation():
    p = parse_nextpnr(NEXTPNR_LOG)
    assert p["fmax_mhz"] == 41.5 and [f["mhz"] for f in p["fmax_lines"]] == [90.01, 41.5]
    assert p["utilisation"]["ICESTORM_LC"] == [1234, 5280]
    assert p["utilisation"]["ICESTORM_DSP"] == [8, 8]
    assert any("acc_SB_DFFE_Q" in ln for ln in p["critical_path"])


def test_parse_muls_and_dsp_blocks():
    dump = ("  cell $mul $flatten\\u.$1\n    parameter \\A_SIGNED 1\n    parameter \\A_WIDTH 6\n"
            "    parameter \\B_WIDTH 4\n    parameter \\Y_WIDTH 10\n  end\n"
            "  cell $mul $m2\n    parameter \\A_WIDTH 20\n    parameter \\B_WIDTH 16\n"
            "    parameter \\Y_WIDTH 36\n  end\n")
    m = parse_muls(dump)
    assert [(x["a"], x["b"], x["y"]) for x in m] == [(6, 4, 10), (20, 16, 36)]
    assert dsp_blocks(m[0], "ice40") == 0  # Y below mul2dsp's 11-bit minimum
    assert dsp_blocks(m[0], "ecp5") == 1
    assert dsp_blocks(m[1], "ice40") == 2 and dsp_blocks(m[1], "ecp5") == 2


# -- device data and yosys scripts ---------------------------------------------------------
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


def test_yosys_scripts_come_from_templates():
    import jinja2

    from modelcircuit.hdl.flow.yosys import render

    assert render("synth.ys.j2", family="ice40", top="top", soft=False) == (
        "read_rtlil prep.il\nsynth_ice40 -dsp -top top -json synth.json\n"
        "tee -q -o stat.json stat -json\n")
    prep = render("prep.ys.j2", family="ecp5", design="d.v", rtlil=False, top="m")
    assert prep.startswith("read_verilog -lib -specify +/lattice/cells_sim_ecp5.v "
                           "+/lattice/cells_bb_ecp5.v\nread_verilog -sv d.v\nhierarchy -check -top m\n")
    with pytest.raises(jinja2.UndefinedError):  # StrictUndefined: nothing missing goes unseen
        render("prep.ys.j2", family="ecp5", top="top")


# -- fit -----------------------------------------------------------------------------------
def test_fit_tiny_on_up5k_is_parallel_and_digits_on_ecp5_folds():
    tiny = fit_reuse(tiny_compiled(), fpga_profile("ice40-up5k"))
    assert tiny.ii == 1 and set(tiny.reuse) == {"fc1", "fc2"}
    d = compile(load_onnx(DIGITS), precision="fixed<6,3>")
    for dev in ("ecp5-25k", "ecp5-85k"):
        plan = fit_reuse(d, fpga_profile(dev))
        assert plan.estimate["lut"] <= fpga_profile(dev)["lut"]
        assert plan.ii == max(plan.reuse.values())
    p25 = fit_reuse(d, fpga_profile("ecp5-25k"))
    p85 = fit_reuse(d, fpga_profile("ecp5-85k"))
    assert p85.ii <= p25.ii  # a bigger device never needs more folding


def test_fit_error_names_the_budget():
    """256 -> 256 at 16 bits: the input rotation and output registers alone (8192 FF) are
    more than an UP5K has, at any reuse."""
    d = compile(wide_graph(), precision="fixed<16,6>")
    with pytest.raises(FitError, match=r"does not fit ice40-up5k even at the largest reuse.*5280"):
        fit_reuse(d, fpga_profile("ice40-up5k"))


# -- bad input (no tools run) --------------------------------------------------------------
def test_unknown_device_and_board(tmp_path):
    r = cli("build", "--device", "nope", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.startswith("error: unknown FPGA device 'nope'")
    r = cli("build", "--device", "xczu3eg", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "estimates only" in r.stderr
    r = cli("build", "--device", "ice40-up5k", "--board", "nope", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown board 'nope'" in r.stderr
    r = cli("build", "--device", "ecp5-85k", "--board", "icebreaker", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "carries ice40-up5k" in r.stderr
    assert not (tmp_path / "o").exists()


def test_design_does_not_fit_is_exit_2(tmp_path):
    onnx_path = tiny_onnx(tmp_path / "wide.onnx", wide_graph())
    r = cli("build", str(onnx_path), "--device", "ice40-up5k", "--precision", "fixed<16,6>",
            "--reuse", "auto", "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    assert "does not fit ice40-up5k" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_failing_tool_shows_log_tail_and_leaves_nothing(tmp_path):
    fake = tmp_path / "fake-yosys"
    fake.write_text("#!/bin/sh\necho 'line one'\necho 'ERROR: something broke in synthesis'\nexit 1\n")
    fake.chmod(0o755)
    import os

    env = dict(os.environ, YOSYS=str(fake))
    onnx_path = tiny_onnx(tmp_path / "tiny.onnx")
    r = cli("build", str(onnx_path), "--device", "ecp5-25k", "--precision", "fixed<6,3>",
            "--reuse", "1", "--out", str(tmp_path / "o"), env=env)
    assert r.returncode == 2
    assert "error: yosys-prep failed (exit 1): ERROR: something broke in synthesis" in r.stderr
    assert "| line one" in r.stderr  # the log's last lines are shown
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.")]
