"""BLAS threads for the golden model and the CPU processes that run it (threadpoolctl).

OpenBLAS starts one thread per core and spins them up for every product above a tiny size.
On a machine that other processes load, a product's worker threads wait for a time slice,
and each call pays for it: the 640-128-...-640 autoencoder at 64 rows took 1.5 ms a call with
one thread and 130-160 ms with OpenBLAS's default two while other jobs ran (issue 26). So:

- a product smaller than `PARALLEL_MACS` runs on one thread. Measured on the project's
  2-core machine (AMD EPYC, OpenBLAS 0.3.31, load 3-5 from other jobs), float32/float64
  GEMMs of 5M-300M multiply-adds: a second thread saved at most 45 % on an idle moment and
  cost 2-7x whenever another process held the core (12 ms waits: the scheduler's slice).
  A second thread can only pay when one thread's work is several such slices, ~2**29
  multiply-adds (10-25 ms single-threaded); below that one thread is never much slower.
- a larger product uses at most the threads the process already allows (a user's
  OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, or an outer threadpoolctl limit) and at most the
  cores the process was given (its CPU affinity): never more threads than cores.
- `limit_process(n)` caps a worker process (a test-suite worker, a sweep worker, a server)
  to n threads once, for every BLAS call it makes, unless the user's environment already
  asks for fewer.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

# one thread below this many multiply-adds per product (see the module docstring)
PARALLEL_MACS = 1 << 29
# OpenBLAS itself runs a GEMM of M*N*K <= SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD
# (65536 * 4 by default; interface/gemm.c) on one thread: below that, a golden run does not
# touch the thread setting at all (querying and setting it back costs ~10 us a call, a
# fifth of a 64-row jet-tagger run)
SINGLE_THREAD_MACS = 1 << 18

_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cores_given() -> int:
    """The CPUs this process may run on (its affinity), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def user_limit() -> int | None:
    """The thread count the user asked for in the environment, if any (the first of
    OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS that is a positive integer)."""
    for k in _ENV:
        v = os.environ.get(k, "").strip().split(",")[0]
        if v.isdigit() and int(v) > 0:
            return int(v)
    return None


@cache
def _blas() -> tuple[Any, ...]:
    """threadpoolctl's controllers of the loaded BLAS libraries (found once: scanning the
    loaded libraries takes ~1 ms; get/set on a controller is one C call, ~1 us)."""
    from threadpoolctl import ThreadpoolController

    return tuple(ThreadpoolController().select(user_api="blas").lib_controllers)


def _get() -> list[int | None]:
    return [c.num_threads for c in _blas()]


def _set(ns: list[int | None]) -> None:
    for c, n in zip(_blas(), ns, strict=True):
        if n is not None and c.num_threads != n:
            c.set_num_threads(n)


def limit_process(n: int | None = None) -> int:
    """Cap this process's BLAS threads at n (default: the cores it was given), or at the
    user's OPENBLAS_NUM_THREADS / OMP_NUM_THREADS where that is lower. Returns the cap."""
    cap = min(n or cores_given(), cores_given())
    u = user_limit()
    if u is not None:
        cap = min(cap, u)
    cap = max(1, cap)
    _set([min(cap, t) if t else cap for t in _get()])
    return cap


def threads_for(macs: int, allowed: int) -> int:
    """BLAS threads for one product of `macs` multiply-adds when `allowed` may run."""
    return 1 if macs < PARALLEL_MACS else max(1, min(allowed, cores_given()))


class Threads:
    """Per-product thread counts inside one golden run: `use(macs)` before each product;
    the caller's settings come back on exit. Lazy: the settings are read the first time a
    product could run on more than one thread (SINGLE_THREAD_MACS or more), and written
    back only if they were changed."""

    def __init__(self) -> None:
        self.saved: list[int | None] | None = None
        self.allowed = 1
        self.now: list[int | None] = []

    def use(self, macs: int) -> None:
        if macs < SINGLE_THREAD_MACS:
            return
        if self.saved is None:
            self.saved = _get()
            self.allowed = min((t for t in self.saved if t), default=1)
            self.now = list(self.saved)
        n = threads_for(macs, self.allowed)
        want = [n if t else None for t in self.saved]
        if want != self.now:
            _set(want)
            self.now = want

    def restore(self) -> None:
        if self.saved is not None and self.now != self.saved:
            _set(self.saved)
            self.now = list(self.saved)

    def __enter__(self) -> Threads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def golden_threads() -> Threads:
    """`with golden_threads() as t:` around one golden run (a class, not a generator
    context manager: that costs ~8 us a call, a tenth of a 64-row jet-tagger run)."""
    return Threads()
