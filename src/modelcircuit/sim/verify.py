"""`modelcircuit verify`: every named backend on the same inputs, compared bit for bit.

Backends: golden (graphs/reference.py, the definition), rtl (the generated Verilog under the
cocotb bench, sim/rtl.py), gpu (a CUDA device if there is one, else the CPU emulator of the
same kernels — the report says which) and gpu-emu (the emulator). Prints who agrees with
whom (bit-exact count, first mismatch), accuracy where labels exist (float, fixed golden,
RTL, …) and "bit-exact: yes/no". Exit 0 only if all agree (and the RTL's latency and II
equal the compile-time figures), 1 on any mismatch; user errors raise SimError (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SimError

KNOWN = ("golden", "rtl", "gpu", "gpu-emu")
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


def _is_default_model(model: str | None) -> bool:
    from ..graphs.userio import DEFAULT_MODEL, bundled

    return model is None or Path(model).resolve() == bundled(DEFAULT_MODEL).resolve()


def select_inputs(a: argparse.Namespace, shape: tuple[int, ...]
                  ) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(float inputs (N, *shape), labels or None, description)."""
    from ..graphs.userio import DEFAULT_MODEL, bundled
    from ..graphs.userio import load_array as load_inputs

    n = getattr(a, "vectors", None)
    if n is not None and n < 1:
        raise SimError(f"--vectors must be at least 1, got {n}")
    size = int(np.prod(shape, dtype=np.int64))
    if getattr(a, "inputs", None):
        x = load_inputs(a.inputs)
        if x.ndim == len(shape) and tuple(x.shape) == tuple(shape):
            x = x[None]
        if x.ndim < 1 or x.shape[0] == 0 or int(np.prod(x.shape[1:], dtype=np.int64)) != size:
            raise SimError(f"--inputs {a.inputs}: shape {list(x.shape)} does not match the "
                           f"model's input: need (N, {', '.join(map(str, shape))})")
        if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
            raise SimError(f"--inputs {a.inputs}: contains NaN or Inf")
        x = x.reshape((x.shape[0],) + tuple(shape))
        return (x[:n] if n else x), None, f"{a.inputs} ({min(n or len(x), len(x))} vectors)"
    if _is_default_model(getattr(a, "model", None)):
        d = np.load(bundled("digits_test.npz"))
        x, y = d["x"], d["y"]
        if n:
            x, y = x[:n], y[:n]
        return x.reshape((len(x),) + tuple(shape)), y, \
            f"bundled {Path(DEFAULT_MODEL).stem} test split ({len(x)} vectors)"
    n = n or DEFAULT_VECTORS
    rng = np.random.default_rng(int(getattr(a, "seed", 0) or 0))
    x = rng.standard_normal((n,) + tuple(shape)).astype(np.float32)
    return x, None, f"{n} random normal vectors (seed {getattr(a, 'seed', 0)})"


def _gpu_device() -> tuple[bool, str]:
    """(real device?, description)."""
    try:
        from ..gpu_backend.runtime import device_info

        info = device_info()
        return True, f"CUDA device {info['name']}"
    except Exception as e:  # noqa: BLE001 - no CuPy, no driver, no device: use the emulator
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return False, f"CPU emulator (no CUDA device: {msg})"


def run_backend(name: str, compiled: Any, codes: np.ndarray, golden: np.ndarray,
                a: argparse.Namespace) -> tuple[np.ndarray, dict[str, Any]]:
    """Output codes (N, ...) of one backend and notes about the run."""
    g = compiled.graph
    t0 = time.perf_counter()
    if name == "golden":
        return golden, {"what": "golden model (graphs/reference.py)",
                        "seconds": 0.0}
    if name == "rtl":
        from . import rtl

        r = rtl.execute(compiled, codes, simulator=getattr(a, "simulator", "verilator"),
                        seed=int(getattr(a, "seed", 0) or 0), expected=golden)
        notes = {"what": f"RTL simulation ({r['simulator']}, cocotb bench)",
                 "seconds": time.perf_counter() - t0, "built": r["built"],
                 "build_s": r["build_s"], "sim_s": r["sim_s"], "cycles": r["cycles"],
                 "latency": r["latency"], "latency_expected": r["latency_expected"],
                 "ii": r["ii"], "ii_expected": r["ii_expected"],
                 "latency_ok": r["checks"]["latency_ok"], "ii_ok": r["checks"]["ii_ok"],
                 "complete": r["checks"]["complete"],
                 "stalled_fraction": r["stalled_fraction"],
                 "scoreboard_first_mismatch": r["checks"]["first_mismatch"]}
        out = np.asarray(r["outputs"])
        if out.shape[0] != codes.shape[0]:  # lost vectors: compare what came, flag the rest
            full = np.full((codes.shape[0],) + golden.shape[1:], np.iinfo(np.int64).min)
            full[: out.shape[0]] = out.reshape((-1,) + golden.shape[1:])
            out = full
        return out.reshape(golden.shape), notes
    from .. import gpu_backend

    if name == "gpu":
        real, what = _gpu_device()
    else:
        real, what = False, "CPU emulator of the CUDA kernels"
    outs = gpu_backend.execute(compiled, [codes], emulate=not real)
    out = np.asarray(outs[g.outputs[0]]).reshape(golden.shape)
    return out, {"what": what, "device": real, "seconds": time.perf_counter() - t0}


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


