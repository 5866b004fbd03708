"""The text ROM of an export (hdl/units/rom_text.py): yosys reads the whole RTLIL, and proves
the ROM module written as RTLIL equivalent to the one written as Verilog (both mapped from
memories to logic); outside an export the ROM is an Amaranth Memory with the same words."""

from __future__ import annotations

import subprocess

from amaranth.back import rtlil, verilog
from amaranth.hdl import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from modelcircuit.hdl.units import netlist_text
from modelcircuit.hdl.units.rom_text import rom

WORDS = [(37 * i + 5) % 29 - 11 for i in range(23)]  # negative words: two's complement


class _Top(wiring.Component):
    def __init__(self) -> None:
        super().__init__({"en": In(1), "addr": In(5), "data": Out(6)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.d.comb += self.data.eq(rom(m, "r", signed(6), WORDS, self.addr, self.en))
        return m


def test_text_rom_equals_its_rtlil(tmp_path) -> None:  # noqa: ANN001
    from modelcircuit.hdl.flow.tools import tool_env, tool_path, warm_tool

    with netlist_text.text_cores("top") as cs:
        il = rtlil.convert(_Top(), name="top", emit_src=False)
    v = verilog._convert_rtlil_text(il) + cs.verilog()
    il += cs.rtlil()
    assert len(cs.verilog_texts) == 1 and "Memory" not in il
    (tmp_path / "all.il").write_text(il)
    (tmp_path / "all.v").write_text(v)
    (tmp_path / "c.v").write_text(cs.verilog())
    (tmp_path / "c.il").write_text(cs.rtlil())
    name = "top__rom0"
    prep = [f"hierarchy -top {name}", "proc", "memory", "opt_clean"]
    script = ["read_rtlil all.il", "hierarchy -check -top top", "design -reset",
              "read_verilog all.v", "hierarchy -check -top top", "design -reset",
              "read_verilog c.v", *prep, f"rename {name} gold", "design -stash gold",
              "read_rtlil c.il", *prep, f"rename {name} gate", "design -stash gate",
              "design -copy-from gold -as gold gold", "design -copy-from gate -as gate gate",
              "equiv_make gold gate equiv", "hierarchy -top equiv", "equiv_simple",
              "equiv_induct", "equiv_status -assert"]
    (tmp_path / "s.ys").write_text("\n".join(script) + "\n")
    warm_tool("yosys")
    r = subprocess.run([tool_path("yosys"), "-q", "-s", "s.ys"], cwd=tmp_path, env=tool_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]


def test_outside_an_export_it_is_a_memory() -> None:
    assert netlist_text.active() is None
    il = rtlil.convert(_Top(), name="top", emit_src=False)
    assert "memrd" in il and "top__rom" not in il


def test_masked_words_of_a_signed_rom_read_back_signed() -> None:
    """Words given as their two's-complement bits (v & mask, as the depthwise fold writes
    them) read back as the signed values, with no truncation warning from Amaranth."""
    import warnings

    from amaranth.hdl import Signal
    from amaranth.sim import Simulator

    words = [143, 5, 255, 0, 127, 128]  # signed(8): -113, 5, -1, 0, 127, -128
    want = [w - 256 if w >= 128 else w for w in words]

    class _R(wiring.Component):
        def __init__(self) -> None:
            super().__init__({"addr": In(3), "data": Out(signed(8))})

        def elaborate(self, platform: object) -> Module:
            m = Module()
            m.d.comb += self.data.eq(rom(m, "r", signed(8), words, self.addr, Signal(init=1)))
            return m

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dut = _R()
        got: list[int] = []

        async def bench(ctx) -> None:  # noqa: ANN001
            for a in range(len(words)):
                ctx.set(dut.addr, a)
                await ctx.tick()
                got.append(ctx.get(dut.data))

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run()
    assert got == want
