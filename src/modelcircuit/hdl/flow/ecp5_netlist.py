"""The yosys JSON netlist (after synth_ecp5) as the ECP5 register packings read and edit it:
drivers and loads of every bit, which fabric flip-flops a hard block's own register can stand
for, and the edit that moves a set of such flip-flops into a block's output. Shared by
ecp5_dsp_pack.py (MULT18X18D) and ecp5_bram_pack.py (DP16KD): both look for the same plain
registers and rewire them the same way."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

FF = "TRELLIS_FF"
Key = tuple[Any, Any, str]  # (clock bit, enable bit or "1", GSR)


def param(v: Any, default: str) -> str:
    """A string parameter as yosys JSON writes it (a trailing space marks a string that looks
    like bits: CEMUX "1 ")."""
    if v is None:
        return default
    return str(v).rstrip(" ") if isinstance(v, str) else str(v)


def top_module(nl: dict[str, Any]) -> str:
    for name, m in nl["modules"].items():
        v = str(m.get("attributes", {}).get("top", "0")).strip() or "0"
        if int(v, 2) == 1:
            return name
    raise ValueError("no top module in the netlist")


class Net:
    """Drivers and loads of every bit of one module (kept up to date by the pass)."""

    def __init__(self, m: dict[str, Any]) -> None:
        self.m = m
        self.cells: dict[str, dict[str, Any]] = m["cells"]
        self.drv: dict[int, tuple[str, str]] = {}
        self.loads: dict[int, set[tuple[str, str]]] = defaultdict(set)
        self.port_bits: set[int] = set()
        for pname, p in m["ports"].items():
            for b in p["bits"]:
                if isinstance(b, int):
                    self.port_bits.add(b)
                    if p["direction"] == "input":
                        self.drv[b] = ("$port", pname)
                    else:
                        self.loads[b].add(("$port", pname))
        for cname, c in self.cells.items():
            dirs = c.get("port_directions", {})
            for port, bits in c["connections"].items():
                for i, b in enumerate(bits):
                    if not isinstance(b, int):
                        continue
                    key = port if len(bits) == 1 else f"{port}[{i}]"
                    if dirs.get(port) == "output":
                        self.drv[b] = (cname, key)
                    else:  # input or inout: a load
                        self.loads[b].add((cname, key))

    def connect(self, cname: str, port: str, bit: Any, direction: str = "input") -> None:
        """(Re)connect single-bit `port` of `cname` to `bit`, keeping the maps."""
        c = self.cells[cname]
        old = c["connections"].get(port)
        if old and isinstance(old[0], int):
            if direction == "output":
                self.drv.pop(old[0], None)
            else:
                self.loads[old[0]].discard((cname, port))
        c["connections"][port] = [bit]
        c.setdefault("port_directions", {})[port] = direction
        if isinstance(bit, int):
            if direction == "output":
                self.drv[bit] = (cname, port)
            else:
                self.loads[bit].add((cname, port))

    def remove(self, cname: str) -> None:
        c = self.cells.pop(cname)
        for bits in c["connections"].values():
            for b in bits:
                if isinstance(b, int):
                    if self.drv.get(b, (None,))[0] == cname:
                        del self.drv[b]
                    self.loads[b] = {x for x in self.loads[b] if x[0] != cname}


def ff_key(c: dict[str, Any]) -> Key | None:
    """(clock bit, enable bit or "1", GSR) of a flip-flop that a block's register can stand for:
    rising-edge clock, set/reset never active, clears to 0, high-active or no enable; None
    otherwise."""
    if c["type"] != FF or c.get("attributes", {}).get("keep"):
        return None
    p, k = c.get("parameters", {}), c["connections"]
    if param(p.get("CLKMUX"), "CLK") != "CLK" or param(p.get("REGSET"), "RESET") != "RESET":
        return None
    lsr = k.get("LSR", ["0"])[0]
    lsrmux = param(p.get("LSRMUX"), "LSR")
    if not ((lsrmux == "LSR" and lsr == "0") or (lsrmux == "INV" and lsr == "1")):
        return None
    cemux = param(p.get("CEMUX"), "1")
    if cemux == "1":
        ce: Any = "1"
    elif cemux == "CE":
        ce = k.get("CE", ["1"])[0]
        if ce not in ("1",) and not isinstance(ce, int):
            return None  # CE tied 0 / x: a register that never loads
    else:  # INV (active-low; would need an inverter), 0
        return None
    clk = k.get("CLK", [None])[0]
    if not isinstance(clk, int) or "DI" not in k:
        return None
    return clk, ce, param(p.get("GSR"), "ENABLED")


def output_registers(net: Net, outs: Mapping[str, Any]
                     ) -> tuple[dict[str, list[str]], set[Key]] | None:
    """For a block's output pins {pin: bit}: per pin with a load, the flip-flops it feeds
    (the one whose Q is a module port first), and the classes (ff_key) they fall in; None
    when some load is not the D of a plain flip-flop, a bit is a module port, or two of a
    bit's flip-flops drive ports."""
    cells = net.cells
    plan: dict[str, list[str]] = {}
    keys: set[Key] = set()
    for pin, b in outs.items():
        if not isinstance(b, int) or not net.loads.get(b):
            continue
        if b in net.port_bits:
            return None
        ffs = []
        for cell, port in net.loads[b]:
            key = None if cell == "$port" or port != "DI" else ff_key(cells[cell])
            if key is None:
                return None
            keys.add(key)
            ffs.append(cell)
        if sum(1 for f in ffs if cells[f]["connections"]["Q"][0] in net.port_bits) > 1:
            return None
        # the flip-flop whose Q is a port (if any) keeps its net
        ffs.sort(key=lambda f: (cells[f]["connections"]["Q"][0] not in net.port_bits, f))
        plan[pin] = ffs
    return plan, keys


