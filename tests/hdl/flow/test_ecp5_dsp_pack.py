"""ECP5 DSP register packing (hdl/flow/ecp5_dsp_pack.py), on a design of corner cases
synthesized by the real synth_ecp5: which flip-flops become the MULT18X18D's own registers,
which must stay in the fabric, and that nextpnr-ecp5 places and routes the result."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from modelcircuit.hdl.flow.ecp5_dsp_pack import pack_file
from modelcircuit.hdl.flow.tools import tool_command, tool_env, warm_tool

# lane 0: plain registers around the product; lane 1: input registers enabled by en1, the
# product register by en2; lane 2: a synchronously reset product register; lane 3: an input
# register with another load (o3) and a product bit with a logic load (x3); lane 4: a product
# register on the falling edge; lane 5: operand a is a register right after a block RAM's read
# (a ROM; it stays beside the RAM), b a plain register
DESIGN = """
module top(input clk, input en1, en2, srst, input [15:0] a0,b0,a1,b1,a2,b2,a3,b3,a4,b4,
           input [8:0] ra, input [15:0] b5,
           output reg [31:0] p0,p1,p2,p3,p4,p5, output [15:0] o3, output x3);
  reg signed [15:0] ra0, rb0, ra1, rb1, ra2, rb2, ra3, rb3, ra4, rb4, ra5, rb5;
  reg [15:0] rom [0:511];
  reg [15:0] rd;
  integer i;
  initial for (i = 0; i < 512; i = i + 1) rom[i] = (i * 40503) % 65521;
  always @(posedge clk) begin
    rd <= rom[ra]; ra5 <= rd; rb5 <= b5; p5 <= $signed(ra5) * $signed(rb5);
    ra0 <= a0; rb0 <= b0; p0 <= $signed(ra0) * $signed(rb0);
    if (en1) begin ra1 <= a1; rb1 <= b1; end
    if (en2) p1 <= $signed(ra1) * $signed(rb1);
    ra2 <= a2; rb2 <= b2; if (srst) p2 <= 0; else p2 <= $signed(ra2) * $signed(rb2);
    ra3 <= a3; rb3 <= b3; p3 <= $signed(ra3) * $signed(rb3);
    ra4 <= a4; rb4 <= b4;
  end
  wire signed [31:0] m3 = $signed(ra3) * $signed(rb3);
  assign o3 = ra3 ^ 16'h5a5a;
  assign x3 = ^m3[7:0];
  always @(negedge clk) p4 <= $signed(ra4) * $signed(rb4);
endmodule
"""


def _run(tool: str, args: list[str], cwd: Path) -> None:
    r = subprocess.run(tool_command(tool, args), cwd=cwd, env=tool_env(), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any], Path]:  # noqa: ANN001
    d = tmp_path_factory.mktemp("dsp_pack")
    (d / "t.v").write_text(DESIGN)
    warm_tool("yosys")
    _run("yosys", ["-q", "-p", "read_verilog t.v; synth_ecp5 -top top -json t.json"], d)
    stats = pack_file(d / "t.json", d / "packed.json")
    nl = json.loads((d / "packed.json").read_text())
    return stats, nl["modules"]["top"], d


def _port_bits(m: dict[str, Any], name: str) -> list[int]:
    return m["ports"][name]["bits"]


def _dsp_driving(m: dict[str, Any], port: str) -> dict[str, Any] | None:
    """The MULT18X18D whose P drives bit 0 of output `port` (a packed product register)."""
    b = _port_bits(m, port)[0]
    for c in m["cells"].values():
        if c["type"] == "MULT18X18D" and c["connections"].get("P0") == [b]:
            return c
    return None


def test_registers_packed_where_the_circuit_allows(packed) -> None:  # noqa: ANN001
    stats, m, _ = packed
    assert stats["dsp"] == 6
    assert sum(c["type"] == "DP16KD" for c in m["cells"].values()) == 1
    # every lane's operands are plain rising-edge registers: all packed but lane 5's a,
    # the register after the block RAM
    assert (stats["input_a"], stats["input_b"]) == (5, 6)
    c5 = _dsp_driving(m, "p5")
    assert c5 is not None and c5["parameters"].get("REG_INPUTA_CLK", "NONE") == "NONE"
    assert c5["parameters"]["REG_INPUTB_CLK"] == "CLK0"
    # lanes 0, 1 and 5 have a product register the block can be: not the reset one (2),
    # not the one whose bit feeds logic (3), not the falling-edge one (4)
    assert stats["output"] == 3
    for port in ("p0", "p1"):
        c = _dsp_driving(m, port)
        assert c is not None, port
        p = c["parameters"]
        assert {p["REG_INPUTA_CLK"], p["REG_INPUTB_CLK"], p["REG_OUTPUT_CLK"]} == {"CLK0"}
    for port in ("p2", "p3", "p4"):
        assert _dsp_driving(m, port) is None, port
        # still a fabric register drives that output
        b = _port_bits(m, port)[0]
        assert any(c["type"] == "TRELLIS_FF" and c["connections"].get("Q") == [b]
                   for c in m["cells"].values()), port


def test_each_register_keeps_its_own_enable(packed) -> None:  # noqa: ANN001
    _, m, _ = packed
    c = _dsp_driving(m, "p1")
    p, k = c["parameters"], c["connections"]
    ce_in, ce_out = p["REG_INPUTA_CE"], p["REG_OUTPUT_CE"]
    assert ce_in != ce_out
    # the enables may pass through a buffer cell: what matters is two different nets, one
    # each, and neither tied on
    assert k[ce_in] != k[ce_out] and "1" not in (k[ce_in][0], k[ce_out][0])
    assert p["REG_INPUTB_CE"] == ce_in


def test_an_input_register_with_other_loads_stays(packed) -> None:  # noqa: ANN001
    """ra3 also drives o3: the block takes a copy and the fabric register stays; ra0 has no
    other load: its flip-flops are gone (the block's register is the only one)."""
    _, m, _ = packed

    def regs_of(port: str) -> int:  # fabric flip-flops loading that input port's bits
        bits = set(_port_bits(m, port))
        return sum(1 for c in m["cells"].values() if c["type"] == "TRELLIS_FF"
                   and c["connections"].get("DI", [None])[0] in bits)

    assert regs_of("a3") == 16
    assert regs_of("a0") == 0 and regs_of("b0") == 0
    # and the block reads the port directly (the register's D)
    c = _dsp_driving(m, "p0")
    assert {c["connections"][f"A{i}"][0] for i in range(16)} <= set(_port_bits(m, "a0"))


def test_nextpnr_places_and_routes_the_packed_netlist(packed) -> None:  # noqa: ANN001
    _, _, d = packed
    _run("nextpnr-ecp5", ["--25k", "--package", "CABGA256", "--json", "packed.json",
                          "--out-of-context", "--freq", "100", "--timing-allow-fail",
                          "--seed", "1", "--quiet"], d)
