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
  them share clock, enable and GSR, and none is fed straight by a block RAM (whose slow
  clock-to-out wants its register beside it), the block's input register is enabled
  (REG_INPUTx_CLK on a CLKk with that clock, REG_INPUTx_CE on a CEk with that enable, RST
  tied 0) and the bits are connected to the flip-flops' D instead. A flip-flop with other
  loads stays; one left with none is removed.
* output P: when every used P bit feeds only the D of such flip-flops (all sharing clock,
  enable, GSR) and SIGNEDP and the cascade outputs are unused, REG_OUTPUT is enabled, P drives
  the flip-flops' Q nets and the flip-flops are removed (a P bit that fed several identical
  flip-flops drives one of their Q nets; the others' loads are moved onto it).

The block's registers clear to 0 at configuration like the flip-flops (REGSET RESET,
init 0); GSR follows the packed flip-flops'. The circuit is cycle for cycle the same:
checked by Verilator on the packed and unpacked netlists (yosys's ECP5 cell models, a
behavioural MULT18X18D written for it, random inputs, valid and ready: the jet tagger 40,000
cycles and a two-layer MLP 20,000, every output every cycle equal; a register added to one
block: 578 mismatches; in CI: tests/hdl/flow/test_ecp5_pack_sim.py, with the model kept in
tests/hdl/flow/ecp5_models); tests/hdl/flow/test_ecp5_dsp_pack.py checks which registers a
design of corner cases gets, and that nextpnr accepts the result. Written by a helper from the
MULT18X18D port list of yosys's cells_bb_ecp5.v.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .ecp5_netlist import Key, Net, absorb, ff_key, finish, output_registers, pack_json, param

ENV = "MODELCIRCUIT_DSP_PACK"  # "1": the flow packs (hdl/flow/yosys.synthesize)
DSP = "MULT18X18D"
REGS = ("REG_INPUTA", "REG_INPUTB", "REG_INPUTC", "REG_PIPELINE", "REG_OUTPUT")
# block RAMs: a register right after one stays in the fabric, beside the RAM. Its clock-to-out
# is 5.6 ns; packed into the block's input register, the route to the DSP came on top (the
# serial Softmax's table output registers: 7.7 ns, the folded jet tagger's clock on ecp5-25k)
BRAM = ("DP16KD", "PDPW16KD")


class _Ports:
    """CLK0..3 / CE0..3 of one MULT18X18D handed out to its registers."""

    def __init__(self) -> None:
        self.clk: dict[Any, str] = {}
        self.ce: dict[Any, str] = {}
        self.gsr: str | None = None

    def fits(self, key: Key) -> bool:
        clk, ce, gsr = key
        # one clock only, on CLK0: nextpnr-ecp5 times every MULT18X18D register from CLK0
        return ((clk in self.clk or not self.clk) and (ce in self.ce or len(self.ce) < 4)
                and (self.gsr is None or self.gsr == gsr))

    def take(self, key: Key) -> tuple[str, str]:
        clk, ce, gsr = key
        self.gsr = gsr
        c = self.clk.setdefault(clk, f"CLK{len(self.clk)}")
        e = self.ce.setdefault(ce, f"CE{len(self.ce)}")
        return c, e


def _unused(net: Net, c: dict[str, Any], prefixes: tuple[str, ...]) -> bool:
    for port, bits in c["connections"].items():
        if port.rstrip("0123456789") in prefixes:
            if any(isinstance(b, int) and net.loads.get(b) for b in bits):
                return False
    return True


def _from_bram(net: Net, m: dict[str, Any], ff: str) -> bool:
    """The flip-flop's D comes straight from a block RAM's output."""
    d = net.drv.get(m["cells"][ff]["connections"]["DI"][0])
    return d is not None and d[0] != "$port" and m["cells"][d[0]]["type"] in BRAM


def pack_module(m: dict[str, Any], inputs: bool = True, output: bool = True) -> dict[str, Any]:
    net = Net(m)
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
        if any(param(p.get(f"{r}_CLK"), "NONE") != "NONE" for r in REGS):
            skip(name, "registers already in use")
            continue
        k = c["connections"]
        if any(param(k.get(x, ["0"])[0], "0") not in ("0", "x")
               for x in ("SOURCEA", "SOURCEB")) or \
                any(isinstance(b, int) for x, bits in k.items()
                    if x.startswith(("SRIA", "SRIB")) for b in bits):
            skip(name, "shift chain in use")
            continue
        if not _unused(net, c, ("SROA", "SROB", "ROA", "ROB", "ROC")):
            skip(name, "register/shift outputs used")
            continue
        eligible.append(name)
        ports[name] = _Ports()

    def set_reg(name: str, reg: str, key: Key) -> None:
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
                    if key is None or _from_bram(net, m, d[0]):
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
            found = output_registers(net, {f"P{i}": k.get(f"P{i}", ["x"])[0] for i in range(36)})
            if not found or not found[0] or len(found[1]) != 1 or \
                    not ports[name].fits(next(iter(found[1]))):
                skip(name, "P not only into one class of plain flip-flops")
                continue
            plan, keys = found
            stats["ff_removed"] += absorb(net, name, plan, remap)
            set_reg(name, "REG_OUTPUT", next(iter(keys)))
            stats["output"] += 1
    finish(m, remap)
    stats["skipped"] = {k: len(v) for k, v in stats["skipped"].items()}
    return stats


def pack_file(src: Path, dst: Path | None = None, **kw: Any) -> dict[str, Any]:
    """Packs the top module of the yosys JSON netlist `src` into `dst` (default: in place)."""
    return pack_json(src, dst, lambda m: pack_module(m, **kw))


__all__ = ["ENV", "pack_file", "pack_module"]
