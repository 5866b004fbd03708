"""The golden plan's fast steps of the other ops: Add/Sub, ReLU, MaxPool, AvgPool, Softmax,
MultiThreshold and Reshape, each where its exactness condition holds.

Why a module of its own: each of these is a small closure over a node's constants and types
(exact float64 sums, a maximum on the codes as they are held, the Softmax and threshold
tables in C loops), with nothing of the GEMMs (graphs/golden_linear.py) nor of how the plan
runs its steps (graphs/golden_plan.py). Each function is an entry of the plan's table by op:
it takes the plan being built, the step's index and its node, and gives the step, or None
where the reference function must run.
"""

from __future__ import annotations

import numpy as np

from . import fixed as fx
from . import native
from . import reference as ref
from .golden_chain import Step
from .golden_fast import EXACT64, FORCE, Building, clip, dtype_of, fixed_out, holds, mag
from .golden_work import Work
from .ir import Graph, Node
from .ops import AvgPoolAttrs, MaxPoolAttrs, Op, ReshapeAttrs, SoftmaxAttrs
from .types import FixedType, Overflow, Rounding

Array = np.ndarray
# a Threshold whose input type has at most this many codes (times rows) is one table lookup
THRESHOLD_LUT_ENTRIES = 1 << 16


def add(p: Building, i: int, node: Node) -> Step | None:
    """Two activations, fixed point, saturating output: in float64 when exact."""
    g = p.g
    out = fixed_out(p.g, node)
    if out is None or len(node.inputs) < 2 or g.is_const(node.inputs[1]):
        return None
    ta, tb = dtype_of(g, node.inputs[0]), dtype_of(g, node.inputs[1])
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
    bound = (mag(ta) << (fine - ta.frac)) + (mag(tb) << (fine - tb.frac))
    if s > 0 and out.rounding == Rounding.RND:
        bound += 1 << (s - 1)
    if bound >= EXACT64 and "add" not in FORCE:
        return None
    if abs(s) > 900 or abs(f - ta.frac - s) > 900 or abs(f - tb.frac - s) > 900:
        return None
    ka = 2.0 ** (f - ta.frac - s)  # codes -> the output's grid (exact powers of two)
    kb = sign * 2.0 ** (f - tb.frac - s)
    lo, hi = float(out.qmin), float(out.qmax)
    if node.name in p.relu_of:
        lo = max(lo, 0.0)
        p.fused.add(p.relu_of[node.name])
    rounding = out.rounding if s > 0 else None
    L = p.loops
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
        return clip(y, lo, hi, out=y)

    return step


def relu(p: Building, i: int, node: Node) -> Step | None:
    g = p.g
    if node.name in p.fused:
        return lambda g, ins, w: ins[0]  # the Add before it clamped at 0
    out = fixed_out(p.g, node)
    if out is None or not (holds(out, dtype_of(g, node.inputs[0])) or "relu" in FORCE):
        return None

    def step(g: Graph, ins: list[Array], work: Work) -> Array:
        x = ins[0]
        return np.maximum(x, 0, out=work.get(i, x.shape, x.dtype))

    return step


def max_pool(p: Building, i: int, node: Node) -> Step | None:
    g = p.g
    out = fixed_out(p.g, node)
    if out is None or not (holds(out, dtype_of(g, node.inputs[0])) or "maxpool" in FORCE):
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


def avg_pool(p: Building, i: int, node: Node) -> Step | None:
    """A window over the whole frame (global average pooling) without padding: the
    window sum is one reduction over the spatial axes instead of a pass per position."""
    g = p.g
    out = fixed_out(p.g, node)
    a = AvgPoolAttrs.of(node)
    t_in = dtype_of(g, node.inputs[0])
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
    f64_ok = mag(t_in) * count < EXACT64

    def step(g: Graph, ins: list[Array], work: Work) -> Array:
        x = ins[0]
        if x.dtype.kind == "f" and f64_ok:
            acc = x.sum(axis=axes, dtype=np.float64, keepdims=True).astype(np.int64)
        else:
            acc = x.astype(np.int64).sum(axis=axes, keepdims=True)
        return fx.requantize(acc * recip, frac, out)

    return step


def softmax(p: Building, i: int, node: Node) -> Step | None:
    """reference.softmax's integers (tables of the compiled node), in reused arrays."""
    g = p.g
    out = fixed_out(p.g, node)
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
    L = p.loops
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
        clip(q, e_lo, e_hi, out=q)  # reference.table_index
        np.subtract(q, e_lo, out=q)
        np.right_shift(q, e_sh, out=q)
        e = work.get((i, "e"), x.shape, np.int64)
        np.take(exp_t, q, out=e)
        s = e.sum(axis=-1, keepdims=True)
        clip(s, r_lo, r_hi, out=s)
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

        p.specs[i] = (spec, 0)
    return step


def threshold(p: Building, i: int, node: Node) -> Step | None:
    """reference.threshold as one C loop: each row's thresholds sorted and its steps'
    prefix sums (plus the base) made once; per element the count guessed from the
    thresholds' spacing and checked, else a binary search (10x the reference's per-channel
    searchsorted on a ResNet-8 quantizer: 6.6 against 74 ms for 1M codes)."""
    g = p.g
    L = p.loops
    if L is None or dtype_of(g, node.inputs[0]).is_float:
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
    tx = dtype_of(g, node.inputs[0])
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


def reshape(p: Building, i: int, node: Node) -> Step:
    shape = ReshapeAttrs.of(node).shape
    return lambda g, ins, w: ins[0].reshape((ins[0].shape[0],) + tuple(shape))


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

