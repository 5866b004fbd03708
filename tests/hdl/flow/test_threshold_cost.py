"""The estimate of the folded Threshold and depthwise units (hdl/flow/threshold_cost.py),
checked against the circuits' own plans: the lanes the lowering gives a Threshold at a frame
time, the ROM depths, and the depthwise multipliers."""

from __future__ import annotations

import numpy as np

from modelcircuit.graphs.types import parse_type
from modelcircuit.hdl.flow.threshold_cost import BRAM_MIN_DEPTH, threshold_cost
from modelcircuit.hdl.streamed.threshold import ThresholdFold


def _layer(c: int, pixels: int, lanes: int | None = None) -> tuple[dict, ThresholdFold]:
    ti, to = parse_type("fixed<16,16>"), parse_type("ufixed<8,8>")
    rng = np.random.default_rng(c)  # distinct thresholds, unit steps: an affine search
    thr = np.stack([np.sort(rng.choice(4000, 255, replace=False)) - 2000 for _ in range(c)])
    lay = {"node": "t", "c": c, "k": 255, "pixels": pixels, "wi": 16, "wo": 8, "fold": True,
           "levels": 8, "kw": int(np.ptp(thr, axis=1).max() + 2).bit_length()}
    return lay, ThresholdFold(ti, c, thr, np.ones_like(thr), np.zeros(c, np.int64), to, lanes)


def test_lanes_follow_the_frame_time() -> None:
    lay, _ = _layer(64, 100)
    fast = threshold_cost(lay, 100, "ecp5")      # one cycle a pixel: 64 lanes
    slow = threshold_cost(lay, 100 * 64, "ecp5")  # 64 cycles a pixel: one lane
    assert fast.lut > 8 * slow.lut and fast.latency_extra < slow.latency_extra
    assert slow.latency_extra == 8 + 64 + 2  # L + ceil(C / lanes) + 2, as the unit


def test_rom_figures_match_the_unit() -> None:
    lay, u16 = _layer(16, 1, lanes=1)
    assert u16.key_width <= lay["kw"] and u16.affine
    mems = u16.memories()
    assert [d for _, d in mems] == [16 << s for s in range(8)]
    big = sum(1 for _, d in mems if d >= BRAM_MIN_DEPTH)
    assert threshold_cost(lay, 16, "ecp5").bram >= big


def test_depthwise_layers_cost_one_lane_per_channel() -> None:
    """DS-CNN's four 3x3 depthwise Convs and its frame-wide one (the average pool) are
    costed as lanes: at reuse 3, ceil(9 / 3) products per channel at most, where the
    block-diagonal Dense over the 576-input window would fold 64 x 576 weights."""
    from pathlib import Path

    import modelcircuit as mc
    from modelcircuit.api import compile
    from modelcircuit.hdl.flow.layer_cost import dense_layers, layer_cost

    zoo = Path(__file__).resolve().parents[2] / "data" / "exporters" / "zoo"
    c = compile(mc.load_onnx(str(zoo / "dscnn_q8.onnx")))
    dw = [lay for lay in dense_layers(c) if lay.get("depthwise")]
    assert [lay["depthwise"][2] for lay in dw] == [False] * 4 + [True]
    for lay in dw[:4]:
        lay["bram_geom"] = (36, 512)
        assert lay["depthwise"][:2] == (9, 64)
        assert layer_cost(lay, 3).multipliers <= 64 * 3
        assert layer_cost(lay, 3).reuse == 3
    glob = layer_cost(dw[4], 1)  # the average pool: a sum of ones, no product per channel
    assert glob.multipliers == 0 and glob.latency_extra == 4


