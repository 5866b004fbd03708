"""An `onnx.backend.base.Backend` over the golden model in float mode (ONNX node conformance).

The model goes through the real front end: `onnx_import.import_model`, then
`modelcircuit.compile(graph, precision="float32")`, then `reference.execute`.

Two conventions of the IR shape what this adapter does (DESIGN.md, "Numbers", "Layout"):

* The IR is per sample: the first dimension of the (first) input is the batch.
* Weights are compiled into the graph. ONNX node tests feed weights as graph inputs, so a
  graph input is an *activation* when it is the first input or has the first input's
  declared shape and type; every other input is a *parameter*: its value is bound as an
  initializer when `run` is called, and the model is compiled then (cached by the values).

Anything the golden model cannot do is a `GraphError` whose message says why (unsupported op,
attribute, dtype or shape), never a silent fallback.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from . import reference
from .ir import GraphError
from .onnx_import import import_model


def _dtype_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type)


def _declared(vi: onnx.ValueInfoProto) -> tuple[int, tuple[Any, ...] | None]:
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is None:
        return TensorProto.UNDEFINED, None
    if not tt.HasField("shape"):
        return tt.elem_type, None
    return tt.elem_type, tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                               for d in tt.shape.dim)


def _check_value_type(vi: onnx.ValueInfoProto, what: str) -> None:
    if not vi.type.HasField("tensor_type"):
        kind = vi.type.WhichOneof("value") or "untyped"
        raise GraphError(f"{what} {vi.name!r} is a {kind} value; only tensors are supported")
    et = vi.type.tensor_type.elem_type
    if et not in (TensorProto.FLOAT, TensorProto.UNDEFINED):
        raise GraphError(f"{what} {vi.name!r} has dtype {_dtype_name(et)}; the float golden "
                         "model computes float32 only")


class GoldenRep(BackendRep):
    """A prepared model: activations fed per call, parameters bound (and compiled) per value."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        g = model.graph
        inits = {i.name for i in g.initializer}
        inputs = [vi for vi in g.input if vi.name not in inits]
        if not inputs:
            raise GraphError("model has no non-constant input")
        for vi in g.output:
            _check_value_type(vi, "output")
        first = _declared(inputs[0])
        _check_value_type(inputs[0], "input")
        self.input_names = [vi.name for vi in inputs]
        self.activations = [vi.name for vi in inputs
                            if vi is inputs[0] or _declared(vi) == first]
        self.params = [n for n in self.input_names if n not in self.activations]
        self.output_names = [vi.name for vi in g.output]
        self._compiled: dict[str, Any] = {}
        if not self.params:
            self._compiled[""] = self._compile({})

    def _compile(self, bound: dict[str, np.ndarray]) -> Any:
        from ..api import compile as compile_graph

        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        if bound:
            keep = [vi for vi in m.graph.input if vi.name not in bound]
            del m.graph.input[:]
            m.graph.input.extend(keep)
            m.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k)
                                       for k, v in bound.items())
        graph = import_model(m, name=m.graph.name or "model")
        compiled = compile_graph(graph, precision="float32")
        missing = [o for o in compiled.graph.outputs if o not in compiled.graph.tensors]
        if missing:
            raise GraphError(f"output(s) {missing} are not computed by the imported graph")
        return compiled

    def _compiled_for(self, bound: dict[str, np.ndarray]) -> Any:
        h = hashlib.sha256()
        for k in sorted(bound):
            v = np.ascontiguousarray(bound[k])
            h.update(f"{k}|{v.dtype}|{v.shape}|".encode())
            h.update(v.tobytes())
        key = h.hexdigest() if bound else ""
        if key not in self._compiled:
            self._compiled[key] = self._compile(bound)
        return self._compiled[key]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            if len(inputs) != len(self.input_names):
                raise GraphError(f"model takes {len(self.input_names)} inputs, got {len(inputs)}")
            feeds = {k: np.asarray(v) for k, v in zip(self.input_names, inputs, strict=True)}
        acts = [feeds[n] for n in self.activations]
        for n, a in zip(self.activations, acts, strict=True):
            if a.dtype != np.float32:
                raise GraphError(f"input {n!r} has dtype {a.dtype}; the float golden model "
                                 "computes float32 only")
            if a.ndim < 1:
                raise GraphError(f"input {n!r} is a scalar; the first dimension is the batch")
        compiled = self._compiled_for({n: feeds[n] for n in self.params})
        g = compiled.graph
        batch = acts[0].shape[0]
        for n, a in zip(self.activations, acts, strict=True):
            if a.shape[0] != batch:
                raise GraphError(f"input {n!r} has batch {a.shape[0]}, the first input {batch}")
        env = reference.execute(g, acts)
        outs = []
        for o in g.outputs:
            v = np.asarray(env[o], dtype=np.float32)
            outs.append(v.reshape((batch,) + tuple(g.tensor(o).shape)))
        return namedtupledict("Outputs", self.output_names)(*outs)


