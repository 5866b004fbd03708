"""ONNX node conformance: regenerate onnx's official node test cases (the 1.23 wheel no
longer ships them) in a cache folder, run every case of every supported op through
`onnx_backend.GoldenBackend`, and summarise passed / excused / refused / wrong / crash.

Only refusals for an unsupported dtype or attribute value (`onnx_import.Unsupported`) are
excused; the pass rate is passed / (all cases - excused).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ...graphs.ir import GraphError
from .backend import GoldenBackend, excused

CACHE_ENV = "MODELCIRCUIT_CACHE"


def default_cache_dir() -> str:

    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache",
                                                    "modelcircuit")
    return os.path.join(root, "onnx-node-tests", onnx.__version__)


def case_op(model: onnx.ModelProto, name: str, ops: Sequence[str]) -> str | None:
    """The op a node test case tests: its single node's op, unless the case is the function
    expansion of another op (`*_expanded*`, e.g. CastLike expanded into one Cast)."""
    nodes = model.graph.node
    if len(nodes) != 1 or nodes[0].op_type not in ops or "_expanded" in name:
        return None
    return nodes[0].op_type


def _write_case(root: str, case: Any, op: str) -> None:
    import json

    d = os.path.join(root, case.name)
    os.makedirs(d)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    for k, (ins, outs) in enumerate(case.data_sets or []):
        sd = os.path.join(d, f"test_data_set_{k}")
        os.makedirs(sd)
        for prefix, arrs in (("input", ins), ("output", outs)):
            for j, a in enumerate(arrs):
                t = a if isinstance(a, TensorProto) else numpy_helper.from_array(np.asarray(a))
                with open(os.path.join(sd, f"{prefix}_{j}.pb"), "wb") as f:
                    f.write(t.SerializeToString())
    with open(os.path.join(d, "data.json"), "w") as f:
        json.dump({"op": op, "rtol": case.rtol, "atol": case.atol}, f)


def generate_cases(cache_dir: str | None = None, ops: Sequence[str] | None = None) -> str:
    """Regenerate the node test cases of `ops` (default: onnx_import.SUPPORTED_OPS) into
    cache_dir, once; returns the folder. Atomic: a temp folder renamed into place."""
    import json
    import shutil
    import tempfile
    import warnings

    from ..onnx.importer import SUPPORTED_OPS

    ops = tuple(ops or SUPPORTED_OPS)
    cache_dir = cache_dir or default_cache_dir()
    tag = hashlib.sha256(",".join(sorted(ops)).encode()).hexdigest()[:12]
    final = os.path.join(cache_dir, f"cases-{tag}")
    if os.path.exists(os.path.join(final, "index.json")):
        return final
    from onnx.backend.test.case import node as node_cases

    os.makedirs(cache_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".cases-", dir=cache_dir)
    index: dict[str, dict[str, Any]] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = node_cases.collect_testcases(None)
        for case in cases:
            op = case_op(case.model, case.name, ops)
            if op is None:
                continue
            try:
                _write_case(tmp, case, op)
                index[case.name] = {"op": op}
            except Exception as e:  # exotic dtypes that cannot be serialised
                shutil.rmtree(os.path.join(tmp, case.name), ignore_errors=True)
                index[case.name] = {"op": op, "error": f"test data not serialisable: {e}"}
        with open(os.path.join(tmp, "index.json"), "w") as f:
            json.dump({"onnx": onnx.__version__, "ops": sorted(ops), "cases": index}, f,
                      indent=1, sort_keys=True)
        try:
            os.rename(tmp, final)
        except OSError:  # another process got there first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _load_case(d: str) -> tuple[onnx.ModelProto, list[tuple[list[np.ndarray], list[np.ndarray]]]]:
    import glob

    def read(path: str) -> np.ndarray:
        t = TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)

    model = onnx.load(os.path.join(d, "model.onnx"))
    sets = []
    for sd in sorted(glob.glob(os.path.join(d, "test_data_set_*"))):
        n_in = len(glob.glob(os.path.join(sd, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(sd, "output_*.pb")))
        sets.append(([read(os.path.join(sd, f"input_{j}.pb")) for j in range(n_in)],
                     [read(os.path.join(sd, f"output_{j}.pb")) for j in range(n_out)]))
    return model, sets


def _compare(expected: Sequence[np.ndarray], got: Sequence[Any], rtol: float,
             atol: float) -> str | None:
    """The onnx backend runner's check (count, shape, dtype, allclose); None when equal."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        g = np.asarray(g)
        if g.shape != e.shape:
            return f"output {i} has shape {list(g.shape)}, expected {list(e.shape)}"
        if g.dtype != e.dtype:
            return f"output {i} has dtype {g.dtype}, expected {e.dtype}"
        if not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
            err = float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64))))
            return f"output {i} differs: max abs error {err:.3g} (rtol {rtol}, atol {atol})"
    return None


