"""FPGA flow from the command line: bad input refused without running the tools, and the
small models shared with the flow and UART tests. Tests of single flow modules are in
tests/hdl/flow/ (reports, devices, yosys, fit); real yosys/nextpnr runs in
tests/hdl/test_fpga_flow.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from modelcircuit.api import compile
from modelcircuit.frontend.builder import GraphBuilder

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "src" / "modelcircuit" / "data" / "digits_mlp.onnx"


# -- small models shared with the flow and UART tests --------------------------------------
def tiny_graph(n_in: int = 16, hidden: int = 8, n_out: int = 4, seed: int = 5):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("tiny_mlp")
    x = b.input("x", n_in)
    h = b.relu(b.dense(x, rng.normal(0, 0.5, (n_in, hidden)), rng.normal(0, 0.1, hidden), name="fc1"))
    b.output(b.dense(h, rng.normal(0, 0.5, (hidden, n_out)), rng.normal(0, 0.1, n_out), name="fc2"))
    return b.build()


def wide_graph():
    """256 -> 256: does not fit an UP5K at any reuse at 16 bits."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("wide")
    b.output(b.dense(b.input("x", 256), rng.normal(0, 0.1, (256, 256)), None, name="fc"))
    return b.build()


def tiny_compiled(precision: str = "fixed<6,3>", profile: str | None = None):
    return compile(tiny_graph(), precision=precision, profile=profile)


def tiny_onnx(path: Path, graph=None) -> Path:
    import onnx

    from modelcircuit.frontend.onnx.export import to_onnx

    onnx.save(to_onnx(graph or tiny_graph()), str(path))
    return path


# A guard against a hung tool, not a speed check: a place and route on a 2-core machine under
# a load average of 20 once took over 600 s (a fresh-clone CI failed on the timeout).
CLI_TIMEOUT_S = 3600


def cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modelcircuit.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=CLI_TIMEOUT_S)


def why(r: subprocess.CompletedProcess, lines: int = 40) -> str:
    """A failed run's cause for an assertion message, most telling first: pytest shows only
    the first lines of a long message (8 lines / 640 characters without -vv), which once hid
    everything after the `[fit]` line. Exit status (or the signal), the `error:` line, then
    the last lines of stderr (the failing tool's log tail, which the CLI prints)."""
    import signal

    rc = r.returncode
    how = f"exit {rc}" if rc >= 0 else f"killed by {signal.Signals(-rc).name}"
    err = r.stderr.rstrip().splitlines()
    errors = [ln for ln in err if ln.startswith("error:")]
    first = errors[-1] if errors else "(no error line)"
    return f"{how}: {first}\n--- last {lines} lines of stderr ---\n" + "\n".join(err[-lines:])


# -- bad input (no tools run) --------------------------------------------------------------
def test_unknown_device_and_board(tmp_path):
    r = cli("build", "--device", "nope", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.startswith("error: unknown FPGA device 'nope'")
    r = cli("build", "--device", "xczu3eg", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "estimates only" in r.stderr
    r = cli("build", "--device", "ice40-up5k", "--board", "nope", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown board 'nope'" in r.stderr
    r = cli("build", "--device", "ecp5-85k", "--board", "icebreaker", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "carries ice40-up5k" in r.stderr
    assert not (tmp_path / "o").exists()


def test_design_does_not_fit_is_exit_2(tmp_path):
    onnx_path = tiny_onnx(tmp_path / "wide.onnx", wide_graph())
    r = cli("build", str(onnx_path), "--device", "ice40-up5k", "--precision", "fixed<16,6>",
            "--reuse", "auto", "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    assert "does not fit ice40-up5k" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_failing_tool_shows_log_tail_and_leaves_nothing(tmp_path):
    fake = tmp_path / "fake-yosys"
    fake.write_text("#!/bin/sh\necho 'line one'\necho 'ERROR: something broke in synthesis'\nexit 1\n")
    fake.chmod(0o755)
    import os

    env = dict(os.environ, YOSYS=str(fake))
    onnx_path = tiny_onnx(tmp_path / "tiny.onnx")
    r = cli("build", str(onnx_path), "--device", "ecp5-25k", "--precision", "fixed<6,3>",
            "--reuse", "1", "--out", str(tmp_path / "o"), env=env)
    assert r.returncode == 2
    assert "error: yosys-prep failed (exit 1): ERROR: something broke in synthesis" in r.stderr
    assert "| line one" in r.stderr  # the log's last lines are shown
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.")]


def test_profile_other_than_the_device_is_refused(tmp_path):
    """`build --device ice40-up5k --profile ecp5-85k` planned the circuit for ECP5 (FIFOs in
    distributed RAM) and died in yosys' memory mapping for iCE40 after the whole synthesis:
    refused before any work, on the command line and in hdl.flow.build."""
    from modelcircuit.hdl.flow import FlowError, build

    onnx_path = tiny_onnx(tmp_path / "tiny.onnx")
    r = cli("build", str(onnx_path), "--device", "ice40-up5k", "--profile", "ecp5-85k",
            "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: the model was compiled for profile 'ecp5-85k', not for "
                               "the device 'ice40-up5k'") and len(r.stderr.splitlines()) == 1
    r = cli("build", str(onnx_path), "--device", "ice40-up5k", "--profile", "nope",
            "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.startswith("error: unknown profile 'nope'")
    import pytest

    with pytest.raises(FlowError, match="compiled for profile 'h100-sxm'"):
        build(tiny_compiled(profile="h100-sxm"), "ecp5-25k", tmp_path / "o")
    assert not (tmp_path / "o").exists()
