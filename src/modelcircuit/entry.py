"""The `modelcircuit` console command's entry point (pyproject [project.scripts]; also
`python -m modelcircuit`). It imports nothing heavy: it sets SIGINT/SIGTERM handling first,
then imports the command line (numpy, onnx, the compiler: most of a second), then runs it.

A signal while the imports run (or after the command finished, while the interpreter shuts
down) has nothing to clean up: one `error:` line and exit 130 (SIGINT) or 143 (SIGTERM),
at once, no traceback. While the command runs, cli.main turns them into exceptions (never inside
an import, where a C extension's initialisation would abort), so that `finally` blocks remove
temp folders before the same line and exit code (cli._main)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

EXIT = {signal.SIGINT: (130, "interrupted (SIGINT)"), signal.SIGTERM: (143, "terminated (SIGTERM)")}


def _say(signum: int) -> int:
    """The one line (cli._main's words) on stderr; returns the exit code."""
    rc, what = EXIT[signal.Signals(signum)]
    try:
        os.write(2, f"error: {what}; nothing half-written was left\n".encode())
    except OSError:
        pass
    return rc


def _quit_now(signum: int, frame: Any) -> None:
    os._exit(_say(signum))


def _quit_on_signals() -> None:
    for s in EXIT:
        signal.signal(s, _quit_now)


def main(argv: list[str] | None = None) -> int:
    _quit_on_signals()
    from .cli import main as cli_main

    try:
        rc = cli_main(argv)  # both signals: _quit_now until cli._signals_raise takes over
    except KeyboardInterrupt:  # before cli's own handler was entered: nothing written yet
        rc = _say(signal.SIGINT)
    for f in (sys.stdout, sys.stderr):  # what the command printed, before a late signal
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    _quit_on_signals()  # interpreter shutdown (Ray, thread joins): no traceback either
    return rc
