"""The sweep's report: sweep.json (every record, plan order), sweep.txt (a table), index.html
(templates/sweep/report.html.j2) and matplotlib PNGs (Agg, no timestamps: the same records
give byte-identical files):

- accuracy.png: argmax agreement with float (and accuracy with labels) vs weight bits;
- pareto-<device>.png: LUT (or logic cells) vs latency per device, the Pareto front drawn;
- profile.png: hls4ml-style per-layer ranges of the float model's weights and activations
  on the data (box plots of |x|, log2 axis) with the chosen point's types as grey bands
  (smallest step to largest value), for the chosen point: the `auto` one, else the cheapest
  meeting the target agreement, else the most accurate.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np

from .store import Store, dump

PNG_META = {"Software": None}


def _num(v: Any, fmt: str = "{}") -> str:
    return "-" if v is None else fmt.format(v)


def rows(records: list[dict[str, Any]]) -> list[dict[str, str]]:
    out = []
    for r in records:
        e = r.get("estimate") or {}
        b = r.get("build") or {}
        v = r.get("verify") or {}
        out.append({
            "precision": str(r["precision"]), "reuse": str(r["reuse"]), "device": r["device"],
            "status": r["status"],
            "agreement": _num(r.get("agreement"), "{:.4f}"),
            "accuracy": _num(r.get("accuracy"), "{:.4f}"),
            "weight_bits": _num(r.get("weight_bits")),
            "lut": _num(e.get("lut")), "ff": _num(e.get("ff")), "dsp": _num(e.get("dsp")),
            "bram": _num(e.get("bram")), "ii": _num(e.get("ii")),
            "latency": _num(e.get("latency_cycles")),
            "bit_exact": ("yes" if v.get("bit_exact") else "no") if v else "-",
            "built_lut": _num(b.get("lut")), "fmax": _num(b.get("fmax_mhz"), "{:.1f}"),
            "latency_ns": _num(b.get("latency_ns"), "{:.0f}"),
            "error": r.get("error") or "",
        })
    return out


COLUMNS = [("precision", "precision"), ("reuse", "reuse"), ("device", "device"),
           ("status", "status"), ("agreement", "agree"), ("accuracy", "acc"),
           ("weight_bits", "w bits"), ("lut", "est LUT"), ("ff", "FF"), ("dsp", "DSP"),
           ("bram", "BRAM"), ("ii", "II"), ("latency", "cycles"), ("bit_exact", "RTL=golden"),
           ("built_lut", "built LUT"), ("fmax", "Fmax MHz"), ("latency_ns", "lat ns")]


def text_table(result: dict[str, Any]) -> str:
    rs = rows(result["points"])
    stage = result.get("stage", "estimate")
    cols = [c for c in COLUMNS if not (
        (c[0] == "bit_exact" and stage != "verify")
        or (c[0] in ("built_lut", "fmax", "latency_ns") and stage != "build")
        or (c[0] == "accuracy" and all(r["accuracy"] == "-" for r in rs)))]
    width = {k: max(len(h), *(len(r[k]) for r in rs)) if rs else len(h) for k, h in cols}
    lines = ["  ".join(h.ljust(width[k]) for k, h in cols)]
    for r in rs:
        lines.append("  ".join(r[k].ljust(width[k]) for k, _ in cols).rstrip())
        if r["error"]:
            lines.append(f"    error: {r['error']}")
    a = result.get("auto")
    if a:
        lines.append("")
        lines.append(auto_line(a))
    return "\n".join(lines) + "\n"


def auto_line(a: dict[str, Any]) -> str:
    b, c = a["baseline"], a["chosen"]
    return (f"precision auto: {c['cost']} {a['lut_unit']} at agreement {c['agreement']:.4f} "
            f"vs {b['precision']} {b['cost']} at {b['agreement']:.4f} "
            f"({100 * a['reduction']:.1f} % smaller, reuse {a['reuse_plan']}, "
            f"{a['evaluations']} designs evaluated)")


def chosen_point(result: dict[str, Any], target: float = 0.99) -> dict[str, Any] | None:
    done = [r for r in result["points"] if r["status"] == "done"]
    if not done:
        return None
    autos = [r for r in done if r["precision"] == "auto"]
    if autos:
        return autos[0]
    ok = [r for r in done if r.get("agreement", 0) >= target]
    if ok:
        return min(ok, key=lambda r: (r["estimate"]["lut"], r["index"]))
    return max(done, key=lambda r: (r.get("agreement", 0), -r["index"]))


def pareto(pts: list[tuple[float, float, int]]) -> list[int]:
    """Indices of the points no other point beats in both coordinates (lower is better)."""
    front, best = [], math.inf
    for _x, y, i in sorted(pts):
        if y < best:
            front.append(i)
            best = y
    return front


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata=PNG_META)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def plot_accuracy(records: list[dict[str, Any]]) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    seen: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["status"] == "done" and r["precision"] not in seen:
            seen[r["precision"]] = r
    xs = [r["weight_bits"] for r in seen.values()]
    ax.scatter(xs, [r["agreement"] for r in seen.values()], label="argmax agreement with float",
               marker="o")
    if any("accuracy" in r for r in seen.values()):
        ax.scatter(xs, [r.get("accuracy", np.nan) for r in seen.values()], marker="s",
                   label="accuracy (labels)")
        fa = next(r["float_accuracy"] for r in seen.values() if "float_accuracy" in r)
        ax.axhline(fa, color="grey", ls="--", lw=1, label=f"float accuracy {fa:.3f}")
    for name, r in seen.items():
        ax.annotate(name, (r["weight_bits"], r["agreement"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("weight bits (sum over Dense weights of count x width)")
    ax.set_ylabel("fraction of the data")
    ax.set_title("accuracy vs bits")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return _png(fig)


def plot_pareto(records: list[dict[str, Any]], device: str) -> bytes:
    import matplotlib.pyplot as plt

    done = [r for r in records if r["status"] == "done" and r["device"] == device]
    built = all(r.get("build", {}).get("latency_ns") is not None for r in done) and done
    pts = []
    for r in done:
        if built:
            x, y = r["build"]["latency_ns"], r["build"]["lut"]
        else:
            x, y = r["estimate"]["latency_cycles"], r["estimate"]["lut"]
        pts.append((float(x), float(y), r["index"]))
    front = set(pareto(pts))
    unit = done[0]["estimate"]["lut_unit"] if done else "LUT"
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    by = {r["index"]: r for r in done}
    ax.scatter([p[0] for p in pts if p[2] not in front], [p[1] for p in pts if p[2] not in front],
               color="lightgrey", label="dominated")
    fp = sorted(p for p in pts if p[2] in front)
    ax.plot([p[0] for p in fp], [p[1] for p in fp], "o-", color="C3", label="Pareto front",
            drawstyle="steps-post")
    ys = [p[1] for p in pts] or [0.0]
    span = (max(ys) - min(ys)) or 1.0
    stacked: dict[tuple[int, int], int] = {}
    for x, y, i in sorted(pts, key=lambda p: (p[0], p[1], p[2])):
        r = by[i]
        # labels of points that (nearly) coincide are stacked, not drawn over each other
        cell = (round(math.log10(max(x, 1e-9)) * 12), round((y - min(ys)) / span * 12))
        k = stacked.get(cell, 0)
        stacked[cell] = k + 1
        ax.annotate(f"{r['precision']} R={r['reuse']}", (x, y), fontsize=6,
                    xytext=(3, 3 + 8 * k), textcoords="offset points")
    if done:
        ax.axhline(done[0]["estimate"]["device_lut"], color="grey", ls=":", lw=1,
                   label=f"{device}: {done[0]['estimate']['device_lut']}")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ns, placed and routed)" if built else "latency (cycles, estimate)")
    ax.set_ylabel(("placed " if built else "estimated ") + unit)
    ax.set_title(f"resources vs latency on {device}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def _mpl_version() -> tuple[int, int]:
    import matplotlib

    major, minor = matplotlib.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _type_band(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    from ..graphs.types import parse_type

    try:
        t = parse_type(text)
    except ValueError:
        return None
    if t.is_float:
        return None
    return t.lsb, t.qmax * t.lsb


def plot_profile(rec: dict[str, Any], graph: Any, x: np.ndarray) -> bytes:
    """hls4ml's numerical profile: per tensor, |values| of the float model on a log2 axis,
    the chosen types' representable magnitudes (step .. largest) as grey boxes."""
    import matplotlib.pyplot as plt

    from ..graphs.host import float_trace
    from .common import compile_model

    fc = compile_model(graph, precision="float32")
    env = float_trace(fc, x)
    types = rec.get("types", {})
    g = fc.graph
    order = list(g.inputs) + [t for n in g.nodes for t in (*n.inputs, *n.outputs)]
    order = list(dict.fromkeys(t for t in order if t in types))[::-1]  # first layer on top
    wnames = [k for k in order if k in g.constants]
    anames = [k for k in order if k not in g.constants and k in env]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.5 * max(len(wnames), len(anames), 4) + 1.6))
    for ax, names, title, src in ((axes[0], wnames, "weights and biases", g.constants),
                                  (axes[1], anames, "activations (data)", env)):
        data, lows, highs = [], [], []
        for j, k in enumerate(names):
            v = np.abs(np.asarray(src[k], dtype=np.float64)).reshape(-1)
            v = np.log2(v[v > 0])
            data.append(v if v.size else np.array([np.nan]))
            if v.size:
                lows.append(float(np.percentile(v, 25)))
                highs.append(float(v.max()))
            band = _type_band(types.get(k))
            if band:
                lo, hi = math.log2(band[0]), math.log2(band[1])
                lows.append(lo)
                highs.append(hi)
                ax.add_patch(plt.Rectangle((lo, j + 0.6), hi - lo, 0.8, color="0.85", zorder=0))
        if names:
            # matplotlib >= 3.10 names the orientation; older ones take vert=False
            horiz: dict[str, Any] = ({"orientation": "horizontal"}
                                     if _mpl_version() >= (3, 10) else {"vert": False})
            ax.boxplot(data, positions=list(range(1, len(names) + 1)), widths=0.5,
                       flierprops={"markersize": 2}, **horiz)
            ax.set_yticks(range(1, len(names) + 1),
                          [f"{k}\n{types.get(k, '')}" for k in names], fontsize=7)
        if lows:  # magnitudes far below every type's step (1e-38 weights) would hide the
            # rest: the axis starts 4 bits below the step or the lower quartile
            ax.set_xlim(math.floor(min(lows)) - 4, math.ceil(max(highs)) + 1)
        ax.set_xlabel("log2 |x| (grey: the type's step .. largest value)")
        ax.set_title(title)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"numerical profile of {rec['precision']} (reuse {rec['reuse']}, "
                 f"{rec['device']}); points beyond the axes are not drawn",
                 fontsize=10)
    fig.tight_layout()
    return _png(fig)


