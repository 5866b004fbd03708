"""Directories written atomically: build in a temp dir beside the target, then rename.

Used by every writer of an output folder (compile artifacts, FPGA builds), so a failed or
interrupted run leaves nothing behind and an earlier result at the same path stays untouched
until the new one is complete. A folder we wrote carries a marker file listing what we wrote;
an existing folder without it, or holding anything else, is the user's and is never touched.
Temp folders are named after the writing process, so one left by a SIGKILL is recognised as
stale and swept by the next run.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .errors import GraphError

T = TypeVar("T")
MARKER = ".modelcircuit"
# seconds atomic_dir waits in its temp folder before filling it (tests: a signal lands mid-write
# however loaded the machine is; without it the write could finish first, seen under load 20)
HOLD_ENV = "MODELCIRCUIT_TEST_HOLD_WRITE"
_TMP = re.compile(r"^\.(?P<name>.+)\.mc-(?:tmp|old)-(?P<pid>\d+)-[^.]+$")


def written_files(folder: Path) -> list[str]:
    """Every regular file under folder (relative, sorted), the marker excluded."""
    folder = Path(folder)
    out = []
    for root, _dirs, files in os.walk(folder):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), folder)
            if rel != MARKER:
                out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def _marker_files(folder: Path) -> list[str] | None:
    """The file list our marker records, or None when the folder carries no valid marker."""
    m = folder / MARKER
    try:
        if m.is_symlink() or not m.is_file() or m.stat().st_size > 10_000_000:
            return None
        d = json.loads(m.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("format") != "modelcircuit-output/1":
        return None
    files = d.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return files


def _display(p: Path | str) -> str:
    return os.fsdecode(p) or '""'


def check_out_dir(out: Path | str, what: str = "--out") -> Path:
    """Refuse, before any work, an output path we may not (or cannot) replace whole: empty,
    a file or link, under a file, a folder that is not one we wrote (or holds files we did
    not write), or in a folder we cannot write. Returns the path."""
    if isinstance(out, str) and not out.strip():
        raise GraphError(f"{what} is empty; name an output directory")
    out = Path(out)
    shown = _display(out)
    absolute = Path(os.path.abspath(out))
    if absolute.parent == absolute:
        raise GraphError(f"{what} {shown} is the file-system root; name an output directory")
    if "\0" in str(out):
        raise GraphError(f"{what} {shown!r} contains a NUL byte")
    try:
        if out.is_symlink():
            raise GraphError(f"{what} {shown} is a symbolic link; name a real directory")
        if out.exists() and not out.is_dir():
            raise GraphError(f"{what} {shown} is a file, not a directory")
        if out.is_dir() and any(out.iterdir()):
            ours = _marker_files(out)
            if ours is None:
                raise GraphError(f"{what} {shown} is a non-empty directory that modelcircuit did "
                                 "not write; refusing to replace it (choose another --out)")
            extra = sorted(set(written_files(out)) - set(ours))
            if extra:
                raise GraphError(f"{what} {shown} holds files modelcircuit did not write "
                                 f"({extra[0]}{' …' if len(extra) > 1 else ''}); refusing to "
                                 "replace it")
    except OSError as e:
        raise GraphError(f"{what} {shown}: {e.strerror or e}") from None
    anc = absolute.parent
    while not anc.exists():
        if anc.is_symlink():  # a dangling link in the way
            raise GraphError(f"{what} {shown}: {_display(anc)} is a broken symbolic link")
        anc = anc.parent
    if not anc.is_dir():
        raise GraphError(f"{what} {shown}: {_display(anc)} is a file, not a directory")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise GraphError(f"{what} {shown}: cannot write in {_display(anc)} (permission denied)")
    return out


def sweep_stale(parent: Path, name: str | None = None) -> list[Path]:
    """Remove temp folders of ours in parent whose writing process is gone (a SIGKILL)."""
    removed = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return removed
    for p in entries:
        m = _TMP.match(p.name)
        if not m or (name is not None and m["name"] != name) or not p.is_dir():
            continue
        if _alive(int(m["pid"])):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours to signal
    return True


def _write_marker(folder: Path) -> None:
    body = {"format": "modelcircuit-output/1", "files": written_files(folder),
            "note": "written by modelcircuit; the next run to this path replaces the folder whole"}
    (folder / MARKER).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def atomic_dir(out: Path, fill: Callable[[Path], T], what: str = "--out") -> T:
    """Run fill(tmp) in a temp dir beside `out`, then swap it in for `out`; return fill's
    result. `out` is checked (check_out_dir) first; on any failure or signal the temp dir
    is removed and `out` is left as it was."""
    out = check_out_dir(out, what)
    parent = Path(os.path.abspath(out)).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GraphError(f"{what} {_display(out)}: cannot create {_display(parent)}: "
                         f"{e.strerror or e}") from None
    sweep_stale(parent, out.name)
    pid = os.getpid()
    old: Path | None = None
    try:
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.mc-tmp-{pid}-", dir=parent))
        except OSError as e:
            raise GraphError(f"{what} {_display(out)}: cannot write in {_display(parent)}: "
                             f"{e.strerror or e}") from None
        hold = os.environ.get(HOLD_ENV)
        if hold:  # a test hook: keeps the run mid-write so a signal surely lands there
            time.sleep(float(hold))
        result = fill(tmp)
        _write_marker(tmp)
        os.chmod(tmp, 0o755)
        for attempt in range(3):  # another run may swap its result in at the same moment
            check_out_dir(out, what)  # still ours (or absent) after the work
            try:
                if out.exists():
                    old = old or Path(tempfile.mkdtemp(prefix=f".{out.name}.mc-old-{pid}-",
                                                       dir=parent))
                    os.replace(out, old / "a")
                    try:
                        os.replace(tmp, out)
                    except BaseException:
                        os.replace(old / "a", out)  # put the earlier result back
                        raise
                    shutil.rmtree(old / "a", ignore_errors=True)
                else:
                    os.replace(tmp, out)
                return result
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT) or attempt == 2:
                    raise
        raise AssertionError("unreachable")
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise GraphError(f"{what} {_display(out)}: no space left on the device") from None
        raise GraphError(f"{what} {_display(out)}: {e.strerror or e}") from None
    finally:
        # every temp folder of this process for `out` goes, `tmp` and `old` with the rest:
        # a signal can land inside mkdtemp, after its mkdir and before either name is
        # bound (one was left by a Ctrl-C in CI)
        for p in parent.glob(f".{glob.escape(out.name)}.mc-*-{pid}-*"):
            m = _TMP.match(p.name)
            if m and m["name"] == out.name and int(m["pid"]) == pid:
                shutil.rmtree(p, ignore_errors=True)


def write_file(path: str | os.PathLike[str], data: bytes | str, tmp_name: str | None = None,
               fsync: bool = False) -> None:
    """One file whole or not at all: written beside it under a temporary name (default
    `.<name>.mc-tmp-<pid>`), then renamed over it; the temporary is gone on any failure.
    Text is written as UTF-8 with the newlines given. The project's one file writer (reports,
    the export's Verilog, the sweep store's records); folders: `atomic_dir`."""
    path = Path(path)
    tmp = path.with_name(tmp_name or f".{path.name}.mc-tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()

