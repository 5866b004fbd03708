"""What every bench script writes beside its rows: the machine it ran on (CPU count, load
average at the end: a loaded machine compresses ratios), under one set of key names, and
the JSON file itself. Imported by the scripts in this folder (run as `python bench/x.py`,
so this folder is on sys.path)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "load_average_at_end": [round(v, 2) for v in os.getloadavg()],
            "python": sys.version.split()[0]}


def write_json(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """payload plus machine(), written to path (its folder made), and a line saying so."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({**payload, **machine()}, indent=1, default=str) + "\n")
    print(f"wrote {p}")
