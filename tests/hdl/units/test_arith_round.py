"""arith.shift_round (the circuits' rounding: constant shifts as slices, never shifter
cells) against the numeric contract, graphs/fixed.shift_round: every code of every input
shape of 1 to 6 bits, signed and unsigned, every rounding, shifts from -2 to past the input's
width (where a slice runs out of bits), in one Amaranth simulation."""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs.types import Rounding
from modelcircuit.hdl.units.arith import shift_right, shift_round

WIDTHS = range(1, 7)
SHIFTS = range(-2, 9)


def _codes(n: int, vs: bool, bits: int) -> list[int]:
    out = []
    for code in range(1 << bits):
        c = code & ((1 << n) - 1)
        out.append(c - (1 << n) if vs and c >> (n - 1) else c)
    return out


def test_shift_round_against_the_contract() -> None:
    m = Module()
    cases = []
    bits = max(WIDTHS)
    inputs = []  # (signal, its value at every step)
    for n in WIDTHS:
        for vs in (True, False):
            v = Signal(signed(n) if vs else unsigned(n), name=f"v{n}{'s' if vs else 'u'}")
            inputs.append((v, _codes(n, vs, bits)))
            for s in SHIFTS:
                for r in Rounding:
                    y = Signal(signed(n + 4), name=f"y{len(cases)}")  # holds every result
                    m.d.comb += y.eq(shift_round(v, s, r))
                    cases.append((y, inputs[-1][1], s, r))
                if s >= 0:
                    y = Signal(signed(n + 1), name=f"y{len(cases)}")
                    m.d.comb += y.eq(shift_right(v, s))
                    cases.append((y, inputs[-1][1], s, None))
    got: list[list[int]] = [[] for _ in cases]

    async def bench(ctx):  # noqa: ANN001
        for code in range(1 << bits):
            for v, values in inputs:
                ctx.set(v, values[code])
            for i, c in enumerate(cases):
                got[i].append(ctx.get(c[0]))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(cases) == len(WIDTHS) * 2 * (len(SHIFTS) * 3 + 9)
    for i, (_, values, s, r) in enumerate(cases):
        vals = np.array(values)
        want = (vals >> s) if r is None else fx.shift_round(vals, s, r)
        assert got[i] == want.tolist(), (values[:4], s, r)
