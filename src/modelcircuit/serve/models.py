"""A served model: an artifact read back and checked, its primary backend, its fallback and
its self-check. No web framework here.

Loading (`load_model`, before the server binds, so a bad artifact is exit 2): the manifest
check of artifact.load_artifact (every file's sha256, graph id recomputed), the target
(golden or gpu; the gpu backends need gpu/), the gpu/ kernels and plan regenerated from the
graph and compared with the files, the self-check vectors. Warm-up (`warm_up`, after the
server binds, while readiness answers 503): the primary prepared (emulator built, CUDA graphs
captured), every bucket run on the stored vectors and compared bit for bit with the golden
output codes stored at compile time and with the golden model run now; the fallback run once.

Serving (`run_batch`, on the server's event loop thread, batching.py): host.encode, the
primary (chunks of the largest bucket), host.decode. If the primary raises, the batch and
the following ones go to the fallback (the golden model on the CPU, `reduced` fidelity) and
the primary is tried again after a back-off that doubles up to `RETRY_MAX_S`. Test hooks:
set `fault` (or `fallback_fault`) to an exception and the primary (or the fallback) raises it
on every call until set back to None.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..graphs import golden_plan, host
from ..graphs.compiled import CompiledGraph
from ..graphs.ir import GraphError
from ..util.userio import shown
from .engines import Engine, bucket_of, make_engine
from .errors import BackendsFailed, ServeError

SERVABLE_TARGETS = ("golden", "gpu")
RETRY_MAX_S = 60.0
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class Health:
    """The primary's state, changed by run_codes only (read by status)."""

    healthy: bool = True
    retry_at: float = 0.0
    backoff_s: float = 1.0
    failures: int = 0
    last_error: str | None = None


