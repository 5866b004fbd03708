"""Directories written atomically: build in a temp dir beside the target, then rename.

Used by every writer of an artifact (compile, FPGA builds), so a failed run leaves nothing
behind and an earlier result at the same path stays untouched until the new one is complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def atomic_dir(out: Path, fill: Callable[[Path], T]) -> T:
    """Run fill(tmp) in a temp dir beside `out`, then swap it in for `out`; return fill's
    result. The caller checks what `out` may be before calling."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        result = fill(tmp)
        os.chmod(tmp, 0o755)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / "a")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        return result
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
