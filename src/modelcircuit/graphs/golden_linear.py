"""The golden plan's fast steps of the linear ops: Dense and Conv, their GEMM and its fused
bias, rounding and clamp, as numpy calls or the C loops (graphs/native.py).

Why a module of its own: these steps are most of the plan's code and all of its weight
handling (the exact int16 GEMM, the C im2col in cache-sized chunks, the depthwise taps, the
native chain specs of a Dense), and none of it concerns how the plan resolves slots, keeps
its work arrays or quantizes its inputs (graphs/golden_plan.py), nor the element-wise ops
(graphs/golden_steps.py). Each function is an entry of the plan's table by op: it takes the
plan being built, the step's index and its node, and gives the step, or None where the
reference function must run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import native
from . import reference as ref
from .golden_chain import Step, i16_weights
from .golden_fast import Building, fixed_out
from .golden_work import Work
from .ir import Graph, Node
from .ops import ConvAttrs
from .threads import SINGLE_THREAD_MACS

Array = np.ndarray
# the C im2col's chunk of int16 window rows, bytes: a ResNet-8-sized CNN, 64 frames, side by
# side in one process: 1 MiB 46 ms a call (16-bit) / 36 ms (8-bit), 8 MiB 56 / 44 ms (a
# core's L2 is 1-2 MiB: larger chunks leave it between the im2col's writes and the GEMM's)
IM2COL_BYTES = 1 << 20


def dense(p: Building, i: int, node: Node) -> Step | None:
    g = p.g
    if fixed_out(p.g, node) is None:
        return None
    lp = ref.dense_linear(g, node)
    if lp.arith is None or not lp.arith.fused or lp.w.ndim != 2:
        return None
    if len(g.tensor(node.inputs[0]).shape) != 1:
        return None
    w, b, dt, lo, hi = lp.w, lp.b, lp.dtype, lp.lo, lp.hi
    n_out = w.shape[1]
    macs = lp.macs
    epi = p.loops.epi.get(dt) if p.loops is not None else None
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

    if epi is not None and p.loops is not None and p.loops.program is not None \
            and w.flags.c_contiguous and w.dtype == dt and (
                b is None or (b.dtype == dt and b.flags.c_contiguous)):
        k = w.shape[0]
        w_ptr = w.ctypes.data
        i16 = i16_weights(p.loops, p.g, node, lp)
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

        p.specs[i] = (spec, macs)
    return step


def _epilogue(p: Building, lp: ref.Linear) -> Callable[[Array], bool] | None:
    """The fused bias, rounding and clamp of a Dense/Conv as one C loop, in place on its
    (rows, n) GEMM result (False where the loop does not take the array)."""
    L = p.loops
    if L is None or lp.arith is None or not lp.arith.fused:
        return None
    mode = native.EPI_MODES[lp.rounding]
    b, lo, hi = lp.b, lp.lo, lp.hi
    return lambda y: L.epilogue(y, b, mode, lo, hi)


def conv(p: Building, i: int, node: Node) -> Step:
    g = p.g
    lp = ref.conv_linear(g, node)
    shape = tuple(g.tensor(node.outputs[0]).shape)
    dw = _depthwise(p, i, node, lp, shape)
    if dw is not None:
        return dw
    epilogue = _epilogue(p, lp) if lp.w.ndim == 2 else None
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
    if p.loops is None or a.group != 1 or len(a.kernel) > 2:
        return numpy_step
    # the window matrix by the C im2col (one call per chunk; numpy's copy of a strided
    # window view iterates its innermost run, C values: one at a time for a 1-channel
    # input), padding read as zeros (no padded copy), chunks as reference.conv_rows
    im2col = p.loops.im2col
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
    i16 = i16_weights(p.loops, p.g, node, lp)
    # the windows straight into the int16 GEMM's rows where they need no padding column
    cols_dt = np.dtype(np.int16) if i16 is not None and K % 2 == 0 else np.dtype(dt)
    # int16 rows in chunks of IM2COL_BYTES: they stay in cache from the im2col to the
    # int16 GEMM (BLAS blocks its own operands: float rows as reference.conv_rows)
    budget = (IM2COL_BYTES // cols_dt.itemsize if cols_dt == np.int16
              else ref.IM2COL_ELEMENTS)
    frames, rows_per = ((max(1, budget // per_frame), OH) if per_frame <= budget else
                        (1, max(1, budget // max(OW * K, 1))))
    L = p.loops
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


def _depthwise(p: Building, i: int, node: Node, lp: ref.Linear, shape: tuple[int, ...]
               ) -> Step | None:
    """A depthwise Conv (group = C, one input channel per group) as one C loop over the
    taps (loops.c mc_dwconv) and the epilogue, where its arithmetic is fused."""
    g = p.g
    L = p.loops
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
