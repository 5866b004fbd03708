"""Units other than Dense and Softmax (softmax.py): element-wise ops, lookup tables, pure
wiring; the table ROM helpers every table unit uses."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from amaranth.hdl import Module, Value
from amaranth.lib.memory import Memory

from ...graphs.types import FixedType
from .arith import shape_of, table_index
from .base import Unit

ElemFn = Callable[[list[list[Value]]], list[Value]]


class Elementwise(Unit):
    """Any per-element function of the input vectors, then one output register."""

    def __init__(self, ins: Sequence[tuple[FixedType, int]], out: tuple[FixedType, int],
                 fn: ElemFn, multipliers: int = 0):
        super().__init__(ins, out)
        self.fn = fn
        self.latency = 1
        self.multipliers = multipliers

    def elaborate(self, platform: object) -> Module:
        m = Module()
        self.out_regs(m, self.fn([self.inputs(k) for k in range(len(self.in_specs))]))
        return m


class Wiring(Unit):
    """Reshape / Transpose: y[i] = x[perm[i]], no logic, latency 0."""

    def __init__(self, t: FixedType, perm: Sequence[int]):
        super().__init__([(t, len(perm))], (t, len(perm)))
        self.perm = [int(p) for p in perm]
        self.latency = 0

    def elaborate(self, platform: object) -> Module:
        m = Module()
        x = self.inputs()
        self.drive_y(m, [x[p] for p in self.perm])
        return m


def table_rom(m: Module, name: str, table: np.ndarray, t: FixedType) -> Memory:
    mem = Memory(shape=shape_of(t), depth=len(table), init=[int(v) for v in table])
    m.submodules[name] = mem
    return mem


def table_read(m: Module, mem: Memory, addr: Value, en: Value) -> Value:
    """A synchronous read port: the table output is the stage register."""
    rp = mem.read_port(domain="sync")
    m.d.comb += [rp.addr.eq(addr), rp.en.eq(en)]
    return rp.data


class Lut(Unit):
    """Table activation: out = table[table_index(x)] (reference.lut); one ROM, one read
    port per element, latency 1 (the ROM's output register)."""

    def __init__(self, tin: FixedType, n: int, tout: FixedType, table: np.ndarray, lo: int,
                 shift: int):
        super().__init__([(tin, n)], (tout, n))
        self.table, self.lo, self.shift = np.asarray(table, dtype=np.int64), int(lo), int(shift)
        self.latency = 1

    def elaborate(self, platform: object) -> Module:
        m = Module()
        mem = table_rom(m, "table", self.table, self.out_spec[0])
        self.drive_y(m, [table_read(m, mem, table_index(q, self.lo, self.shift, len(self.table)),
                               self.en) for q in self.inputs()])
        return m

