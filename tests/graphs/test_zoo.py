"""The field's benchmark CNNs as their exporters write them (issue 29): our own MLPerf Tiny
ResNet-8 (TorchScript and dynamo exporters, brevitas 8-bit) and DS-CNN (float and brevitas
8-bit), committed under tests/data/exporters/zoo (made by tests/exporters/zoo.py; a ResNet-8 is
~320 kB, the budget is 350 kB a file and 2 MB in all). The float models' golden output equals
onnxruntime's within the computed float32 bound (tests/conftest.py), the QONNX models' equals
qonnx execution up to the float32 rounding of the last float layer on either side (the codes
before it are exact), and gpu-emu's
codes equal the golden model's. The bigger models (MobileNet-v1 0.25, the autoencoder,
brevitas_examples' CNV/ResNet-18/MobileNet) are made in `slow` tests by the generator where
torch and brevitas are installed (ZOO_PYTHON names that interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import modelcircuit as mc
from tests.conftest import assert_float32_close, tail_error_bound

ZOO = Path(__file__).resolve().parents[1] / "data" / "exporters" / "zoo"
FLOAT = ["resnet8", "resnet8_dynamo", "dscnn"]
QONNX = ["resnet8_q8", "dscnn_q8"]
GENERATOR = Path(__file__).resolve().parents[1] / "exporters" / "zoo.py"


def _input(path: Path, n: int, seed: int = 3) -> np.ndarray:
    i = onnx.load(str(path)).graph.input[0]
    shp = [d.dim_value for d in i.type.tensor_type.shape.dim][1:]
    return (np.random.default_rng(seed).random((n, *shp)) * 2 - 0.5).astype(np.float32)


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])


def _qonnx(path: Path, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """qonnx execution's outputs and, per output, a bound on the float32 rounding of its last
    Gemm (the float layer after the last quantizer: K products and sums, each rounding by at
    most u of the magnitude, |a| @ |W| + |b|, computed from qonnx's own operands)."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    w = ModelWrapper(str(path)).transform(InferShapes())
    i, o = w.graph.input[0].name, w.graph.output[0].name
    gemm = [n for n in w.graph.node if n.op_type == "Gemm"][-1]
    outs, bounds = [], []
    for k in range(len(x)):
        ctx = execute_onnx(w, {i: x[k:k + 1]}, return_full_exec_context=True)
        a, wt = (np.abs(ctx[n].astype(np.float64)) for n in gemm.input[:2])
        b = np.abs(ctx[gemm.input[2]].astype(np.float64)) if len(gemm.input) > 2 else 0.0
        mag = a.reshape(1, -1) @ (wt.T if any(t.name == "transB" and t.i for t in
                                              gemm.attribute) else wt) + b
        outs.append(ctx[o])
        bounds.append((a.size + 1) * 2.0 ** -24 * mag)
    return np.concatenate(outs), np.concatenate(bounds)


def test_zoo_sizes_within_budget():
    files = sorted(ZOO.glob("*.onnx"))
    entries = {e["file"]: e for e in json.loads((ZOO / "models.json").read_text())}
    assert {f.name for f in files} == set(entries)
    assert all(f.stat().st_size < 350_000 for f in files)
    assert sum(f.stat().st_size for f in files) < 2_000_000


@pytest.mark.parametrize("name", FLOAT)
def test_zoo_float_golden_equals_onnxruntime(name):
    p = ZOO / f"{name}.onnx"
    c = mc.compile(mc.load_onnx(p), precision="float32")
    x = _input(p, 3)
    assert_float32_close(np.asarray(mc.run(c, x)), _ort(p, x), c, x)


@pytest.mark.parametrize("name", QONNX)
def test_zoo_qonnx_golden_equals_qonnx_exactly(name):
    p = ZOO / f"{name}.onnx"
    c = mc.compile(mc.load_onnx(p))
    assert "Mul" not in [str(n.op) for n in c.graph.nodes]  # every layer on integer codes
    x = _input(p, 2)
    got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(len(x), -1)
    want, qb = _qonnx(p, x)
    diff = np.abs(got - want.astype(np.float64).reshape(len(x), -1))
    assert np.all(diff <= tail_error_bound(c, x) + qb), diff.max()
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_025", "mobilenet_025_q8", "autoencoder_q8"])
def test_zoo_generated_models(name, tmp_path):
    """Made by the generator in ZOO_PYTHON (torch + brevitas); skipped where it is absent."""
    py = os.environ.get("ZOO_PYTHON", sys.executable)
    probe = subprocess.run([py, "-c", "import torch, brevitas"], capture_output=True)
    if probe.returncode:
        pytest.skip("torch and brevitas are not installed (set ZOO_PYTHON)")
    subprocess.run([py, str(GENERATOR), "--out", str(tmp_path), "--only", name], check=True,
                   capture_output=True, timeout=600)
    p = tmp_path / f"{name}.onnx"
    x = _input(p, 2)
    if name.endswith("_q8"):
        c = mc.compile(mc.load_onnx(p))
        got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(len(x), -1)
        want, qb = _qonnx(p, x)
        diff = np.abs(got - want.astype(np.float64).reshape(len(x), -1))
        assert np.all(diff <= tail_error_bound(c, x) + qb), diff.max()
    else:
        c = mc.compile(mc.load_onnx(p), precision="float32")
        assert_float32_close(np.asarray(mc.run(c, x)), _ort(p, x), c, x)