def write_report(store: Store, result: dict[str, Any], graph: Any, auto: Any,
                 cal: Any, x: np.ndarray) -> dict[str, str]:
    """sweep.json, sweep.txt, the PNGs and index.html under the store folder (each file
    replaced whole). Returns {what: file name}."""
    import matplotlib

    matplotlib.use("Agg")
    from ..util.templating import environment

    records = result["points"]
    files = {"json": "sweep.json", "table": "sweep.txt", "html": "index.html"}
    store.write_file("sweep.json", dump(result))
    table = text_table(result)
    store.write_file("sweep.txt", table)
    images = []
    if any(r["status"] == "done" for r in records):
        store.write_file("accuracy.png", plot_accuracy(records))
        images.append(("accuracy vs bits", "accuracy.png"))
        for d in result["devices"]:
            if any(r["status"] == "done" and r["device"] == d for r in records):
                name = f"pareto-{d}.png"
                store.write_file(name, plot_pareto(records, d))
                images.append((f"Pareto front on {d}", name))
    chosen = chosen_point(result)
    if chosen is not None:
        store.write_file("profile.png", plot_profile(chosen, graph, x))
        images.append(("numerical profile of the chosen point", "profile.png"))
    html = environment("sweep", html=True).get_template("report.html.j2").render(
        result=result, rows=rows(records), columns=COLUMNS, images=images,
        auto=result.get("auto"),
        auto_text=auto_line(result["auto"]) if result.get("auto") else None,
        auto_json=json.dumps(result["auto"]["precision"], indent=1) if result.get("auto") else None,
        chosen=chosen)
    store.write_file("index.html", html)
    files.update({name: name for _t, name in images})
    return files
