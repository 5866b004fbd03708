"""The folded Threshold (hdl/streamed/threshold.py): every input code of every channel, in
Amaranth's simulator, against MultiThreshold's definition (reference.threshold) computed here
as the plain sum of steps over the thresholds <= x."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from modelcircuit.graphs.types import parse_type
from modelcircuit.hdl.streamed.threshold import ThresholdFold, fold_thresholds
from modelcircuit.hdl.units.base import circuit


def _definition(x: np.ndarray, thr: np.ndarray, steps: np.ndarray, base: np.ndarray
                ) -> np.ndarray:
    """out[c] = base[c] + sum_k steps[c, k] * (x[c] >= thr[c, k]) (rows broadcast)."""
    n = x.shape[1]
    t = np.broadcast_to(thr, (n, thr.shape[-1]))
    s = np.broadcast_to(steps, t.shape)
    b = np.broadcast_to(base.reshape(-1), (n,))
    return b + (s[None] * (x[:, :, None] >= t[None])).sum(-1)


def _pack(row: np.ndarray, w: int) -> int:
    return sum((int(v) & ((1 << w) - 1)) << (i * w) for i, v in enumerate(row))


def _run(u: ThresholdFold, x: np.ndarray) -> np.ndarray:
    tin, tout = u.tin, u.tout
    got: dict[int, int] = {}

    async def bench(ctx) -> None:  # a start every II cycles, y read `latency` after it
        ctx.set(u.en, 1)
        starts = {k * u.ii: k for k in range(len(x))}
        for cyc in range(len(x) * u.ii + u.latency + 1):
            k = starts.get(cyc)
            ctx.set(u.x0, _pack(x[k], tin.width) if k is not None else 0)
            ctx.set(u.start, int(k is not None))
            j = starts.get(cyc - u.latency)
            if j is not None:
                got[j] = ctx.get(u.y)
            await ctx.tick()

    sim = Simulator(circuit(u))
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    out = np.zeros(x.shape, dtype=np.int64)
    w = tout.width
    for j, yv in got.items():
        for i in range(x.shape[1]):
            q = (yv >> (i * w)) & ((1 << w) - 1)
            out[j, i] = q - (1 << w) if tout.signed and q >> (w - 1) else q
    return out


CASES = [
    # (input type, output type, rows, thresholds per row, step kind)
    ("ufixed<8,8>", "ufixed<8,8>", 3, 255, "unit"),      # an 8-bit quantizer per channel
    ("fixed<9,9>", "fixed<8,8>", 1, 119, "unit"),        # one row for every channel
    ("fixed<6,3>", "fixed<8,8>", 3, 40, "mixed"),        # +-steps, zeros, duplicates
    ("ufixed<5,2>", "fixed<4,4>", 3, 7, "mixed"),        # few thresholds, wrapping output
]


@pytest.mark.parametrize("lanes", [None, 2])
@pytest.mark.parametrize("tin,tout,rows,k,kind", CASES)
def test_search_equals_definition_on_every_code(tin, tout, rows, k, kind, lanes) -> None:
    ti, to = parse_type(tin), parse_type(tout)
    rng = np.random.default_rng(k)
    n = 3
    # thresholds partly outside the input range, unsorted, with duplicates
    thr = rng.integers(ti.qmin - 4, ti.qmax + 5, size=(rows, k))
    thr[:, : k // 4] = thr[:, k // 4: 2 * (k // 4)]
    if kind == "unit":
        thr = np.sort(rng.permutation(np.arange(ti.qmin, ti.qmin + k) % (ti.qmax + 2)
                                      ).reshape(1, k).repeat(rows, 0) + rng.integers(
            0, 3, size=(rows, 1)), axis=-1)[:, rng.permutation(k)]
        steps = np.ones((rows, k), dtype=np.int64)
    else:
        steps = rng.integers(-2, 3, size=(rows, k))
    base = rng.integers(-3, 4, size=(rows,))
    codes = np.arange(ti.qmin, ti.qmax + 1)
    x = np.stack([np.roll(codes, 17 * c) for c in range(n)], axis=1)
    u = ThresholdFold(ti, n, thr, steps, base, to, lanes)
    assert u.ii == (1 if lanes is None else 2)  # 3 channels on 2 lanes: 2 steps a pixel
    assert u.latency == u.stages + u.ii + 2 + (0 if u.affine else 1)
    want = _definition(x, thr, steps, base)
    w = to.width  # the circuit keeps W bits, as the plain threshold circuit does
    want = ((want & ((1 << w) - 1)) ^ (1 << (w - 1) if to.signed else 0)) - (
        (1 << (w - 1)) if to.signed else 0)
    got = _run(u, x)
    bad = np.argwhere(got != want)
    assert not len(bad), (bad[:3].tolist(), got[tuple(bad[0])], want[tuple(bad[0])])


def test_a_wrong_key_is_seen() -> None:
    """The check can fail: one key moved by one code changes one output."""
    ti = parse_type("ufixed<8,8>")
    thr = np.arange(1, 256).reshape(1, -1)
    u = ThresholdFold(ti, 1, thr, np.ones_like(thr), np.zeros(1, np.int64), ti,
                      multiply=False)
    row = u.chan[0]
    keys = list(row.keys)
    keys[100] += 1
    u.chan[0] = type(row)(tuple(keys), row.values, row.lo, row.hi, row.m)
    x = np.arange(256).reshape(-1, 1)
    assert u.levels == 8 and u.affine
    got = _run(u, x)
    want = _definition(x, thr, np.ones_like(thr), np.zeros(1, np.int64))
    assert int((got != want).sum()) == 1


def test_fold_choice() -> None:
    assert fold_thresholds(255) and not fold_thresholds(3)


def _quantizer(rng: np.random.Generator, rows: int, levels: int, span: int,
               half_even: bool = False) -> np.ndarray:
    """The thresholds a model quantizer puts on an accumulator x: code k from the least x
    with a * x + b >= k - 1/2 (round half up) for random scales a (levels steps over about
    `span` codes) and offsets b, per row; `half_even`: ties to even as numpy's rint,
    on a scale whose ties land on integers (the case an affine count cannot meet)."""
    out = np.zeros((rows, levels), dtype=np.int64)
    for r in range(rows):
        if half_even:  # a = 1/4: x/4 - 1/2 ties at every multiple of 4 plus 2
            xs = np.arange(-4, 4 * levels + 8)
            q = np.rint(xs / 4.0).astype(np.int64)
            out[r] = [xs[np.argmax(q >= k)] for k in range(1, levels + 1)]
            continue
        a = levels / span * rng.uniform(0.7, 1.0)
        b = rng.uniform(-0.5, 0.5)
        k = np.arange(1, levels + 1)
        out[r] = np.ceil((k - 0.5 - b) / a).astype(np.int64)
    return out


@pytest.mark.parametrize("lanes", [None, 2])
def test_product_equals_definition_on_every_code(lanes) -> None:
    """An 8-bit quantizer's thresholds over a 12-bit accumulator: the multiply mode (the
    count as floor((x' M + C) / 2**N)) on every input code of 3 channels."""
    ti, to = parse_type("fixed<12,12>"), parse_type("fixed<8,8>")
    rng = np.random.default_rng(5)
    thr = _quantizer(rng, 3, 255, 3000) - 1500
    steps = np.ones_like(thr)
    base = np.full(3, -128)
    u = ThresholdFold(ti, 3, thr, steps, base, to, lanes)
    assert u.mode == "multiply" and u.comparators() == 0
    assert u.latency == 2 + u.ii + 2
    codes = np.arange(ti.qmin, ti.qmax + 1)
    x = np.stack([np.roll(codes, 17 * c) for c in range(3)], axis=1)
    want = _definition(x, thr, steps, base)
    got = _run(u, x)
    assert np.array_equal(got, want), np.argwhere(got != want)[:3]
    # the search on the same thresholds gives the same codes (and is not the product)
    s = ThresholdFold(ti, 3, thr, steps, base, to, lanes, multiply=False)
    assert s.mode == "search" and np.array_equal(_run(s, x), want)


def test_channel_affine_is_exact_on_wide_accumulators() -> None:
    """20-bit accumulator spans (ResNet-8's 8-bit layers): the count by the product equals
    the number of keys <= x at every key, one below it, the ends and random points (x'
    clamped to [-1, last key], as the unit does)."""
    from modelcircuit.hdl.streamed.threshold import channel_affine

    rng = np.random.default_rng(0)
    for span in (300, 1 << 14, 1 << 20):
        for thr in _quantizer(rng, 6, 255, span):
            keys = np.unique(thr) - thr.min()
            hi = int(keys[-1])  # the unit clamps x' to its last key
            a = channel_affine(tuple(int(k) for k in keys), hi)
            assert a is not None
            mm, c, n = a
            xs = np.unique(np.concatenate([keys, keys - 1, [-1, hi],
                                           rng.integers(-1, hi + 1, 2000)]))
            want = np.searchsorted(keys, xs, side="right")
            got = np.array([(int(x) * mm + c) >> n for x in xs])
            assert np.array_equal(got, want)


def test_no_affine_count_keeps_the_search() -> None:
    """Keys no affine floor meets (spacings 1, then 7: no one slope) and a quantizer that
    rounds ties to even: channel_affine says None and the unit searches, still exact."""
    from modelcircuit.hdl.streamed.threshold import channel_affine

    assert channel_affine((0, 1, 2, 9, 16, 17, 18), 20) is None
    ti, to = parse_type("fixed<12,12>"), parse_type("fixed<9,9>")
    thr = _quantizer(np.random.default_rng(1), 2, 200, 0, half_even=True)
    u = ThresholdFold(ti, 2, thr, np.ones_like(thr), np.zeros(2, np.int64), to)
    assert u.mode == "search"
    x = np.stack([np.arange(-64, 1000), np.arange(-64, 1000)[::-1]], axis=1)
    assert np.array_equal(_run(u, x), _definition(x, thr, np.ones_like(thr),
                                                  np.zeros(2, np.int64)))
