"""A synchronous-read ROM as a text module of an export (hdl/units/netlist_text.py CoreSet):
Amaranth spends most of a big ROM's export on its words (one constant and one RTLIL
sigspec per word); the same ROM written as Verilog (`reg` array, `initial` words, a
registered read enabled by `en`) and RTLIL (`memory`, `$meminit_v2`, `$memrd_v2`, as
Amaranth writes them) costs a string join. Outside an export (amaranth.sim, the FPGA flow's
elaboration), `rom` is an `amaranth.lib.memory.Memory` with the same behaviour."""

from __future__ import annotations

from amaranth.hdl import ClockSignal, Instance, Module, Shape, Signal, Value
from amaranth.lib.memory import Memory

from . import netlist_text


def _verilog(name: str, width: int, depth: int, abits: int, words: list[int]) -> str:
    mask = (1 << width) - 1
    init = "".join(f"    mem[{i}] = {width}'h{w & mask:x};\n" for i, w in enumerate(words))
    return (f"module {name}(clk, en, addr, data);\n  input clk;\n  input en;\n"
            f"  input [{abits - 1}:0] addr;\n  output [{width - 1}:0] data;\n"
            f"  reg [{width - 1}:0] data_r;\n  reg [{width - 1}:0] mem [0:{depth - 1}];\n"
            f"  initial begin\n{init}  end\n"
            f"  always @(posedge clk) if (en) data_r <= mem[addr];\n"
            f"  assign data = data_r;\nendmodule\n")


def _rtlil(name: str, width: int, depth: int, abits: int, words: list[int]) -> str:
    mask = (1 << width) - 1
    bits = "".join(format(words[i] & mask, f"0{width}b") for i in reversed(range(depth)))
    x = "x" * width
    return (f"module \\{name}\n  wire width 1 input 1 \\clk\n  wire width 1 input 2 \\en\n"
            f"  wire width {abits} input 3 \\addr\n  wire width {width} output 4 \\data\n"
            f"  memory width {width} size {depth} \\mem\n"
            f"  cell $meminit_v2 $init\n    parameter \\MEMID \"\\\\mem\"\n"
            f"    parameter \\ABITS 0\n    parameter \\WIDTH {width}\n"
            f"    parameter \\WORDS {depth}\n    parameter \\PRIORITY 0\n"
            f"    connect \\ADDR {{  }}\n    connect \\DATA {width * depth}'{bits}\n"
            f"    connect \\EN {width}'{'1' * width}\n  end\n"
            f"  cell $memrd_v2 $read\n    parameter \\MEMID \"\\\\mem\"\n"
            f"    parameter \\ABITS {abits}\n    parameter \\WIDTH {width}\n"
            f"    parameter \\TRANSPARENCY_MASK 0'0\n    parameter \\COLLISION_X_MASK 0'0\n"
            f"    parameter \\ARST_VALUE {width}'{x}\n    parameter \\SRST_VALUE {width}'{x}\n"
            f"    parameter \\INIT_VALUE {width}'{x}\n    parameter \\CE_OVER_SRST 0\n"
            f"    parameter \\CLK_ENABLE 1\n    parameter \\CLK_POLARITY 1\n"
            f"    connect \\ADDR \\addr\n    connect \\DATA \\data\n    connect \\ARST 1'0\n"
            f"    connect \\SRST 1'0\n    connect \\EN \\en\n    connect \\CLK \\clk\n  end\n"
            f"end\n")


def rom(m: Module, name: str, shape: Shape, words: list[int], addr: Value, en: Value
        ) -> Value:
    """A ROM of `words` (depth >= 2) read synchronously at `addr` while `en`: the data one
    enabled cycle later, of `shape`."""
    shape = Shape.cast(shape)
    depth = len(words)
    cores = netlist_text.active()
    if cores is None:
        if shape.signed:  # the same bits as signed values (Amaranth warns on 143 in signed(8))
            top = 1 << (shape.width - 1)
            words = [((w & (2 * top - 1)) ^ top) - top for w in words]
        mem = Memory(shape=shape, depth=depth, init=words)
        m.submodules[name] = mem
        rp = mem.read_port(domain="sync")
        m.d.comb += [rp.addr.eq(addr), rp.en.eq(en)]
        return rp.data
    abits = max(1, (depth - 1).bit_length())
    mod = f"{cores.prefix}__rom{len(cores.verilog_texts)}"
    cores.verilog_texts.append(_verilog(mod, shape.width, depth, abits, words))
    cores.rtlil_texts.append(_rtlil(mod, shape.width, depth, abits, words))
    cores.core_bits += shape.width  # its read register
    data = Signal(shape.width, name=f"{name}_data")
    a = Signal(abits, name=f"{name}_addr")
    m.d.comb += a.eq(addr)
    m.submodules[name] = Instance(mod, i_clk=ClockSignal("sync"), i_en=en, i_addr=a,
                                  o_data=data)
    return data.as_signed() if shape.signed else data


__all__ = ["rom"]
