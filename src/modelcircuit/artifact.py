"""`modelcircuit compile` output: one directory, written atomically (temp dir + rename).

manifest.json (graph id, options, tool versions, pass log, cost ledger), graph.json,
weights.npz, and per target gpu/, hdl/, fpga/. Byte-identical for the same model and options:
no timestamps, no timings, sorted keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .graphs.analysis.cost import ledger, totals
from .graphs.check import require_single_io
from .graphs.compiled import CompiledGraph
from .graphs.host import wire_order
from .graphs.identity import graph_id
from .graphs.ir import Graph, GraphError
from .graphs.profiles import get_profile
from .graphs.serialize import (
    dumps,
    graph_to_json,
    load_artifact_graph,
    load_host_parts,
    npz_bytes,
)
from .util.atomic import atomic_dir, written_files
from .util.userio import regular_file, shown

TARGETS = ("golden", "gpu", "verilog", "fpga")
FORMAT = "modelcircuit-artifact/1"
MAX_MANIFEST_BYTES = 64 << 20
MAX_ARTIFACT_FILE_BYTES = 4 << 30
SELFCHECK = "selfcheck.npz"  # targets golden and gpu: what `modelcircuit serve` checks at start
SELFCHECK_TARGETS = ("golden", "gpu")
SELFCHECK_VECTORS = 16
SELFCHECK_ELEMENTS = 1 << 18  # input elements in all: a 512x512x3 frame stores 1 vector, not 16


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
        "format": FORMAT,
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
        **({"host": host_summary(compiled)} if compiled.head or compiled.tail else {}),
        **({"wire": w} if (w := wire_order(compiled)) else {}),
        **(extra or {}),
    }


def host_summary(compiled: CompiledGraph) -> dict[str, Any]:
    """What runs on the host around the circuit (graphs/host.py), for manifests and inspect."""
    def part(g: Graph | None) -> list[dict[str, Any]] | None:
        return None if g is None else [{"node": n.name, "op": str(n.op)} for n in g.nodes]

    return {"head": part(compiled.head), "tail": part(compiled.tail),
            "circuit_input": compiled.graph.inputs[0], "circuit_output": compiled.graph.outputs[0]}


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file of an artifact but the manifest (which holds these)."""
    return {rel: hashlib.sha256((folder / rel).read_bytes()).hexdigest()
            for rel in written_files(folder) if rel != "manifest.json"}


