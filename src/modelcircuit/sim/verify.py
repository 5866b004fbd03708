"""`modelcircuit verify`: every named backend on the same inputs, compared bit for bit.

Backends: golden (graphs/reference.py, the definition), rtl (the generated Verilog under the
cocotb bench, sim/rtl.py), gpu (a CUDA device if there is one, else the CPU emulator of the
same kernels — the report says which) and gpu-emu (the emulator). Prints who agrees with
whom (bit-exact count, first mismatch), accuracy where labels exist (float, fixed golden,
RTL, …) and "bit-exact: yes/no". Exit 0 only if all agree (and the RTL's latency and II
equal the compile-time figures), 1 on any mismatch; user errors raise SimError (exit 2).
"""

from __future__ import annotations

import json
import sys
from itertools import combinations
from typing import Any

import numpy as np

from ..graphs.compiled import CompiledGraph
from .backends import BACKENDS
from .errors import SimError

KNOWN = tuple(BACKENDS)
DEFAULT_VECTORS = 100
FLOAT_RTOL = 1e-5  # ~84 float32 ulps of the row's largest value (float mode only)


def parse_backends(text: str) -> list[str]:
    names = [b.strip() for b in (text or "").split(",") if b.strip()]
    bad = [b for b in names if b not in KNOWN]
    if bad or not names:
        raise SimError(f"--backends: unknown backend(s) {', '.join(bad) or '(none given)'}; "
                       f"known: {', '.join(KNOWN)}")
    out = list(dict.fromkeys(names))
    if "golden" not in out:
        out.insert(0, "golden")  # the definition every backend is compared with
    return out


def compare(a_out: np.ndarray, b_out: np.ndarray, frac: int | None) -> dict[str, Any]:
    """Bit-exact comparison of two (N, ...) code arrays."""
    n = a_out.shape[0]
    fa, fb = a_out.reshape(n, -1), b_out.reshape(n, -1)
    if fa.dtype.kind == "f" or fb.dtype.kind == "f":
        # float32 backends sum in their own (CPU-dependent) order: the tolerance scales with
        # each output vector's magnitude (an element near zero in a row of large values
        # carries the row's rounding), not with the element alone
        a64, b64 = fa.astype(np.float64), fb.astype(np.float64)
        scale = np.maximum(np.abs(a64), np.abs(b64)).max(axis=1, keepdims=True)
        eq = np.abs(a64 - b64) <= FLOAT_RTOL * (np.abs(b64) + scale) + np.finfo(np.float32).tiny
    else:
        eq = fa.astype(np.int64) == fb.astype(np.int64)
    row_ok = eq.all(axis=1)
    first = None
    if not row_ok.all():
        i = int(np.argmin(row_ok))
        k = int(np.argmin(eq[i]))
        ea, eb = fa[i, k].item(), fb[i, k].item()
        first = {"vector": i, "element": k, "a": ea, "b": eb}
        if frac is not None and fa.dtype.kind != "f":
            first.update(a_value=ea * 2.0 ** -frac, b_value=eb * 2.0 ** -frac)
    return {"agree": int(row_ok.sum()), "total": n, "bit_exact": bool(row_ok.all()),
            "first_mismatch": first}


def _fmt_first(f: dict[str, Any] | None, an: str, bn: str) -> str:
    if f is None:
        return "-"
    s = f"vector {f['vector']}, element {f['element']}: {an} {f['a']}"
    if "a_value" in f:
        s += f" ({f['a_value']:g})"
    s += f", {bn} {f['b']}"
    if "b_value" in f:
        s += f" ({f['b_value']:g})"
    return s


def accuracy(out: np.ndarray, labels: np.ndarray) -> float:
    pred = out.reshape(out.shape[0], -1).argmax(axis=1)
    return float((pred == labels.reshape(-1)).mean())