@dataclass
class ServedModel:
    name: str
    path: Path
    compiled: CompiledGraph
    manifest: dict[str, Any]
    backend: str
    buckets: tuple[int, ...]
    selfcheck: dict[str, np.ndarray]
    selfcheck_source: str  # "artifact" or "generated at load"
    retry_s: float = 1.0
    engine: Engine | None = None
    state: str = "loaded"  # loaded -> warming -> ready | failed
    error: str | None = None
    warmed: list[int] = field(default_factory=list)
    selfcheck_result: dict[str, Any] | None = None
    health: Health = field(default_factory=Health)
    fault: BaseException | None = None  # test hook: the primary raises it while set
    fallback_fault: BaseException | None = None  # test hook: the fallback raises it
    on_fallback: Any = None  # callable(n_rows, error or None) set by the app for metrics
    in_shape: tuple[int, ...] = ()  # per sample, of the float input (the head's)
    out_shape: tuple[int, ...] = ()  # per sample, of the decoded (float) output
    out_dtype: Any = None

    # -- description ---------------------------------------------------------------------
    @property
    def graph_id(self) -> str:
        return self.compiled.graph_id

    def describe(self) -> dict[str, Any]:
        c = self.compiled
        g = c.graph
        head, tail = c.head, c.tail
        src = head or g
        out_g = tail or g
        return {
            "name": self.name, "graph_id": self.graph_id, "model": g.name,
            "backend": self.backend, "target": self.manifest.get("target"),
            "profile": self.manifest.get("options", {}).get("profile"),
            "precision": self.manifest.get("options", {}).get("precision"),
            "input": {"name": src.inputs[0], "shape": list(self.in_shape),
                      "dtype": "float32", "circuit_type": str(g.tensor(g.inputs[0]).dtype)},
            "output": {"name": out_g.outputs[0], "shape": list(self.out_shape),
                       "dtype": str(self.out_dtype),
                       "circuit_type": str(g.tensor(g.outputs[0]).dtype)},
            "buckets": list(self.buckets), "state": self.state,
        }

    def status(self) -> dict[str, Any]:
        h = self.health
        return {"graph_id": self.graph_id, "state": self.state, "error": self.error,
                "backend": self.backend, "buckets": list(self.buckets),
                "buckets_warmed": list(self.warmed), "selfcheck": self.selfcheck_result,
                "primary": "healthy" if h.healthy else "failing (served by the fallback)",
                "primary_failures": h.failures, "last_primary_error": h.last_error}

    # -- warm-up -------------------------------------------------------------------------
    def warm_up(self) -> None:
        """Prepare the primary, run every bucket on the self-check vectors and compare with
        the golden codes; run the fallback once. Raises ServeError on a mismatch."""
        self.state = "warming"
        x, expected = self.selfcheck["inputs"], self.selfcheck["expected"]
        codes = host.encode(self.compiled, x)
        golden = self._fallback(codes)
        _same(golden, expected, f"{self.name}: the golden model run now differs from the "
                                "golden output codes stored at compile time")
        self.engine = make_engine(self.backend, self.compiled, self.buckets)
        self.engine.prepare()
        self.buckets = tuple(self.engine.buckets)  # as loaded (the GPU's memory may drop some)
        n = len(x)
        checked = 0
        for b in self.buckets:  # every bucket: full, and at its smallest size (padding)
            lo = 1 if b == self.buckets[0] else self.buckets[self.buckets.index(b) - 1] + 1
            for rows in sorted({lo, b}):
                idx = np.arange(rows) % n
                got = self._primary(codes[idx])
                _same(got, expected[idx], f"{self.name}: backend {self.backend} differs from the "
                                          f"golden model at batch {rows} (bucket {b})")
                checked += rows
            self.warmed.append(b)
        self.selfcheck_result = {"vectors": n, "rows_checked": checked,
                                 "source": self.selfcheck_source, "bit_exact": True}
        self.state = "ready"

    # -- serving -------------------------------------------------------------------------
    def _primary(self, codes: np.ndarray) -> np.ndarray:
        if self.fault is not None:
            raise self.fault
        assert self.engine is not None
        top = self.buckets[-1]
        if codes.shape[0] <= top:
            return self.engine.run(codes)
        return np.concatenate([self.engine.run(codes[i: i + top])
                               for i in range(0, codes.shape[0], top)])

    def _fallback(self, codes: np.ndarray) -> np.ndarray:
        if self.fallback_fault is not None:
            raise self.fallback_fault
        g = self.compiled.graph
        return golden_plan.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]

    def run_codes(self, codes: np.ndarray) -> tuple[np.ndarray, str]:
        """(output codes, fidelity). One caller at a time (the batcher)."""
        h = self.health
        now = time.monotonic()
        err: BaseException | None = None
        if h.healthy or now >= h.retry_at:
            try:
                out = self._primary(codes)
            except Exception as e:  # noqa: BLE001 - any failure of the primary: fall back
                err = e
                h.failures += 1
                h.last_error = f"{type(e).__name__}: {_line(e)}"
                h.retry_at = now + h.backoff_s
                h.backoff_s = min(RETRY_MAX_S, h.backoff_s * 2)
                h.healthy = False
            else:
                if not h.healthy:
                    h.healthy, h.backoff_s = True, self.retry_s
                return out, "full"
        try:
            out = self._fallback(codes)
        except Exception as e:  # noqa: BLE001
            raise BackendsFailed(f"model {self.name!r}: the {self.backend} backend failed "
                                 f"({h.last_error}) and the golden fallback failed too "
                                 f"({type(e).__name__}: {_line(e)})") from None
        if self.on_fallback is not None:
            self.on_fallback(codes.shape[0], err)
        return out, "reduced"

    def run_batch(self, x: np.ndarray) -> tuple[np.ndarray, str, int]:
        """Float inputs (n, *shape) -> (float outputs, fidelity, bucket)."""
        codes = host.encode(self.compiled, x)
        out, fid = self.run_codes(codes)
        return host.decode(self.compiled, out), fid, bucket_of(self.buckets, x.shape[0])


def _line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Bit-exact for codes; for float graphs the tolerance of `verify` (sim/verify.py)."""
    from ..sim.verify import compare

    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise ServeError(f"{what}: output shape {list(got.shape)} vs {list(want.shape)}")
    r = compare(got, want, None)
    if not r["bit_exact"]:
        f = r["first_mismatch"]
        raise ServeError(f"{what} (self-check vector {f['vector']}, element {f['element']}: "
                         f"{f['a']} vs {f['b']}); refusing to serve it")


# -- loading -------------------------------------------------------------------------------
def parse_specs(items: list[str]) -> list[tuple[str, Path]]:
    """ARTIFACT_DIR or NAME=ARTIFACT_DIR -> (name, path); names unique and URL-safe."""
    out: list[tuple[str, Path]] = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not NAME_RE.match(name):
            name, path = "", item
        p = Path(path)
        if not name:
            name = p.resolve().name if p.name in ("", ".", "..") else p.name
        if not NAME_RE.match(name):
            raise ServeError(f"artifact {shown(path)}: {name!r} cannot be a model name (letters, "
                             "digits, '.', '_', '-'; at most 64); name it with NAME=ARTIFACT_DIR")
        if any(n == name for n, _ in out):
            raise ServeError(f"two artifacts are named {name!r}; name them with NAME=ARTIFACT_DIR")
        out.append((name, p))
    return out


def compiled_from_artifact(graph: Any, manifest: dict[str, Any], path: Path) -> Any:
    """A CompiledGraph rebuilt from an artifact (the compile-time plans recomputed from the
    graph: they are pure functions of it)."""
    from ..graphs.pipeline import PLANS
    from ..graphs.serialize import load_host_parts

    head, tail = load_host_parts(path)
    options = manifest["options"]
    return CompiledGraph(graph, options, (), manifest["graph_id"], options.get("profile"),
                         {name: fn(graph) for name, fn in PLANS}, head, tail)


def check_gpu_files(compiled: CompiledGraph, path: Path) -> None:
    """gpu/plan.json, kernels.cu and weights.bin must be what the graph lowers to: the
    kernels the server runs are the artifact's, byte for byte."""
    from ..gpu_backend.artifact import plan_json
    from ..gpu_backend.codegen import lower

    where = shown(path)
    prog = lower(compiled)
    try:
        plan = json.loads((path / "gpu" / "plan.json").read_text())
        src = (path / "gpu" / "kernels.cu").read_bytes()
        blob = (path / "gpu" / "weights.bin").read_bytes()
    except (OSError, ValueError) as e:
        raise ServeError(f"artifact {where}: gpu/ is not readable ({_line(e)})") from None
    want = json.loads(json.dumps(plan_json(prog, compiled), sort_keys=True))
    if plan != want:
        raise ServeError(f"artifact {where}: gpu/plan.json does not match the plan generated from "
                         "its graph (edited, or written by another version)")
    if hashlib.sha256(src).hexdigest() != prog.source_sha256:
        raise ServeError(f"artifact {where}: gpu/kernels.cu is not the source generated from its "
                         "graph")
    if blob != prog.weights_blob:
        raise ServeError(f"artifact {where}: gpu/weights.bin does not hold the graph's weights")