def selfcheck_vectors(compiled: CompiledGraph) -> dict[str, np.ndarray]:
    """Self-check vectors stored in a servable artifact: seeded normal inputs (float32) at
    magnitudes from 1/4 to 16 (so saturation and the tables' ends are reached too) and the
    golden model's output codes (float32 values for a float graph) on them. A server runs them
    through its backend before it reports ready; a mismatch means it would answer wrongly.
    Big frames (CNNs) store fewer vectors, at least one, so that artifacts and compile time
    stay small."""
    from .graphs import host, reference

    shape = host.input_shape(compiled)
    per = max(1, int(np.prod(shape, dtype=np.int64)))
    n = int(min(SELFCHECK_VECTORS, max(1, SELFCHECK_ELEMENTS // per)))
    scale = (2.0 ** np.linspace(-2, 4, n)).reshape((n,) + (1,) * len(shape))
    x = (np.random.default_rng(0).standard_normal((n,) + shape) * scale).astype(np.float32)
    g = compiled.graph
    out = reference.execute(g, [host.encode(compiled, x)], inputs_are_codes=True)[g.outputs[0]]
    return {"inputs": x, "expected": np.asarray(out)}


def load_artifact(path: str | Path) -> tuple[Graph, dict[str, Any]]:
    """Read an artifact back, refusing one that was edited: the manifest's format, every
    file's sha256 against the manifest, no file missing or added, and the graph id
    recomputed from graph.json + weights.npz + the options."""
    p = Path(path)
    where = shown(p)
    mpath = p / "manifest.json"
    regular_file(mpath, "artifact manifest", MAX_MANIFEST_BYTES)
    try:
        m = json.loads(mpath.read_bytes().decode("utf-8"))
    except RecursionError:
        raise GraphError(f"artifact {where}: manifest.json is nested too deeply") from None
    except (OSError, ValueError) as e:
        raise GraphError(f"artifact {where}: manifest.json is not valid JSON "
                         f"({str(e).splitlines()[0]})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise GraphError(f"artifact {where}: manifest.json is not a modelcircuit manifest "
                         f"(format {FORMAT!r} expected)")
    files = m.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in files.items()):
        raise GraphError(f"artifact {where}: manifest.json lists no file hashes")
    try:
        present = set(written_files(p)) - {"manifest.json"}
        for rel in sorted(set(files) | present):
            if rel not in present:
                raise GraphError(f"artifact {where}: {rel} is missing")
            if rel not in files:
                raise GraphError(f"artifact {where}: {rel} is not listed in its manifest")
            f = p / rel
            regular_file(f, f"artifact file {rel}", MAX_ARTIFACT_FILE_BYTES)
            if hashlib.sha256(f.read_bytes()).hexdigest() != files[rel]:
                raise GraphError(f"artifact {where}: {rel} was modified after compilation "
                                 "(sha256 differs from the manifest)")
    except OSError as e:
        raise GraphError(f"artifact {where}: {e.strerror or e}") from None
    graph, _ = load_artifact_graph(p)
    head, tail = load_host_parts(p)
    options = m.get("options")
    if not isinstance(options, dict) or not isinstance(m.get("graph_id"), str):
        raise GraphError(f"artifact {where}: manifest.json lacks its options or graph id")
    if graph_id(graph, options, head, tail) != m["graph_id"]:
        raise GraphError(f"artifact {where}: graph id in manifest.json does not match the graph "
                         "and options it holds (edited manifest?)")
    return graph, m


def write_compiled(compiled: CompiledGraph, out: Path, target: str = "golden",
                   reuse: Any = None, progress: Callable[[str], None] | None = None,
                   hdl_options: dict[str, Any] | None = None) -> Path:
    if target not in TARGETS:
        raise GraphError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    require_single_io(compiled.graph)  # the server, self-check and circuit carry one tensor

    hdl_options = hdl_options or {}
    plan = None  # the circuit plan: resolved once, for the export and the flow
    if target == "fpga":  # refuse a design that cannot fit before the export and the flow
        from .hdl.flow import fpga_profile, plan_build

        plan, _ = plan_build(compiled, fpga_profile(compiled.profile), reuse,
                             hdl_options.get("pipeline"), hdl_options.get("adder_levels"))
    elif target == "verilog":
        from .hdl.flow import plan_circuit

        plan = plan_circuit(compiled, reuse, hdl_options.get("pipeline"),
                            hdl_options.get("adder_levels"))

    def fill(d: Path) -> None:
        extra: dict[str, Any] = {}
        if target == "gpu":
            from .gpu_backend import write_artifact

            extra["gpu"] = write_artifact(compiled, d / "gpu")
        elif target in ("verilog", "fpga"):
            from .hdl import export_verilog

            hdl = export_verilog(compiled, d / "hdl", reuse=plan)
            hdl.pop("convert_s", None)  # a timing: kept out so the manifest is reproducible
            extra["hdl"] = hdl
            if target == "fpga":
                from .hdl.flow import run_flow

                extra["fpga"] = run_flow(compiled, plan, d / "fpga", progress=progress)
        (d / "graph.json").write_text(dumps(graph_to_json(compiled.graph)))
        (d / "weights.npz").write_bytes(npz_bytes(dict(compiled.graph.constants)))
        if compiled.head is not None or compiled.tail is not None:  # graphs/host.py
            parts = {k: v for k, v in (("head", compiled.head), ("tail", compiled.tail)) if v}
            (d / "host.json").write_text(dumps({k: graph_to_json(v) for k, v in parts.items()}))
            (d / "host.npz").write_bytes(npz_bytes(
                {f"{k}/{n}": a for k, v in parts.items() for n, a in v.constants.items()}))
        if target in SELFCHECK_TARGETS:
            (d / SELFCHECK).write_bytes(npz_bytes(selfcheck_vectors(compiled)))
        extra["files"] = file_hashes(d)
        (d / "manifest.json").write_text(dumps(manifest(compiled, target, extra)))

    atomic_dir(Path(out), fill)  # temp dir beside out, swapped in whole; nothing on failure
    return Path(out)
