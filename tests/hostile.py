"""Helpers for hostile-input tests: run the CLI in-process, snapshot a folder, assert a
clean refusal (exit 2, one `error:` line, no traceback, nothing changed on disk)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Result:
    rc: int
    out: str
    err: str


def run_cli(argv: list[str], cwd: Path | None = None) -> Result:
    """`modelcircuit argv` in this process. Any exception escaping main() is a traceback the
    user would have seen, so it is reported as rc -1 with the traceback in `err`."""
    import traceback

    from modelcircuit.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    rc: int
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = int(main(argv) or 0)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
            except BaseException:  # noqa: BLE001 - what a user would see as a traceback
                err.write(traceback.format_exc())
                rc = -1
    finally:
        os.chdir(old)
    return Result(rc, out.getvalue(), err.getvalue())


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """{relative path: (sha256 or 'dir' or 'link:…', mode)} of everything under folder,
    hidden files included: a refusal must leave this unchanged, byte for byte."""
    snap: dict[str, tuple[str, int]] = {}
    folder = Path(folder)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(folder))
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = (f"link:{os.readlink(p)}", st.st_mode)
            elif stat.S_ISDIR(st.st_mode):
                snap[rel] = ("dir", st.st_mode)
            elif stat.S_ISREG(st.st_mode):
                snap[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode)
            else:
                snap[rel] = ("special", st.st_mode)
    return snap


def assert_refused(res: Result, match: str | None = None, rc: int = 2) -> str:
    """Exit `rc`, exactly one non-empty stderr line `error: …` (matching `match`, a
    case-insensitive substring), no traceback. Returns the error line."""
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert "Traceback" not in res.err, res.err
    assert res.rc == rc, f"rc {res.rc} (want {rc}); stderr:\n{res.err}"
    errs = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errs) == 1, f"want one 'error:' line, stderr:\n{res.err}"
    assert lines[-1] == errs[0], f"the error line must come last, stderr:\n{res.err}"
    if match is not None:
        assert match.lower() in errs[0].lower(), f"{match!r} not in {errs[0]!r}"
    return errs[0]
