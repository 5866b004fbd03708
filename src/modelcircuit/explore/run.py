"""`mc.sweep(...)` / `modelcircuit sweep`: plan the points, skip the ones the store already
holds, run the rest (engine.py), write the report (report.py).

Order of work, so that bad input costs nothing and writes nothing: options, lists
(precision, reuse, device), the output folder, the engine (Ray importable, the cluster
address answering), the model and the data; then every point is compiled here once (a
precision that does not compile is refused with the point named) to get its graph id and
store key. Only then is the store folder created and the first file written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..data import load_model
from ..graphs.check import require_fixed_point
from ..graphs.host import golden
from .common import compile_model
from .engine import (
    ENGINES,
    Progress,
    check_address,
    default_say,
    import_ray,
    run_ray,
    run_serial,
    start_ray,
)
from .evaluate import CRASH_ENV, DELAY_ENV, Data, Job, compile_point
from .spec import (
    AUTO,
    MAX_POINTS,
    Point,
    SweepError,
    check_stage,
    data_digest,
    parse_devices,
    parse_precisions,
    parse_reuses,
    point_key,
    tool_versions,
)
from .store import Store, check_store

DEFAULT_VECTORS = 64
MAX_WORKERS = 1024
RANDOM_SAMPLES = 256
AUTO_JSON = "auto_precision.json"


def _import_plots() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SweepError("modelcircuit sweep's report needs matplotlib: install the extra "
                         "`pip install 'modelcircuit[sweep]'`") from None


def _load_data(model: str | None, data: Any, labels: Any, shape: tuple[int, ...]
               ) -> tuple[np.ndarray, np.ndarray | None, str]:
    from ..data import DEFAULT_MODEL, bundled
    from ..util.userio import check_array, load_array, shown

    size = int(np.prod(shape, dtype=np.int64))
    y = None
    if data is None:
        if labels is not None:
            raise SweepError("--labels needs --data (the inputs they label)")
        if model is None or Path(model).resolve() == bundled(DEFAULT_MODEL).resolve():
            d = np.load(bundled("digits_test.npz"))
            return (d["x"].reshape((-1,) + tuple(shape)).astype(np.float32), d["y"],
                    f"bundled {Path(DEFAULT_MODEL).stem} test split")
        x = np.random.default_rng(0).standard_normal((RANDOM_SAMPLES,) + tuple(shape))
        return x.astype(np.float32), None, f"{RANDOM_SAMPLES} random normal vectors (seed 0)"
    if isinstance(data, str | os.PathLike):
        x, where = load_array(data, "--data"), f"--data {shown(data)}"
    else:
        x, where = check_array(np.asarray(data, dtype=np.float32), "data"), "data"
    if x.ndim < 1 or x.shape[0] == 0 or int(np.prod(x.shape[1:], dtype=np.int64)) != size:
        raise SweepError(f"{where}: shape {list(x.shape)} does not match the model's input: "
                         f"need (N, {', '.join(map(str, shape))})")
    x = x.reshape((x.shape[0],) + tuple(shape)).astype(np.float32)
    if labels is not None:
        if isinstance(labels, str | os.PathLike):
            y, lw = load_array(labels, "--labels"), f"--labels {shown(labels)}"
        else:
            y, lw = np.asarray(labels), "labels"
        y = np.asarray(y).reshape(-1)
        if len(y) != len(x) or not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise SweepError(f"{lw}: need {len(x)} integer class labels (one per input), "
                             f"got shape {list(np.shape(y))}")
        y = y.astype(np.int64)
    return x, y, where


def _check_options(engine: str, workers: Any, target: Any, vectors: Any, timeout_s: Any
                   ) -> None:
    if engine not in ENGINES:
        raise SweepError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise SweepError(f"--workers must be within 1..{MAX_WORKERS}, got {workers!r}")
    if not isinstance(target, int | float) or not 0 < float(target) <= 1:
        raise SweepError(f"--target-agreement must be within (0, 1], got {target}")
    if not isinstance(vectors, int) or vectors < 1:
        raise SweepError(f"--vectors must be a positive integer, got {vectors!r}")
    if timeout_s is not None and not (isinstance(timeout_s, int | float) and timeout_s > 0):
        raise SweepError(f"--timeout must be a positive number of seconds, got {timeout_s}")


def _plan(graph: Any, points: list[Point], stage: str, digest: str, cal: np.ndarray | None,
          vectors: int, store: Store) -> tuple[list[Job], list[str]]:
    """Every point compiled here once: its graph id and store key (a precision that does
    not compile is refused, naming the point); the jobs are the points the store lacks
    (or holds as failed). The test hooks (evaluate.CRASH_ENV, DELAY_ENV) are read here."""
    versions = tool_versions(stage)
    jobs, keys = [], []
    for i, p in enumerate(points):
        calibrated = p.precision != AUTO  # the auto map is explicit for every tensor
        try:
            c = compile_point(graph, p.default, p.per_layer, p.reuse, p.device,
                              cal if calibrated else None)
            require_fixed_point(c.graph, "sweep")  # every stage estimates a circuit
        except ValueError as e:
            raise SweepError(f"point {p.label()}: {str(e).splitlines()[0]}") from None
        key = point_key(c.graph_id, stage, versions, digest)
        keys.append(key)
        if (rec := store.get(key)) is not None and rec.get("status") == "done":
            continue
        jobs.append(Job(i, key, c.graph_id, p.precision, p.default, p.per_layer, p.reuse,
                        p.device, stage, vectors, calibrated))
    crash_idx, _, flag = (os.environ.get(CRASH_ENV) or "").partition(":")
    try:
        delay = float(os.environ.get(DELAY_ENV) or 0)
    except ValueError:
        raise SweepError(f"{DELAY_ENV} must be a number of seconds") from None
    for j in jobs:
        j.delay_s = delay
        if flag and str(j.index) == crash_idx.strip():
            j.crash_flag = flag
    return jobs, keys


def _as_list(v: Any) -> list[str]:
    return [str(i) for i in v] if isinstance(v, list | tuple) else [str(v)]


def sweep(model: str | None = None, precision: str | Sequence[str] = "fixed<8,3>",
          reuse: str | int | Sequence[str | int] = "auto",
          device: str | Sequence[str] = "ice40-up5k", stage: str = "estimate",
          data: Any = None, labels: Any = None, engine: str = "local",
          address: str | None = None, workers: int = 2, out: str | os.PathLike[str] | None = None,
          target_agreement: float = 0.99, vectors: int = DEFAULT_VECTORS,
          timeout_s: float | None = None, calibrate: bool = True, report: bool = True,
          say: Any = None) -> dict[str, Any]:
    """Design-space exploration over precision x reuse x device (module doc). Returns
    {"points": [record, ...] in plan order, "auto": summary or None, "out": folder,
    "computed": n, "skipped": n}."""
    say = say or default_say
    stage = check_stage(stage)
    _check_options(engine, workers, target_agreement, vectors, timeout_s)
    precs = parse_precisions(_as_list(precision))
    reuses = parse_reuses(_as_list(reuse))
    devices = parse_devices(_as_list(device))
    n_points = len(precs) * len(reuses) * len(devices)
    if n_points > MAX_POINTS:
        raise SweepError(f"{n_points:,} points is over the limit of {MAX_POINTS:,}")
    from ..data import DEFAULT_MODEL

    out_dir = Path(out if out is not None else f"out/sweep-{Path(model or DEFAULT_MODEL).stem}")
    check_store(out_dir)
    if address is not None and engine == "local":
        engine = "ray"
    if engine == "ray" and not address:
        raise SweepError("--engine ray needs --address HOST:PORT of a running Ray cluster")
    if engine != "serial":
        import_ray()
    if engine == "ray":
        check_address(str(address))
    if report:
        _import_plots()

    from ..graphs import host

    graph = load_model(model)
    fc = compile_model(graph, precision="float32")
    x, y, source = _load_data(model, data, labels, host.input_shape(fc))
    float_argmax = golden(fc, x).reshape(len(x), -1).argmax(axis=1)
    cal = x if calibrate else None

    auto = None
    if any(p[0] == AUTO for p in precs):
        from .auto import search

        auto = search(graph, x, float_argmax, float(target_agreement), devices[0], reuses[0],
                      say=say)
    points = [Point(text, r, d, *((auto.per_layer, auto.default) if auto and text == AUTO
                                  else (per_layer, default)))
              for text, default, per_layer in precs for r in reuses for d in devices]
    store = Store(out_dir)
    jobs, keys = _plan(graph, points, stage, data_digest(x, y, vectors), cal, vectors, store)
    # -- from here on the store is written (the one thing written point by point) --
    store.open()
    if auto is not None:
        store.write_file(AUTO_JSON, json.dumps(auto.precision_json(), indent=1) + "\n")
    say(f"[sweep] {len(points)} points ({len(precs)} precision x {len(reuses)} reuse x "
        f"{len(devices)} device), stage {stage}, data: {source} ({len(x)} samples); "
        f"{len(points) - len(jobs)} in the store, {len(jobs)} to run on "
        f"{'this process' if engine == 'serial' else f'Ray ({engine})'}")
    progress = Progress(len(points), len(points) - len(jobs), workers, say)
    data_obj = Data(x, y, float_argmax, cal)
    if jobs:
        if engine == "serial":
            run_serial(graph, jobs, data_obj, store, progress)
        else:
            ray, started = start_ray(engine, workers, address)
            try:
                run_ray(ray, graph, jobs, data_obj, store, progress, workers, timeout_s)
            finally:
                if started:
                    ray.shutdown()
    records = []
    for p, key in zip(points, keys, strict=True):
        rec = store.get(key)
        if rec is None:  # cannot happen unless the folder was edited meanwhile
            raise SweepError(f"--out {out_dir}: the record of {p.label()} vanished")
        records.append(rec)
    result = {"points": records, "auto": auto.summary() if auto else None,
              "out": str(out_dir), "computed": len(jobs), "skipped": len(points) - len(jobs),
              "stage": stage, "data": source, "devices": devices}
    if report:
        from .report import write_report

        write_report(store, result, graph, auto, cal, x)
    return result
