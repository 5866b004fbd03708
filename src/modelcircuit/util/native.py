"""Shared libraries compiled from generated C/C++ source on first use, cached by a hash of
what makes them (source, compiler, flags, and the CPU where the flags tune for it) under
~/.cache/modelcircuit/<kind> (or $MODELCIRCUIT_CACHE/<kind>).

Why a cache and an atomic rename: the gpu-emu backend and the golden model's loops are
built from the same source on every run of every process; under `pytest -n 2` or a sweep's
workers two processes may build the same library at once, and each must find either nothing
or a whole file (a build goes to a temporary folder beside the cache entry, then os.replace).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path


class BuildError(Exception):
    """No compiler, or the compiler refused the source (message: its first line)."""


def cache_root() -> Path:
    root = os.environ.get("MODELCIRCUIT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "modelcircuit"


@cache
def cpu_signature() -> str:
    """What -march=native tunes for: the CPU's model name and flags (a cache shared by
    machines of another CPU must not hand them an instruction they lack)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        return platform.processor() or platform.machine()
    keep = [ln for ln in text.splitlines() if ln.split(":")[0].strip() in ("model name", "flags")]
    return "\n".join(sorted(set(keep)))


def compiler(env: str, *names: str) -> str | None:
    """$env if set, else the first of `names` on PATH."""
    found = os.environ.get(env) or next((p for n in names if (p := shutil.which(n))), None)
    return found or None


def shared_library(source: str, *, cc: str | None, flags: list[str], kind: str,
                   suffix: str = ".c") -> Path:
    """The library built from `source` (cached); raises BuildError."""
    if not cc:
        raise BuildError("no compiler found on PATH")
    tag = cpu_signature() if "-march=native" in flags else ""
    key = hashlib.sha256("\0".join([source, cc, " ".join(flags), tag]).encode()).hexdigest()[:24]
    out = cache_root() / kind / f"{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / f"lib{suffix}"
        src.write_text(source)
        lib = Path(tmp) / "lib.so"
        r = subprocess.run([cc, *flags, str(src), "-o", str(lib)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or ["?"])[0]
            raise BuildError(f"{Path(cc).name} failed: {msg}")
        os.replace(lib, out)
    return out