def load_selfcheck(compiled: CompiledGraph, manifest: dict[str, Any], path: Path
                   ) -> tuple[dict[str, np.ndarray], str]:
    from ..artifact import SELFCHECK, selfcheck_vectors

    if SELFCHECK not in manifest.get("files", {}):  # written before artifacts carried them
        return selfcheck_vectors(compiled), "generated at load (the artifact holds none)"
    where = shown(path)
    try:
        with np.load(path / SELFCHECK, allow_pickle=False) as z:
            d = {"inputs": z["inputs"], "expected": z["expected"]}
    except (OSError, ValueError, KeyError) as e:
        raise ServeError(f"artifact {where}: {SELFCHECK} is not readable ({_line(e)})") from None
    g = compiled.graph
    shp, out = host.input_shape(compiled), tuple(g.tensor(g.outputs[0]).shape)
    x, y = d["inputs"], d["expected"]
    if (x.dtype != np.float32 or x.ndim != len(shp) + 1 or tuple(x.shape[1:]) != shp
            or len(x) == 0 or y.shape != (len(x),) + out or y.dtype.kind not in "if"
            or not np.all(np.isfinite(x))):
        raise ServeError(f"artifact {where}: {SELFCHECK} does not fit the model's input and "
                         "output shapes")
    return d, "artifact"


def load_model(name: str, path: Path, backend: str, buckets: tuple[int, ...],
               retry_s: float = 1.0) -> ServedModel:
    """Read and check one artifact (no backend is started here)."""
    from ..artifact import load_artifact

    where = shown(path)
    if not path.is_dir():
        raise ServeError(f"artifact {where} is not a directory (give the folder that "
                         "`modelcircuit compile --target golden|gpu` wrote)")
    try:
        graph, manifest = load_artifact(path)
    except GraphError as e:
        raise ServeError(f"refusing artifact: {_line(e)}") from None
    target = manifest.get("target")
    if target not in SERVABLE_TARGETS:
        raise ServeError(f"artifact {where} was compiled with --target {target}; serve takes "
                         "artifacts of --target golden or gpu")
    if backend in ("gpu", "gpu-emu") and target != "gpu":
        raise ServeError(f"artifact {where} holds no GPU kernels (--target {target}); the "
                         f"{backend} backend needs `modelcircuit compile --target gpu`, or serve "
                         "it with --backend golden")
    compiled = compiled_from_artifact(graph, manifest, path)
    if target == "gpu":
        check_gpu_files(compiled, path)
    selfcheck, source = load_selfcheck(compiled, manifest, path)
    probe = host.decode(compiled, selfcheck["expected"][:1])
    m = ServedModel(name, path, compiled, manifest, backend, buckets, selfcheck, source,
                    retry_s=retry_s, in_shape=host.input_shape(compiled),
                    out_shape=tuple(probe.shape[1:]), out_dtype=probe.dtype)
    m.health.backoff_s = retry_s
    return m


def load_models(specs: list[str], backend: str, buckets: tuple[int, ...],
                retry_s: float = 1.0) -> dict[str, ServedModel]:
    """The route table: model name -> served model, built once."""
    return {name: load_model(name, p, backend, buckets, retry_s)
            for name, p in parse_specs(specs)}
