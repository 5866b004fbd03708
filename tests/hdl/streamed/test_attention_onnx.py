"""The attention circuits on the ONNX test models (tests/exporters/attention_models.py: torch
encoders through both exporters, SDPA with Gelu and causal masks, a particle-transformer-style
jet tagger, brevitas 8-bit QAT): streamed, bit-exact against the golden model in Amaranth's
simulator under input gaps and output backpressure, at fixed<16,6> and (QAT) at the model's
own types; `verify --backends golden,rtl` under Verilator for the jet tagger and the QAT
encoder (`slow`), with the measured latency / II equal to the compile-time report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.graphs import reference
from modelcircuit.hdl import build_top
from modelcircuit.sim import rtl
from modelcircuit.sim.amaranth_sim import simulate

pytestmark = pytest.mark.xdist_group("sim")

DATA = Path(__file__).resolve().parents[2] / "data" / "exporters"
MODELS = {m["file"]: m for m in json.loads((DATA / "models.json").read_text())["models"]}
QAT = sorted(f for f, m in MODELS.items() if m["kind"] == "qonnx_attention")
FLOAT = sorted(f for f, m in MODELS.items() if m["kind"] == "float"
               and ("token_task" in m["training"] or "jet_task" in m["training"]))
BIG = {f for f in FLOAT if "d32" in f or "t16" in f}  # 2 layers, 16 tokens: `slow`


def _compiled(name: str):
    prec = None if name in QAT else "fixed<16,6>"
    return mc.compile(mc.load_onnx(DATA / name), precision=prec)


def _codes(c, n: int, seed: int):
    shp = c.graph.tensor(c.graph.inputs[0]).shape
    x = np.random.default_rng(seed).normal(size=(n, *shp)).astype(np.float32)
    codes = reference.quantize_inputs(c.graph, [x])[0]
    return x, codes, reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]


def test_the_models_are_there() -> None:
    assert QAT and len(FLOAT) >= 5
    assert any("particle" in f for f in FLOAT)


@pytest.mark.parametrize("name", [pytest.param(f, marks=pytest.mark.slow) if f in BIG else f
                                  for f in FLOAT + QAT])
def test_streamed_bit_exact_in_amaranth_sim(name: str) -> None:
    import sys

    # the QAT model's 8-bit MultiThresholds are deep expressions for Amaranth's simulator
    # compiler (RecursionError at Python's default limit of 1000 frames)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    try:
        _bit_exact(name)
    finally:
        sys.setrecursionlimit(old)


def _bit_exact(name: str) -> None:
    c = _compiled(name)
    _, codes, want = _codes(c, 2, 1)
    top, info = build_top(c, 1)
    assert info["streamed"] and any(u["op"] == "Attention" for u in info["layers"])
    shp = codes.shape
    res = simulate(top, info, codes.reshape(-1, shp[-1]), n_out=shp[0], gap=0.25,
                   backpressure=0.25, seed=3)
    assert res.outputs.shape[0] == shp[0], "outputs missing"
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)


@pytest.mark.slow
@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
@pytest.mark.parametrize("name", ["torch_particle_transformer_p16_f4.onnx", *QAT])
def test_verify_golden_rtl(name: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from io import StringIO

    from modelcircuit.sim.verify import verify

    monkeypatch.setenv("MODELCIRCUIT_SIM_CACHE", str(tmp_path))
    c = _compiled(name)
    x, _, _ = _codes(c, 3, 2)
    out = StringIO()
    code, rep = verify(c, x, ["golden", "rtl"], out=out)
    assert code == 0, out.getvalue()
    n = rep["notes"]["rtl"]
    assert n["latency"] == n["latency_expected"] and n["ii"] == n["ii_expected"], n
