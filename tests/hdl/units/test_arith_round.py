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
    for n in WIDTHS:
        for vs in (True, False):
            v = Signal(signed(n) if vs else unsigned(n), name=f"v{n}{'s' if vs else 'u'}")
            for s in SHIFTS:
                for r in Rounding:
                    y = Signal(signed(n + 4), name=f"y{len(cases)}")  # holds every result
                    m.d.comb += y.eq(shift_round(v, s, r))
                    cases.append((v, y, n, vs, s, r))
                if s >= 0:
                    y = Signal(signed(n + 1), name=f"y{len(cases)}")
                    m.d.comb += y.eq(shift_right(v, s))
                    cases.append((v, y, n, vs, s, None))
    got: list[list[int]] = [[] for _ in cases]

    async def bench(ctx):  # noqa: ANN001
        for code in range(1 << bits):
            for n in WIDTHS:
                for vs in (True, False):
                    v = next(c[0] for c in cases if c[2] == n and c[3] == vs)
                    ctx.set(v, _codes(n, vs, bits)[code])
            for i, c in enumerate(cases):
                got[i].append(ctx.get(c[1]))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(cases) == len(WIDTHS) * 2 * (len(SHIFTS) * 3 + 9)
    for i, (_, _, n, vs, s, r) in enumerate(cases):
        vals = np.array(_codes(n, vs, bits))
        want = (vals >> s) if r is None else fx.shift_round(vals, s, r)
        assert got[i] == want.tolist(), (n, vs, s, r)
