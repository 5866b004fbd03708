"""The AXI IP (hdl/axi.py) under cocotbext-axi (sim/axi_bench.py): AxiStreamSource/Sink with
random TVALID gaps and TREADY stalls, AxiLiteMaster for the registers; outputs bit-exact
against the golden model, registers against values computed here from the compiled graph.

Default suite: the digits MLP at fixed<8,3>, reuse 64, 8-byte beats (the 10-byte output
token leaves its second beat partial: TKEEP), packets of 4 vectors. Slow: the jet tagger
(three_layer_keras) and the digits CNN (streamed: TLAST on a frame's last pixel), one token
per beat."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from modelcircuit.api import compile as mc_compile
from modelcircuit.api import load_onnx
from modelcircuit.graphs import reference
from modelcircuit.sim.axi import execute_axi

from ..conftest import shared_model

DIGITS_CNN = Path(__file__).resolve().parents[2] / "src/modelcircuit/data/digits_cnn.onnx"


def _check(c, r, frames: int) -> None:
    assert r["complete"] and not r["extra_outputs"], r
    assert r["bit_exact"], f"{r['mismatched_frames']} frames differ"
    np.testing.assert_array_equal(r["outputs"].reshape(frames, -1), r["expected"])
    before, after = r["registers_before"], r["registers_after"]
    gid = c.graph_id  # the words as the register map defines them, from the id's hex text
    for i in range(4):
        assert after[f"GRAPH_ID{i}"] == int(gid[8 * i:8 * i + 8], 16)
    info = r["info"]  # the schedule the circuit was built with (hdl/<top>.json)
    assert after["LATENCY"] == info["latency"] and after["II"] == info["ii"]
    assert before["FRAMES_IN"] == before["FRAMES_OUT"] == 0
    assert after["FRAMES_IN"] == after["FRAMES_OUT"] == frames
    assert before["ERROR"] == after["ERROR"] == 0
    assert r["error_after_early_tlast"] == 1 and r["error_after_clear"] == 0


def test_digits_mlp_axi_bit_exact(digits_model, digits_test, sim_cache) -> None:
    c = mc_compile(load_onnx(digits_model), precision="fixed<8,3>", reuse=64)
    xf, labels = digits_test
    x = reference.quantize_inputs(c.graph, [xf[:24]])[0]
    r = execute_axi(c, x, reuse=64, beat_bytes=8, packet_frames=4, seed=3, stall_in=0.3,
                    stall_out=0.4, cache_dir=sim_cache)
    _check(c, r, 24)
    lay = r["layout"]
    assert lay["input"]["beats_per_token"] == 8 and not lay["input"]["tkeep"]
    assert lay["output"]["beats_per_token"] == 2 and lay["output"]["tkeep"]
    assert r["registers_after"]["PACKET_FRAMES"] == 4
    assert r["registers_after"]["LAYOUT"] == 8 | (8 << 8) | (8 << 16)
    assert (r["outputs"].argmax(axis=1) == labels[:24]).mean() > 0.8


@pytest.mark.slow
def test_jet_tagger_axi_bit_exact(sim_cache) -> None:
    c = mc_compile(load_onnx(str(shared_model("three_layer_keras"))), precision="fixed<8,3>")
    g = c.graph
    t = g.tensor(g.inputs[0]).dtype
    x = np.random.default_rng(7).integers(t.qmin, t.qmax + 1, size=(200, 16))
    r = execute_axi(c, x, seed=5, stall_in=0.4, stall_out=0.4, cache_dir=sim_cache)
    _check(c, r, 200)
    assert r["layout"]["input"]["beats_per_token"] == 1


@pytest.mark.slow
@pytest.mark.skipif(not DIGITS_CNN.exists(), reason="no bundled digits CNN")
def test_digits_cnn_axi_bit_exact(digits_test, sim_cache) -> None:
    c = mc_compile(load_onnx(str(DIGITS_CNN)))
    xf, labels = digits_test
    x = reference.quantize_inputs(c.graph, [xf[:12]])[0]
    reuse = {"conv2": 72, "fc": 40}
    r = execute_axi(c, x, reuse=reuse, packet_frames=3, seed=2, stall_in=0.3, stall_out=0.3,
                    cache_dir=sim_cache)
    _check(c, r, 12)
    assert r["layout"]["input"]["tokens_per_frame"] == 64  # 8 x 8 pixels, TLAST on the last
    assert (r["outputs"].reshape(12, -1).argmax(axis=1) == labels[:12]).mean() > 0.8
