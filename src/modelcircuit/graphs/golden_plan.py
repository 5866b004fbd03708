"""The golden model prepared once per compiled graph: what `reference.execute` computes, with
the per-call work that depends only on the graph done once.

reference.py is the definition (an interpreter: one function per op, looked up per node and
call). A `Plan` resolves every node once: its inputs and output as slots of a list, the
function that computes it, the prepared weights (reference.Linear), the shapes and types it
needs. Per call it only runs those steps. Besides:

- work arrays are kept per thread and batch size and reused call to call (a fresh array of a
  few hundred KB is a fresh mmap: a page fault per 4 KB on first touch, half the time of a
  256-row autoencoder run); the arrays handed back to the caller are always fresh;
- a Dense/Conv whose bias and requantization run fused in a float type (graphs/arithmetic.py)
  is four in-place ufuncs on one array (GEMM, + bias, floor or rint, clamp);
- a sum of two activations (Add/Sub) runs in float64 when every value it forms is an integer
  or half-integer under 2**53 (the inputs' type ranges bound it), shifts as exact
  power-of-two scales, the requantization as floor/rint and a clamp; ReLU and MaxPool whose
  output type holds every input code are a maximum on the codes in whatever exact form they
  are held (int64, or float between float GEMMs); Reshape is a view;
- the float inputs are quantized into reused float64 arrays (fx.quantize's steps, same
  results), and the float outputs decoded from the codes as they are held;
- with the C loops (graphs/native.py): runs of Dense/Softmax steps as one call and the exact
  int16 GEMM (graphs/golden_chain.py), depthwise convolutions over their taps, MultiThreshold
  as a table search (or one lookup for an input type of few codes).

Every other op (and every case a fast path's condition excludes) runs the reference function
itself. Results are the reference's bit for bit (tests/graphs/test_golden_plan.py compares
every model and a hypothesis draw of layer types across the float32/float64/int64 bounds with
`reference.execute`; each fast path has a test that a wrong bound is caught).

This module holds the plan (slots, the table FAST by op, running, quantizing the inputs,
decoding the outputs) and its cache per graph; the fast steps live by family in
graphs/golden_linear.py (Dense, Conv) and graphs/golden_steps.py (the rest), what they share
in graphs/golden_fast.py.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from . import fixed as fx
from . import golden_linear, golden_steps, native
from . import reference as ref
from .golden_chain import Chain, Spec, Step, chain_steps
from .golden_fast import FORCE, clip, dtype_of, holds
from .golden_work import Work
from .ir import Graph, GraphError, Node
from .ops import Op
from .threads import golden_threads
from .types import FixedType, Overflow, Rounding

Array = np.ndarray
# batch sizes whose work arrays are kept per plan and thread (a data set run in chunks has
# two: the chunk and the last, shorter one; a server's batch buckets a few)
KEEP_BATCHES = 4
_NONE = object()  # not decided yet

# the fast steps by op (graphs/golden_linear.py, graphs/golden_steps.py): each takes the plan
# being built, the step's index and its node, and gives the step, or None where the
# reference function must run (its condition for exactness does not hold)
FAST: dict[Op, Callable[[Plan, int, Node], Step | None]] = {
    Op.DENSE: golden_linear.dense, Op.CONV: golden_linear.conv, Op.ADD: golden_steps.add,
    Op.SUB: golden_steps.add, Op.RELU: golden_steps.relu, Op.MAX_POOL: golden_steps.max_pool,
    Op.RESHAPE: golden_steps.reshape, Op.SOFTMAX: golden_steps.softmax,
    Op.THRESHOLD: golden_steps.threshold,
    Op.AVG_POOL: golden_steps.avg_pool}


class Plan:
    """A compiled graph's golden model, prepared (see the module docstring)."""

    def __init__(self, g: Graph) -> None:
        self._g = weakref.ref(g)  # the plan keeps no graph alive (_PLANS is keyed by id)
        # the C loops (graphs/native.py) where they could be built; else the numpy steps
        self.loops = native.loops()
        self._quant_c: dict[tuple[int, np.dtype], tuple[Any, ...] | None] = {}
        self.inputs_read_in_f64 = {name for name in g.inputs if self._read_in_f64(g, name)}
        # a ReLU whose input is an Add/Sub's output read by nothing else: where the Add runs
        # its fast step, that step's clamp does it (max(clamp(v, lo, hi), 0) =
        # clamp(v, max(lo, 0), hi) for hi >= 0) and the ReLU step passes its input on
        self.relu_of: dict[str, str] = self._fusable_relus(g)  # add node -> relu node
        self.fused: set[str] = set()  # the ReLUs so done
        # steps that can also run as ops of a native chain (see _chains): step index -> spec
        self.specs: dict[int, Spec] = {}
        slot: dict[str, int] = {}
        for name in g.inputs:
            slot.setdefault(name, len(slot))
        self.steps: list[tuple[Step, tuple[int, ...], int]] = []
        for i, node in enumerate(g.nodes):
            if ref.OPS.get(node.op) is None:
                raise GraphError(f"node {node.name}: op {node.op} has no reference definition; "
                                 f"supported: {', '.join(sorted(ref.OPS))}")
            ins = tuple(slot[n] for n in node.inputs if n and n in slot)
            step = self._step(i, node)
            slot[node.outputs[0]] = len(slot)
            self.steps.append((step, ins, slot[node.outputs[0]]))
        self.n_slots = len(slot)
        self.chained = chain_steps(self.steps, self.specs, slot, g, self.loops)
        self.in_slots = [slot[n] for n in g.inputs]
        self.out_slots = [slot[n] for n in g.outputs]
        self.in_shapes = [tuple(g.tensor(n).shape) for n in g.inputs]
        # the whole plan one chain from its one input to its one output: a float input is
        # quantized in the same C call (_floats_in_one_call)
        whole = self.steps[0] if len(self.steps) == 1 else None
        self.whole = whole[0] if (whole is not None and isinstance(whole[0], Chain)
                                  and len(self.in_slots) == 1 and len(self.out_slots) == 1
                                  and whole[1] == (self.in_slots[0],)
                                  and whole[2] == self.out_slots[0]) else None
        self._local = threading.local()

    @staticmethod
    def _read_in_f64(g: Graph, name: str) -> bool:
        """Every reader of tensor `name` is a Dense/Conv whose GEMM is float64."""
        readers = [n for n in g.nodes if name in n.inputs]
        if not readers:
            return False
        for n in readers:
            if n.op not in (Op.DENSE, Op.CONV) or n.inputs[0] != name:
                return False
            lp = ref.dense_linear(g, n) if n.op == Op.DENSE else ref.conv_linear(g, n)
            if lp.arith is None or lp.dtype != np.float64:
                return False
        return True

    @staticmethod
    def _fusable_relus(g: Graph) -> dict[str, str]:
        readers: dict[str, list[Node]] = {}
        for node in g.nodes:
            for name in node.inputs:
                readers.setdefault(name, []).append(node)
        fused = {}
        for node in g.nodes:
            if node.op not in (Op.ADD, Op.SUB) or node.outputs[0] in g.outputs:
                continue
            r = readers.get(node.outputs[0], [])
            if len(r) != 1 or r[0].op != Op.RELU:
                continue
            t_in, t_out = dtype_of(g, node.outputs[0]), dtype_of(g, r[0].outputs[0])
            if holds(t_out, t_in) and isinstance(t_in, FixedType) and t_in.qmax >= 0:
                fused[node.name] = r[0].name
        return fused

    @property
    def g(self) -> Graph:
        g = self._g()
        if g is None:
            raise GraphError("the plan's graph no longer exists")
        return g

    # -- steps --------------------------------------------------------------------------
    def _step(self, i: int, node: Node) -> Step:
        fast = FAST.get(node.op)
        step = fast(self, i, node) if fast is not None else None
        if step is not None:
            return step
        fn = ref.OPS[node.op]
        return lambda g, ins, w: fn(g, node, ins)

    # -- running ------------------------------------------------------------------------
    def _work(self, n: int) -> Work:
        d = self._local.__dict__
        works: dict[int, Work] = d.setdefault("works", {})
        w = works.get(n)
        if w is None:
            while len(works) >= KEEP_BATCHES:
                works.pop(next(iter(works)))
            w = works[n] = Work()
        else:  # most recently used last
            works[n] = works.pop(n)
        return w

    def held(self, inputs: list[Array]) -> list[Array]:
        """The graph's outputs as the steps leave them: codes in int64 or exact float arrays
        (possibly reused work arrays: copy before handing out)."""
        g = self.g
        vals: list[Any] = [None] * self.n_slots
        for s, x, shp in zip(self.in_slots, inputs, self.in_shapes, strict=True):
            x = np.asarray(x)
            if x.shape[1:] != shp:
                x = x.reshape((-1,) + shp)
            vals[s] = x
        work = self._work(vals[self.in_slots[0]].shape[0] if self.in_slots else 0)
        with np.errstate(all="ignore"), golden_threads() as t:
            ref.set_threads(t)
            try:
                for fn, ins, o in self.steps:
                    vals[o] = fn(g, [vals[k] for k in ins], work)
            finally:
                ref.set_threads(None)
        return [vals[s] for s in self.out_slots]

    def _floats_in_one_call(self, x: Array) -> Array | None:
        """The held output for float input x where the whole plan is one chain and its
        quantization a C loop: both in one call (else None: quantize, then held)."""
        if self.whole is None:
            return None
        x = np.asarray(x)
        shp = self.in_shapes[0]
        if x.shape[1:] != shp:
            x = x.reshape((-1,) + shp)
        fast = self._quant_c.get((0, x.dtype), _NONE)
        if fast is _NONE:
            fast = self._quant_c[(0, x.dtype)] = self._quant_loop(self.g.inputs[0], x.dtype)
        if fast is None or not x.flags.c_contiguous:
            return None
        # C only: no numpy floating-point warnings to silence; the chain sets its threads
        return self.whole.from_floats(self._work(x.shape[0]), x, fast, self.g.inputs[0])

    def execute(self, inputs: list[Array], inputs_are_codes: bool = False) -> dict[str, Array]:
        """reference.execute(g, inputs, inputs_are_codes=...) without trace: the outputs,
        fixed point as int64 codes, float as float32 (fresh arrays)."""
        held = None
        if not inputs_are_codes:
            v = self._floats_in_one_call(inputs[0]) if len(inputs) == 1 else None
            if v is None:
                inputs = self.quantize(inputs)
            else:
                held = [v]
        res = {}
        for name, v in zip(self.g.outputs, held or self.held(inputs), strict=True):
            t = dtype_of(self.g, name)
            res[name] = v.astype(np.float32 if t.is_float else np.int64)
        return res

    def quantize(self, xs: list[Array]) -> list[Array]:
        """Float inputs -> codes, the same integers as fx.quantize (reference.quantize_inputs)
        held as exact floats for saturating types of at most 53 bits: float32 where x is
        float32, the type at most 24 bits wide and its fraction bits in [0, 100] (x * 2**frac,
        the floor, y - floor(y) and the clip are then exact in float32: no subnormal results,
        overflow only to inf, which saturates as in float64), else float64."""
        out = []
        for k, (name, x) in enumerate(zip(self.g.inputs, xs, strict=True)):
            x = np.asarray(x)
            fast = self._quant_c.get((k, x.dtype), _NONE)
            if fast is _NONE:
                fast = self._quant_c[(k, x.dtype)] = self._quant_loop(name, x.dtype)
            if fast is not None and x.flags.c_contiguous:  # the steps below in one C loop
                f, dt, scale, mode, lo, hi = fast
                work = self._work(x.shape[0])
                r = work.get(("q", name, "r"), x.shape, dt)
                if f(x.ctypes.data, work.ptr(r), x.size, scale, mode, lo, hi):
                    raise ValueError("cannot quantize NaN or Inf")
                out.append(r)
                continue
            t = dtype_of(self.g, name)
            if (not isinstance(t, FixedType) or t.overflow != Overflow.SAT or t.width > 53
                    or abs(t.frac) > 900 or x.dtype not in (np.float32, np.float64)):
                out.append(fx.quantize(x, t) if isinstance(t, FixedType)
                           else np.asarray(x, dtype=np.float32))  # reference.quantize_inputs
                continue
            # all finite <=> the float64 sum is finite (float32 values cannot overflow it;
            # a float64 sum that does is checked element by element)
            with np.errstate(over="ignore", invalid="ignore"):
                if not np.isfinite(x.sum(dtype=np.float64)) and not np.isfinite(x).all():
                    raise ValueError("cannot quantize NaN or Inf")
            work = self._work(x.shape[0])
            dt = self._quantdtype_of(t, x.dtype, name)
            r = work.get(("q", name, "r"), x.shape, dt)
            y = work.get(("q", name), x.shape, dt)
            with np.errstate(over="ignore"):  # float32 beyond its range: inf, clipped to qmax
                np.multiply(x, dt(2.0 ** t.frac), out=y)  # exact, as np.ldexp
            if t.rounding == Rounding.RND_CONV:
                np.rint(y, out=r)  # half to even, as np.round
            else:
                np.floor(y, out=r)
                if t.rounding == Rounding.RND:
                    np.subtract(y, r, out=y)  # exact: y - floor(y)
                    np.add(r, np.greater_equal(y, 0.5), out=r)
            out.append(clip(r, dt(t.qmin), dt(t.qmax), out=r))
        return out

    def _quantdtype_of(self, t: FixedType, x_dtype: np.dtype, name: str = "") -> Any:
        """float32 where exact (see quantize) unless every reader of the input multiplies in
        float64 (it would convert the codes first: a copy per call)."""
        return np.float32 if (x_dtype == np.float32 and t.width <= 24 and 0 <= t.frac <= 100
                              and "quantize32" not in FORCE
                              and name not in self.inputs_read_in_f64) or (
            "quantize32" in FORCE and x_dtype == np.float32) else np.float64

    def _quant_loop(self, name: str, x_dtype: np.dtype) -> tuple[Any, ...] | None:
        """The C quantization of input `name` from floats of x_dtype, where the numpy steps
        of `quantize` would run: (function, dtype, scale, mode, lo, hi), decided once."""
        t = dtype_of(self.g, name)
        if (self.loops is None or not isinstance(t, FixedType) or t.overflow != Overflow.SAT
                or t.width > 53 or abs(t.frac) > 900
                or x_dtype not in (np.float32, np.float64)):
            return None
        dt = self._quantdtype_of(t, x_dtype, name)
        f = self.loops.quant.get((np.dtype(x_dtype), np.dtype(dt)))
        if f is None:
            return None
        mode = (native.Q_RINT if t.rounding == Rounding.RND_CONV else
                native.Q_HALF_UP if t.rounding == Rounding.RND else native.Q_FLOOR)
        return f, dt, dt(2.0 ** t.frac), mode, dt(t.qmin), dt(t.qmax)

    def values(self, x: Array, quantize: bool) -> Array:
        """The float values (float64) of the graph's (first) output for input x: floats to
        quantize, or the input codes."""
        name = self.g.outputs[0]
        v = self._floats_in_one_call(x) if quantize else None
        if v is None:
            v = self.held(self.quantize([x]) if quantize else [x])[0]
        t = dtype_of(self.g, name)
        if t.is_float:
            return np.asarray(v, dtype=np.float64).copy()
        assert isinstance(t, FixedType)
        if abs(t.frac) > 900:
            return fx.to_float(np.asarray(v).astype(np.int64), t)
        # one pass: the codes converted to float64 (as fx.to_float) times an exact 2**-frac
        return np.multiply(v, 2.0 ** -t.frac, dtype=np.float64)


_PLANS: dict[int, Plan] = {}
_lock = threading.Lock()


def plan(g: Graph) -> Plan:
    """The graph's plan, built on first use and kept while the graph lives."""
    key = id(g)
    p = _PLANS.get(key)
    if p is None or p._g() is not g:
        with _lock:
            p = _PLANS.get(key)
            if p is None or p._g() is not g:
                p = _PLANS[key] = Plan(g)
                weakref.finalize(g, _PLANS.pop, key, None)
    return p


def execute(g: Graph, inputs: list[Array], inputs_are_codes: bool = False) -> dict[str, Array]:
    """reference.execute(g, inputs, inputs_are_codes=...) (no trace), prepared and faster:
    the same arrays."""
    return plan(g).execute(inputs, inputs_are_codes)
