"""No traceback reachable from the CLI: hypothesis draws argument lists and mutated model
bytes; every run must end in exit 0/1/2 with, on failure, exactly one `error:` line last and
no traceback or internal error. A few hundred examples in the default suite; more under
`slow` (MODELCIRCUIT_FUZZ_EXAMPLES raises the count)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile import Result, run_cli

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "src" / "modelcircuit" / "data" / "digits_mlp.onnx"
FAST = int(os.environ.get("MODELCIRCUIT_FUZZ_EXAMPLES", "150"))
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def check(res: Result) -> None:
    assert "Traceback" not in res.err, res.err
    assert "internal error" not in res.err, res.err
    assert res.rc in (0, 1, 2), (res.rc, res.err)
    if res.rc != 0:
        lines = [ln for ln in res.err.splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("error: "), res.err
        assert sum(ln.startswith("error: ") for ln in lines) == 1, res.err


# Files the drawn arguments may name (made once per run in a temp folder).
def _files(d: Path) -> dict[str, str]:
    np.save(d / "x.npy", np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32))
    np.save(d / "nan.npy", np.full((2, 64), np.nan))
    np.save(d / "small.npy", np.zeros((2, 5)))
    (d / "p.json").write_text('{"fc1_matmul": "fixed<8,3>"}')
    (d / "bad.json").write_text('{"fc1_matmul": 7}')
    (d / "t.txt").write_text("hello")
    (d / "dir").mkdir()
    return {k: str(d / k) for k in ("x.npy", "nan.npy", "small.npy", "p.json", "bad.json",
                                      "t.txt", "dir")}


_WORDS = st.sampled_from(["", " ", "-", "--", "0", "1", "-1", "2", "8", "17", "1e9", "nan",
                          "auto", "float32", "fixed<8,3>", "fixed<4,2,RND,WRAP>", "fixed<0,0>",
                          "ufixed<6,1>", "fixed<8,3", "golden", "gpu", "verilog", "latency",
                          "fmax", "area", "h200", "ecp5-25k", "ice40-up5k", "nosuch",
                          "golden,gpu-emu", "gpu-emu", "rtl,fpga", "verilator", "\udcff",
                          "a" * 300, "../x", "/", "/dev/null", "/dev/zero"])
_OPTS = st.sampled_from(["--precision", "--calibrate", "--reuse", "--profile", "--table-bits",
                         "--target", "--out", "--json", "--html", "--inputs", "--vectors",
                         "--backends", "--seed", "--pipeline", "--adder-levels", "--simulator",
                         "--help", "-h", "--device", "--board", "--nope"])
# Never a run that would start an RTL simulation or an FPGA flow (minutes): those targets
# and backends are not drawn, and `build` gets no valid device.
_SUB = st.sampled_from(["compile", "inspect", "verify", "profiles", "build", "", "help"])


@st.composite
def argvs(draw: st.DrawFn, files: dict[str, str]) -> list[str]:
    tokens = [draw(_SUB)]
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            tokens.append(draw(_OPTS))
        elif kind == 1:
            tokens.append(draw(_WORDS))
        elif kind == 2:
            tokens += [draw(_OPTS), draw(st.sampled_from(sorted(files.values())))]
        else:
            tokens += [draw(_OPTS), draw(st.text(max_size=12))]
    return tokens


def _safe(argv: list[str]) -> bool:
    """Keep the fuzzer off the legitimately long runs (RTL simulation, FPGA flows, Verilog
    export): those are tested elsewhere."""
    long = {"verilog", "fpga", "rtl,fpga"}
    devices = {"ecp5-25k", "ice40-up5k"}
    if any(t in long for t in argv):
        return False
    return not (argv and argv[0] == "build" and any(t in devices for t in argv))


@pytest.fixture(scope="module")
def fuzz_dir() -> Path:
    with tempfile.TemporaryDirectory(prefix="mc-fuzz-") as d:
        yield Path(d)


def test_fuzz_argv(fuzz_dir: Path) -> None:
    files = _files(fuzz_dir)

    @settings(max_examples=FAST, **SETTINGS)
    @given(argvs(files))
    def run(argv: list[str]) -> None:
        if not _safe(argv):
            return
        check(run_cli(argv, cwd=fuzz_dir))

    run()


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    b = bytearray(base)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.integers(0, 3))
        i = draw(st.integers(0, max(len(b) - 1, 0)))
        if op == 0 and b:
            b[i] ^= 1 << draw(st.integers(0, 7))
        elif op == 1:
            del b[i:i + draw(st.integers(1, 64))]
        elif op == 2:
            b[i:i] = draw(st.binary(min_size=1, max_size=16))
        else:
            b[i] = draw(st.integers(0, 255)) if b else 0
    return bytes(b)


def test_fuzz_model_bytes(tmp_path: Path) -> None:
    base = DIGITS.read_bytes()

    @settings(max_examples=FAST, **SETTINGS)
    @given(st.one_of(mutated(base), st.binary(max_size=256)))
    def run(data: bytes) -> None:
        m = tmp_path / "m.onnx"
        m.write_bytes(data)
        out = tmp_path / "o"
        check(run_cli(["compile", str(m), "--out", str(out)], cwd=tmp_path))

    run()


@pytest.mark.slow
def test_fuzz_argv_long(fuzz_dir: Path) -> None:
    files = _files(fuzz_dir / "long") if (fuzz_dir / "long").mkdir() is None else {}

    @settings(max_examples=20 * FAST, **{**SETTINGS, "derandomize": False})
    @given(argvs(files))
    def run(argv: list[str]) -> None:
        if _safe(argv):
            check(run_cli(argv, cwd=fuzz_dir / "long"))

    run()
