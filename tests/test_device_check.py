"""bench/device_check.sh --dry end to end: the one command a session lent a GPU will run must
not be the first thing to break, so its plumbing (every step, the time boxes, the files that
come back, the summary) runs here on the CPU paths."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "device_check.sh"
# what the device tool brings back: at most 8 files, names of letters, digits, '.', '_', '-'
RETURNED = {"env.txt", "tests.log", "verify.log", "verify.json", "serve.log", "bench.log",
            "bench.json", "summary.json"}

needs = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None
                           or shutil.which("g++") is None,
                           reason="needs bash, coreutils timeout and g++ (gpu-emu)")


def _dry(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out"
    e = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, **env}
    e.pop("DRY", None)
    r = subprocess.run(["bash", str(SCRIPT), "--dry"], cwd=ROOT, env=e, capture_output=True,
                       text=True, timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    return r, summary


def _check(r: subprocess.CompletedProcess, s: dict, out: Path, n_verify: int) -> None:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert s["mode"] == "dry" and s["ok"] is True and s["budget_s"] == 480
    assert 0 < s["total_s"] <= s["budget_s"]
    names = [st["step"] for st in s["steps"]]
    verify = [n for n in names if n.startswith("verify:")]
    assert names[:2] == ["env", "tests"] and names[-2:] == ["serve", "bench"]
    assert "verify:digits_mlp" in verify and len(verify) >= n_verify
    for st in s["steps"]:
        if st["step"] == "verify:shared":  # only where ../shared/models is absent
            assert st["status"] == "skipped"
            continue
        assert st["status"] == "pass", st
        assert isinstance(st["seconds"], int) and 0 <= st["seconds"] <= st["box_s"]
    assert s["counts"] == {"pass": len(names) - names.count("verify:shared"),
                           **({"skipped": 1} if "verify:shared" in names else {})}
    steps = {st["step"]: st for st in s["steps"]}
    # the gpu tests are collected (not run: no CUDA here), the serve gpu-emu test ran
    assert "collected" in steps["tests"]["tally"] and "passed" in steps["serve"]["tally"]
    assert all(steps[v]["bit_exact"] is True for v in verify)
    files = {p.name for p in out.iterdir()}
    assert files <= RETURNED and len(files) <= 8 and {"summary.json", "bench.json"} <= files
    b = json.loads((out / "bench.json").read_text())
    assert b["dry"] is True and b["errors"] == 0
    impls = {(r["impl"], r["status"]) for r in b["rows"]}
    assert ("mc-emu", "ok") in impls and ("ort-cpu", "ok") in impls
    assert ("ort-cuda-graph", "skipped") in impls and ("torch-graph", "skipped") in impls
    assert {b["physical"][k]["status"] for k in ("d2d_copy", "launch_floor")} == {"skipped"}
    for row in b["rows"]:
        if row["impl"] == "mc-emu":
            assert row["ok"] is True and row["b1"]["calls"] == 20
            assert row["b1"]["p50_us"] <= row["b1"]["p99_us"]


@needs
def test_device_check_dry_runs_every_step(tmp_path: Path) -> None:
    r, s = _dry(tmp_path, VERIFY_ONLY="2", BENCH_MODELS="digits_cnn")
    _check(r, s, tmp_path / "out", 2)


@needs
@pytest.mark.slow
def test_device_check_dry_full(tmp_path: Path) -> None:
    r, s = _dry(tmp_path)
    _check(r, s, tmp_path / "out", 2)


def test_device_check_refuses_unknown_option() -> None:
    r = subprocess.run(["bash", str(SCRIPT), "--bogus"], cwd=ROOT, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.startswith("error: unknown option --bogus")


@needs
@pytest.mark.slow
def test_gpu_mode_without_a_device_fails_loudly(tmp_path: Path) -> None:
    """Where CuPy sees no device, the real mode must not pass on skips and fallbacks: the gpu
    tests all skipped, verify's gpu backend on the emulator, the bench without CUDA are fails."""
    from tests.conftest import gpu_available

    if gpu_available():
        pytest.skip("a CUDA device is here")
    out = tmp_path / "out"
    e = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "VERIFY_ONLY": "1",
         "BENCH_MODELS": "jet"}
    e.pop("DRY", None)
    r = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=e, capture_output=True, text=True,
                       timeout=300)
    s = json.loads((out / "summary.json").read_text())
    assert r.returncode == 1 and s["mode"] == "gpu" and s["ok"] is False
    st = {x["step"]: x for x in s["steps"]}
    assert st["env"]["status"] == "pass"
    for name in ("tests", "verify:digits_mlp", "serve", "bench"):
        assert st[name]["status"] == "fail", st[name]
    assert "emulator" in st["verify:digits_mlp"]["reason"]


def test_bench_acceptance_ratios() -> None:
    """The issue's two bars from rows: ours over the peer, each from the rows that ran ok."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    rows = [{"model": "jet", "precision": "float32", "impl": "mc-replay", "status": "ok",
             "b1": {"p50_us": 10.0}, "big_samples_per_s": 8.0},
            {"model": "jet", "precision": "fixed<16,6>", "impl": "mc-replay", "status": "ok",
             "b1": {"p50_us": 30.0}},
            {"model": "jet", "precision": "float32", "impl": "torch-graph", "status": "ok",
             "b1": {"p50_us": 20.0}},
            {"model": "jet", "precision": "float32", "impl": "ort-cuda-graph", "status": "ok",
             "big_samples_per_s": 10.0},
            {"model": "big_cnn", "precision": "float32", "impl": "mc-replay", "status": "ok",
             "b1": {"p50_us": 1.0}, "big_samples_per_s": 5.0},
            {"model": "big_cnn", "precision": "float32", "impl": "ort-cuda-graph",
             "status": "skipped"}]
    assert gpu.acceptance(rows) == {"jet_b1_p50_ours_float32_over_torch_graph": 0.5,
                                    "jet_b1_p50_ours_fixed16_6_over_torch_graph": 1.5,
                                    "jet_big_throughput_ours_over_ort_cuda": 0.8}
