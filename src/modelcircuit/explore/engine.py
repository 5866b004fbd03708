"""Running the points: in this process (`serial`) or as Ray tasks (`local`: a Ray instance
started here with --workers CPUs and shut down at the end; `ray`: an existing cluster at
--address). The driver keeps at most `workers` tasks in flight (so a task's time starts
when it is submitted and --timeout means what it says), writes each record to the store as
it arrives, and prints a progress line per finished point.

Faults: a task whose worker process dies is retried by Ray (max_retries) and, when the
retries are spent, recorded as failed with Ray's error; a task over --timeout is cancelled
(force) and recorded as failed. Either way every point ends in the store exactly once."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from ..util.userio import one_line
from .evaluate import Data, Job, evaluate
from .spec import SweepError
from .store import Store

ENGINES = ("local", "ray", "serial")
TASK_RETRIES = 2
CONNECT_TIMEOUT_S = 3.0

Say = Callable[[str], None]


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SweepError("modelcircuit sweep needs Ray: install the extra "
                         "`pip install 'modelcircuit[sweep]'`") from None
    return ray


def check_address(address: str) -> None:
    """A cluster address must answer within CONNECT_TIMEOUT_S (Ray itself would wait a
    minute or more); refused with one line otherwise."""
    text = address
    for prefix in ("ray://", "http://", "https://"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SweepError(f"--address {address!r}: expected HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise SweepError(f"--address {address}: no Ray cluster answers there "
                         f"({e.strerror or type(e).__name__}, waited {CONNECT_TIMEOUT_S:g} s)"
                         ) from None


class Progress:
    """done/failed/running counts and an ETA from the mean time per finished point."""

    def __init__(self, total: int, skipped: int, workers: int, say: Say):
        self.total, self.skipped, self.workers, self.say = total, skipped, workers, say
        self.done = self.failed = 0
        self.t0 = time.monotonic()

    def point(self, rec: dict[str, Any], running: int) -> None:
        if rec["status"] == "done":
            self.done += 1
        else:
            self.failed += 1
        n = self.done + self.failed
        left = self.total - self.skipped - n
        el = time.monotonic() - self.t0
        eta = el * left / n if n else 0.0  # points finish at the rate seen so far
        what = (f"agreement {rec['agreement']:.3f}, {rec['estimate']['lut']} "
                f"{rec['estimate']['lut_unit']}" if rec["status"] == "done" and "estimate" in rec
                else f"failed: {rec['error']}")
        if rec.get("build"):
            b = rec["build"]
            what += f"; placed {b.get('lut')}, {b.get('fmax_mhz')} MHz, {b.get('latency_ns')} ns"
        if rec.get("verify"):
            what += f"; RTL == golden: {'yes' if rec['verify']['bit_exact'] else 'no'}"
        self.say(f"[sweep] {self.skipped + n}/{self.total} ({self.done} done, "
                 f"{self.failed} failed, "
                 f"{running} running, {self.skipped} from the store), {el:.1f} s, "
                 f"ETA {eta:.0f} s | {rec['precision']} r{rec['reuse']} {rec['device']}: {what}")


def _failed(job: Job, error: str) -> dict[str, Any]:
    return {"key": job.key, "index": job.index, "precision": job.precision, "reuse": job.reuse,
            "device": job.device, "stage": job.stage, "graph_id": job.graph_id,
            "status": "failed", "error": one_line(error)}


def run_serial(graph: Any, jobs: list[Job], data: Data, store: Store, progress: Progress
               ) -> None:
    for job in jobs:
        job.crash_flag = None  # the crash hook would end this process: Ray workers only
        rec = evaluate(graph, job, data)
        store.put(rec)
        progress.point(rec, 0)


def evaluate_in_worker(graph: Any, job: Job, data: Data) -> Any:
    """A Ray task holds one CPU (num_cpus=1): one BLAS thread, whatever the machine has,
    unless the user's OPENBLAS_NUM_THREADS / OMP_NUM_THREADS asks for fewer."""
    from ..graphs.threads import limit_process

    limit_process(1)
    return evaluate(graph, job, data)


def start_ray(engine: str, workers: int, address: str | None) -> tuple[Any, bool]:
    """(ray, whether we started it). An already initialised Ray (tests, an embedding
    program) is used as it is and left running."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    import logging
    import os

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                          "logging_level": logging.ERROR, "configure_logging": True}
    if engine == "ray":
        ray.init(address=address, **kw)
    else:
        ray.init(num_cpus=workers, **kw)
    return ray, True


def run_ray(ray: Any, graph: Any, jobs: list[Job], data: Data, store: Store,
            progress: Progress, workers: int, timeout_s: float | None) -> None:
    task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(evaluate_in_worker)
    g_ref, d_ref = ray.put(graph), ray.put(data)
    pending = list(jobs)
    inflight: dict[Any, tuple[Job, float]] = {}
    try:
        while pending or inflight:
            while pending and len(inflight) < workers:
                job = pending.pop(0)
                inflight[task.remote(g_ref, job, d_ref)] = (job, time.monotonic())
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in ready:
                job, _t = inflight.pop(ref)
                try:
                    rec = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - the worker died, retries spent
                    rec = _failed(job, f"{type(e).__name__}: the worker running this point "
                                       f"failed ({str(e).splitlines()[0] if str(e) else ''})")
                store.put(rec)
                progress.point(rec, len(inflight))
            if timeout_s:
                now = time.monotonic()
                for ref, (job, t0) in list(inflight.items()):
                    if now - t0 > timeout_s:
                        ray.cancel(ref, force=True)
                        inflight.pop(ref)
                        rec = _failed(job, f"timeout: over --timeout {timeout_s:g} s")
                        store.put(rec)
                        progress.point(rec, len(inflight))
    finally:
        for ref in inflight:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass


def default_say(s: str) -> None:
    print(s, file=sys.stderr, flush=True)
