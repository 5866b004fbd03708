"""Native chains of the golden plan (graphs/golden_plan.py): runs of Dense/Softmax steps
that run as one C call (templates/golden/loops.c's mc_program), and the exact int16 x int16
GEMM those and the convolutions use where a layer's codes and sums allow it.

Why: a Python step costs 5-10 us of interpreter and ctypes work around a few us of
arithmetic on a small layer; the jet tagger at 64 rows spent two thirds of its time between
its products (91 us a call, 34 us as one chain). And a 16-bit layer's exact float64 GEMM is
half the speed of onnxruntime's float32 one; int16 products summed in int32 are exact under
the same proven bound (arithmetic.Arithmetic.int16) and 2-5x faster than OpenBLAS's dgemm
with AVX2 / AVX-512 VNNI. Both give the steps' arrays bit for bit
(tests/graphs/test_golden_chain.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from . import native
from . import reference as ref
from .golden_work import Work
from .ir import Graph, Node
from .threads import PARALLEL_MACS, SINGLE_THREAD_MACS, golden_threads
from .types import FixedType

# a golden plan's step (golden_plan.Step): the graph, the input arrays, the work arrays
Step = Callable[[Graph, list[np.ndarray], Work], np.ndarray]

Array = np.ndarray

# the int16 GEMM (i16_weights) by its kernel (native.Loops.i16: 1 AVX2, 2 AVX-512
# VNNI): layers with fan-in and outputs at least I16_MIN[level] and a weight matrix of at
# least I16_MIN_KN[level] entries. Measured against OpenBLAS's dgemm, one thread, 256 rows
# (Xeon with AVX-512 VNNI): VNNI 640x128 3.6x, 128x128 3.1x, 64x32 1.1x, 32x32 0.9x, 64x16
# 0.9x, and at 4096 rows (convolutions) 144x16 2.7x, 576x64 5.2x, 27x16 1.3x; AVX2
# (the same machine, -mavx2) 640x128 2.0x, 128x128 2.4x, 64x32 0.7x. A fan-in at most
# I16_MAX_K (each row's input pairs are copied to the stack).
I16_MIN = {1: 64, 2: 16}
I16_MIN_KN = {1: 1 << 14, 2: 1 << 11}
I16_MAX_K = 1 << 13

# a step as native ops (graphs/native.py, loops.c's mc_program): for an input array (its
# shape, dtype, and its address as the first op's x), the ops and the output array, or None
# where the step does not take that input (the chain then runs the steps); second: the
# multiply-adds per row (the thread decision)
Spec = tuple[Callable[["Work", Array], "tuple[list[native.Op], Array] | None"], int]


class Chain:
    """A run of steps as one native call (chain_steps): the steps' ops, built per batch
    size and input type and kept with the work arrays they point into."""

    def __init__(self, specs: list[Spec], run: list[int], steps: list[Step],
                 loops: native.Loops) -> None:
        self.specs = specs
        self.per_row = max(m for _s, m in self.specs)
        self.steps = steps
        self.L = loops
        assert self.L is not None
        self.key = ("chain", run[0])
        self.qkey = ("chain", run[0], "q")

    def build(self, work: Work, x: Array) -> tuple[Any, Array] | None:
        ops: list[native.Op] = []
        y = x
        for spec, _m in self.specs:
            r = spec(work, y)
            if r is None:
                return None
            ops += r[0]
            y = r[1]
        return ops, y

    def _ops(self, work: Work, key: Any, x: Array, front: native.Op | None = None,
             xin: Array | None = None) -> tuple[Any, Array, Any, Any] | None:
        """The ops for codes x, with `front` (the quantization of floats xin into x) first
        where given: (ops, output array, input shape, input dtype), kept in `work` while
        their work arrays are."""
        fresh = work.fresh
        built = self.build(work, x)
        if built is None:
            return None
        ops = ([front] if front is not None else []) + built[0]
        xin = x if xin is None else xin
        arr = (native.Op * len(ops))(*ops)
        # (ops, output, input shape and dtype, the ops' address and count, the first op: the
        # one that reads the input, its address set per call)
        c = (arr, built[1], xin.shape, xin.dtype, ctypes.addressof(arr), len(ops), arr[0])
        if work.fresh == fresh:  # its arrays are kept: the ops serve the next call
            work.chains[key] = c
        return c

    def run(self, work: Work, c: tuple[Any, ...], x: Array) -> None:
        c[6].x = work.ptr(x)
        n = x.shape[0]
        macs = n * self.per_row  # the largest product's
        if macs < SINGLE_THREAD_MACS:  # OpenBLAS runs it on one thread by itself
            self.L.run(c[4], c[5], n)
        elif self.L.sets_threads and macs < PARALLEL_MACS:  # threads_for: 1, set in C
            self.L.run(c[4], c[5], n, True)
        elif ref.has_threads():
            ref.blas_threads(macs)
            self.L.run(c[4], c[5], n)
        else:  # called outside a golden run's thread control (from_floats)
            with golden_threads() as t:
                t.use(macs)
                self.L.run(c[4], c[5], n)

    def __call__(self, g: Graph, ins: list[Array], work: Work) -> Array:
        x = ins[0]
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        c = work.chains.get(self.key)
        if c is None or c[2] != x.shape or c[3] != x.dtype:
            c = self._ops(work, self.key, x)
            if c is None:  # an input the ops do not take: the steps
                for fn in self.steps:
                    x = fn(g, [x], work)
                return x
        self.run(work, c, x)
        return c[1]

    def from_floats(self, work: Work, x: Array, q: tuple[Any, ...], name: str) -> Array | None:
        """Quantize float input x (C-contiguous; q: Plan._quant_loop's) and run the chain on
        its codes in the same call; None where the ops do not take x."""
        key = self.qkey
        c = work.chains.get(key)
        if c is None or c[2] != x.shape or c[3] != x.dtype:
            _f, dt, scale, mode, lo, hi = q
            r = work.get(("q", name, "r"), x.shape, dt)
            front = native.Op(kind=native.OP_QUANTIZE, dtype=native.DTYPES[x.dtype],
                              dtype2=native.DTYPES[np.dtype(dt)],
                              n=x.size // max(x.shape[0], 1), mode=mode, y=work.ptr(r),
                              scale=scale, lo=lo, hi=hi)
            c = self._ops(work, key, r, front, x)
            if c is None:
                return None
        self.run(work, c, x)
        return c[1]


def chain_steps(steps: list[tuple[Step, tuple[int, ...], int]], specs: dict[int, Spec],
                slot_of: dict[str, int], g: Graph, loops: native.Loops | None) -> int:
    """Replace each run of two or more steps that have native specs, each reading only
    the one before it (whose output nothing else reads and is no graph output), by one
    step running them as one C call (loops.c's mc_program). Returns the steps so run."""
    readers: dict[int, int] = {}
    for _fn, ins, _o in steps:
        for k in ins:
            readers[k] = readers.get(k, 0) + 1
    outs = {slot_of[n] for n in g.outputs if n in slot_of}
    runs: list[list[int]] = []
    for i, (_fn, ins, _o) in enumerate(steps):
        prev = runs[-1][-1] if runs else None
        if i not in specs:
            continue
        p_out = steps[prev][2] if prev is not None else None
        if (prev == i - 1 and ins == (p_out,) and readers.get(p_out) == 1
                and p_out not in outs):
            runs[-1].append(i)
        else:
            runs.append([i])
    done = 0
    for run in reversed(runs):
        if len(run) < 2 or len(steps[run[0]][1]) != 1:
            continue
        first, last = run[0], run[-1]
        assert loops is not None  # specs are only made where the loops are
        step = Chain([specs[k] for k in run], run, [steps[k][0] for k in run], loops)
        steps[first:last + 1] = [(step, steps[first][1], steps[last][2])]
        done += len(run)
    return done


def i16_weights(loops: native.Loops | None, g: Graph, node: Node, lp: ref.Linear
                ) -> tuple[Array, float] | None:
    """(w in the int16 GEMM's pairs, 2**e) where a fused Dense/Conv may run as int16 x
    int16 products summed in int32 (loops.c's mc_gemm_i16): input and weight codes within
    int16, every partial sum under 2**31 (arithmetic.Arithmetic.int16), layers where it
    is faster (I16_MIN); else None. The sum times 2**e is the float GEMM's result."""
    L = loops
    tx, tw = g.tensor(node.inputs[0]).dtype, g.tensor(node.inputs[1]).dtype
    out = g.tensor(node.outputs[0]).dtype
    if (L is None or L.i16 not in I16_MIN or lp.arith is None or not lp.arith.int16
            or lp.dtype not in native.I16_OUT or not isinstance(out, FixedType)
            or not isinstance(tx, FixedType)
            or not isinstance(tw, FixedType)):
        return None
    k, n = lp.w.shape
    if min(k, n) < I16_MIN[L.i16] or k * n < I16_MIN_KN[L.i16] or k > I16_MAX_K:
        return None
    e = out.frac - (tx.frac + tw.frac)
    wi = np.ldexp(lp.w, -e)  # the weight codes (lp.w: codes times 2**e, exact)
    assert np.all(wi == np.floor(wi)) and np.abs(wi).max(initial=0) < (1 << 15), node.name
    kp = k + (k & 1)
    pad = np.zeros((kp, n), np.int16)
    pad[:k] = wi
    wp = np.ascontiguousarray(pad.reshape(kp // 2, 2, n).transpose(0, 2, 1))
    return wp, float(2.0 ** e)