def verify(compiled: CompiledGraph, x: np.ndarray, backends: list[str], labels: np.ndarray | None = None,
           float_out: np.ndarray | None = None, source: str = "inputs",
           simulator: str = "verilator", seed: int = 0, out: Any = None
           ) -> tuple[int, dict[str, Any]]:
    """Run every backend on the float inputs x (N, *input shape), compare all pairs bit for
    bit, print the table (to `out`, default stdout). Returns (exit code 0 all agree / 1 a
    mismatch, report). `float_out` (the float model's outputs) and `labels` add accuracy."""
    out = out or sys.stdout
    from ..graphs import golden_plan, host
    from ..graphs.threads import limit_process
    from .backends import RunOptions, run_backend

    limit_process()  # BLAS threads: at most the cores this process was given

    backends = parse_backends(",".join(backends))
    g = compiled.graph
    if len(g.inputs) != 1:
        raise SimError(f"verify handles models with one input; {g.name} has {len(g.inputs)}")
    codes = host.encode(compiled, x)  # the host head, where the model has one
    golden = golden_plan.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
    t_out = g.tensor(g.outputs[0]).dtype
    frac = None if t_out is None or t_out.is_float else t_out.frac

    opts = RunOptions(simulator=simulator, seed=seed, expected=golden)
    outs: dict[str, np.ndarray] = {}
    notes: dict[str, dict[str, Any]] = {}
    for b in backends:
        res, notes[b] = run_backend(b, compiled, codes, opts)
        outs[b] = np.asarray(res).reshape(golden.shape)

    pairs = []
    for an, bn in combinations(backends, 2):
        c = compare(outs[an], outs[bn], frac)
        pairs.append({"a": an, "b": bn, **c})
    timing_ok = all(notes["rtl"].get(k) is not False for k in ("latency_ok", "ii_ok", "complete")
                    ) if "rtl" in notes else True
    all_agree = all(p["bit_exact"] for p in pairs) and timing_ok

    acc: dict[str, float] = {}
    if labels is not None:
        if float_out is not None:
            acc["float"] = accuracy(float_out, labels)
        for b in backends:  # on the model's outputs: the host tail applied
            acc["fixed golden" if b == "golden" else b] = accuracy(
                host.decode(compiled, outs[b]), labels)

    report = {"model": g.name, "graph_id": compiled.graph_id, "precision": compiled.options.get("precision"),
              "reuse": compiled.options.get("reuse"), "inputs": source, "vectors": int(len(x)),
              "output_type": None if t_out is None else str(t_out), "backends": backends,
              "notes": notes, "pairs": pairs, "accuracy": acc, "timing_ok": timing_ok,
              "bit_exact": all_agree}
    _print(report, out)
    return (0 if all_agree else 1), report


def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=1, sort_keys=True, default=_jsonable) + "\n"


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _print(r: dict[str, Any], out: Any) -> None:
    p = lambda s="": print(s, file=out)  # noqa: E731
    p(f"verify {r['model']}  (graph id {r['graph_id'][:16]}, precision {r['precision']}, "
      f"reuse {r['reuse']}, output {r['output_type']})")
    p(f"inputs: {r['inputs']}")
    for b in r["backends"]:
        n = r["notes"][b]
        line = f"  {b:8s} {n['what']}"
        if b == "rtl":
            built = f"{n['build_s']:.1f} s" if n["built"] else "cached"
            line += (f"; build {built}, "
                     f"sim {n['sim_s']:.1f} s, {n['cycles']} cycles, latency {n['latency']} "
                     f"(compile-time {n['latency_expected']}), II {n['ii']} "
                     f"(compile-time {n['ii_expected']}), o__ready low "
                     f"{100 * n['stalled_fraction']:.0f}% of cycles")
        p(line)
    p()
    p(f"{'backends':22s} {'bit-exact':>14s}  first mismatch")
    for q in r["pairs"]:
        p(f"{q['a'] + ' vs ' + q['b']:22s} {str(q['agree']) + '/' + str(q['total']):>14s}  "
          f"{_fmt_first(q['first_mismatch'], q['a'], q['b'])}")
    if "rtl" in r["notes"]:
        n = r["notes"]["rtl"]
        bad = [f"{k} {n[k.split('_')[0]] if k != 'complete' else ''}".strip()
               for k in ("latency_ok", "ii_ok", "complete") if n.get(k) is False]
        if bad:
            p(f"rtl timing/stream check failed: {', '.join(bad)}")
    if r["accuracy"]:
        p()
        p("accuracy: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in r["accuracy"].items()))
    p(f"bit-exact: {'yes' if r['bit_exact'] else 'no'}")
