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
    from modelcircuit.hdl.flow.estimate import dense_layers, layer_cost

    zoo = Path(__file__).resolve().parents[2] / "data" / "exporters" / "zoo"
    c = compile(mc.load_onnx(str(zoo / "dscnn_q8.onnx")))
    dw = [lay for lay in dense_layers(c) if lay.get("depthwise")]
    assert [lay["depthwise"][2] for lay in dw] == [False] * 4 + [True]
    for lay in dw[:4]:
        lay["bram_geom"] = (36, 512)
        assert lay["depthwise"][:2] == (9, 64)
        assert layer_cost(lay, 3).multipliers <= 64 * 3
        assert layer_cost(lay, 3).reuse == 3
    glob = layer_cost(dw[4], 1)
    assert glob.multipliers == 64 and glob.latency_extra == 4
