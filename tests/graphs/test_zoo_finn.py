"""FINN's flagships from brevitas_examples (issue 29): CNV 1W1A, ResNet-18 4W4A (CIFAR-10) and
MobileNet-v1 4b (ImageNet, 224x224), untrained (pretrained=False: no download here), exported
by brevitas' export_qonnx through tests/exporters/zoo.py. 6 to 45 MB each: made in `slow`
tests by the generator in ZOO_PYTHON (torch + brevitas; skipped where absent) into
ZOO_CACHE (default: a pytest temp folder). Golden == qonnx execution exactly on the codes
(up to the float32 rounding of the last float Gemm on either side), gpu-emu == golden bit
for bit, and the compile time is bounded. ResNet-18 has no input quantizer: its first Conv
reads the input frame at the compile's fixed-point type (exact on the 8-bit pixels fed here),
its weight scales factored out as for any other Conv.

The bench's published figures (bench/cnn.py PUBLISHED) are checked for their citations, and
the bench runs on a small model (default suite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import modelcircuit as mc
from tests.conftest import tail_error_bound
from tests.graphs.test_zoo import _input, _qonnx

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tests" / "exporters" / "zoo.py"
# seconds, on this 2-core machine shared by several agents (cnv ~4 s, mobilenet ~40 s alone)
COMPILE_LIMIT = {"cnv_1w1a": 60, "resnet18_4w4a": 300, "mobilenet_v1_4b": 300}


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory) -> Path:
    d = os.environ.get("ZOO_CACHE")
    return Path(d) if d else tmp_path_factory.mktemp("finn_zoo")


def _generated(name: str, d: Path) -> Path:
    p = d / f"{name}.onnx"
    if p.exists():
        return p
    py = os.environ.get("ZOO_PYTHON", sys.executable)
    if subprocess.run([py, "-c", "import torch, brevitas_examples"],
                      capture_output=True).returncode:
        pytest.skip("torch and brevitas_examples are not installed (set ZOO_PYTHON)")
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run([py, str(GENERATOR), "--out", str(d), "--only", name], check=True,
                   capture_output=True, timeout=900)
    return p


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMPILE_LIMIT))
def test_finn_zoo_golden_equals_qonnx_and_gpu_emu_is_exact(name, zoo_dir):
    p = _generated(name, zoo_dir)
    t0 = time.perf_counter()
    c = mc.compile(mc.load_onnx(p))
    compile_s = time.perf_counter() - t0
    assert compile_s < COMPILE_LIMIT[name], f"{name}: compile {compile_s:.1f} s"
    ops = {str(n.op) for n in c.graph.nodes}
    assert "Mul" not in ops, ops  # every layer on integer codes
    x = (np.round(_input(p, 1) * 256) / 256).astype(np.float32)  # 8-bit pixels
    got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(len(x), -1)
    want, qb = _qonnx(p, x)
    diff = np.abs(got - want.astype(np.float64).reshape(len(x), -1))
    assert np.all(diff <= tail_error_bound(c, x) + qb), diff.max()
    assert np.unique(got).size > 1  # not a constant output
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))


def test_bench_published_figures_are_cited():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import cnn as bench_cnn
    finally:
        sys.path.remove(str(ROOT / "bench"))
    rows = bench_cnn.PUBLISHED
    assert {r["model"].split()[0] for r in rows} >= {"RN07", "CNV-W1A1", "AD08", "KWS-W3A3",
                                                     "cnv-w1a1"}
    for r in rows:
        assert r["frames_per_s"] > 0 and r["board"] and r["who"]
        assert r["source"].startswith("https://github.com/"), r
        if "tiny_results_v0.7" in r["source"]:  # a pinned commit, the file of the figure
            assert "/blob/8813eded7403f4167867d305f8d997597f06181a/" in r["source"]
            assert r["source"].endswith("/performance/results.txt")


def test_bench_runs_and_writes_its_table(tmp_path):
    out = tmp_path / "cnn.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "cnn.py"), "--models",
                        "digits_cnn", "--frames", "8", "--no-plan", "--json", str(out)],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())
    row = data["rows"][0]
    assert row["model"] == "digits_cnn" and row["golden_frames_per_s"] > 0
    assert row["ort_1thread_frames_per_s"] > 0 and row["gpu_emu_bit_exact"] is True
    assert {p["model"] for p in data["published"]} >= {"CNV-W1A1 (CIFAR-10)", "cnv-w1a1"}
    assert "published figures" in r.stdout and "661.5" in r.stdout