def run_case(d: str) -> tuple[str, str]:
    """Run one cached case through GoldenBackend: (status, reason), status one of STATUSES."""
    import json

    with open(os.path.join(d, "data.json")) as f:
        meta = json.load(f)
    model, sets = _load_case(d)
    try:
        rep = GoldenBackend.prepare(model)
        for ins, outs in sets:
            bad = _compare(outs, list(rep.run(ins)), meta["rtol"], meta["atol"])
            if bad:
                return "wrong", f"wrong result: {bad}"
    except GraphError as e:
        if excused(e):
            return "excused", f"unsupported {e.kind} {e.what}: {e}"
        return "refused", f"refused: {e}"
    except Exception as e:  # a crash instead of a clear error is a bug of its own
        return "crash", f"CRASH {type(e).__name__}: {e}"
    return "passed", ""


def run_conformance(cache_dir: str | None = None,
                    ops: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every cached node test case of `ops`; returns {"cases": [...], "ops": {...},
    "summary": {...}} where summary["rate"] is the issue's pass rate:
    passed / (cases - excused refusals)."""
    import json

    root = generate_cases(cache_dir, ops)
    with open(os.path.join(root, "index.json")) as f:
        index = json.load(f)["cases"]
    cases = []
    for name in sorted(index):
        info = index[name]
        if "error" in info:
            status, why = "not run", f"not run: {info['error']}"
        else:
            status, why = run_case(os.path.join(root, name))
        cases.append({"case": name, "op": info["op"], "passed": status == "passed",
                      "status": status, "reason": why.splitlines()[0] if why else ""})
    per_op: dict[str, dict[str, int]] = {}
    for c in cases:
        s = per_op.setdefault(c["op"], dict.fromkeys(STATUSES, 0))
        s[c["status"]] += 1
    return {"onnx": onnx.__version__, "cases": cases, "ops": per_op,
            "summary": summarize(cases)}


# passed; excused: refused for a dtype or attribute value the golden model does not support,
# the message naming it (onnx_import.Unsupported); refused: any other GraphError (counts
# against conformance); wrong result; crash (not a GraphError); not run (the case's data
# could not be cached: counts against conformance too)
STATUSES = ("passed", "excused", "refused", "wrong", "crash", "not run")


def summarize(cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue's number: passed / (all cases - excused refusals)."""
    n = len(cases)
    counts = {k: sum(c["status"] == k for c in cases) for k in STATUSES}
    counted = n - counts["excused"]
    return {"cases": n, **counts, "counted": counted,
            "rate": counts["passed"] / counted if counted else 1.0}


def format_table(result: dict[str, Any]) -> str:
    """Per-op counts and pass rate (passed / (cases - excused)), then every case that did not
    pass with its reason (excused ones too, so the excuse can be read)."""
    head = ["cases", *STATUSES, "rate"]
    lines = [f"{'op':<20}" + "".join(f"{h:>9}" for h in head)]
    tot = dict.fromkeys(STATUSES, 0)
    rows = [(op, result["ops"][op]) for op in sorted(result["ops"])] + [("total", tot)]
    for op, s in rows:
        if op != "total":
            for k in STATUSES:
                tot[k] += s[k]
        n = sum(s.values())
        counted = n - s["excused"]
        rate = f"{s['passed'] / counted:.0%}" if counted else "-"
        lines.append(f"{op:<20}{n:>9}" + "".join(f"{s[k]:>9}" for k in STATUSES)
                     + f"{rate:>9}")
    fails = [c for c in result["cases"] if not c["passed"]]
    for title, keep in (("failures (count against the rate):", lambda c: c["status"] != "excused"),
                        ("excused (unsupported dtype or attribute):",
                         lambda c: c["status"] == "excused")):
        sel = [c for c in fails if keep(c)]
        if sel:
            lines += ["", title]
            lines += [f"  {c['op']:<18} {c['case']:<44} {c['reason'][:200]}" for c in sel]
    return "\n".join(lines)
