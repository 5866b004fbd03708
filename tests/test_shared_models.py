"""Every model of ../shared/models compiles for the golden target from the command line; those
without Conv also for the GPU and Verilog targets (the CNN kernels and streaming circuits come
with their own tests: tests/gpu_backend, tests/hdl). FPGA place-and-route of these is in
tests/hdl (slow)."""

from __future__ import annotations

import math

import onnx
import pytest

from tests.conftest import SHARED_MODELS as SHARED
from tests.hostile import run_cli

NAMES = sorted(p.stem for p in SHARED.glob("*.onnx")) if SHARED.is_dir() else []


def _has_conv(name: str) -> bool:
    return any(n.op_type == "Conv" for n in onnx.load(str(SHARED / f"{name}.onnx")).graph.node)


def _big_frame(name: str) -> bool:
    """256x256 and 512x512 images: a golden artifact runs 16 self-check frames (minutes)."""
    dims = onnx.load(str(SHARED / f"{name}.onnx")).graph.input[0].type.tensor_type.shape.dim
    return math.prod(d.dim_value or 1 for d in dims[1:]) > 1 << 16


def _params(names: list[str]) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if _big_frame(n) else n for n in names]


@pytest.mark.skipif(not NAMES, reason="../shared/models is absent")
@pytest.mark.parametrize("name", _params(NAMES))
def test_shared_model_compiles(tmp_path, name):
    path = str(SHARED / f"{name}.onnx")
    for target in ("golden",) if _has_conv(name) else ("golden", "gpu"):
        r = run_cli(["compile", path, "--target", target, "--out", str(tmp_path / target)])
        assert r.rc == 0, r.err


@pytest.mark.slow
@pytest.mark.skipif(not NAMES, reason="../shared/models is absent")
@pytest.mark.parametrize("name", NAMES)
def test_shared_model_compiles_to_verilog(tmp_path, name):
    if _has_conv(name):
        pytest.skip("Conv: the CNN issue")
    r = run_cli(["compile", str(SHARED / f"{name}.onnx"), "--target", "verilog", "--out",
                 str(tmp_path / "v")])
    assert r.rc == 0, r.err
    assert any((tmp_path / "v" / "hdl").glob("*.v"))
