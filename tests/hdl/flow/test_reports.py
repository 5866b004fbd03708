"""Parsing the tools' reports (hdl/flow/reports.py): nextpnr logs, yosys multiplier cells and
their DSP blocks (hdl/flow/devices.py)."""

from __future__ import annotations

from modelcircuit.hdl.flow.devices import dsp_blocks
from modelcircuit.hdl.flow.reports import parse_muls, parse_nextpnr

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