def float_outputs(a: argparse.Namespace, graph: Any, x: np.ndarray) -> np.ndarray | None:
    """The float model's outputs (precision float32), for accuracy; None if it won't compile."""
    from ..api import compile as mc_compile
    from ..graphs import reference

    try:
        fc = mc_compile(graph, precision="float32")
        return reference.execute(fc.graph, [x])[fc.graph.outputs[0]]
    except ValueError:
        return None


def verify(a: argparse.Namespace, out: Any = None) -> tuple[int, dict[str, Any]]:
    out = out or sys.stdout
    from ..cli import compile_from_args, load_model
    from ..graphs import reference
    from ..graphs.userio import check_output_file, write_text_atomic

    backends = parse_backends(getattr(a, "backends", "golden,rtl"))
    if getattr(a, "json", None) is not None:
        check_output_file(a.json, "--json")  # a bad path fails before the long work
    if "rtl" in backends:
        from . import rtl

        rtl.check_simulator(getattr(a, "simulator", "verilator"))  # before any long work
    compiled = compile_from_args(a)
    g = compiled.graph
    if len(g.inputs) != 1:
        raise SimError(f"verify handles models with one input; {g.name} has {len(g.inputs)}")
    shape = tuple(g.tensor(g.inputs[0]).shape)
    x, labels, source = select_inputs(a, shape)
    codes = reference.quantize_inputs(g, [x])[0]
    golden = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
    t_out = g.tensor(g.outputs[0]).dtype
    frac = None if t_out is None or t_out.is_float else t_out.frac

    outs: dict[str, np.ndarray] = {}
    notes: dict[str, dict[str, Any]] = {}
    for b in backends:
        outs[b], notes[b] = run_backend(b, compiled, codes, golden, a)

    pairs = []
    for an, bn in combinations(backends, 2):
        c = compare(outs[an], outs[bn], frac)
        pairs.append({"a": an, "b": bn, **c})
    timing_ok = all(notes["rtl"].get(k) is not False for k in ("latency_ok", "ii_ok", "complete")
                    ) if "rtl" in notes else True
    all_agree = all(p["bit_exact"] for p in pairs) and timing_ok

    acc: dict[str, float] = {}
    if labels is not None:
        f = float_outputs(a, load_model(getattr(a, "model", None)), x)
        if f is not None:
            acc["float"] = accuracy(f, labels)
        for b in backends:
            acc["fixed golden" if b == "golden" else b] = accuracy(outs[b], labels)

    report = {"model": g.name, "graph_id": compiled.graph_id, "precision": compiled.options.get("precision"),
              "reuse": compiled.options.get("reuse"), "inputs": source, "vectors": int(len(x)),
              "output_type": None if t_out is None else str(t_out), "backends": backends,
              "notes": notes, "pairs": pairs, "accuracy": acc, "timing_ok": timing_ok,
              "bit_exact": all_agree}
    _print(report, out)
    if getattr(a, "json", None) is not None:
        write_text_atomic(a.json, json.dumps(report, indent=1, sort_keys=True,
                                             default=_jsonable) + "\n", "--json")
    return (0 if all_agree else 1), report


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


def verify_from_args(a: argparse.Namespace) -> int:
    rc, _ = verify(a)
    return rc
