"""Code generation: a compiled graph -> one CUDA module (each node's kernel rendered from
templates/cuda by its lowering function, lowering.py) plus the launch list, the arena plan
and the weights blob. `lower(compiled)` is the job (cached per compiled graph);
`generate(graph)` does the work. Deterministic: same graph, same text and bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..graphs.analysis.memory_plan import memory_plan
from ..graphs.analysis.streams import assign_streams
from ..graphs.compiled import CompiledGraph
from ..graphs.ir import Graph, Node
from ..util import templating
from .context import LowerCtx
from .kernel import BLOCK, Kernel, Param, Program
from .lowering import lowering_for


def render(template: str, **ctx: Any) -> str:
    return templating.render("cuda", template, **ctx)


def kernel_name(i: int, node: Node) -> str:
    safe = "".join(ch if ch.isalnum() else "_" for ch in node.name)[:40]
    return f"mc_k{i}_{node.op.lower()}_{safe}"


def generate(g: Graph, graph_id: str = "", plan: dict[str, Any] | None = None,
             streams: dict[str, Any] | None = None) -> Program:
    """Lower a compiled graph to a Program. Deterministic: same graph, same text and bytes."""
    plan = plan or memory_plan(g)
    streams = streams or assign_streams(g)
    ctx = LowerCtx(g, plan)
    kernels: list[Kernel] = []
    for i, node in enumerate(g.nodes):
        fn = lowering_for(node)
        kname = kernel_name(i, node)
        tpl, c, params, per = fn(ctx, node, kname)
        src = render(tpl, params=params, **c)
        kernels.append(Kernel(kname, node.name, node.op, per, params, src.strip()))
    weights, blob = pack_weights(ctx.consts)
    kernels = [with_offsets(k, weights) for k in kernels]
    source = render("module.cu.j2", graph_name=g.name, graph_id=graph_id, block=BLOCK,
                    kernels=[k.source for k in kernels])
    return Program(source, kernels, plan, streams, weights, blob, list(g.inputs),
                   list(g.outputs), {k: v["float"] for k, v in plan["tensors"].items()})


def pack_weights(consts: dict[str, np.ndarray]) -> tuple[dict[str, dict[str, Any]], bytes]:
    """All constants in one blob, sorted by name, each padded to 16 bytes."""
    table, parts, off = {}, [], 0
    for name in sorted(consts):
        v = consts[name]
        raw = v.tobytes()
        pad = (-len(raw)) % 16
        table[name] = {"offset": off, "bytes": len(raw), "dtype": v.dtype.str,
                       "shape": list(v.shape)}
        parts.append(raw + b"\0" * pad)
        off += len(raw) + pad
    return table, b"".join(parts)


def with_offsets(k: Kernel, weights: dict[str, dict[str, Any]]) -> Kernel:
    ps = [Param(p.name, p.ctype, True, p.tensor, weights[p.tensor]["offset"]) if p.const else p
          for p in k.params]
    return Kernel(k.kname, k.node, k.op, k.per_sample, ps, k.source)


_PROGRAMS: dict[int, tuple[Any, Program]] = {}  # id(compiled) -> (compiled, its Program)


def lower(compiled: CompiledGraph) -> Program:
    """The job `lower`: the Program of a CompiledGraph, with the compile-time memory plan and
    streams it carries (cached on the object's identity)."""
    cached = _PROGRAMS.get(id(compiled))
    if cached is not None and cached[0] is compiled:
        return cached[1]
    extra = getattr(compiled, "extra", None) or {}
    prog = generate(compiled.graph, compiled.graph_id, extra.get("memory_plan"),
                    extra.get("streams"))
    if len(_PROGRAMS) > 32:
        _PROGRAMS.clear()
    _PROGRAMS[id(compiled)] = (compiled, prog)
    return prog


program = lower  # the name before the HDL-side job names
