"""ECP5 block RAM output-register packing (hdl/flow/ecp5_bram_pack.py), on a design of corner
cases synthesized by the real synth_ecp5: which read registers become the DP16KD's own output
register, which must stay in the fabric, and that nextpnr-ecp5 places the result and times
the packed reads with the output register's clock-to-out."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from modelcircuit.hdl.flow.ecp5_bram_pack import pack_file
from modelcircuit.hdl.flow.tools import tool_command, tool_env, warm_tool

# four ROMs of 512 words: r0 18 bits wide, its read registered (plain); r1 36 bits (yosys's
# pseudo-dual-port mode: the read port's data is DOA and DOB), registered under enable en;
# with CORNERS defined, r2 registered with a synchronous reset, and r3 registered but one
# data bit also feeding logic; y0/y1 register q0/q1 again (register-to-register paths, which
# an out-of-context nextpnr run times)
DESIGN = """
module top(input clk, input en, input srst, input [8:0] a0, a1, a2, a3,
           output reg [17:0] q0, output reg [35:0] q1, output reg [17:0] q2, q3,
           output x3, output reg [17:0] y0, output reg [35:0] y1);
  reg [17:0] r0 [0:511]; reg [35:0] r1 [0:511]; reg [17:0] r2 [0:511]; reg [17:0] r3 [0:511];
  reg [17:0] d0, d2, d3; reg [35:0] d1;
  integer i; reg [35:0] t;
  initial for (i = 0; i < 512; i = i + 1) begin
    t = (i * 977) % 262139; t = (t << 18) | ((i * 31337) % 262139);
    r0[i] = (i * 40503) % 262139; r1[i] = t;
    r2[i] = (i * 7919) % 262139; r3[i] = (i * 6007) % 262139;
  end
  always @(posedge clk) begin
    d0 <= r0[a0]; d1 <= r1[a1];
    q0 <= d0;
    if (en) q1 <= d1;
    y0 <= q0; y1 <= q1;
`ifdef CORNERS
    d2 <= r2[a2]; d3 <= r3[a3];
    if (srst) q2 <= 0; else q2 <= d2;
    q3 <= d3;
`endif
  end
`ifdef CORNERS
  assign x3 = d3[5] ^ a3[0];
`else
  assign x3 = 0;
`endif
endmodule
"""


def _run(tool: str, args: list[str], cwd: Path) -> str:
    r = subprocess.run(tool_command(tool, args), cwd=cwd, env=tool_env(), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    return r.stderr + r.stdout


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any], Path]:  # noqa: ANN001
    d = tmp_path_factory.mktemp("bram_pack")
    (d / "t.v").write_text(DESIGN)
    warm_tool("yosys")
    _run("yosys", ["-q", "-p", "read_verilog -DCORNERS t.v; synth_ecp5 -top top -json t.json"],
         d)
    stats = pack_file(d / "t.json", d / "packed.json")
    nl = json.loads((d / "packed.json").read_text())
    return stats, nl["modules"]["top"], d


def _bram_driving(m: dict[str, Any], port: str, i: int = 0) -> tuple[dict[str, Any], str] | None:
    """(the DP16KD, its pin) whose read data drives bit i of output `port`, if one does."""
    b = m["ports"][port]["bits"][i]
    for c in m["cells"].values():
        if c["type"] == "DP16KD":
            for pin, bits in c["connections"].items():
                if pin.startswith("DO") and bits == [b]:
                    return c, pin
    return None


def test_read_registers_packed_where_the_circuit_allows(packed) -> None:  # noqa: ANN001
    stats, m, _ = packed
    assert stats["bram"] == 4
    assert stats["ports"] == 2  # r0 and r1's read ports
    # r0: the block's output register drives q0, its fabric register is gone
    c0, _ = _bram_driving(m, "q0")
    assert c0["parameters"]["REGMODE_A"] == "OUTREG" or c0["parameters"]["REGMODE_B"] == "OUTREG"
    # r1: every one of q1's 36 bits comes straight from the block, both halves registered
    # alike, the output register enabled by en
    found = [_bram_driving(m, "q1", i) for i in range(36)]
    assert all(found)
    c1 = found[0][0]
    assert all(f[0] is c1 for f in found)
    assert {f[1][:3] for f in found} == {"DOA", "DOB"}
    p, k = c1["parameters"], c1["connections"]
    assert p["REGMODE_A"] == p["REGMODE_B"] == "OUTREG"
    en = m["ports"]["en"]["bits"][0]
    assert k["OCEA"] == k["OCEB"] != ["1"]
    assert k["CLKA"] == k["CLKB"]
    # the enable may pass through a buffer: it is en or a net driven from it, never a constant
    assert isinstance(k["OCEB"][0], int) and (k["OCEB"] == [en] or k["OCEB"][0] != en)
    # r2 (reset) and r3 (a data bit with a logic load): still fabric registers after the RAM
    for port in ("q2", "q3"):
        assert _bram_driving(m, port) is None, port
    for c in m["cells"].values():
        if c["type"] == "DP16KD" and c is not c1 and c is not c0:
            assert {c["parameters"].get("REGMODE_A", "NOREG"),
                    c["parameters"].get("REGMODE_B", "NOREG")} == {"NOREG"}


def test_no_flip_flop_left_on_a_packed_read(packed) -> None:  # noqa: ANN001
    """The removed registers left no loads behind: every bit a cell reads has a driver."""
    _, m, _ = packed
    driven = {b for p in m["ports"].values() if p["direction"] == "input" for b in p["bits"]}
    for c in m["cells"].values():
        for pin, bits in c["connections"].items():
            if c.get("port_directions", {}).get(pin) == "output":
                driven.update(b for b in bits if isinstance(b, int))
    for c in m["cells"].values():
        for pin, bits in c["connections"].items():
            if c.get("port_directions", {}).get(pin) == "input":
                assert all(b in driven for b in bits if isinstance(b, int)), (c["type"], pin)


def test_nextpnr_times_the_packed_reads_from_the_output_register(tmp_path) -> None:  # noqa: ANN001
    """nextpnr accepts a packed netlist and times its reads from the output register: r0 and
    r1 alone (their output registers then drive y0/y1's registers) reach a clock no read
    without its register could: 5.61 ns block RAM clock-to-out in nextpnr's ECP5 model is
    < 178 MHz before any route (seen unpacked: ~145 MHz)."""
    d = tmp_path
    (d / "t.v").write_text(DESIGN)
    warm_tool("yosys")
    _run("yosys", ["-q", "-p", "read_verilog t.v; synth_ecp5 -top top -json t.json"], d)
    fmax = {}
    for name in ("t.json", "packed.json"):
        if name == "packed.json":
            assert pack_file(d / "t.json", d / name)["ports"] == 2
        log = _run("nextpnr-ecp5", ["--25k", "--package", "CABGA256", "--json", name,
                                    "--out-of-context", "--freq", "100", "--timing-allow-fail",
                                    "--seed", "1"], d)
        fmax[name] = float(re.findall(r"Max frequency for clock '[^']*': ([\d.]+) MHz", log)[-1])
    assert fmax["t.json"] < 178 < 250 < fmax["packed.json"], fmax
