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


def _factor_columns_by_definition(w, scales):
    """scales.factor_columns' definition: every scale tried in order on the whole column."""
    from modelcircuit.graphs.passes.scales import MAX_CODE

    codes, col_scale = np.zeros_like(w), np.ones(w.shape[1])
    with np.errstate(all="ignore"):
        for j in range(w.shape[1]):
            col = w[:, j]
            if not np.any(col):
                continue
            for s in scales:
                c = np.round(col / s)
                if np.all(np.abs(c) < MAX_CODE) and np.array_equal(c * s, col):
                    codes[:, j], col_scale[j] = c, s
                    break
            else:
                return None
    return codes, col_scale


@pytest.mark.parametrize("seed", range(4))
def test_factor_columns_equals_its_definition(seed):
    """Per-channel float scales (brevitas' per-output-channel weight quantizers), a pool of
    hundreds of candidate scales, columns of codes times one of them (and zero columns, and
    codes that a larger scale also explains: the largest must win)."""
    from modelcircuit.graphs.passes.scales import factor_columns

    rng = np.random.default_rng(seed)
    pool = np.sort(rng.uniform(1e-4, 1e-1, 400).astype(np.float32).astype(np.float64))[::-1]
    pool = np.concatenate([pool, pool[:50] / 2])  # s and s/2: even codes fit both
    scales = tuple(float(s) for s in sorted(set(pool.tolist()), reverse=True))
    k, n = 27, 40
    pick = rng.choice(len(scales), n)
    codes = rng.integers(-7, 8, size=(k, n)).astype(np.float64)
    codes[:, 3] = 0
    codes[:, 5] = 2 * rng.integers(-3, 4, size=k)
    w = codes * np.asarray([scales[i] for i in pick])[None, :]
    want = _factor_columns_by_definition(w, scales)
    got = factor_columns(w, scales)
    assert want is not None and got is not None
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    w[0, 0] += 1e-3  # no scale explains this column
    assert factor_columns(w, scales) is None and _factor_columns_by_definition(w, scales) is None
