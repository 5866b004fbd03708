"""`gpu/` in a compiled artifact: the kernel source, the emulator shim and the plan JSON
(arena offsets, streams, launch list, weights layout). Deterministic: the same compiled graph
writes byte-identical files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..graphs.compiled import CompiledGraph
from .codegen import lower, render
from .kernel import BLOCK, GpuError, Program


def plan_json(prog: Program, compiled: CompiledGraph) -> dict[str, Any]:
    return {
        "format": "modelcircuit-gpu/1",
        "graph_id": compiled.graph_id,
        "profile": getattr(compiled, "profile", None),
        "block": BLOCK,
        "source": "kernels.cu",
        "source_sha256": prog.source_sha256,
        "weights_sha256": hashlib.sha256(prog.weights_blob).hexdigest(),
        "inputs": prog.inputs,
        "outputs": prog.outputs,
        "memory": prog.plan,
        "streams": prog.streams,
        "weights": prog.weights,
        "weights_bytes": len(prog.weights_blob),
        "launches": [{"kernel": k.kname, "node": k.node, "op": k.op,
                      "threads_per_sample": k.per_sample,
                      "args": [{"name": p.name, "tensor": p.tensor, "ctype": p.ctype,
                                "in": "weights" if p.const else "arena", "offset": p.offset}
                               for p in k.params]}
                     for k in prog.kernels],
    }


def export(compiled: CompiledGraph, out_dir: str | Path) -> dict[str, Any]:
    """The job `export`: write kernels.cu, emu_shim.h, weights.bin and plan.json into out_dir
    (the gpu/ folder of an artifact); returns the plan."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise GpuError(f"output path {str(out)!r} is a file, not a directory")
    prog = lower(compiled)
    out.mkdir(parents=True, exist_ok=True)
    plan = plan_json(prog, compiled)
    (out / "kernels.cu").write_text(prog.source)
    (out / "emu_shim.h").write_text(render("shim.h.j2"))
    (out / "weights.bin").write_bytes(prog.weights_blob)
    (out / "plan.json").write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")
    return plan


write_artifact = export  # the name artifact.py (the top-level writer) calls
