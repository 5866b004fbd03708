"""The valid bit of a stream unit delayed by its latency (hdl/streamed/units.SUnit._delay):
a chain of registers, or, where the pulses come at least II enabled cycles apart, a few
down-counters taken in turn. Both against a plain model of "v sampled at each enabled edge,
seen n enabled edges later", cycle by cycle, with the enable dropping at random (a stalled
stream) and pulses at random gaps no shorter than II."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from modelcircuit.hdl.streamed.units import SUnit


class _Delay(Elaboratable):
    def __init__(self, n: int, gap: int) -> None:
        self.n, self.gap = n, gap
        self.en, self.v, self.out = Signal(), Signal(), Signal()

    def elaborate(self, platform: object) -> Module:
        m = Module()
        out = SUnit._delay(self, m, self.v, self.n, "v", self.gap)  # uses self.en only
        m.d.comb += self.out.eq(out)
        return m


@pytest.mark.parametrize("n,gap", [(1, 1), (6, 1), (7, 7), (21, 20), (57, 54), (40, 9),
                                   (64, 16), (300, 250)])
def test_delay_matches_the_chain(n: int, gap: int) -> None:
    rng = np.random.default_rng(n * 1000 + gap)
    d = _Delay(n, gap)
    cycles = 30 * (n + gap) + 50
    en = rng.random(cycles) < 0.7
    v = np.zeros(cycles, dtype=bool)
    since = gap  # enabled edges since the last pulse
    for t in range(cycles):
        if en[t]:
            if since >= gap and rng.random() < 0.6:
                v[t], since = True, 1
            else:
                since += 1
    # the model: out at cycle t is v at the enabled edge n enabled edges before
    edges = [t for t in range(cycles) if en[t]]
    want = np.zeros(cycles, dtype=bool)
    for i, t in enumerate(edges):
        if v[t] and i + n - 1 < len(edges):
            a = edges[i + n - 1] + 1  # after the n-th enabled edge counted from t
            b = edges[i + n] + 1 if i + n < len(edges) else cycles
            want[a:b] = True
    got = np.zeros(cycles, dtype=bool)

    async def bench(ctx) -> None:
        for t in range(cycles):
            ctx.set(d.en, int(en[t]))
            ctx.set(d.v, int(v[t]))
            got[t] = bool(ctx.get(d.out))
            await ctx.tick()

    sim = Simulator(d)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert v.sum() > 5 and want.any()
    np.testing.assert_array_equal(got, want)
    # counters where they are fewer flip-flops than the chain: (57, 54) 2 x 6 + 1 < 57
    dd = _Delay(n, gap)
    text = rtlil.convert(dd, ports=[dd.en, dd.v, dd.out])
    k = -(-n // gap)
    assert ("vc0" in text) == (n > 4 and k * (n + 1).bit_length() + (k - 1).bit_length() < n)
