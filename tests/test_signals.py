"""Signals and races against the real command in a subprocess: Ctrl-C and SIGTERM during a
compile exit 130/143 with one line and leave nothing; a SIGKILL's temp folder is swept by
the next run; two runs writing the same --out at once both finish with a valid artifact."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from modelcircuit.util.atomic import HOLD_ENV
from tests.hostile import Result, assert_refused, run_cli

ROOT = Path(__file__).resolve().parents[1]


def _start(args: list[str], cwd: Path, hold: float = 0) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    if hold:  # the run waits in its temp folder: the signal cannot miss the write
        env[HOLD_ENV] = str(hold)
    return subprocess.Popen([sys.executable, "-m", "modelcircuit.cli", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_temp(d: Path, p: subprocess.Popen, timeout: float = 120.0) -> Path:
    """The run's temp folder beside --out: the moment it exists, the run is mid-write."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        tmp = [q for q in d.iterdir() if ".mc-tmp-" in q.name]
        if tmp:
            return tmp[0]
        assert p.poll() is None, f"the run ended before writing: {p.communicate()}"
        time.sleep(0.05)
    raise AssertionError("no temp folder appeared")


# The Verilog export of the digits MLP takes seconds: long enough to interrupt mid-write.
LONG = ["compile", "--target", "verilog", "--out", "o"]


@pytest.mark.parametrize("sig,rc,word", [(signal.SIGTERM, 143, "terminated"),
                                         (signal.SIGINT, 130, "interrupted")])
def test_signal_mid_compile_leaves_nothing(tmp_path: Path, sig: int, rc: int, word: str) -> None:
    p = _start(LONG, tmp_path, hold=300)
    _wait_for_temp(tmp_path, p)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert_refused(Result(p.returncode, out, err), word, rc=rc)
    assert list(tmp_path.iterdir()) == [], "temp folder or partial output left behind"


def test_sigkill_leftover_is_swept_by_next_run(tmp_path: Path) -> None:
    p = _start(LONG, tmp_path)
    tmp = _wait_for_temp(tmp_path, p)
    p.kill()
    p.communicate(timeout=60)
    assert tmp.exists()  # a SIGKILL cannot clean up ...
    res = run_cli(["compile", "--out", "o"], cwd=tmp_path)
    assert res.rc == 0, res.err
    assert sorted(q.name for q in tmp_path.iterdir()) == ["o"]  # ... the next run does


def test_live_runs_temp_folder_is_not_swept(tmp_path: Path) -> None:
    """Only dead writers' folders are stale: a concurrent live run keeps its own."""
    from modelcircuit.util.atomic import sweep_stale

    live = tmp_path / f".o.mc-tmp-{os.getpid()}-abc"
    live.mkdir()
    gone = tmp_path / ".o.mc-tmp-999999999-abc"
    gone.mkdir()
    removed = sweep_stale(tmp_path, "o")
    assert removed == [gone] and live.exists()


def test_two_runs_racing_for_one_out(tmp_path: Path) -> None:
    procs = [_start(["compile", "--precision", prec, "--out", "o"], tmp_path)
             for prec in ("fixed<16,6>", "fixed<8,3>")]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    for rc, _out, err in results:
        assert rc == 0, err
    assert sorted(q.name for q in tmp_path.iterdir()) == ["o"]
    res = run_cli(["inspect", "o"], cwd=tmp_path)  # whoever won, the artifact is whole
    assert res.rc == 0, res.err


# -- start-up: the console command (entry.py) handles signals before its heavy imports -----
# What pip's console-script wrapper runs (pyproject [project.scripts], checked below), with a
# handshake: "ready" is printed once the handlers are set, so that the signal lands during
# the imports that follow (numpy, onnx, the compiler: most of a second) on any machine load.
WRAPPER = ("import sys\nimport modelcircuit.entry as e\ne._quit_on_signals()\n"
           "print('ready', flush=True)\nsys.exit(e.main())\n")


def test_console_script_is_the_light_entry() -> None:
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["modelcircuit"] == "modelcircuit.entry:main"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    probe = ("import sys, modelcircuit.entry; "
             "print(sorted(m for m in ('numpy', 'onnx', 'modelcircuit.cli', 'modelcircuit.api') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "[]", out  # nothing heavy before the handlers are set


@pytest.mark.parametrize("sig,rc,word", [(signal.SIGTERM, 143, "terminated"),
                                         (signal.SIGINT, 130, "interrupted")])
@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_signal_during_startup_is_one_line(tmp_path: Path, sig: int, rc: int, word: str,
                                           delay: float) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    p = subprocess.Popen([sys.executable, "-c", WRAPPER, *LONG], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline() == "ready\n"
    time.sleep(delay)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert_refused(Result(p.returncode, out, err), word, rc=rc)
    assert list(tmp_path.iterdir()) == [], "something was left behind"


def test_python_dash_m_runs_the_command(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    out = subprocess.run([sys.executable, "-m", "modelcircuit", "profiles"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ice40-up5k" in out.stdout, out


@pytest.mark.parametrize("sig,exc", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, None)])
def test_signal_inside_an_import_waits_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              sig: int, exc: type | None) -> None:
    """The CI abort, made deterministic: a signal that arrives while a module is imported (the
    compiler's lazy onnx import; nanobind aborts the process when an exception crosses its
    module initialisation) is raised after the import finished, never inside it."""
    from modelcircuit import cli

    exc = exc or cli.Terminated
    name = f"mc_sig_probe_{int(sig)}"
    (tmp_path / f"{name}.py").write_text(
        f"import signal\nreached = []\nsignal.raise_signal(signal.Signals({int(sig)}))\n"
        "reached.append('after the signal')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    before = signal.getsignal(sig)
    with pytest.raises(exc), cli._signals_raise():
        probe = importlib.import_module(name)  # the signal is raised inside this import
        assert probe.reached == ["after the signal"]  # the import ran to its end ...
        time.sleep(5)  # ... and the signal comes back a moment later
    assert sys.modules[name].reached == ["after the signal"]
    assert signal.getsignal(sig) == before  # handlers restored on the way out


def test_signal_inside_mkdtemp_leaves_nothing(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A Ctrl-C that lands inside tempfile.mkdtemp, after its mkdir and before the folder is
    bound to a name (left a `.o.mc-tmp-*` folder behind once in CI): nothing is left."""
    import tempfile

    from modelcircuit.util import atomic

    real = tempfile.mkdtemp

    def interrupted(*a, **k):  # noqa: ANN002, ANN003, ANN202
        real(*a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.tempfile, "mkdtemp", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.atomic_dir(tmp_path / "o", lambda d: None)
    assert list(tmp_path.iterdir()) == []
