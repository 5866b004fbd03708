"""ChainUnit (hdl/streamed/units.py): a folded Dense and the folded Threshold after it in one
unit, under random clock-enable stalls, against the Dense simulated alone and MultiThreshold's
definition of what it gives (the chain of a Conv and the quantizer that alone reads it)."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from modelcircuit.graphs.types import parse_type
from modelcircuit.hdl.errors import HdlError
from modelcircuit.hdl.streamed.threshold import ThresholdFold
from modelcircuit.hdl.streamed.units import ChainUnit
from modelcircuit.hdl.units.base import circuit
from modelcircuit.hdl.units.dense import Dense

from .test_threshold_fold import _definition, _pack

TX, TW, TA = parse_type("fixed<6,3>"), parse_type("fixed<5,2>"), parse_type("fixed<24,12>")
TMID, TOUT = parse_type("fixed<10,5>"), parse_type("ufixed<6,6>")


def _unpack(v: int, n: int, t) -> list[int]:
    w, out = t.width, []
    for i in range(n):
        q = (v >> (i * w)) & ((1 << w) - 1)
        out.append(q - (1 << w) if t.signed and q >> (w - 1) else q)
    return out


def _run(u, xs: np.ndarray, stall: float, seed: int) -> np.ndarray:
    """A start every II enabled cycles (x held until the next), y read `latency` enabled
    cycles after each; en low with probability `stall`."""
    rng = np.random.default_rng(seed)
    t_in, n_in = u.in_specs[0]
    t_out, n_out = u.out_spec
    starts = {k * u.ii: k for k in range(len(xs))}
    reads = {k * u.ii + u.latency: k for k in range(len(xs))}
    got: dict[int, int] = {}

    async def bench(ctx) -> None:
        e, cur = 0, 0
        while len(got) < len(xs):
            if e in reads:
                got[reads[e]] = ctx.get(u.y)
            k = starts.get(e)
            if k is not None:
                cur = k
            en = int(rng.random() >= stall)
            ctx.set(u.x0, _pack(xs[cur], t_in.width))
            ctx.set(u.start, int(k is not None))
            ctx.set(u.en, en)
            await ctx.tick()
            e += en

    sim = Simulator(circuit(u))
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return np.array([_unpack(got[j], n_out, t_out) for j in range(len(xs))])


def _units(reuse: int, lanes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.integers(-16, 16, size=(6, 3))
    b = rng.integers(-40, 40, size=(3,))
    thr = rng.integers(-300, 300, size=(3, 40))
    steps = rng.integers(-2, 3, size=(3, 40))
    base = rng.integers(0, 9, size=(3,))

    def dense():
        return Dense(TX, w, TW, b, TA, TMID, TA, False, reuse, 2)

    def thresh():
        return ThresholdFold(TMID, 3, thr, steps, base, TOUT, lanes)
    return dense, thresh, (thr, steps, base)


# (Dense reuse, quantizer lanes, stall probability, quantizer reads the Dense in place):
# 6 -> 3 outputs at R 12 and 18 fold the outputs too (2 and 3 groups written R_in apart)
@pytest.mark.parametrize("reuse,lanes,stall,in_place", [
    (6, 2, 0.0, True), (6, 2, 0.3, True), (9, 1, 0.2, True), (12, 1, 0.3, True),
    (18, 1, 0.25, True), (3, 1, 0.25, False), (3, 3, 0.2, True)])
def test_chain_equals_the_two_units_in_turn(reuse, lanes, stall, in_place) -> None:
    dense, thresh, (thr, steps, base) = _units(reuse, lanes)
    rng = np.random.default_rng(reuse * 7 + lanes)
    xs = rng.integers(TX.qmin, TX.qmax + 1, size=(12, 6))
    a = dense()
    mid = _run(a, xs, 0.0, 1)  # the Dense alone
    want = _definition(mid, thr, steps, base)
    w = TOUT.width
    want = want & ((1 << w) - 1)  # the circuit keeps W bits (unsigned output)
    chain = ChainUnit(dense(), thresh())
    assert chain.b_in_place == in_place and chain.b.in_place == in_place
    assert chain.latency == a.latency + thresh().latency
    assert chain.ii == max(a.ii, thresh().ii)
    got = _run(chain, xs, stall, 2)
    bad = np.argwhere(got != want)
    assert not len(bad), (bad[:3].tolist(), got[tuple(bad[0])], want[tuple(bad[0])])


def test_chain_refuses_a_mismatched_pair() -> None:
    dense, _, (thr, steps, base) = _units(6, 2)
    with pytest.raises(HdlError, match="does not feed"):
        ChainUnit(dense(), ThresholdFold(TMID, 2, thr[:2], steps[:2], base[:2], TOUT, 1))
