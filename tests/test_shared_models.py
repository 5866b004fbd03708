"""Every model of ../shared/models without Conv compiles for the golden, GPU and Verilog
targets from the command line; a Conv model is refused with a line naming Conv (until the
CNN issue lands). FPGA place-and-route of these is in tests/hdl (slow)."""

from __future__ import annotations

import onnx
import pytest

from tests.conftest import SHARED_MODELS as SHARED
from tests.hostile import assert_refused, run_cli

NAMES = sorted(p.stem for p in SHARED.glob("*.onnx")) if SHARED.is_dir() else []


def _has_conv(name: str) -> bool:
    return any(n.op_type == "Conv" for n in onnx.load(str(SHARED / f"{name}.onnx")).graph.node)


@pytest.mark.skipif(not NAMES, reason="../shared/models is absent")
@pytest.mark.parametrize("name", NAMES)
def test_shared_model_compiles_or_names_conv(tmp_path, name):
    path = str(SHARED / f"{name}.onnx")
    if _has_conv(name):
        err = assert_refused(run_cli(["compile", path, "--target", "golden", "--out",
                                      str(tmp_path / "x")]), "unsupported op")
        assert "Conv" in err
        assert not (tmp_path / "x").exists()
        return
    for target in ("golden", "gpu"):
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