class GoldenBackend(Backend):
    """onnx.backend.base.Backend adapter: the golden interpreter, float32, on the CPU."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            cls.prepare(model, device, **kwargs)
        except GraphError:
            return False
        return True

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU",
                **kwargs: Any) -> GoldenRep:
        if not cls.supports_device(device):
            raise GraphError(f"device {device!r} is not supported; the golden model runs on CPU")
        return GoldenRep(model)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                             np.asarray(v).shape)
               for n, v in zip(node.input, inputs, strict=False)]
        outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in node.output]
        model = helper.make_model(helper.make_graph([node], "node", ins, outs))
        return cls.run_model(model, list(inputs), device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


prepare = GoldenBackend.prepare
run_model = GoldenBackend.run_model
run_node = GoldenBackend.run_node
supports_device = GoldenBackend.supports_device


# -- conformance against ONNX's own node test cases -------------------------------------
#
# onnx >= 1.23 wheels no longer ship the node test data; it is regenerated once with
# `onnx.backend.test.case.node.collect_testcases()` into a cache folder (official layout:
# <case>/model.onnx, <case>/test_data_set_<k>/{input,output}_<j>.pb) and read from there.

CACHE_ENV = "MODELCIRCUIT_CACHE"


def default_cache_dir() -> str:
    import os

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
    import os

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
    import os
    import shutil
    import tempfile
    import warnings

    from .onnx_import import SUPPORTED_OPS

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
    import os

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


def run_case(d: str) -> tuple[bool, str]:
    """Run one cached case through GoldenBackend: (passed, reason)."""
    import json
    import os

    with open(os.path.join(d, "data.json")) as f:
        meta = json.load(f)
    model, sets = _load_case(d)
    try:
        rep = GoldenBackend.prepare(model)
        for ins, outs in sets:
            bad = _compare(outs, list(rep.run(ins)), meta["rtol"], meta["atol"])
            if bad:
                return False, f"wrong result: {bad}"
    except GraphError as e:
        return False, f"refused: {e}"
    except Exception as e:  # a crash instead of a clear error is a bug of its own
        return False, f"CRASH {type(e).__name__}: {e}"
    return True, ""


def run_conformance(cache_dir: str | None = None,
                    ops: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every cached node test case of `ops`; returns {"cases": [...], "ops": {...}}."""
    import json
    import os

    root = generate_cases(cache_dir, ops)
    with open(os.path.join(root, "index.json")) as f:
        index = json.load(f)["cases"]
    cases = []
    for name in sorted(index):
        info = index[name]
        if "error" in info:
            ok, why = False, f"not run: {info['error']}"
        else:
            ok, why = run_case(os.path.join(root, name))
        status = "passed" if ok else why.split(":", 1)[0].split(" ", 1)[0].lower()
        cases.append({"case": name, "op": info["op"], "passed": ok, "status": status,
                      "reason": why.splitlines()[0] if why else ""})
    per_op: dict[str, dict[str, int]] = {}
    for c in cases:
        s = per_op.setdefault(c["op"], dict.fromkeys(STATUSES, 0))
        s[c["status"]] += 1
    return {"onnx": onnx.__version__, "cases": cases, "ops": per_op}


# passed; refused with a GraphError that says why; wrong result; crash (not a GraphError);
# not run (the case's data could not be cached)
STATUSES = ("passed", "refused", "wrong", "crash", "not")


def format_table(result: dict[str, Any]) -> str:
    """Per-op pass counts, then every failure with its reason."""
    head = ["cases", *STATUSES[:-1], "not run", "rate"]
    lines = [f"{'op':<20}" + "".join(f"{h:>8}" for h in head)]
    tot = dict.fromkeys(STATUSES, 0)
    rows = [(op, result["ops"][op]) for op in sorted(result["ops"])] + [("total", tot)]
    for op, s in rows:
        if op != "total":
            for k in STATUSES:
                tot[k] += s[k]
        n = sum(s.values())
        lines.append(f"{op:<20}{n:>8}" + "".join(f"{s[k]:>8}" for k in STATUSES)
                     + f"{s['passed'] / max(n, 1):>8.0%}")
    fails = [c for c in result["cases"] if not c["passed"]]
    if fails:
        lines.append("")
        lines.append("failures:")
        lines += [f"  {c['op']:<18} {c['case']:<44} {c['reason'][:160]}" for c in fails]
    return "\n".join(lines)