def absorb(net: Net, name: str, plan: dict[str, list[str]], remap: dict[int, int]) -> int:
    """Block `name`'s output pins drive their flip-flops' Q nets and the flip-flops go (a
    pin's duplicates: their Q nets merge into the first one's, in `remap`, applied by
    `finish`). Returns the flip-flops removed."""
    n = 0
    for pin, ffs in plan.items():
        q0 = net.cells[ffs[0]]["connections"]["Q"][0]
        for f in ffs[1:]:
            remap[net.cells[f]["connections"]["Q"][0]] = q0
        for f in ffs:
            net.remove(f)
            n += 1
        net.connect(name, pin, q0, "output")
    return n


def finish(m: dict[str, Any], remap: dict[int, int]) -> None:
    """Apply the merged Q nets, and make bits no cell or port uses any more "x" (no dangling
    nets in nextpnr)."""
    if remap:  # loads of merged duplicate flip-flops onto the kept one's Q
        for c in m["cells"].values():
            for port, bits in c["connections"].items():
                c["connections"][port] = [remap.get(b, b) if isinstance(b, int) else b
                                          for b in bits]
        for p in m["ports"].values():
            p["bits"] = [remap.get(b, b) if isinstance(b, int) else b for b in p["bits"]]
    used: set[int] = set()
    for c in m["cells"].values():
        for bits in c["connections"].values():
            used.update(b for b in bits if isinstance(b, int))
    for p in m["ports"].values():
        used.update(b for b in p["bits"] if isinstance(b, int))
    dead = []
    for n, nn in m.get("netnames", {}).items():
        bits = [remap.get(b, b) if isinstance(b, int) else b for b in nn["bits"]]
        bits = [b if not isinstance(b, int) or b in used else "x" for b in bits]
        nn["bits"] = bits
        if bits and all(b == "x" for b in bits):
            dead.append(n)
    for n in dead:
        del m["netnames"][n]


def pack_json(src: Path, dst: Path | None, pack: Callable[[dict[str, Any]], dict[str, Any]]
              ) -> dict[str, Any]:
    """`pack` the top module of the yosys JSON netlist `src` into `dst` (default: in place)."""
    nl = json.loads(Path(src).read_text())
    stats = pack(nl["modules"][top_module(nl)])
    Path(dst or src).write_text(json.dumps(nl))
    return stats
