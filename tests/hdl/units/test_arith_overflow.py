"""arith.overflow (saturation as bit tests where the range is a power of two, comparisons
for QONNX narrow ranges) against the numeric contract, graphs/fixed.overflow: every code of
every input shape from 1 to 7 bits, signed and unsigned, into every output type of 1 to 6
bits (signed, unsigned, narrow, SAT and WRAP), in one Amaranth simulation. The same for
arith.overflow_relu (saturation and ReLU as one decision) against max(overflow, 0)."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs.types import FixedType, Overflow
from modelcircuit.hdl.units.arith import overflow, overflow_relu


def _check(ns: range | tuple[int, ...], ws: range | tuple[int, ...]) -> None:
    m = Module()
    cases = []
    relus: list[Signal] = []
    bits = max(ns)
    for n in ns:
        for vs in (True, False):
            for w in ws:
                for ts in (True, False):
                    for narrow in (False, True):
                        for ov in (Overflow.SAT, Overflow.WRAP):
                            if ts and narrow and w < 2:
                                continue
                            t = FixedType(w, w, ts, overflow=ov, narrow=narrow)
                            v = Signal(signed(n) if vs else unsigned(n))
                            y = Signal(signed(w) if ts else unsigned(w))
                            yr = Signal(signed(w) if ts else unsigned(w))
                            m.d.comb += [y.eq(overflow(v, t)), yr.eq(overflow_relu(v, t, True))]
                            cases.append((v, y, t, n, vs))
                            relus.append(yr)
    got: dict[int, list[int]] = {i: [] for i in range(len(cases))}
    got_relu: dict[int, list[int]] = {i: [] for i in range(len(cases))}

    async def bench(ctx):  # noqa: ANN001
        for code in range(1 << bits):
            for v, _, _, n, vs in cases:
                c = code & ((1 << n) - 1)
                ctx.set(v, c - (1 << n) if vs and c >> (n - 1) else c)
            for i, (_, y, _, _, _) in enumerate(cases):
                got[i].append(ctx.get(y))
                got_relu[i].append(ctx.get(relus[i]))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(cases) >= 2 * len(ns) * len(ws) * 7
    for i, (_, _, t, n, vs) in enumerate(cases):
        codes = [c & ((1 << n) - 1) for c in range(1 << bits)]
        vals = np.array([c - (1 << n) if vs and c >> (n - 1) else c for c in codes])
        want = fx.overflow(vals, t).tolist()
        assert got[i] == want, (t, n, vs)
        assert got_relu[i] == np.maximum(fx.overflow(vals, t), 0).tolist(), ("relu", t, n, vs)


def test_overflow_against_the_contract():
    """Input shapes of 1, 3 and 6 bits into 1-, 2- and 4-bit types (a few seconds)."""
    _check((1, 3, 6), (1, 2, 4))


@pytest.mark.slow
def test_overflow_exhaustive_against_the_contract():
    """Every input shape of 1-7 bits into every type of 1-6 bits (about 30 s)."""
    _check(range(1, 8), range(1, 7))
