"""Issue 4's acceptance list: `modelcircuit verify` bit-exact (exit 0) on the third-party
models at fixed<16,6> and fixed<8,3>, R=1 and R=4, and on the QONNX models with their own
types, on Verilator (and Icarus where installed). Slow: one simulator build per case."""

from __future__ import annotations

import shutil

import pytest

from modelcircuit.cli import main as cli
from tests.conftest import shared_model

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sim")]

FLOAT_MODELS = ["three_layer_keras", "three_layer_pytorch", "two_layer_keras"]
CASES = [(m, p, r) for m in FLOAT_MODELS for p in ("fixed<16,6>", "fixed<8,3>") for r in (1, 4)]
CASES += [("qkeras_jettagging", None, 1), ("qkeras_jettagging", None, 4), ("TFC_2W2A", None, 1)]


@pytest.mark.parametrize(("model", "precision", "reuse"), CASES)
def test_verify_bit_exact_on_verilator(model, precision, reuse, cli_cache, capsys):
    args = ["verify", str(shared_model(model)), "--backends", "golden,rtl", "--vectors", "200",
            "--reuse", str(reuse)]
    if precision:
        args += ["--precision", precision]
    assert cli(args) == 0, capsys.readouterr().out
    assert "bit-exact: yes" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="iverilog is not installed")
@pytest.mark.parametrize("model", ["three_layer_keras", "qkeras_jettagging"])
def test_verify_bit_exact_on_icarus(model, cli_cache, capsys):
    args = ["verify", str(shared_model(model)), "--backends", "golden,rtl", "--vectors", "50",
            "--simulator", "icarus"]
    if model == "three_layer_keras":
        args += ["--precision", "fixed<16,6>"]
    assert cli(args) == 0, capsys.readouterr().out
