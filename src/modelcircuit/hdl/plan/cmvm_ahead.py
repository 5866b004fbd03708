"""The adder graphs of a design's Dense layers (hdl/plan/cmvm.py) solved side by side, in
forked processes, before the design is built.

Why: with `--strategy da` the graphs are most of an export's time (the jet tagger
fixed<16,6>: 0.9 s of CPU over four layers, 0.55 s the largest), and each layer's graph
depends only on its own weights, so on two idle cores the layers can be solved at once.
`ahead(build)` builds the design once with a cheap stand-in for every graph (no sharing:
`cse=False`) only to learn the problems its layers pose, solves those in a pool of
forked processes (largest first) and, within its block, `optimize` answers each problem
from the solutions: the same graphs, byte for byte, as solving them in turn.

Never more processes than idle cores: the cores this process was given less the load
average (a test-suite worker on a busy machine solves in turn, as before);
MODELCIRCUIT_JOBS=n sets the number (1: in turn). Small designs are solved in turn (a fork
costs more than they take)."""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from . import cmvm

JOBS_ENV = "MODELCIRCUIT_JOBS"
# below this many non-zero weights over all layers, solve in turn (measured: a fork and
# the stand-in pass cost ~0.05-0.1 s; the qkeras jet tagger's ~4k non-zero weights take 0.25 s)
MIN_WEIGHTS = 2000

_SOLVED: ContextVar[dict[bytes, cmvm.AdderGraph] | None] = ContextVar("cmvm_solved",
                                                                     default=None)
_RECORD: ContextVar[dict[bytes, tuple[Any, ...]] | None] = ContextVar("cmvm_record",
                                                                     default=None)


def _key(args: tuple[Any, ...]) -> bytes:
    w, lo, hi, bias, max_depth, cap, cse = args
    w = np.asarray(w)
    return pickle.dumps((w.shape, w.tolist(), [int(v) for v in lo], [int(v) for v in hi],
                         None if bias is None else [int(v) for v in bias], max_depth, cap,
                         cse))


def optimize(w: np.ndarray, lo: list[int] | np.ndarray, hi: list[int] | np.ndarray,
             bias: list[int] | None = None, max_depth: int | None = None,
             cap: int | None = None, cse: bool = True) -> cmvm.AdderGraph:
    """cmvm.optimize, answered from the solutions of an `ahead` block where it has them."""
    solved, record = _SOLVED.get(), _RECORD.get()
    if solved is None and record is None:
        return cmvm.optimize(w, lo, hi, bias, max_depth, cap, cse)
    args = (w, lo, hi, bias, max_depth, cap, cse)
    key = _key(args)
    if solved is not None and key in solved:
        return solved[key]
    if record is not None:  # the stand-in: only the problem is wanted
        record[key] = args
        return cmvm.optimize(w, lo, hi, bias, max_depth, cap, cse=False)
    return cmvm.optimize(*args)


def jobs() -> int:
    """Processes to solve in: MODELCIRCUIT_JOBS, else the idle cores of those given."""
    env = os.environ.get(JOBS_ENV, "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    from ...graphs.threads import cores_given

    try:
        busy = int(os.getloadavg()[0])
    except OSError:
        busy = 0
    return max(1, min(cores_given(), cores_given() - busy))


def _worker_init() -> None:
    # the parent answers signals (cli._signals_raise, inherited by the fork) and ends
    # the pool: a worker neither raises on Ctrl-C nor writes a traceback when terminated
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _solve(args: tuple[Any, ...]) -> cmvm.AdderGraph:
    return cmvm.optimize(*args)


def _solve_all(problems: dict[bytes, tuple[Any, ...]], n: int) -> dict[bytes, cmvm.AdderGraph]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    order = sorted(problems, key=lambda k: -int(np.count_nonzero(problems[k][0])))
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(min(n, len(order)), mp_context=ctx,
                             initializer=_worker_init) as pool:
        futures = {k: pool.submit(_solve, problems[k]) for k in order}
        return {k: f.result() for k, f in futures.items()}


@contextmanager
def ahead(build: Callable[[], Any]) -> Iterator[None]:
    """Within this block, `optimize` answers the problems `build()` poses from solutions
    made side by side (see the module docstring); where that cannot pay (one idle core,
    one problem, a small design, not Linux), nothing is done ahead."""
    n = jobs()
    if n < 2 or sys.platform != "linux" or _SOLVED.get() is not None:
        yield
        return
    record: dict[bytes, tuple[Any, ...]] = {}
    token = _RECORD.set(record)
    try:
        build()
    except Exception:  # noqa: BLE001 - the real build raises it again, with its message
        record.clear()
    finally:
        _RECORD.reset(token)
    weights = sum(int(np.count_nonzero(a[0])) for a in record.values())
    if len(record) < 2 or weights < MIN_WEIGHTS:
        yield
        return
    token = _SOLVED.set(_solve_all(record, n))
    try:
        yield
    finally:
        _SOLVED.reset(token)
