"""passes/thresholds.py: bisection over wide input ranges gives the exhaustive thresholds."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs.ir import Node
from modelcircuit.graphs.passes.thresholds import _bisect, _exhaustive
from modelcircuit.graphs.types import FixedType, Rounding


def _apply(x: np.ndarray, th, st, base) -> np.ndarray:
    out = np.array(base, dtype=np.int64)[None, :].repeat(len(x), 0)
    for c in range(x.shape[1]):
        for t, s in zip(th[c], st[c], strict=True):
            out[:, c] += s * (x[:, c] >= t)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_bisection_equals_exhaustive(seed):
    rng = np.random.default_rng(seed)
    channels = 7
    k = rng.uniform(-0.01, 0.01, channels)  # negative scales: decreasing channels
    b = rng.uniform(-3, 3, channels)
    out_t = FixedType(4, 4, seed % 2 == 0, Rounding.RND_CONV)

    def run(codes):
        y = np.maximum(codes * k[None, :] + b[None, :], 0) / 0.37
        return fx.quantize(y, out_t)

    lo, hi = -3000, 3000
    ex = _exhaustive(run, lo, hi, channels)
    bi = _bisect(run, lo, hi, channels, Node.make("q", "Requant", ["x"], ["y"]))
    x = np.arange(lo, hi + 1)[:, None].repeat(channels, 1)
    assert np.array_equal(_apply(x, *ex), run(x))
    assert np.array_equal(_apply(x, *bi), run(x))
    assert [len(t) for t in bi[0]] == [len(t) for t in ex[0]]
