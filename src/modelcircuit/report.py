"""`modelcircuit inspect`: per node op, shapes, types, FLOPs, bytes, multipliers, cycles,
predicted time; as text, JSON or an HTML page (templates/report/inspect.html.j2)."""

from __future__ import annotations

from typing import Any

from .graphs.analysis.cost import ledger, totals
from .graphs.arithmetic import plan as arithmetic_plan
from .graphs.host import wire_lines
from .graphs.ir import Graph
from .graphs.ops import attrs
from .graphs.profiles import get_profile
from .util.templating import environment

COLUMNS = ["node", "op", "in_shape", "out_shape", "out_type", "golden_gemm", "flops", "bytes",
           "multipliers", "reuse", "cycles", "predicted_us"]


def inspect_rows(g: Graph, info: dict[str, Any]) -> dict[str, Any]:
    prof = get_profile(info["profile"]) if info.get("profile") else None
    hdl_layers = {}
    if info.get("hdl"):
        for layer in info["hdl"].get("layers", []):
            hdl_layers[layer.get("node")] = layer
    rows = []
    costs = ledger(g, prof)
    arith = arithmetic_plan(g)  # how the golden model sums each fixed-point Dense/Conv
    for n, c in zip(g.nodes, costs, strict=True):
        acts = g.activations(n)
        layer = hdl_layers.get(n.name, {})
        at = attrs(n)
        rows.append({
            "node": n.name, "op": n.op + ("+relu" if getattr(at, "relu", False) else ""),
            "in_shape": list(g.tensor(acts[0]).shape) if acts else [],
            "out_shape": list(g.tensor(n.outputs[0]).shape),
            "in_type": str(g.tensor(acts[0]).dtype) if acts else "",
            "out_type": str(g.tensor(n.outputs[0]).dtype),
            "acc_type": str(at.acc) if getattr(at, "acc", None) is not None else "",
            "golden_gemm": str(arith[n.name]) if n.name in arith else "",
            "flops": c.flops, "bytes": c.bytes,
            "multipliers": layer.get("multipliers", c.multipliers),
            "shifts": c.shifts, "zero_weights": c.zero_weights,
            "cycles": layer.get("latency", "-"), "reuse": layer.get("reuse", "-"),
            "predicted_us": "-" if c.predicted_s is None else round(c.predicted_s * 1e6, 4),
        })
    tot = totals(costs)
    total = {"node": "total", "flops": tot["flops"], "bytes": tot["bytes"],
             "multipliers": sum(r["multipliers"] for r in rows),
             "cycles": (info.get("hdl") or {}).get("latency", "-"),
             "predicted_us": "-" if tot["predicted_s"] is None else round(tot["predicted_s"] * 1e6, 4)}
    out = {"model": g.name, "graph_id": info.get("graph_id"), "profile": info.get("profile"),
           "columns": COLUMNS, "nodes": rows, "total": total}
    if info.get("memory"):
        out["memory"] = info["memory"]
    if info.get("gpu"):
        out["gpu"] = info["gpu"]
    if info.get("hdl"):
        out["hdl"] = {k: v for k, v in info["hdl"].items() if k != "layers"}
    if info.get("host"):
        out["host"] = info["host"]
    if info.get("wire"):
        out["wire"] = info["wire"]
    return out


def render_text(r: dict[str, Any]) -> str:
    cols = r["columns"]
    table = [[str(row.get(c, "")) for c in cols] for row in r["nodes"]]
    table.append([str(r["total"].get(c, "")) for c in cols])
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(s.ljust(w) if i < 2 else s.rjust(w)  # noqa: E731
                                   for i, (s, w) in enumerate(zip(cells, widths, strict=True)))
    head = [f"model {r['model']}  graph id {r['graph_id']}" + (f"  profile {r['profile']}" if r["profile"] else "")]
    tail = []
    h = r.get("host") or {}
    for key, what in (("head", "before the circuit's input"), ("tail", "after its output")):
        if h.get(key):
            ops = " -> ".join(f"{n['op']}({n['node']})" for n in h[key])
            tail.append(f"host {key} (float32, {what}): {ops}")
    tail.extend(wire_lines(r.get("wire")))
    if r.get("memory"):
        m = r["memory"]
        tail.append(f"GPU arena {m['arena_bytes_per_sample']} B/sample (naive sum of tensors "
                    f"{m['naive_bytes_per_sample']} B/sample)")
    if r.get("hdl"):
        h = r["hdl"]
        tail.append(f"circuit latency {h.get('latency')} cycles, II {h.get('ii')}"
                    + (f", {h['pipeline']} schedule" if h.get("pipeline") else ""))
        f = h.get("fit")
        if f:
            e, b = f.get("estimate", {}), f.get("budget", {})
            tail.append(f"--reuse auto for {f.get('device')}: estimate {e.get('lut')} "
                        f"{f.get('lut_unit', 'LUT4')} of {b.get('lut')} (fits within "
                        f"{f.get('margin', 0):.0%}), {e.get('dsp')}/{b.get('dsp')} DSP, "
                        f"{e.get('bram')}/{b.get('bram')} BRAM")
            if f.get("stream"):  # a streamed model: hdl/flow/stream_fit.py
                from .hdl.flow.stream_fit import plan_lines

                tail.extend(plan_lines(f))
    return "\n".join(head + [line(cols)] + [line(t) for t in table] + tail)


def render_html(r: dict[str, Any]) -> str:
    return environment("report", html=True).get_template("inspect.html.j2").render(r=r)
