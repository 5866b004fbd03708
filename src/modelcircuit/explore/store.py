"""The results store under `--out`: one JSON file per point (points/<key>.json), each
written whole or not at all (a temp file beside it, then rename), so a sweep killed at any
moment leaves only complete records, and a rerun skips them. The folder is marked as ours
(MARKER); a folder that holds anything else is refused before any work, and the report
files (sweep.json, sweep.txt, index.html, PNGs) are replaced whole at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..util.atomic import check_out_dir, write_file
from .spec import SweepError

MARKER = "sweep-store.json"
FORMAT = "modelcircuit-sweep/1"
POINTS = "points"
TMP_TAG = ".mc-tmp-"


def check_store(out: Path) -> Path:
    """Before any work: `out` is absent, empty, or a store of ours (refused otherwise)."""
    out = Path(out)
    if out.is_dir() and not out.is_symlink() and (out / MARKER).is_file():
        try:
            body = json.loads((out / MARKER).read_text())
        except (OSError, ValueError):
            body = {}
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise SweepError(f"--out {out}: {MARKER} is not a sweep store marker of this "
                             f"version (format {FORMAT}); choose another --out")
        return out
    try:
        return check_out_dir(out)  # absent or empty (a folder of other files is refused)
    except ValueError as e:
        raise SweepError(str(e).replace("modelcircuit did not write", "is not a sweep store")
                         ) from None


def write_atomic(path: Path, data: bytes) -> None:
    write_file(path, data, f".{path.name}{TMP_TAG}{os.getpid()}", fsync=True)


def dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n").encode()


class Store:
    """The per-point records of one `--out` folder."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.points = self.out / POINTS

    def open(self) -> None:
        """Create the folder (the first write of a sweep) and remove temp files that a
        killed run left behind."""
        self.points.mkdir(parents=True, exist_ok=True)
        if not (self.out / MARKER).exists():
            write_atomic(self.out / MARKER, dump({
                "format": FORMAT, "note": "results store of `modelcircuit sweep`: one record "
                "per point under points/, keyed by graph id + stage + tool versions; a rerun "
                "to this folder skips the points recorded here"}))
        for d in (self.out, self.points):
            for p in d.iterdir():
                if TMP_TAG in p.name and p.is_file():
                    p.unlink(missing_ok=True)

    def path(self, key: str) -> Path:
        return self.points / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The record stored under key, or None (absent or unreadable: recomputed)."""
        try:
            rec = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) and rec.get("key") == key else None

    def put(self, rec: dict[str, Any]) -> None:
        write_atomic(self.path(rec["key"]), dump(rec))

    def write_file(self, name: str, data: bytes | str) -> Path:
        p = self.out / name
        write_atomic(p, data.encode() if isinstance(data, str) else data)
        return p
