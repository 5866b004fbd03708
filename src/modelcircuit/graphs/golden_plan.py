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
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from . import fixed as fx
from . import native
from . import reference as ref
from .golden_chain import Chain, Spec, Step, chain_steps, i16_weights
from .golden_work import Work
from .ir import Graph, GraphError, Node
from .ops import AvgPoolAttrs, ConvAttrs, MaxPoolAttrs, Op, ReshapeAttrs, SoftmaxAttrs
from .threads import SINGLE_THREAD_MACS, golden_threads
from .types import FixedType, NumType, Overflow, Rounding

Array = np.ndarray
# batch sizes whose work arrays are kept per plan and thread (a data set run in chunks has
# two: the chunk and the last, shorter one; a server's batch buckets a few)
KEEP_BATCHES = 4
_NONE = object()  # not decided yet
# float64 holds every integer, and every multiple of 1/2, under this exactly
_EXACT64 = 1 << 53

# clip as one ufunc call (np.clip is a Python wrapper around it: 3 us against 1.5 us on a
# 64x64 array); np.clip where a numpy lacks it
_clip = getattr(getattr(getattr(np, "_core", None), "umath", None), "clip", None) or np.clip

# the C im2col's chunk of int16 window rows, bytes: a ResNet-8-sized CNN, 64 frames, side by
# side in one process: 1 MiB 46 ms a call (16-bit) / 36 ms (8-bit), 8 MiB 56 / 44 ms (a
# core's L2 is 1-2 MiB: larger chunks leave it between the im2col's writes and the GEMM's)
IM2COL_BYTES = 1 << 20
# a Threshold whose input type has at most this many codes (times rows) is one table lookup
THRESHOLD_LUT_ENTRIES = 1 << 16
# a test hook: names of fast paths whose exactness bound is ignored (forced on), to show that
# the tests catch a wrong bound (tests/graphs/test_golden_plan.py)
FORCE: set[str] = set()


def _dtype(g: Graph, name: str) -> NumType:
    t = g.tensor(name).dtype
    if t is None:
        raise GraphError(f"tensor {name!r} has no type; compile the graph first")
    return t


def _mag(t: FixedType) -> int:
    return max(-t.qmin, t.qmax)


