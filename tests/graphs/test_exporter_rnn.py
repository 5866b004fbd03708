"""The LSTM / GRU models written by torch's exporters (tests/exporters/generate.py, the rnn
group: TorchScript and dynamo paths, trained on a synthetic sequence task). The float32
golden == onnxruntime check runs with every float export in test_exporter_models.py; here:
fixed<16,6> golden == gpu-emu bit for bit, its agreement with the float model, and golden ==
RTL == gpu-emu under Verilator on one of them (slow)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.sim import rtl
from modelcircuit.sim.verify import verify

DATA = Path(__file__).resolve().parents[1] / "data" / "exporters"
MODELS = {m["file"]: m for m in json.loads((DATA / "models.json").read_text())["models"]}
RNN = sorted(f for f, m in MODELS.items() if any(op in m["ops"] for op in ("LSTM", "GRU")))


def _x(c, n: int, seed: int) -> np.ndarray:
    t, f = c.graph.tensor(c.graph.inputs[0]).shape
    return np.random.default_rng(seed).normal(size=(n, t, f)).astype(np.float32)


def test_the_rnn_group_is_there() -> None:
    assert len(RNN) >= 4
    assert {"LSTM", "GRU"} <= {op for f in RNN for op in MODELS[f]["ops"]}
    assert any("dynamo=True" in MODELS[f]["exporter"] for f in RNN)
    assert any("dynamo=False" in MODELS[f]["exporter"] for f in RNN)


@pytest.mark.parametrize("name", RNN)
def test_fixed_golden_equals_gpu_emu(name: str) -> None:
    g = mc.load_onnx(DATA / name)
    c = mc.compile(g, precision="fixed<16,6>")
    x = _x(c, 64, 0)
    out = io.StringIO()
    code, rep = verify(c, x, ["golden", "gpu-emu"], out=out)
    assert code == 0 and rep["bit_exact"], out.getvalue()
    # agreement with the float model: the class decided is the same on nearly every input
    fl = np.asarray(mc.run(mc.compile(g, precision="float32"), x), dtype=np.float64)
    fxd = np.asarray(mc.run(c, x), dtype=np.float64)
    same = float((fl.argmax(axis=1) == fxd.argmax(axis=1)).mean())
    assert same >= 0.9, (name, same, np.abs(fl - fxd).max())


@pytest.mark.slow
@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
def test_lstm_export_golden_rtl_gpu_emu_bit_exact() -> None:
    c = mc.compile(mc.load_onnx(DATA / "torch_lstm_f4_h8_t12.onnx"), precision="fixed<16,6>",
                   reuse=4)
    out = io.StringIO()
    code, rep = verify(c, _x(c, 8, 1), ["golden", "rtl", "gpu-emu"], out=out)
    assert code == 0 and rep["bit_exact"], out.getvalue()
    n = rep["notes"]["rtl"]
    assert n["latency"] == n["latency_expected"] and n["ii"] == n["ii_expected"], n
