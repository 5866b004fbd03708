"""`modelcircuit compile` output: one directory, written atomically (temp dir + rename).

manifest.json (graph id, options, tool versions, pass log, cost ledger), graph.json,
weights.npz, and per target gpu/, hdl/, fpga/. Byte-identical for the same model and options:
no timestamps, no timings, sorted keys.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from .graphs.atomic import atomic_dir
from .graphs.cost import ledger, totals
from .graphs.ir import GraphError
from .graphs.pipeline import CompiledGraph
from .graphs.profiles import get_profile
from .graphs.serialize import dumps, graph_to_json, npz_bytes

TARGETS = ("golden", "gpu", "verilog", "fpga")


def tool_versions() -> dict[str, str]:
    out = {}
    for pkg in ("modelcircuit", "numpy", "onnx", "onnxruntime", "amaranth", "jinja2"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


def manifest(compiled: CompiledGraph, target: str, extra: dict[str, Any] | None = None) -> dict:
    prof = get_profile(compiled.profile) if compiled.profile else None
    rows = ledger(compiled.graph, prof)
    return {
        "format": "modelcircuit-artifact/1",
        "graph_id": compiled.graph_id,
        "model": compiled.graph.name,
        "target": target,
        "options": dict(compiled.options),
        "profile": prof,
        "versions": tool_versions(),
        "passes": [name for name, _ms, _n in compiled.pass_log],
        "cost": {"nodes": [r.to_json() for r in rows], "total": totals(rows)},
        "memory": {k: compiled.extra["memory_plan"][k]
                   for k in ("arena_bytes_per_sample", "naive_bytes_per_sample")},
        "streams": compiled.extra["streams"]["streams"],
        **(extra or {}),
    }


def check_out_path(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise GraphError(f"--out {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise GraphError(f"--out {out} is a non-empty directory that is not a modelcircuit "
                         "artifact; refusing to overwrite it")
    parent = out.resolve().parent
    if parent.exists() and not parent.is_dir():
        raise GraphError(f"--out {out}: parent {parent} is not a directory")


def write_atomic(out: Path, fill: Callable[[Path], None]) -> Path:
    """Build the artifact in a temp dir beside `out`, then swap it in. A failure leaves
    nothing behind (and an earlier artifact at `out` untouched)."""
    out = Path(out)
    check_out_path(out)
    atomic_dir(out, fill)
    return out


def write_compiled(compiled: CompiledGraph, out: Path, target: str = "golden",
                   reuse: Any = None, progress: Callable[[str], None] | None = None,
                   hdl_options: dict[str, Any] | None = None) -> Path:
    if target not in TARGETS:
        raise GraphError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")

    def fill(d: Path) -> None:
        extra: dict[str, Any] = {}
        if target == "gpu":
            from .gpu_backend import write_artifact

            extra["gpu"] = write_artifact(compiled, d / "gpu")
        elif target in ("verilog", "fpga"):
            from .hdl import export_verilog

            hdl = export_verilog(compiled, d / "hdl", reuse=reuse, **(hdl_options or {}))
            hdl.pop("convert_s", None)  # a timing: kept out so the manifest is reproducible
            extra["hdl"] = hdl
            if target == "fpga":
                from .hdl.fpga import run_flow

                extra["fpga"] = run_flow(compiled, d / "hdl", d / "fpga", progress=progress)
        (d / "graph.json").write_text(dumps(graph_to_json(compiled.graph)))
        (d / "weights.npz").write_bytes(npz_bytes(dict(compiled.graph.constants)))
        (d / "manifest.json").write_text(dumps(manifest(compiled, target, extra)))

    return write_atomic(out, fill)
