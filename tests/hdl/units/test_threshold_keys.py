"""The vector style's Threshold from its keys (hdl/units/threshold.py): a table of every code
for a narrow input, an unrolled binary search for a wide one. Simulated in amaranth.sim and
compared with reference.threshold (the K-comparator sum) on thresholds that are unsorted,
duplicated, beyond the input's range on both sides, with steps that are not 1 (negative,
zero, cancelling), per channel and per tensor, signed and unsigned inputs."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from modelcircuit.graphs.ir import Node
from modelcircuit.hdl.units.threshold import FOLD_MIN_THRESHOLDS, TABLE_MAX_BITS

from ..helpers import T, check, compiled_from, extremes

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def _case(tin: str, tout: str, n: int, k: int, rows: int, steps: str, seed: int):
    rng = np.random.default_rng(seed)
    t = T(tin)
    span = t.qmax - t.qmin
    # a third beyond the range (both sides), duplicates by drawing from a narrow pool
    pool = rng.integers(t.qmin - span // 3, t.qmax + span // 3 + 2, size=max(2, k // 2))
    thr = rng.choice(pool, size=(rows, k))  # unsorted, with duplicates
    thr[0, :3] = [t.qmin, t.qmax, t.qmax + 1]  # the edges: always, at the top, never
    if steps == "unit":
        st = np.ones((rows, k), dtype=np.int64)
    else:  # non-unit, negative, zero, and a pair that cancels
        st = rng.integers(-2, 4, size=(rows, k))
        thr[-1, 3:5], st[-1, 3:5] = thr[-1, 5], [2, -2]
    base = rng.integers(-3, 3, size=rows)
    nodes = [Node.make("th", "Threshold", ["x", "thr", "st", "base"], ["y"])]
    tensors = {"x": ((n,), tin), "thr": ((rows, k), "fixed<24,24>"),
               "st": ((rows, k), "fixed<4,4>"), "base": ((rows,), "fixed<4,4>"),
               "y": ((n,), tout)}
    c = compiled_from(nodes, tensors, {"thr": thr, "st": st, "base": base}, ["x"], ["y"],
                      f"thk{seed}")
    if t.width <= 8:  # every code, in every channel
        codes = np.arange(t.qmin, t.qmax + 1)
        x = np.stack([np.roll(codes, i)[:len(codes)] for i in range(n)], axis=1)
    else:
        x = extremes(t, n, rng, 40)
        x = np.concatenate([x, np.clip(thr[:, :n].T[None] if rows == n else
                                       np.broadcast_to(thr[0, :n], (1, n)),
                                       t.qmin, t.qmax).reshape(-1, n)])
    return c, x


@pytest.mark.parametrize("tin,tout", [
    ("fixed<8,8>", "fixed<8,8,RND_CONV,SAT>"),  # table, signed
    ("ufixed<6,6>", "fixed<8,8>"),  # table, unsigned
    ("fixed<14,14>", "fixed<8,8>"),  # search, signed
    ("ufixed<11,11>", "fixed<9,9>"),  # search, unsigned
])
@pytest.mark.parametrize("steps", ["unit", "mixed"])
@pytest.mark.parametrize("rows", [1, 3])
def test_threshold_from_keys_matches_reference(tin, tout, steps, rows):
    assert FOLD_MIN_THRESHOLDS <= 40
    assert (T(tin).width <= TABLE_MAX_BITS) == tin.startswith(("fixed<8", "ufixed<6"))
    c, x = _case(tin, tout, 3, 40, rows, steps, seed=zlib.crc32(f"{tin}{steps}{rows}".encode()))
    check(c, x)


def test_threshold_from_keys_no_key_in_range():
    """Every threshold outside the input's range: a constant per channel."""
    nodes = [Node.make("th", "Threshold", ["x", "thr", "st", "base"], ["y"])]
    thr = np.concatenate([np.full((2, 10), -5000), np.full((2, 10), 5000)], axis=1)
    tensors = {"x": ((2,), "fixed<10,10>"), "thr": ((2, 20), "fixed<16,16>"),
               "st": ((2, 20), "fixed<4,4>"), "base": ((2,), "fixed<4,4>"),
               "y": ((2,), "fixed<8,8>")}
    c = compiled_from(nodes, tensors, {"thr": thr, "st": np.full((2, 20), 2),
                                       "base": np.array([1, -4])}, ["x"], ["y"], "thnone")
    check(c, extremes(T("fixed<10,10>"), 2, np.random.default_rng(1)))
