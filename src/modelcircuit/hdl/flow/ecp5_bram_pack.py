"""ECP5: the fabric flip-flops right after a block RAM's read packed into the DP16KD's own
output register (REGMODE "OUTREG"), on the yosys JSON netlist that nextpnr-ecp5 reads. Runs
with the DSP packing (ecp5_dsp_pack.py, the same opt-in MODELCIRCUIT_DSP_PACK=1, after it).

Why: yosys maps every inferred memory with REGMODE "NOREG" (it has no output-register
absorption for ECP5), and a DP16KD without its output register has a 5.61 ns clock-to-out in
nextpnr's model (0.97 ns with it): with the route to the register after it, a block RAM read
was the folded jet tagger's clock on an ECP5-25k once its products were in registered DSPs
(coefficient ROM -> coefficient register 7.43 ns, 134.6 MHz). Every table and coefficient
read of the circuits is already followed by a register (the units register a ROM's output
before using it: hdl/units/elementwise.table_read and the folded Dense's coefficient
register), so packing it changes no cycle.

For each read port of a DP16KD with no output register in use (port A and port B of a block
up to 18 bits wide; in the 36-bit pseudo-dual-port mode yosys uses for wide ROMs, the one
read port of clock CLKB whose data is DOA and DOB together):

* every read-data bit that has a load feeds only the D of flip-flops that are plain (rising
  clock, no set/reset in use, clear to 0, high-active or no enable: ecp5_dsp_pack.ff_key),
  all sharing one clock, which is the port's read clock, one enable and one GSR setting;
  no read-data bit is a module port; the port's reset input is tied 0.
* then REGMODE becomes "OUTREG" with the flip-flops' enable on OCE, the read-data bits drive
  the flip-flops' Q nets and the flip-flops are removed (a bit that fed several identical
  flip-flops drives one of their Q nets; the others' loads move onto it). In the 36-bit mode
  both halves are set alike (REGMODE_A and _B, OCEA and OCEB, and CLKA on the read clock
  when port A's clock was unused), so the block is right whichever port's output register
  the silicon uses for the low half.

Like the DSP packing, checked by simulation of the packed against the unpacked netlist (a
behavioural DP16KD with the output register, tests/hdl/flow/ecp5_models; not the vendor's
model: the folded jet tagger 40,000 cycles, and in CI tests/hdl/flow/test_ecp5_pack_sim.py)
and by nextpnr accepting the result (test_ecp5_bram_pack.py); not yet on hardware.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .ecp5_netlist import Net, absorb, finish, output_registers, pack_json, param

BRAM = "DP16KD"


def _width(p: dict[str, Any], port: str) -> int:
    v = p.get(f"DATA_WIDTH_{port}", 18)
    return int(v, 2) if isinstance(v, str) else int(v)


def _groups(c: dict[str, Any]) -> list[tuple[str, list[str], list[str]]]:
    """The read ports of a DP16KD: (read port, its data pins, the ports to set alike)."""
    p = c.get("parameters", {})
    if _width(p, "A") == 36 or _width(p, "B") == 36:
        return [("B", [f"DO{x}{i}" for x in "AB" for i in range(18)], ["A", "B"])]
    return [(x, [f"DO{x}{i}" for i in range(18)], [x]) for x in "AB"]


def pack_module(m: dict[str, Any]) -> dict[str, Any]:
    net = Net(m)
    cells = m["cells"]
    brams = sorted(n for n, c in cells.items() if c["type"] == BRAM)
    stats: dict[str, Any] = {"bram": len(brams), "ports": 0, "ff_removed": 0, "skipped": {}}
    remap: dict[int, int] = {}

    def skip(why: str) -> None:
        stats["skipped"][why] = stats["skipped"].get(why, 0) + 1

    for name in brams:
        c = cells[name]
        p, k = c.setdefault("parameters", {}), c["connections"]
        if param(p.get("REGMODE_A"), "NOREG") != "NOREG" or \
                param(p.get("REGMODE_B"), "NOREG") != "NOREG":
            skip("output register already in use")
            continue
        gsr0 = None  # one GSR setting per block
        for rd, pins, alike in _groups(c):
            clk = k.get(f"CLK{rd}", ["0"])[0]
            if not isinstance(clk, int) or any(k.get(f"RST{x}", ["0"])[0] != "0" for x in alike):
                skip("port unused (no clock) or reset in use")
                continue
            if len(alike) == 2:  # the other port's clock: unused or the same
                other = k.get("CLKA", ["0"])[0]
                if isinstance(other, int) and other != clk:
                    skip("two clocks")
                    continue
            found = output_registers(net, {pin: k.get(pin, ["x"])[0] for pin in pins})
            if not found or not found[0] or len(found[1]) != 1 or \
                    next(iter(found[1]))[0] != clk or gsr0 not in (None, next(iter(found[1]))[2]):
                skip("read data not only into one class of plain flip-flops on its clock")
                continue
            plan, keys = found
            _, ce, gsr = next(iter(keys))
            gsr0 = gsr
            stats["ff_removed"] += absorb(net, name, plan, remap)
            for x in alike:
                p[f"REGMODE_{x}"] = "OUTREG"
                net.connect(name, f"OCE{x}", ce)
                if x != rd:
                    net.connect(name, f"CLK{x}", clk)
            p["GSR"] = gsr
            stats["ports"] += 1
    finish(m, remap)
    return stats


def pack_file(src: Path, dst: Path | None = None) -> dict[str, Any]:
    """Packs the top module of the yosys JSON netlist `src` into `dst` (default: in place)."""
    return pack_json(src, dst, pack_module)


__all__ = ["pack_file", "pack_module"]
