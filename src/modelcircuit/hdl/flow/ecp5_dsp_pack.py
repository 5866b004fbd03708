"""ECP5: fabric flip-flops packed into the MULT18X18D's own input and output registers, on the
yosys JSON netlist that nextpnr-ecp5 reads. Opt-in (MODELCIRCUIT_DSP_PACK=1, the flow's
synthesis runs it after synth_ecp5; hdl/flow/yosys.synthesize) until it has been checked
beyond simulation (see below).

Why: synth_ecp5 maps every `$mul` to a MULT18X18D with all REG_*_CLK = "NONE" (yosys has no
register-absorbing pass for ECP5: `synth_lattice` runs one only for Nexus), so a registered
product pays the block's combinational multiply (3.9 ns in nextpnr's model) plus routes to
fabric flip-flops on both sides: the folded jet tagger fixed<16,6> on ecp5-25k was set by
exactly that path (operand FF 0.52 + route 2.91 + MULT 3.93 + route 3.14 = 10.5 ns). Packed:
95.3 -> 102.9 MHz (seed 1), 96.0 -> 104.0 (seed 2), 1,149 flip-flops fewer; on ecp5-45k
92.9 -> 103.7 MHz; the limit is then the products the device had no DSP for (LUT
multipliers, 9.7 ns): pipelining those is the next step. An 8-lane MAC: 137 -> 232 MHz.
nextpnr does not time the multiply between the block's input and output registers (the
datasheet's figure bounds it; ~250-280 MHz judging by its partly registered classes).

For each MULT18X18D with no register in use:

* input A (resp. B): when every non-constant bit is the Q of a TRELLIS_FF that is plain (rising
  clock, no set/reset in use, REGSET RESET so init 0, CE high-active or always on) and all of
  them share clock, enable and GSR, the block's input register is enabled (REG_INPUTx_CLK on a
  CLKk with that clock, REG_INPUTx_CE on a CEk with that enable, RST tied 0) and the bits are
  connected to the flip-flops' D instead. A flip-flop with other loads stays; one left with
  none is removed.
* output P: when every used P bit feeds only the D of such flip-flops (all sharing clock,
  enable, GSR) and SIGNEDP and the cascade outputs are unused, REG_OUTPUT is enabled, P drives
  the flip-flops' Q nets and the flip-flops are removed (a P bit that fed several identical
  flip-flops drives one of their Q nets; the others' loads are moved onto it).

The block's registers clear to 0 at configuration like the flip-flops (REGSET RESET,
init 0); GSR follows the packed flip-flops'. The circuit is cycle for cycle the same:
checked by Verilator on the packed and unpacked netlists (yosys's ECP5 cell models, a
behavioural MULT18X18D written for it, random inputs, valid and ready: the jet tagger 40,000
cycles and a two-layer MLP 20,000, every output every cycle equal; a register added to one
block: 578 mismatches); tests/hdl/flow/test_ecp5_dsp_pack.py checks which registers a design
of corner cases gets, and that nextpnr accepts the result. Written by a helper from the
MULT18X18D port list of yosys's cells_bb_ecp5.v.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

ENV = "MODELCIRCUIT_DSP_PACK"  # "1": the flow packs (hdl/flow/yosys.synthesize)
DSP = "MULT18X18D"
FF = "TRELLIS_FF"
REGS = ("REG_INPUTA", "REG_INPUTB", "REG_INPUTC", "REG_PIPELINE", "REG_OUTPUT")


def _s(v: Any, default: str) -> str:
    """A string parameter as yosys JSON writes it (a trailing space marks a string that looks
    like bits: CEMUX "1 ")."""
    if v is None:
        return default
    return str(v).rstrip(" ") if isinstance(v, str) else str(v)


def _top(nl: dict[str, Any]) -> str:
    for name, m in nl["modules"].items():
        v = str(m.get("attributes", {}).get("top", "0")).strip() or "0"
        if int(v, 2) == 1:
            return name
    raise ValueError("no top module in the netlist")


class _Net:
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


def ff_key(c: dict[str, Any]) -> tuple[Any, Any, str] | None:
    """(clock bit, enable bit or "1", GSR) of a flip-flop that a DSP register can stand for:
    rising-edge clock, set/reset never active, clears to 0, high-active or no enable; None
    otherwise."""
    if c["type"] != FF or c.get("attributes", {}).get("keep"):
        return None
    p, k = c.get("parameters", {}), c["connections"]
    if _s(p.get("CLKMUX"), "CLK") != "CLK" or _s(p.get("REGSET"), "RESET") != "RESET":
        return None
    lsr = k.get("LSR", ["0"])[0]
    lsrmux = _s(p.get("LSRMUX"), "LSR")
    if not ((lsrmux == "LSR" and lsr == "0") or (lsrmux == "INV" and lsr == "1")):
        return None
    cemux = _s(p.get("CEMUX"), "1")
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
    return clk, ce, _s(p.get("GSR"), "ENABLED")


class _Ports:
    """CLK0..3 / CE0..3 of one MULT18X18D handed out to its registers."""

    def __init__(self) -> None:
        self.clk: dict[Any, str] = {}
        self.ce: dict[Any, str] = {}
        self.gsr: str | None = None

    def fits(self, key: tuple[Any, Any, str]) -> bool:
        clk, ce, gsr = key
        # one clock only, on CLK0: nextpnr-ecp5 times every MULT18X18D register from CLK0
        return ((clk in self.clk or not self.clk) and (ce in self.ce or len(self.ce) < 4)
                and (self.gsr is None or self.gsr == gsr))

    def take(self, key: tuple[Any, Any, str]) -> tuple[str, str]:
        clk, ce, gsr = key
        self.gsr = gsr
        c = self.clk.setdefault(clk, f"CLK{len(self.clk)}")
        e = self.ce.setdefault(ce, f"CE{len(self.ce)}")
        return c, e


def _unused(net: _Net, c: dict[str, Any], prefixes: tuple[str, ...]) -> bool:
    for port, bits in c["connections"].items():
        if port.rstrip("0123456789") in prefixes:
            if any(isinstance(b, int) and net.loads.get(b) for b in bits):
                return False
    return True


def pack_module(m: dict[str, Any], inputs: bool = True, output: bool = True) -> dict[str, Any]:
    net = _Net(m)
    dsps = sorted(n for n, c in m["cells"].items() if c["type"] == DSP)
    stats: dict[str, Any] = {"dsp": len(dsps), "input_a": 0, "input_b": 0, "output": 0,
                             "ff_removed": 0, "skipped": {}}
    ports: dict[str, _Ports] = {}
    candidates_dead: set[str] = set()

    def skip(name: str, why: str) -> None:
        stats["skipped"].setdefault(why, []).append(name)

    eligible = []
    for name in dsps:
        c = m["cells"][name]
        p = c.get("parameters", {})
        if any(_s(p.get(f"{r}_CLK"), "NONE") != "NONE" for r in REGS):
            skip(name, "registers already in use")
            continue
        k = c["connections"]
        if any(_s(k.get(x, ["0"])[0], "0") not in ("0", "x") for x in ("SOURCEA", "SOURCEB")) or \
                any(isinstance(b, int) for x, bits in k.items()
                    if x.startswith(("SRIA", "SRIB")) for b in bits):
            skip(name, "shift chain in use")
            continue
        if not _unused(net, c, ("SROA", "SROB", "ROA", "ROB", "ROC")):
            skip(name, "register/shift outputs used")
            continue
        eligible.append(name)
        ports[name] = _Ports()

    def set_reg(name: str, reg: str, key: tuple[Any, Any, str]) -> None:
        c = m["cells"][name]
        clkp, cep = ports[name].take(key)
        p = c.setdefault("parameters", {})
        p[f"{reg}_CLK"], p[f"{reg}_CE"], p[f"{reg}_RST"] = clkp, cep, "RST0"
        p["GSR"] = key[2]
        net.connect(name, clkp, key[0])
        net.connect(name, cep, key[1])
        net.connect(name, "RST0", "0")

    if inputs:
        for name in eligible:
            c = m["cells"][name]
            for x, reg, sign in (("A", "REG_INPUTA", "SIGNEDA"), ("B", "REG_INPUTB", "SIGNEDB")):
                k = c["connections"]
                if isinstance(k.get(sign, ["0"])[0], int):
                    skip(name, f"{sign} not constant")
                    continue
                bits = {i: k.get(f"{x}{i}", ["0"])[0] for i in range(18)}
                live = {i: b for i, b in bits.items() if isinstance(b, int)}
                if not live:
                    continue
                keys, ffs = set(), {}
                for i, b in live.items():
                    d = net.drv.get(b)
                    if d is None or d[0] == "$port" or d[1] != "Q":
                        break
                    key = ff_key(m["cells"][d[0]])
                    if key is None:
                        break
                    keys.add(key)
                    ffs[i] = d[0]
                else:
                    if len(keys) == 1 and ports[name].fits(next(iter(keys))):
                        for i, ff in ffs.items():
                            net.connect(name, f"{x}{i}", m["cells"][ff]["connections"]["DI"][0])
                            candidates_dead.add(ff)
                        set_reg(name, reg, next(iter(keys)))
                        stats[f"input_{x.lower()}"] += 1
                        continue
                skip(name, f"{x} not all from one class of plain flip-flops")
        for ff in sorted(candidates_dead):
            q = m["cells"][ff]["connections"]["Q"][0]
            if not net.loads.get(q) and q not in net.port_bits:
                net.remove(ff)
                stats["ff_removed"] += 1

    remap: dict[int, int] = {}
    if output:
        for name in eligible:
            c = m["cells"][name]
            k = c["connections"]
            if isinstance(k.get("SIGNEDP", ["x"])[0], int) and net.loads.get(k["SIGNEDP"][0]):
                skip(name, "SIGNEDP used")
                continue
            plan: dict[int, list[str]] = {}
            keys = set()
            ok = True
            for i in range(36):
                b = k.get(f"P{i}", ["x"])[0]
                if not isinstance(b, int) or not net.loads.get(b):
                    continue
                if b in net.port_bits:
                    ok = False
                    break
                ffs = []
                for cell, port in net.loads[b]:
                    if cell == "$port" or port != "DI":
                        ok = False
                        break
                    key = ff_key(m["cells"][cell])
                    if key is None:
                        ok = False
                        break
                    keys.add(key)
                    ffs.append(cell)
                if not ok:
                    break
                qs = [m["cells"][f]["connections"]["Q"][0] for f in ffs]
                if sum(1 for q in qs if q in net.port_bits) > 1:
                    ok = False
                    break
                # the flip-flop whose Q is a port (if any) keeps its net
                ffs.sort(key=lambda f: (m["cells"][f]["connections"]["Q"][0] not in net.port_bits, f))
                plan[i] = ffs
            if not ok or not plan or len(keys) != 1 or not ports[name].fits(next(iter(keys))):
                skip(name, "P not only into one class of plain flip-flops")
                continue
            for i, ffs in plan.items():
                q0 = m["cells"][ffs[0]]["connections"]["Q"][0]
                for f in ffs[1:]:
                    remap[m["cells"][f]["connections"]["Q"][0]] = q0
                for f in ffs:
                    net.remove(f)
                    stats["ff_removed"] += 1
                net.connect(name, f"P{i}", q0, "output")
            set_reg(name, "REG_OUTPUT", next(iter(keys)))
            stats["output"] += 1
    if remap:  # loads of merged duplicate flip-flops onto the kept one's Q
        for c in m["cells"].values():
            for port, bits in c["connections"].items():
                c["connections"][port] = [remap.get(b, b) if isinstance(b, int) else b
                                          for b in bits]
        for p in m["ports"].values():
            p["bits"] = [remap.get(b, b) if isinstance(b, int) else b for b in p["bits"]]
    # netnames: bits no cell or port uses any more become "x" (no dangling nets in nextpnr)
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
    stats["skipped"] = {k: len(v) for k, v in stats["skipped"].items()}
    return stats


def pack_file(src: Path, dst: Path | None = None, **kw: Any) -> dict[str, Any]:
    """Packs the top module of the yosys JSON netlist `src` into `dst` (default: in place)."""
    nl = json.loads(Path(src).read_text())
    stats = pack_module(nl["modules"][_top(nl)], **kw)
    Path(dst or src).write_text(json.dumps(nl))
    return stats


__all__ = ["ENV", "pack_file", "pack_module"]