def test_multiply_mode_costs_the_product_not_the_search() -> None:
    """A quantizer's affine thresholds (an 8-bit code over a 20-bit accumulator, as the
    8-bit ResNet-8's layers have): the estimate takes the unit's product (its DSP blocks on
    the family's width) and its ROM depths (M and C per step, no key ROMs)."""
    ti, to = parse_type("fixed<24,24>"), parse_type("ufixed<8,8>")
    rng = np.random.default_rng(3)
    c, k = 32, 255
    thr = np.zeros((c, k), dtype=np.int64)
    for r in range(c):
        a = k / 2**20 * rng.uniform(0.7, 1.0)
        b = rng.uniform(-0.5, 0.5)
        thr[r] = np.ceil((np.arange(1, k + 1) - 0.5 - b) / a).astype(np.int64)
    u = ThresholdFold(ti, c, thr, np.ones(1, np.int64), np.zeros(1, np.int64), to, lanes=2)
    assert u.mode == "multiply" and u.comparators() == 0
    xw, mw = u.product_widths()
    assert mw > 18  # two 18-bit blocks wide
    cw = max(1, max(u.multiply[1]).bit_length())
    lay = {"node": "t", "c": c, "k": k, "pixels": 16, "wi": 24, "wo": 8, "fold": True,
           "levels": u.levels, "kw": u.key_width, "multiply": (xw, mw, cw)}
    cost = threshold_cost(lay, 16 * 16, "ecp5")  # 16 cycles a pixel: 2 lanes, as u
    assert cost.multipliers == 2 * (-(-xw // 18)) * (-(-mw // 18))
    assert cost.latency_extra == u.stages + u.steps_ + 2
    assert sorted(d for _, d in u.memories()) == [16] * 4
    search = dict(lay, multiply=None)
    assert threshold_cost(search, 16 * 16, "ecp5").multipliers == 0
    assert cost.bram < threshold_cost(search, 16 * 16, "ecp5").bram


def test_resnet8_q8_thresholds_take_the_product() -> None:
    """Every 8-bit quantizer of the brevitas ResNet-8 after a convolution is affine in its
    wide accumulator: each such Threshold is costed (and built) as a product, not as a key
    search (the residual adds' 9-bit requantizers may keep theirs: 8-bit keys)."""
    from pathlib import Path

    import modelcircuit as mc
    from modelcircuit.api import compile
    from modelcircuit.hdl.flow.threshold_cost import threshold_layers

    zoo = Path(__file__).resolve().parents[2] / "data" / "exporters" / "zoo"
    model = compile(mc.load_onnx(str(zoo / "resnet8_q8.onnx")))
    layers = [lay for lay in threshold_layers(model) if lay["fold"] and lay["kw"] >= 16]
    assert len(layers) == 9 and all(lay["multiply"] for lay in layers)
    with_search = [dict(lay, multiply=None) for lay in layers]
    t = 32 * 32 * 16
    assert (sum(threshold_cost(lay, t, "ecp5").bram for lay in layers)
            < sum(threshold_cost(lay, t, "ecp5").bram for lay in with_search) // 4)


# A vector model's Threshold (hdl/vector/lower.py lower_threshold): (C, K, Wi, K's nonzero
# steps per channel) and yosys 0.70's LUT4 for the unit alone (threshold_cost docstring):
# synth_gowin LUT1-4 + ALU, synth_ecp5 LUT4 + 2 per CCU2C
VECTOR_SYNTH = [
    ("gowin", 32, 127, 14, 16260 + 49772),  # brevitas w2a7: the s48 sweep's model
    ("gowin", 32, 31, 15, 1669 + 13164),    # brevitas w3a5
    ("gowin", 24, 15, 16, 371 + 5277),      # brevitas skip w4a4, its three Thresholds
    ("gowin", 24, 15, 11, 377 + 3456),
    ("gowin", 24, 31, 29, 2554 + 20354),
    ("ecp5", 32, 31, 15, 1697 + 2 * 6400),  # brevitas w3a5 on ecp5-25k
]


def test_vector_compare_cost_matches_synthesis() -> None:
    """The comparator sum (measured when every vector Threshold was one; since b0188e8 only
    those of fewer than FOLD_MIN_THRESHOLDS thresholds a channel are, the rest use keys)."""
    from modelcircuit.hdl.flow.threshold_cost import vector_cmp_lut

    for _, c, k, wi, lut in VECTOR_SYNTH:
        est = c * k * vector_cmp_lut(wi, k)
        assert 0.9 * lut <= est <= 1.1 * lut, (c, k, wi, est, lut)


# hdl/units/threshold.py from its keys (b0188e8): (input bits, distinct keys, LUT4 + 2 per
# CCU2C per channel of the unit alone, synth_ecp5, measured 2026-12-08 on 2-4 channels)
KEYS_SYNTH = [(8, 127, 72), (10, 31, 76), (14, 127, 237), (20, 255, 479)]


def test_vector_keys_cost_covers_synthesis() -> None:
    """The table/search cost is at least 0.9x of synthesis and at most 1.4x (an estimate
    that refuses what fits is as wrong as one that lets a build fail)."""
    from modelcircuit.hdl.flow.threshold_cost import vector_keys_lut

    for wi, m, lut in KEYS_SYNTH:
        est = vector_keys_lut(wi, m)
        assert 0.9 * lut <= est <= 1.4 * lut, (wi, m, est, lut)


def test_vector_thresholds_count_in_the_fit() -> None:
    """The s48 sweep's bug: a vector model's Thresholds were not in `--reuse auto`'s
    estimate (brevitas w2a7 on a GW1NR-9: 4,076 LUT estimated, ~66k LUT4 + ALU in
    synthesis). brevitas_pc_w8a8's 32 channels of 255 thresholds on 21 bits are searches of
    8 compares (units/threshold.py), ~16k LUT4: the fit refuses it on a GW1NR-9 before
    synthesis, and costs them on a device that holds them."""
    from pathlib import Path

    import pytest

    from modelcircuit.api import compile
    from modelcircuit.graphs.profiles import all_profiles
    from modelcircuit.hdl.flow.fit import estimate_plan, fit_reuse
    from modelcircuit.hdl.flow.threshold_cost import vector_threshold_costs
    from modelcircuit.hdl.flow.tools import FitError

    model = Path(__file__).resolve().parents[2] / "data" / "exporters" / "brevitas_pc_w8a8.onnx"
    c = compile(str(model))
    (thr,) = vector_threshold_costs(c)
    assert thr.lut >= 32 * 8 * 21 and thr.ff == 32 * 8  # at least 8 compares of 21 bits
    with pytest.raises(FitError, match="does not fit gw1nr-9"):
        fit_reuse(c, dict(all_profiles()["gw1nr-9"], name="gw1nr-9"))
    big = dict(all_profiles()["ecp5-85k"], name="ecp5-85k")
    est = estimate_plan(c, big, {lay: 1 for lay in _dense_names(c)})
    assert est["lut"] >= thr.lut


def _dense_names(c) -> list[str]:  # noqa: ANN001
    from modelcircuit.hdl.flow.layer_cost import dense_layers

    return [lay["node"] for lay in dense_layers(c)]