def _holds(out: NumType, t: NumType) -> bool:
    """Output type `out` holds every code of input type `t` unchanged (requantization is the
    identity)."""
    return (isinstance(out, FixedType) and isinstance(t, FixedType) and out.frac == t.frac
            and out.qmin <= t.qmin and out.qmax >= t.qmax)


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
            t_in, t_out = _dtype(g, node.outputs[0]), _dtype(g, r[0].outputs[0])
            if _holds(t_out, t_in) and isinstance(t_in, FixedType) and t_in.qmax >= 0:
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
        fast = {Op.DENSE: self._dense, Op.CONV: self._conv, Op.ADD: self._add,
                Op.SUB: self._add, Op.RELU: self._relu, Op.MAX_POOL: self._max_pool,
                Op.RESHAPE: self._reshape, Op.SOFTMAX: self._softmax,
                Op.THRESHOLD: self._threshold,
                Op.AVG_POOL: self._avg_pool}.get(node.op)
        step = fast(i, node) if fast is not None else None
        if step is not None:
            return step
        fn = ref.OPS[node.op]
        return lambda g, ins, w: fn(g, node, ins)

    def _fixed_out(self, node: Node) -> FixedType | None:
        t = _dtype(self.g, node.outputs[0])
        return t if isinstance(t, FixedType) else None

    def _dense(self, i: int, node: Node) -> Step | None:
        g = self.g
        if self._fixed_out(node) is None:
            return None
        lp = ref.dense_linear(g, node)
        if lp.arith is None or not lp.arith.fused or lp.w.ndim != 2:
            return None
        if len(g.tensor(node.inputs[0]).shape) != 1:
            return None
        w, b, dt, lo, hi = lp.w, lp.b, lp.dtype, lp.lo, lp.hi
        n_out = w.shape[1]
        macs = lp.macs
        epi = self.loops.epi.get(dt) if self.loops is not None else None
        mode = native.EPI_MODES[lp.rounding]
        b_ptr = None if b is None else b.ctypes.data  # b is the plan's (lp keeps it alive)

        def step(g: Graph, ins: list[Array], work: Work) -> Array:
            x = ins[0]
            n = x.shape[0]
            if x.dtype != dt:
                xc = work.get((i, "x"), x.shape, dt)
                np.copyto(xc, x, casting="unsafe")  # exact: codes within the GEMM's bound
                x = xc
            y = work.get(i, (n, n_out), dt)  # C-contiguous, dt: what the loop takes
            if n * macs >= SINGLE_THREAD_MACS:
                ref.blas_threads(n * macs)
            np.matmul(x, w, out=y)
            if epi is not None:  # bias, rounding and clamp in one C loop
                epi(work.ptr(y), b_ptr, n, n_out, mode, lo, hi)
                return y
            return lp.finish(y)

        if epi is not None and self.loops is not None and self.loops.program is not None \
                and w.flags.c_contiguous and w.dtype == dt and (
                    b is None or (b.dtype == dt and b.flags.c_contiguous)):
            k = w.shape[0]
            w_ptr = w.ctypes.data
            i16 = i16_weights(self.loops, self.g, node, lp)
            if i16 is not None:
                wp, scale = i16
                kp = k + (k & 1)

            def spec(work: Work, x: Array) -> tuple[list[native.Op], Array] | None:
                if x.ndim != 2 or x.shape[1] != k or x.dtype not in native.HELD:
                    return None
                n = x.shape[0]
                if i16 is not None:  # the exact int16 GEMM, reading x as it is held
                    z = work.get((i, "z"), (n, kp), np.int16)
                    acc = work.get((i, "acc"), (n, n_out), np.int32)
                    y = work.get(i, (n, n_out), dt)
                    return [native.Op(kind=native.OP_GEMM_I16, dtype=native.DTYPES[x.dtype],
                                      dtype2=native.DTYPES[np.dtype(dt)],
                                      k=k, n=n_out, mode=mode, x=work.ptr(x), y=work.ptr(y),
                                      w=wp.ctypes.data, b=b_ptr, lo=lo, hi=hi, scale=scale,
                                      z=work.ptr(z), acc=work.ptr(acc))], y
                ops = []
                if x.dtype != dt:  # the step's copyto: exact, codes within the GEMM's bound
                    xc = work.get((i, "x"), x.shape, dt)
                    ops.append(native.Op(kind=native.OP_CAST, dtype=native.DTYPES[x.dtype],
                                         dtype2=native.DTYPES[np.dtype(dt)], n=k,
                                         x=work.ptr(x), y=work.ptr(xc)))
                    x = xc
                y = work.get(i, (n, n_out), dt)
                ops.append(native.Op(kind=native.OP_GEMM, dtype=native.DTYPES[np.dtype(dt)],
                                     k=k, n=n_out, mode=mode, x=work.ptr(x), y=work.ptr(y),
                                     w=w_ptr, b=b_ptr, lo=lo, hi=hi))
                return ops, y

            self.specs[i] = (spec, macs)
        return step

    def _epilogue(self, lp: ref.Linear) -> Callable[[Array], bool] | None:
        """The fused bias, rounding and clamp of a Dense/Conv as one C loop, in place on its
        (rows, n) GEMM result (False where the loop does not take the array)."""
        L = self.loops
        if L is None or lp.arith is None or not lp.arith.fused:
            return None
        mode = native.EPI_MODES[lp.rounding]
        b, lo, hi = lp.b, lp.lo, lp.hi
        return lambda y: L.epilogue(y, b, mode, lo, hi)

    def _conv(self, i: int, node: Node) -> Step:
        g = self.g
        lp = ref.conv_linear(g, node)
        shape = tuple(g.tensor(node.outputs[0]).shape)
        dw = self._depthwise(i, node, lp, shape)
        if dw is not None:
            return dw
        epilogue = self._epilogue(lp) if lp.w.ndim == 2 else None
        if epilogue is None:
            def step(g: Graph, ins: list[Array], work: Work) -> Array:
                out = work.get(i, (ins[0].shape[0],) + shape, lp.out_dtype)
                return ref.conv(g, node, ins, out=out)

            return step
        a = ConvAttrs.of(node)
        out_sp, cout = shape[:-1], shape[-1]

        def rows(cols: Array, o: Array) -> Array:
            """reference_linear._linear_out's fused path, its epilogue one C loop."""
            y = lp.gemm(cols, o)
            if y is not o:
                o[...] = y
            if not epilogue(o):
                lp.finish(o)
            return o

        def numpy_step(g: Graph, ins: list[Array], work: Work) -> Array:
            out = work.get(i, (ins[0].shape[0],) + shape, lp.out_dtype)
            return ref.conv_rows(ins[0], a, out_sp, lp.dtype, cout, lp.out_dtype, rows, out)

        shape_in = tuple(g.tensor(node.inputs[0]).shape)
        if self.loops is None or a.group != 1 or len(a.kernel) > 2:
            return numpy_step
        # the window matrix by the C im2col (one call per chunk; numpy's copy of a strided
        # window view iterates its innermost run, C values: one at a time for a 1-channel
        # input), padding read as zeros (no padded copy), chunks as reference.conv_rows
        im2col = self.loops.im2col
        two = len(a.kernel) == 2
        (H, W), (KH, KW), (SH, SW) = ((shape_in[0], shape_in[1]), a.kernel, a.strides) if two \
            else ((1, shape_in[0]), (1, a.kernel[0]), (1, a.strides[0]))
        PT, PL = (a.pads[0], a.pads[1]) if two else (0, a.pads[0])
        C = shape_in[-1]
        OH, OW = (out_sp[0], out_sp[1]) if two else (1, out_sp[0])
        K = KH * KW * C
        per_frame = OH * OW * K
        dt = lp.dtype
        # the window rows' GEMM as int16 x int16 -> int32 where exact and faster (i16_weights)
        i16 = i16_weights(self.loops, self.g, node, lp)
        # the windows straight into the int16 GEMM's rows where they need no padding column
        cols_dt = np.dtype(np.int16) if i16 is not None and K % 2 == 0 else np.dtype(dt)
        # int16 rows in chunks of IM2COL_BYTES: they stay in cache from the im2col to the
        # int16 GEMM (BLAS blocks its own operands: float rows as reference.conv_rows)
        budget = (IM2COL_BYTES // cols_dt.itemsize if cols_dt == np.int16
                  else ref.IM2COL_ELEMENTS)
        frames, rows_per = ((max(1, budget // per_frame), OH) if per_frame <= budget else
                            (1, max(1, budget // max(OW * K, 1))))
        L = self.loops
        if i16 is not None:
            wp, scale = i16
            mode = native.EPI_MODES[lp.rounding]
            b_ptr = None if lp.b is None else lp.b.ctypes.data
            kp = K + (K & 1)

            def gemm_i16(cols: Array, o: Array, work: Work) -> None:
                m = cols.shape[0]
                z = cols if cols.dtype == np.int16 else work.get((i, "z"), (m, kp), np.int16)
                acc = work.get((i, "acc"), (m, cout), np.int32)
                ops = (native.Op * 1)(native.Op(
                    kind=native.OP_GEMM_I16, dtype=native.DTYPES[cols.dtype],
                    dtype2=native.DTYPES[np.dtype(dt)], k=K, n=cout,
                    mode=mode, x=work.ptr(cols), y=o.ctypes.data, w=wp.ctypes.data, b=b_ptr,
                    lo=lp.lo, hi=lp.hi, scale=scale, z=work.ptr(z), acc=work.ptr(acc)))
                L.run(ops, 1, m)


        def step(g: Graph, ins: list[Array], work: Work) -> Array:
            x = ins[0]
            if not x.flags.c_contiguous:  # (a strided view of the caller's codes)
                x = np.ascontiguousarray(x)
            f = im2col.get((x.dtype, cols_dt))
            if f is None:
                return numpy_step(g, [x], work)
            n = x.shape[0]
            out = work.get(i, (n,) + shape, lp.out_dtype)
            nf0 = min(frames, n)
            buf = work.get((i, "cols"), (nf0 * rows_per * OW, K), cols_dt)
            xp, bp, frame_bytes = work.ptr(x), work.ptr(buf), H * W * C * x.itemsize
            for f0 in range(0, n, nf0):
                nf = min(nf0, n - f0)
                for o0 in range(0, OH, rows_per):
                    nr = min(rows_per, OH - o0)
                    m = nf * nr * OW
                    f(xp + f0 * frame_bytes, bp, nf, H, W, C, OW, KH, KW, SH, SW, PT, PL,
                      o0, o0 + nr)
                    o = out[f0:f0 + nf].reshape(nf, OH * OW, cout)[:, o0 * OW:(o0 + nr) * OW]
                    o = o.reshape(m, cout)
                    if i16 is not None and o.flags.c_contiguous:
                        gemm_i16(buf[:m], o, work)
                    else:
                        rows(buf[:m], o)
            return out

        return step

    def _depthwise(self, i: int, node: Node, lp: ref.Linear, shape: tuple[int, ...]
                   ) -> Step | None:
        """A depthwise Conv (group = C, one input channel per group) as one C loop over the
        taps (loops.c mc_dwconv) and the epilogue, where its arithmetic is fused."""
        g = self.g
        L = self.loops
        a = ConvAttrs.of(node)
        shape_in = tuple(g.tensor(node.inputs[0]).shape)
        C = shape_in[-1]
        if (L is None or lp.arith is None or not lp.arith.fused or lp.w.ndim != 3
                or a.group != C or C < 2 or len(a.kernel) > 2
                or lp.w.shape[:2] != (C, int(np.prod(a.kernel)))
                or any(d != 1 for d in getattr(a, "dilations", None) or ())):
            return None
        dt = lp.dtype
        M = lp.w.shape[2]
        kk = lp.w.shape[1]
        w2 = np.ascontiguousarray(lp.w.transpose(1, 0, 2).reshape(kk, C * M), dtype=dt)
        two = len(a.kernel) == 2
        (H, W), (KH, KW), (SH, SW) = ((shape_in[0], shape_in[1]), a.kernel, a.strides) if two \
            else ((1, shape_in[0]), (1, a.kernel[0]), (1, a.strides[0]))
        PT, PL = (a.pads[0], a.pads[1]) if two else (0, a.pads[0])
        OH, OW = (shape[0], shape[1]) if two else (1, shape[0])
        epi = L.epi.get(np.dtype(dt))
        if epi is None:
            return None
        mode = native.EPI_MODES[lp.rounding]
        b_ptr = None if lp.b is None else lp.b.ctypes.data
        w_ptr = w2.ctypes.data

        def step(g: Graph, ins: list[Array], work: Work,
                 _keep: Array = w2) -> Array:  # the reordered weights stay alive
            x = ins[0]
            if not x.flags.c_contiguous:  # (a strided view of the caller's codes)
                x = np.ascontiguousarray(x)
            f = L.dwconv.get((x.dtype, np.dtype(dt)))
            if f is None:
                out = work.get(i, (x.shape[0],) + shape, lp.out_dtype)
                return ref.conv(g, node, ins, out=out)
            n = x.shape[0]
            out = work.get(i, (n,) + shape, dt)
            op = work.ptr(out)
            f(work.ptr(x), op, w_ptr, n, H, W, C, M, OH, OW, KH, KW, SH, SW, PT, PL)
            epi(op, b_ptr, n * OH * OW, C * M, mode, lp.lo, lp.hi)
            return out

        return step

    def _add(self, i: int, node: Node) -> Step | None:
        """Two activations, fixed point, saturating output: in float64 when exact."""
        g = self.g
        out = self._fixed_out(node)
        if out is None or len(node.inputs) < 2 or g.is_const(node.inputs[1]):
            return None
        ta, tb = _dtype(g, node.inputs[0]), _dtype(g, node.inputs[1])
        if not isinstance(ta, FixedType) or not isinstance(tb, FixedType):
            return None
        if out.overflow != Overflow.SAT or max(out.width, ta.width, tb.width) > 53:
            return None
        if tuple(g.tensor(node.inputs[0]).shape) != tuple(g.tensor(node.inputs[1]).shape):
            return None
        sign = -1.0 if node.op == Op.SUB else 1.0
        f = max(ta.frac, tb.frac)
        s = f - out.frac  # bits the requantization drops (< 0: the output has more)
        fine = max(f, out.frac)
        bound = (_mag(ta) << (fine - ta.frac)) + (_mag(tb) << (fine - tb.frac))
        if s > 0 and out.rounding == Rounding.RND:
            bound += 1 << (s - 1)
        if bound >= _EXACT64 and "add" not in FORCE:
            return None
        if abs(s) > 900 or abs(f - ta.frac - s) > 900 or abs(f - tb.frac - s) > 900:
            return None
        ka = 2.0 ** (f - ta.frac - s)  # codes -> the output's grid (exact powers of two)
        kb = sign * 2.0 ** (f - tb.frac - s)
        lo, hi = float(out.qmin), float(out.qmax)
        if node.name in self.relu_of:
            lo = max(lo, 0.0)
            self.fused.add(self.relu_of[node.name])
        rounding = out.rounding if s > 0 else None
        L = self.loops
        mode = {None: native.A_NONE, Rounding.TRN: native.A_FLOOR, Rounding.RND: native.A_HALF_UP,
                Rounding.RND_CONV: native.A_RINT}[rounding]

        def step(g: Graph, ins: list[Array], work: Work) -> Array:
            a, b = ins
            y = work.get(i, a.shape, np.float64)
            if L is not None and L.add(a, b, y, ka, kb, mode, lo, hi):
                return y
            t = work.get((i, "t"), a.shape, np.float64)
            # in float64 whatever the codes are held in (float32 would underflow 2**-150)
            np.multiply(a, ka, out=y, dtype=np.float64)
            np.multiply(b, kb, out=t, dtype=np.float64)
            np.add(y, t, out=y)
            if rounding == Rounding.RND:
                np.add(y, 0.5, out=y)
                np.floor(y, out=y)
            elif rounding == Rounding.TRN:
                np.floor(y, out=y)
            elif rounding == Rounding.RND_CONV:
                np.rint(y, out=y)
            return _clip(y, lo, hi, out=y)

        return step

    def _relu(self, i: int, node: Node) -> Step | None:
        g = self.g
        if node.name in self.fused:
            return lambda g, ins, w: ins[0]  # the Add before it clamped at 0
        out = self._fixed_out(node)
        if out is None or not (_holds(out, _dtype(g, node.inputs[0])) or "relu" in FORCE):
            return None

        def step(g: Graph, ins: list[Array], work: Work) -> Array:
            x = ins[0]
            return np.maximum(x, 0, out=work.get(i, x.shape, x.dtype))

        return step

    def _max_pool(self, i: int, node: Node) -> Step | None:
        g = self.g
        out = self._fixed_out(node)
        if out is None or not (_holds(out, _dtype(g, node.inputs[0])) or "maxpool" in FORCE):
            return None
        a = MaxPoolAttrs.of(node)
        if any(a.pads):
            return None
        out_sp = tuple(g.tensor(node.outputs[0]).shape[:-1])
        r = len(a.kernel)
        offsets = list(np.ndindex(*a.kernel))

        def step(g: Graph, ins: list[Array], work: Work) -> Array:
            x = ins[0]
            y = work.get(i, (x.shape[0],) + out_sp + (x.shape[-1],), x.dtype)
            for j, k in enumerate(offsets):
                sl = x[(slice(None),) + tuple(
                    slice(k[d], k[d] + a.strides[d] * (out_sp[d] - 1) + 1, a.strides[d])
                    for d in range(r))]
                if j == 0:
                    np.copyto(y, sl)
                else:
                    np.maximum(y, sl, out=y)
            return y

        return step

    def _avg_pool(self, i: int, node: Node) -> Step | None:
        """A window over the whole frame (global average pooling) without padding: the
        window sum is one reduction over the spatial axes instead of a pass per position."""
        g = self.g
        out = self._fixed_out(node)
        a = AvgPoolAttrs.of(node)
        t_in = _dtype(g, node.inputs[0])
        shape_in = tuple(g.tensor(node.inputs[0]).shape)
        if (out is None or not isinstance(t_in, FixedType) or any(a.pads)
                or tuple(a.kernel) != shape_in[:-1] or a.recip_type is None
                or len(node.inputs) < 2):
            return None
        count = int(np.prod(a.kernel))
        rc = np.asarray(g.constants[node.inputs[1]]).astype(np.int64)
        recip = rc.reshape(-1)[count] if a.exclude_pad else rc.reshape(-1)[0]
        frac = t_in.frac + a.recip_type.frac
        axes = tuple(range(1, len(shape_in)))
        # a float64 sum of the codes is exact when it stays under 2**53
        f64_ok = _mag(t_in) * count < _EXACT64

        def step(g: Graph, ins: list[Array], work: Work) -> Array:
            x = ins[0]
            if x.dtype.kind == "f" and f64_ok:
                acc = x.sum(axis=axes, dtype=np.float64, keepdims=True).astype(np.int64)
            else:
                acc = x.astype(np.int64).sum(axis=axes, keepdims=True)
            return fx.requantize(acc * recip, frac, out)

        return step

    def _softmax(self, i: int, node: Node) -> Step | None:
        """reference.softmax's integers (tables of the compiled node), in reused arrays."""
        g = self.g
        out = self._fixed_out(node)
        if out is None:
            return None
        a = SoftmaxAttrs.of(node)
        exp_t = np.asarray(g.constants[node.inputs[1]]).astype(np.int64)
        rec_t = np.asarray(g.constants[node.inputs[2]]).astype(np.int64)
        e_lo, e_sh = np.int64(a.exp_lo), np.int64(a.exp_shift)
        e_hi = np.int64(a.exp_lo + (exp_t.shape[0] << a.exp_shift) - 1)
        r_lo, r_sh = np.int64(a.recip_lo), np.int64(a.recip_shift)
        r_hi = np.int64(a.recip_lo + (rec_t.shape[0] << a.recip_shift) - 1)
        frac = a.exp_type.frac + a.recip_type.frac
        L = self.loops
        e_args = (int(e_lo), int(e_hi), int(e_sh))
        r_args = (int(r_lo), int(r_hi), int(r_sh))
        s_out = frac - out.frac
        req = {Rounding.TRN: native.R_TRN, Rounding.RND: native.R_RND,
               Rounding.RND_CONV: native.R_RND_CONV}[out.rounding]
        req_c = L is not None and out.overflow == Overflow.SAT and 0 < s_out < 63
        smax = L.smax if L is not None else {}
        exp_p, rec_p = exp_t.ctypes.data, rec_t.ctypes.data  # the closure keeps the tables

        def step(g: Graph, ins: list[Array], work: Work) -> Array:
            x = ins[0]
            f = smax.get(x.dtype) if L is not None else None
            if f is not None and x.flags.c_contiguous and x.shape[-1] > 0:
                e = work.get((i, "e"), x.shape, np.int64)
                ep, n = work.ptr(e), x.shape[-1]
                f(work.ptr(x), ep, x.size // n, n, exp_p, *e_args, rec_p, *r_args)
                if req_c:
                    L.req(ep, e.size, s_out, req, out.qmin, out.qmax)
                    return e
                return fx.requantize(e, frac, out)
            q = work.get((i, "q"), x.shape, np.int64)
            np.copyto(q, x, casting="unsafe")  # exact: the codes, however held
            np.subtract(q, q.max(axis=-1, keepdims=True), out=q)
            _clip(q, e_lo, e_hi, out=q)  # reference.table_index
            np.subtract(q, e_lo, out=q)
            np.right_shift(q, e_sh, out=q)
            e = work.get((i, "e"), x.shape, np.int64)
            np.take(exp_t, q, out=e)
            s = e.sum(axis=-1, keepdims=True)
            _clip(s, r_lo, r_hi, out=s)
            np.subtract(s, r_lo, out=s)
            np.right_shift(s, r_sh, out=s)
            np.multiply(e, rec_t[s], out=e)
            return fx.requantize(e, frac, out)

        if req_c and L is not None and L.program is not None:
            def spec(work: Work, x: Array) -> tuple[list[native.Op], Array] | None:
                if x.ndim != 2 or x.shape[1] < 1 or x.dtype not in native.HELD:
                    return None
                e = work.get((i, "e"), x.shape, np.int64)
                return [native.Op(kind=native.OP_SOFTMAX, dtype=native.DTYPES[x.dtype],
                                  n=x.shape[1], x=work.ptr(x), y=work.ptr(e), exp_t=exp_p,
                                  rec_t=rec_p, e_lo=e_args[0], e_hi=e_args[1],
                                  e_sh=e_args[2], r_lo=r_args[0], r_hi=r_args[1],
                                  r_sh=r_args[2], s_out=s_out, req_mode=req,
                                  q_lo=out.qmin, q_hi=out.qmax)], e

            self.specs[i] = (spec, 0)
        return step

    def _threshold(self, i: int, node: Node) -> Step | None:
        """reference.threshold as one C loop: each row's thresholds sorted and its steps'
        prefix sums (plus the base) made once; per element the count guessed from the
        thresholds' spacing and checked, else a binary search (10x the reference's per-channel
        searchsorted on a ResNet-8 quantizer: 6.6 against 74 ms for 1M codes)."""
        g = self.g
        L = self.loops
        if L is None or _dtype(g, node.inputs[0]).is_float:
            return None
        thr = np.asarray(g.constants[node.inputs[1]]).astype(np.int64)
        steps = np.asarray(g.constants[node.inputs[2]]).astype(np.int64)
        base = np.asarray(g.constants[node.inputs[3]]).astype(np.int64)
        if thr.ndim != 2 or thr.shape[1] < 1:
            return None
        rows, k = thr.shape
        ts, tab, inv = threshold_tables(thr, steps, base)
        shape = tuple(g.tensor(node.inputs[0]).shape)
        per = int(np.prod(shape))
        if not (rows == 1 or rows == per or (len(shape) > 1 and rows == shape[-1])):
            return None  # the reference's layouts only (it says why otherwise)
        ts_p, tab_p, inv_p = ts.ctypes.data, tab.ctypes.data, inv.ctypes.data
        # an input type of few codes: the whole map, one lookup per element
        tx = _dtype(g, node.inputs[0])
        span = tx.qmax - tx.qmin + 1 if isinstance(tx, FixedType) else 0
        lut = None
        if 0 < span * rows <= THRESHOLD_LUT_ENTRIES:
            v = np.arange(tx.qmin, tx.qmax + 1, dtype=np.int64)
            lut = np.ascontiguousarray(np.stack([
                tab[r][np.searchsorted(ts[r, 1:-1], v, side="right")] for r in range(rows)]))

        def step(g: Graph, ins: list[Array], work: Work,
                 _keep: tuple[Array | None, ...] = (ts, tab, inv, lut)) -> Array:  # alive
            x = ins[0]
            f = L.thresh.get(x.dtype)
            if f is None or not x.flags.c_contiguous:
                return ref.threshold(g, node, ins)
            out = work.get(i, x.shape, np.int64)
            if lut is not None:
                L.thresh_lut[x.dtype](work.ptr(x), work.ptr(out), x.size, rows,
                                      lut.ctypes.data, tx.qmin, span)
            else:
                f(work.ptr(x), work.ptr(out), x.size, rows, ts_p, k, tab_p, inv_p)
            return out

        return step

    def _reshape(self, i: int, node: Node) -> Step:
        shape = ReshapeAttrs.of(node).shape
        return lambda g, ins, w: ins[0].reshape((ins[0].shape[0],) + tuple(shape))

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
            t = _dtype(self.g, name)
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
            t = _dtype(self.g, name)
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
            dt = self._quant_dtype(t, x.dtype, name)
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
            out.append(_clip(r, dt(t.qmin), dt(t.qmax), out=r))
        return out

    def _quant_dtype(self, t: FixedType, x_dtype: np.dtype, name: str = "") -> Any:
        """float32 where exact (see quantize) unless every reader of the input multiplies in
        float64 (it would convert the codes first: a copy per call)."""
        return np.float32 if (x_dtype == np.float32 and t.width <= 24 and 0 <= t.frac <= 100
                              and "quantize32" not in FORCE
                              and name not in self.inputs_read_in_f64) or (
            "quantize32" in FORCE and x_dtype == np.float32) else np.float64

    def _quant_loop(self, name: str, x_dtype: np.dtype) -> tuple[Any, ...] | None:
        """The C quantization of input `name` from floats of x_dtype, where the numpy steps
        of `quantize` would run: (function, dtype, scale, mode, lo, hi), decided once."""
        t = _dtype(self.g, name)
        if (self.loops is None or not isinstance(t, FixedType) or t.overflow != Overflow.SAT
                or t.width > 53 or abs(t.frac) > 900
                or x_dtype not in (np.float32, np.float64)):
            return None
        dt = self._quant_dtype(t, x_dtype, name)
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
        t = _dtype(self.g, name)
        if t.is_float:
            return np.asarray(v, dtype=np.float64).copy()
        assert isinstance(t, FixedType)
        if abs(t.frac) > 900:
            return fx.to_float(np.asarray(v).astype(np.int64), t)
        # one pass: the codes converted to float64 (as fx.to_float) times an exact 2**-frac
        return np.multiply(v, 2.0 ** -t.frac, dtype=np.float64)


def threshold_tables(thr: Array, steps: Array, base: Array) -> tuple[Array, Array, Array]:
    """MultiThreshold's tables for the C loop (loops.c mc_threshold): each row's thresholds
    sorted, between an INT64_MIN and an INT64_MAX sentinel; base plus the prefix sums of their steps in that order (K + 1 per row); the
    inverse mean spacing (K - 1) / span per row (0 where the span is 0), its first guess."""
    rows, k = thr.shape
    order = np.argsort(thr, axis=-1, kind="stable")
    ts = np.take_along_axis(thr, order, axis=-1).astype(np.int64)
    cs = np.cumsum(np.take_along_axis(np.broadcast_to(steps, thr.shape), order, axis=-1),
                   axis=-1)
    tab = np.concatenate([np.zeros((rows, 1), np.int64), cs], axis=-1)
    b = base.reshape(-1, 1) if base.size > 1 else base.reshape(1, 1)
    tab = np.ascontiguousarray(tab + np.broadcast_to(b, tab.shape), dtype=np.int64)
    span = (ts[:, -1] - ts[:, 0]).astype(np.float64)
    inv = np.ascontiguousarray(np.where(span > 0, (k - 1) / np.where(span > 0, span, 1), 0.0))
    info = np.iinfo(np.int64)
    ts = np.ascontiguousarray(np.concatenate(  # between sentinels (the C loop's one test)
        [np.full((rows, 1), info.min), ts, np.full((rows, 1), info.max)], axis=1))
    return ts, tab, inv


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
