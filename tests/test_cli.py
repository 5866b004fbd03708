"""The command line: bad input gives one line `error: …`, exit 2, nothing on disk;
same model and options give byte-identical artifacts in two processes."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import shared_model

ROOT = Path(__file__).resolve().parents[1]


def mc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modelcircuit.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def assert_user_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])


def _mlp(path: Path, w: np.ndarray, op: str = "MatMul") -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", w.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", w.shape[1]])
    node = helper.make_node(op, ["x", "w"], ["y"], name="layer0")
    g = helper.make_graph([node], "t", [x], [y], initializer=[numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _no_artifacts(d: Path) -> None:
    left = [p.name for p in d.iterdir() if p.name not in ("model.onnx", "bad.onnx", "x.npy")]
    assert left == [], left


def test_missing_file(tmp_path):
    assert_user_error(mc("compile", str(tmp_path / "nope.onnx"), "--out", str(tmp_path / "o")),
                      "not found", "nope.onnx")
    assert not (tmp_path / "o").exists()


def test_non_onnx_file(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_text("this is not a protobuf at all \x00\xff" * 10)
    assert_user_error(mc("compile", str(p), "--out", str(tmp_path / "o")), "bad.onnx")
    _no_artifacts(tmp_path)


def test_truncated_onnx(tmp_path, digits_model):
    p = tmp_path / "bad.onnx"
    p.write_bytes(digits_model.read_bytes()[:3000])
    assert_user_error(mc("compile", str(p), "--out", str(tmp_path / "o")), "truncated")
    _no_artifacts(tmp_path)


def test_unsupported_op(tmp_path):
    p = tmp_path / "model.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Erf", ["x"], ["y"], name="my_erf")], "t", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    r = mc("compile", str(p), "--out", str(tmp_path / "o"))
    assert_user_error(r, "Erf", "my_erf", "supported")
    _no_artifacts(tmp_path)


def test_nan_weight(tmp_path):
    w = np.ones((4, 3), np.float32)
    w[1, 2] = np.nan
    p = _mlp(tmp_path / "model.onnx", w)
    assert_user_error(mc("compile", str(p), "--out", str(tmp_path / "o")), "NaN", "'w'")
    _no_artifacts(tmp_path)


def test_inf_weight(tmp_path):
    w = np.ones((4, 3), np.float32)
    w[0, 0] = np.inf
    p = _mlp(tmp_path / "model.onnx", w)
    assert_user_error(mc("compile", str(p), "--out", str(tmp_path / "o")), "Inf")
    _no_artifacts(tmp_path)


@pytest.mark.parametrize("prec", ["fixed<16", "fixed<0,3>", "float64", "fixed<16,6,BOGUS>",
                                  "fixed<65,3>"])
def test_malformed_precision(tmp_path, prec):
    r = mc("compile", "--precision", prec, "--out", str(tmp_path / "o"))
    assert_user_error(r, "precision" if "65" not in prec and "<0" not in prec else "")
    _no_artifacts(tmp_path)


def test_accumulator_over_64_bits(tmp_path):
    p = _mlp(tmp_path / "model.onnx", np.full((4, 3), 1000.0, np.float32))
    r = mc("compile", str(p), "--precision", "fixed<48,24>", "--out", str(tmp_path / "o"))
    assert_user_error(r, "64", "layer0")
    _no_artifacts(tmp_path)


def test_out_is_a_file(tmp_path):
    f = tmp_path / "x.npy"
    f.write_text("occupied")
    assert_user_error(mc("compile", "--out", str(f)), "is a file")
    assert f.read_text() == "occupied"


def test_dynamic_dimension(tmp_path):
    p = tmp_path / "model.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "features"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "features"])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "t", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    assert_user_error(mc("compile", str(p), "--out", str(tmp_path / "o")), "dynamic", "'x'")


def test_unknown_profile_and_bad_reuse(tmp_path):
    assert_user_error(mc("compile", "--profile", "tpu9", "--out", str(tmp_path / "o")), "tpu9")
    assert_user_error(mc("compile", "--reuse", "0", "--out", str(tmp_path / "o")), "reuse")
    assert not (tmp_path / "o").exists()


def test_calibrate_bad_file(tmp_path):
    f = tmp_path / "x.npy"
    f.write_text("not numpy")
    assert_user_error(mc("compile", "--precision", "fixed<8,3>", "--calibrate", str(f),
                         "--out", str(tmp_path / "o")), "calibrate")


def test_same_model_same_bytes_in_two_processes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ra = mc("compile", "--precision", "fixed<12,4>", "--out", str(a))
    rb = mc("compile", "--precision", "fixed<12,4>", "--out", str(b))
    assert ra.returncode == 0 and rb.returncode == 0, ra.stderr + rb.stderr
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert {str(f) for f in files} >= {"manifest.json", "graph.json", "weights.npz"}
    for f in files:
        assert filecmp.cmp(a / f, b / f, shallow=False), f
    ida = json.loads((a / "manifest.json").read_text())["graph_id"]
    rc = mc("compile", "--precision", "fixed<12,5>", "--out", str(tmp_path / "c"))
    assert rc.returncode == 0
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["graph_id"] != ida


def test_recompile_over_existing_artifact(tmp_path):
    out = tmp_path / "o"
    assert mc("compile", "--out", str(out)).returncode == 0
    assert mc("compile", "--precision", "fixed<8,3>", "--out", str(out)).returncode == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["options"]["precision"] == "fixed<8,3>"
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temp dirs left behind


def test_inspect_model_and_artifact(tmp_path):
    r = mc("inspect", str(shared_model("three_layer_keras")), "--precision", "fixed<16,6>",
           "--profile", "h200", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    dense = [n for n in rep["nodes"] if n["op"].startswith("Dense")]
    assert [n["out_shape"] for n in dense] == [[64], [32], [32], [5]]
    assert dense[0]["flops"] == 2 * 16 * 64 + 64
    assert all(n["predicted_us"] != "-" for n in rep["nodes"])
    out = tmp_path / "art"
    assert mc("compile", "--out", str(out)).returncode == 0
    html = tmp_path / "r.html"
    r2 = mc("inspect", str(out), "--html", str(html))
    assert r2.returncode == 0 and "fc1" in r2.stdout
    assert "<svg" in html.read_text()


def test_profiles_lists_gpu_and_fpga():
    r = mc("profiles")
    assert r.returncode == 0
    for name in ("h200", "h100-sxm", "a100-80g", "a100-40g", "l4", "ice40-up5k", "ecp5-25k",
                 "ecp5-45k", "ecp5-85k", "xczu3eg"):
        assert name in r.stdout


def test_compile_target_gpu_writes_kernels_deterministically(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        r = mc("compile", "--target", "gpu", "--precision", "fixed<12,4>", "--out", str(d))
        assert r.returncode == 0, r.stderr
    for f in ("kernels.cu", "plan.json", "weights.bin"):
        assert filecmp.cmp(a / "gpu" / f, b / "gpu" / f, shallow=False), f
    assert "__global__" in (a / "gpu" / "kernels.cu").read_text()
    m = json.loads((a / "manifest.json").read_text())
    assert 0 < m["memory"]["arena_bytes_per_sample"] <= m["memory"]["naive_bytes_per_sample"]


def test_inspect_shows_the_fit_plan(tmp_path):
    """`--reuse auto` for an iCE40: the plan's schedule and estimate (in logic cells) are
    in `inspect`, the same numbers as hdl/top.json."""
    out = tmp_path / "art"
    r = mc("compile", "--target", "verilog", "--profile", "ice40-up5k", "--precision",
           "fixed<6,3>", "--reuse", "auto", "--out", str(out))
    assert r.returncode == 0, r.stderr
    top = json.loads((out / "hdl" / "top.json").read_text())
    r = mc("inspect", str(out))
    assert r.returncode == 0, r.stderr
    assert f"II {top['ii']}, area schedule" in r.stdout
    fit = top["fit"]
    assert fit["device"] == "ice40-up5k" and fit["lut_unit"].startswith("logic cells")
    assert (f"estimate {fit['estimate']['lut']} logic cells (LUT4 + FF) of 5280 (fits within 85%)"
            in r.stdout)
    assert fit["estimate"]["lut"] <= 0.85 * 5280 and top["ii"] == max(fit["reuse"].values())
