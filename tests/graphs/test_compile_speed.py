"""Compile-time hot spots of the big CNNs (issue 29): the fast paths give the same integers
as the exact Python-int definitions they replace."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.graphs.passes import accumulators as acc
from modelcircuit.graphs.types import FixedType


def _object_range(xt, w, b, bt, wt):
    """dense_range's definition in Python ints (object arrays), written out here."""
    w = np.asarray(w, dtype=object)
    lo = np.minimum(w * xt.qmin, w * xt.qmax).sum(axis=0)
    hi = np.maximum(w * xt.qmin, w * xt.qmax).sum(axis=0)
    frac = xt.frac + wt.frac
    if b is not None and bt is not None:
        bf = max(frac, bt.frac)
        bb = np.asarray(b, dtype=object)
        lo = lo * 2 ** (bf - frac) + bb * 2 ** (bf - bt.frac)
        hi = hi * 2 ** (bf - frac) + bb * 2 ** (bf - bt.frac)
        frac = bf
    return int(min(lo.min(), 0)), int(max(hi.max(), 0)), frac


@pytest.mark.parametrize("seed", range(6))
def test_dense_range_int64_equals_python_ints(seed):
    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(1, 300)), int(rng.integers(1, 40))
    wbits = int(rng.integers(2, 17))
    w = rng.integers(-(1 << (wbits - 1)), 1 << (wbits - 1), size=(k, n)).astype(np.float64)
    xt = FixedType(int(rng.integers(2, 17)), int(rng.integers(-4, 8)), bool(seed % 2))
    wt = FixedType(wbits, 1, True)
    bt = FixedType(24, int(rng.integers(0, 20)), True) if seed % 3 else None
    b = rng.integers(-(1 << 20), 1 << 20, size=n).astype(np.float64) if bt else None
    want = _object_range(xt, w, b, bt, wt)
    assert acc._dense_range_int64(xt, w, b, bt, wt) == want
    assert acc.dense_range(xt, w, b, bt, wt) == want


def test_dense_range_falls_back_where_int64_could_overflow_or_values_are_not_integers():
    xt, wt = FixedType(32, 0, True), FixedType(32, 0, True)
    w = np.full((4, 2), float(1 << 31))
    assert acc._dense_range_int64(xt, w, None, None, wt) is None  # 2**31 * 2**31 * 4
    assert acc.dense_range(xt, w, None, None, wt) == _object_range(xt, w, None, None, wt)
    assert acc._dense_range_int64(xt, np.full((2, 2), 0.5), None, None, wt) is None


@pytest.mark.parametrize("model", ["brevitas_cnn.onnx", "zoo/resnet8_q8.onnx"])
def test_bisected_thresholds_equal_the_code_by_code_walk(model, monkeypatch):
    """Wide layers bisect (thresholds.EXHAUSTIVE_WORK) instead of walking every code: the
    same thresholds, steps and bases as the walk, on real exported models."""
    from pathlib import Path

    import modelcircuit as mc
    from modelcircuit.graphs.passes import thresholds

    p = Path(__file__).resolve().parents[1] / "data" / "exporters" / model
    calls = {"walk": 0, "bisect": 0}
    walk_fn, bisect_fn = thresholds._exhaustive, thresholds._bisect

    def counted(fn, key):
        def f(*a, **k):
            calls[key] += 1
            return fn(*a, **k)
        return f

    monkeypatch.setattr(thresholds, "_exhaustive", counted(walk_fn, "walk"))
    monkeypatch.setattr(thresholds, "_bisect", counted(bisect_fn, "bisect"))
    monkeypatch.setattr(thresholds, "EXHAUSTIVE_WORK", 1 << 62)  # walk wherever MAX_CODES allows
    walk = mc.compile(mc.load_onnx(p))
    walked = calls["walk"]
    assert walked >= 1
    monkeypatch.setattr(thresholds, "EXHAUSTIVE_WORK", 0)  # bisect every chain
    bisect = mc.compile(mc.load_onnx(p))
    assert calls["walk"] == walked and calls["bisect"] >= walked
    names = [k for k in walk.graph.constants if k.endswith(("_thresholds", "_steps", "_base"))]
    assert len(names) >= 3
    for k in names:
        np.testing.assert_array_equal(bisect.graph.constants[k], walk.graph.constants[k], k)
    assert bisect.graph_id == walk.graph_id
