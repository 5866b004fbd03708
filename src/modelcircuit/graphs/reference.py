"""The golden interpreter: the living definition of what every op computes.

Two modes, decided by the tensor types: FloatType tensors are computed in float32 (compared
with onnxruntime), FixedType tensors as int64 codes, bit-exact (DESIGN.md, "Numbers"). Every
backend is tested against this file. Fixed-point arrays here are always codes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import fixed as fx
from .ir import Graph, GraphError, Node
from .ops import (
    AvgPoolAttrs,
    BatchNormAttrs,
    BipolarAttrs,
    ClipAttrs,
    ConcatAttrs,
    ConvAttrs,
    DenseAttrs,
    GatherAttrs,
    LeakyReluAttrs,
    LutAttrs,
    MaxPoolAttrs,
    Op,
    RequantAttrs,
    ReshapeAttrs,
    ResizeAttrs,
    SoftmaxAttrs,
    TransposeAttrs,
    TruncAttrs,
)
from .types import FixedType, NumType, Overflow

Array = np.ndarray
OpFn = Callable[[Graph, Node, list[Array]], Array]


def _t(g: Graph, name: str) -> NumType:
    t = g.tensor(name).dtype
    if t is None:
        raise GraphError(f"tensor {name!r} has no type; compile the graph first")
    return t


def _const(g: Graph, name: str) -> Array:
    return np.asarray(g.constants[name])


def _out(g: Graph, node: Node) -> NumType:
    return _t(g, node.outputs[0])


def _is_fixed(g: Graph, node: Node) -> bool:
    return not _out(g, node).is_float


def _as_codes(g: Graph, name: str, v: Array) -> tuple[Array, FixedType]:
    t = _t(g, name)
    assert isinstance(t, FixedType), f"{name} is not fixed point"
    return v.astype(np.int64), t


def _add_bias(g: Graph, acc: np.ndarray, frac: int, bn: str | None
              ) -> tuple[np.ndarray, int]:
    """An exact sum of products (codes at `frac` fraction bits) plus the bias codes, aligned
    to the finer of the two: Dense and Conv add their bias the same way."""
    if not bn:
        return acc, frac
    tb = _t(g, bn)
    b = _const(g, bn).astype(np.int64)
    if tb.frac > frac:
        acc = fx.align(acc, frac, tb.frac)
        frac = tb.frac
    return acc + fx.align(b, tb.frac, frac), frac


def _finish(g: Graph, node: Node, q: Array, frac: int) -> Array:
    """Requantize exact codes at `frac` to the node's output type."""
    t = _out(g, node)
    assert isinstance(t, FixedType)
    return fx.requantize(q, frac, t)


def _f32(v: Array) -> Array:
    return np.asarray(v, dtype=np.float32)


# -- Dense ------------------------------------------------------------------------
def exact_matmul(x: Array, w: Array, bound_bits: int) -> Array:
    """Integer x @ w, exact. BLAS in float64 is exact while every partial sum stays under
    2**53, which the accumulator width (computed at compile time) guarantees."""
    if bound_bits <= 53:
        return (x.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
    return np.einsum("bk,kn->bn", x.astype(np.int64), w.astype(np.int64))


def dense(g: Graph, node: Node, ins: list[Array]) -> Array:
    x = ins[0]
    wn = node.inputs[1]
    bn = node.inputs[2] if len(node.inputs) > 2 else None
    relu = DenseAttrs.of(node).relu
    if not _is_fixed(g, node):
        y = _f32(x) @ _f32(_const(g, wn))
        if bn:
            y = y + _f32(_const(g, bn))
        return _f32(np.maximum(y, 0) if relu else y)
    xq, tx = _as_codes(g, node.inputs[0], x)
    tw = _t(g, wn)
    acc_t = _accumulator(g, node)
    out_t = _out(g, node)
    if acc_t.width <= 53:
        # Fast path, same numbers: every partial sum and the aligned bias are integers under
        # 2**53, so float64 BLAS is exact; then one conversion and the integer requantization.
        acc_f = x.astype(np.float64) @ _const(g, wn).astype(np.float64)
        frac = tx.frac + tw.frac
        if bn:
            tb = _t(g, bn)
            f = max(frac, tb.frac)
            if f != frac:
                acc_f *= 2.0 ** (f - frac)
            acc_f += _const(g, bn).astype(np.float64) * 2.0 ** (f - tb.frac)
            frac = f
        q = fx.shift_round(acc_f.astype(np.int64), frac - out_t.frac, out_t.rounding)
        if relu and out_t.overflow == Overflow.SAT:  # max(sat(q), 0) == clamp(q, max(qmin, 0), qmax)
            return fx.clamp(q, max(out_t.qmin, 0), out_t.qmax)
        y = fx.overflow(q, out_t)
        return np.maximum(y, 0) if relu else y
    acc = exact_matmul(xq, _const(g, wn), acc_t.width)
    acc, frac = _add_bias(g, acc, tx.frac + tw.frac, bn)
    y = _finish(g, node, acc, frac)
    return np.maximum(y, 0) if relu else y


def _accumulator(g: Graph, node: Node) -> FixedType:
    t = DenseAttrs.of(node).acc
    if t is None:
        raise GraphError(f"node {node.name}: accumulator type not computed; compile first")
    return t


# -- element-wise ---------------------------------------------------------------------
def add(g: Graph, node: Node, ins: list[Array], sign: int = 1) -> Array:
    a = ins[0]
    bname = node.inputs[1]
    b = _const(g, bname) if g.is_const(bname) else ins[1]
    if not _is_fixed(g, node):
        return _f32(_f32(a) + sign * _f32(b))
    ta, tb = _t(g, node.inputs[0]), _t(g, bname)
    f = max(ta.frac, tb.frac)
    q = fx.align(a.astype(np.int64), ta.frac, f) + sign * fx.align(b.astype(np.int64), tb.frac, f)
    return _finish(g, node, q, f)


def sub(g: Graph, node: Node, ins: list[Array]) -> Array:
    return add(g, node, ins, sign=-1)


def _second(g: Graph, node: Node, ins: list[Array]) -> Array:
    """The second operand of a binary op: a constant, or the second activation."""
    name = node.inputs[1]
    return _const(g, name) if g.is_const(name) else ins[1]


def mul(g: Graph, node: Node, ins: list[Array]) -> Array:
    """x * c (a constant) or x * y (two activations, numpy broadcasting per sample).
    Fixed point: the exact product of the codes at frac_x + frac_y, then one requantization."""
    b = _second(g, node, ins)
    if not _is_fixed(g, node):
        return _f32(_f32(ins[0]) * _f32(b))
    tx, tc = _t(g, node.inputs[0]), _t(g, node.inputs[1])
    return _finish(g, node, ins[0].astype(np.int64) * b.astype(np.int64), tx.frac + tc.frac)


def div(g: Graph, node: Node, ins: list[Array]) -> Array:
    """x / y of two activations, float32 (as ONNX: IEEE division, x/0 = ±inf, 0/0 = nan).
    Fixed point has no Div: the compiler refuses it (passes/accumulators.py)."""
    if _is_fixed(g, node):
        raise GraphError(f"node {node.name} (Div): division of two activations is float only")
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f32(_f32(ins[0]) / _f32(_second(g, node, ins)))


def relu(g: Graph, node: Node, ins: list[Array]) -> Array:
    if not _is_fixed(g, node):
        return _f32(np.maximum(ins[0], 0))
    return _finish(g, node, np.maximum(ins[0].astype(np.int64), 0), _t(g, node.inputs[0]).frac)


def leaky_relu(g: Graph, node: Node, ins: list[Array]) -> Array:
    x = ins[0]
    if not _is_fixed(g, node):
        a = np.float32(LeakyReluAttrs.of(node).alpha)
        return _f32(np.where(x >= 0, x, _f32(x) * a))
    an = node.inputs[1]
    tx, ta = _t(g, node.inputs[0]), _t(g, an)
    alpha = int(_const(g, an).reshape(-1)[0])
    q = x.astype(np.int64)
    y = np.where(q >= 0, np.left_shift(q, ta.frac), q * alpha)
    return _finish(g, node, y, tx.frac + ta.frac)


def _hard_sigmoid(x: Array, n: Node) -> Array:
    """ONNX HardSigmoid max(0, min(1, alpha * x + beta)), in the dtype of x (float32 for the
    float model, float64 where the tables are built); HardSwish is x times it (alpha 1/6)."""
    a = LutAttrs.of(n)
    alpha = (1.0 / 6.0 if a.func == "hardswish" else 0.2) if a.alpha is None else a.alpha
    beta = 0.5 if a.beta is None else a.beta
    dt = x.dtype if x.dtype.kind == "f" else np.float64
    return np.clip(x * dt.type(alpha) + dt.type(beta), 0, 1).astype(dt)


def _selu(x: Array, n: Node) -> Array:
    a = LutAttrs.of(n)
    return a.selu_gamma * np.where(x > 0, x, a.selu_alpha * (np.exp(np.minimum(x, 0)) - 1.0))


# the float function of each ops.LUT_FUNCS name (the tables are built from these)
FLOAT_FUNCS: dict[str, Callable[[Array, Node], Array]] = {
    "sigmoid": lambda x, n: 1.0 / (1.0 + np.exp(-x)),
    "tanh": lambda x, n: np.tanh(x),
    "exp": lambda x, n: np.exp(x),
    "selu": _selu,
    "reciprocal": lambda x, n: 1.0 / x,
    "hardsigmoid": lambda x, n: _hard_sigmoid(x, n),
    "hardswish": lambda x, n: x * _hard_sigmoid(x, n),
}


def table_index(q: Array, lo: int, shift: int, size: int) -> Array:
    """The documented table indexing: clip the code into the table's domain
    [lo, lo + (size << shift) - 1], subtract lo and drop `shift` low bits."""
    hi = lo + (size << shift) - 1
    return np.right_shift(np.clip(q.astype(np.int64), lo, hi) - lo, shift)


def lut(g: Graph, node: Node, ins: list[Array]) -> Array:
    a = LutAttrs.of(node)
    if not _is_fixed(g, node):
        x = ins[0].astype(np.float32)
        return _f32(FLOAT_FUNCS[a.func](x, node))
    table = _const(g, node.inputs[1]).astype(np.int64)
    idx = table_index(ins[0], a.lo, a.shift, table.shape[0])
    return table[idx]


def softmax(g: Graph, node: Node, ins: list[Array]) -> Array:
    x = ins[0]
    if not _is_fixed(g, node):
        x32 = _f32(x)
        e = np.exp(x32 - x32.max(axis=-1, keepdims=True))
        return _f32(e / e.sum(axis=-1, keepdims=True))
    a = SoftmaxAttrs.of(node)
    exp_t, rec_t = _const(g, node.inputs[1]).astype(np.int64), _const(g, node.inputs[2]).astype(np.int64)
    q = x.astype(np.int64)
    d = q - q.max(axis=-1, keepdims=True)
    e = exp_t[table_index(d, a.exp_lo, a.exp_shift, exp_t.shape[0])]
    s = e.sum(axis=-1, keepdims=True)
    r = rec_t[table_index(s, a.recip_lo, a.recip_shift, rec_t.shape[0])]
    return _finish(g, node, e * r, a.exp_type.frac + a.recip_type.frac)


def threshold(g: Graph, node: Node, ins: list[Array]) -> Array:
    """MultiThreshold: out = base + sum_k step[c,k] * (x[c] >= thr[c,k]), all integers; c
    is the element (one row each), or the channel (last axis) of a frame with one row per
    channel."""
    thr = _const(g, node.inputs[1]).astype(np.int64)
    steps = _const(g, node.inputs[2]).astype(np.int64)
    base = _const(g, node.inputs[3]).astype(np.int64)
    x = ins[0]
    shp = x.shape
    if _t(g, node.inputs[0]).is_float:
        raise GraphError(f"node {node.name}: Threshold needs a fixed-point input")
    # one row per element, or (a frame) one row per channel of the last axis
    rows = thr.shape[0]
    flat = x.reshape(shp[0], -1, rows) if len(shp) > 2 and rows == shp[-1] and rows != \
        int(np.prod(shp[1:])) else x.reshape(shp[0], -1)
    # the same sum, without the (..., rows, K) comparison tensor (an 8-bit quantizer has K =
    # 255): per row, the thresholds sorted with their steps, and x's count of thresholds <= x
    # picks the prefix sum of those steps
    order = np.argsort(thr, axis=-1, kind="stable")
    ts = np.take_along_axis(thr, order, axis=-1)
    cs = np.cumsum(np.take_along_axis(np.broadcast_to(steps, thr.shape), order, axis=-1),
                   axis=-1)
    cs = np.concatenate([np.zeros((rows, 1), dtype=np.int64), cs], axis=-1)
    xi = flat.astype(np.int64)
    if rows == 1:  # one row for every element (a per-tensor quantizer)
        summed = cs[0, np.searchsorted(ts[0], xi, side="right")]
    else:
        summed = np.empty(xi.shape, dtype=np.int64)
        for r in range(rows):
            summed[..., r] = cs[r, np.searchsorted(ts[r], xi[..., r], side="right")]
    out = base + summed
    return out.reshape(shp)


def requant(g: Graph, node: Node, ins: list[Array]) -> Array:
    x = ins[0]
    tin, tout = _t(g, node.inputs[0]), _out(g, node)
    if tout.is_float:
        # float model keeping the model's quantizer: fake-quantize with the quantizer's type
        t = RequantAttrs.of(node).quant_type
        return _f32(fx.to_float(fx.quantize(x, t), t))
    if tin.is_float:
        return fx.quantize(x, tout)
    return fx.requantize(x.astype(np.int64), tin.frac, tout)


def bipolar(g: Graph, node: Node, ins: list[Array]) -> Array:
    x = ins[0]
    tout = _out(g, node)
    if tout.is_float:
        return _f32(np.where(x >= 0, 1.0, -1.0) * BipolarAttrs.of(node).scale)
    return np.where(x >= 0, 1, -1).astype(np.int64)


def batchnorm(g: Graph, node: Node, ins: list[Array]) -> Array:
    if _is_fixed(g, node):
        raise GraphError(f"node {node.name}: BatchNorm must be folded before fixed-point runs")
    s, b, m, v = (_f32(_const(g, n)) for n in node.inputs[1:5])
    eps = np.float32(BatchNormAttrs.of(node).epsilon)
    x = _f32(ins[0])
    shp = (1, -1) + (1,) * (x.ndim - 2)
    return _f32((x - m.reshape(shp)) / np.sqrt(v.reshape(shp) + eps) * s.reshape(shp) + b.reshape(shp))


def reshape(g: Graph, node: Node, ins: list[Array]) -> Array:
    return ins[0].reshape((ins[0].shape[0],) + ReshapeAttrs.of(node).shape)


def transpose(g: Graph, node: Node, ins: list[Array]) -> Array:
    return np.transpose(ins[0], (0,) + tuple(p + 1 for p in TransposeAttrs.of(node).perm))


def _to_out(g: Graph, node: Node, name: str, v: Array) -> Array:
    """An input's values in the node's output representation (data movement ops):
    float32, or its codes requantized to the output type (exact when the types agree)."""
    if not _is_fixed(g, node):
        return _f32(v)
    return fx.requantize(v.astype(np.int64), _t(g, name).frac, _out(g, node))


def concat(g: Graph, node: Node, ins: list[Array]) -> Array:
    """Concatenation of activations along per-sample axis `axis` (negative: from the last,
    as ONNX; never the batch axis)."""
    parts = [_to_out(g, node, n, v) for n, v in zip(node.inputs, ins, strict=True)]
    rank = len(g.tensor(node.outputs[0]).shape)
    axis = ConcatAttrs.of(node).axis
    if not -rank <= axis < rank:
        raise GraphError(f"node {node.name} (Concat): axis {axis} is out of range for rank {rank}")
    return np.concatenate(parts, axis=axis % rank + 1)


def gather(g: Graph, node: Node, ins: list[Array]) -> Array:
    """np.take along per-sample axis `axis` with the constant (non-negative) `indices`."""
    a = GatherAttrs.of(node)
    return np.take(_to_out(g, node, node.inputs[0], ins[0]), a.index_array(), axis=a.axis + 1)


# -- channels-last window ops (per sample (L, C) or (H, W, C); batch first here) ----------
def _pad(x: Array, pads: tuple[int, ...], value: float | int) -> Array:
    r = len(pads) // 2
    if not any(pads):
        return x
    width = [(0, 0)] + [(pads[i], pads[i + r]) for i in range(r)] + [(0, 0)]
    return np.pad(x, width, constant_values=value)


def _windows(xp: Array, kernel: tuple[int, ...], strides: tuple[int, ...],
             out_sp: tuple[int, ...]):
    """For each kernel offset (row-major), the (N, *out_sp, C) slice of the padded input
    that this offset of every output window reads."""
    for k in np.ndindex(*kernel):
        yield k, xp[(slice(None),) + tuple(
            slice(k[i], k[i] + strides[i] * (out_sp[i] - 1) + 1, strides[i])
            for i in range(len(kernel)))]


def _out_spatial(g: Graph, node: Node) -> tuple[int, ...]:
    return tuple(g.tensor(node.outputs[0]).shape[:-1])


def conv_sum(x: Array, w: Array, a: ConvAttrs, out_sp: tuple[int, ...]) -> Array:
    """sum over each window and group of x * w, in the dtype of x and w (float32: the float
    model; float64 exact while every partial sum stays under 2**53, which the accumulator
    width guarantees; int64 beyond). x (N, *S, Cin), w (*kernel, Cin/group, Cout)."""
    xp = _pad(x, a.pads, 0)
    cout = w.shape[-1]
    g = a.group
    acc = np.zeros((x.shape[0],) + out_sp + (cout,), dtype=np.result_type(x, w))
    for k, sl in _windows(xp, a.kernel, a.strides, out_sp):
        wk = w[k]  # (Cin/group, Cout)
        if g == 1:
            acc += sl @ wk
        elif wk.shape[0] == 1:  # depthwise: output channel o reads input channel o // m
            m = cout // g
            acc += (sl[..., :, None] * wk.reshape(g, m)).reshape(acc.shape)
        else:
            ci = wk.shape[0]
            part = np.einsum("...gi,igj->...gj", sl.reshape(sl.shape[:-1] + (g, ci)),
                             wk.reshape(ci, g, cout // g))
            acc += part.reshape(acc.shape)
    return acc


def conv(g: Graph, node: Node, ins: list[Array]) -> Array:
    a = ConvAttrs.of(node)
    wn = node.inputs[1]
    bn = node.inputs[2] if len(node.inputs) > 2 else None
    out_sp = _out_spatial(g, node)
    if not _is_fixed(g, node):
        y = conv_sum(_f32(ins[0]), _f32(_const(g, wn)), a, out_sp)
        if bn:
            y = y + _f32(_const(g, bn))
        return _f32(np.maximum(y, 0) if a.relu else y)
    if a.acc is None:
        raise GraphError(f"node {node.name}: accumulator type not computed; compile first")
    tx, tw = _t(g, node.inputs[0]), _t(g, wn)
    dt = np.float64 if a.acc.width <= 53 else np.int64
    acc = conv_sum(ins[0].astype(dt), _const(g, wn).astype(dt), a, out_sp).astype(np.int64)
    acc, frac = _add_bias(g, acc, tx.frac + tw.frac, bn)
    y = _finish(g, node, acc, frac)
    return np.maximum(y, 0) if a.relu else y


def max_pool(g: Graph, node: Node, ins: list[Array]) -> Array:
    """Maximum over each window; padding never wins. Fixed point: the codes' maximum in the
    output type (the input's, unless a pass chose another)."""
    a = MaxPoolAttrs.of(node)
    out_sp = _out_spatial(g, node)
    fixed = _is_fixed(g, node)
    x = ins[0].astype(np.int64) if fixed else _f32(ins[0])
    low = np.iinfo(np.int64).min if fixed else -np.inf
    y = None
    for _, sl in _windows(_pad(x, a.pads, low), a.kernel, a.strides, out_sp):
        y = sl.copy() if y is None else np.maximum(y, sl)
    assert y is not None
    return _to_out(g, node, node.inputs[0], y) if fixed else _f32(y)


def avg_pool(g: Graph, node: Node, ins: list[Array]) -> Array:
    """Mean over each window, padding counted as zeros (count_include_pad=1). Fixed point:
    the exact window sum times the constant recip = round(2**F / count) (recip_type, F its
    fractional bits), one requantization to the output type; float32: sum / count."""
    a = AvgPoolAttrs.of(node)
    out_sp = _out_spatial(g, node)
    count = int(np.prod(a.kernel))
    fixed = _is_fixed(g, node)
    x = ins[0].astype(np.int64) if fixed else _f32(ins[0])
    acc = np.zeros((x.shape[0],) + out_sp + (x.shape[-1],), dtype=x.dtype)
    for _, sl in _windows(_pad(x, a.pads, 0), a.kernel, a.strides, out_sp):
        acc += sl
    if not fixed:
        return _f32(acc / np.float32(count))
    if a.recip_type is None or len(node.inputs) < 2:
        raise GraphError(f"node {node.name}: AvgPool reciprocal not computed; compile first")
    recip = int(_const(g, node.inputs[1]).reshape(-1)[0])
    return _finish(g, node, acc * recip, _t(g, node.inputs[0]).frac + a.recip_type.frac)


def resize(g: Graph, node: Node, ins: list[Array]) -> Array:
    """Nearest-neighbour upsampling by integer factors: each input pixel repeated."""
    y = ins[0]
    for i, s in enumerate(ResizeAttrs.of(node).scales):
        if s != 1:
            y = np.repeat(y, s, axis=i + 1)
    return _to_out(g, node, node.inputs[0], y)


def clip(g: Graph, node: Node, ins: list[Array]) -> Array:
    """min(max(x, lo), hi). Float32 as ONNX; fixed point: the codes clamped to the bounds
    rounded inward onto the input's grid (ClipAttrs), then one requantization."""
    a = ClipAttrs.of(node)
    if not _is_fixed(g, node):
        lo = -np.inf if a.lo is None else np.float32(a.lo)
        hi = np.inf if a.hi is None else np.float32(a.hi)
        return _f32(np.minimum(np.maximum(_f32(ins[0]), lo), hi))
    lo_q, hi_q = clip_codes(a, _t(g, node.inputs[0]))
    return _finish(g, node, fx.clamp(ins[0].astype(np.int64), lo_q, hi_q),
                   _t(g, node.inputs[0]).frac)


def clip_codes(a: ClipAttrs, t: NumType) -> tuple[int, int]:
    """The bounds of a fixed-point Clip as input codes: ceil(lo * 2**F), floor(hi * 2**F),
    within the type's range (exact: Fraction arithmetic on the float bounds)."""
    from fractions import Fraction

    assert isinstance(t, FixedType)
    lo, hi = t.qmin, t.qmax
    if a.lo is not None:
        v = Fraction(a.lo) * Fraction(2) ** t.frac
        lo = max(lo, -((-v.numerator) // v.denominator))
    if a.hi is not None:
        v = Fraction(a.hi) * Fraction(2) ** t.frac
        hi = min(hi, v.numerator // v.denominator)
    return lo, hi  # lo > hi: every code becomes hi, as ONNX's min(max(x, lo), hi)


def trunc_round(q: Array, d: int, mode: str) -> Array:
    """q / 2**d rounded by a QONNX rounding mode, exactly in integers (d > 0; d <= 0 is the
    exact product q * 2**-d). FLOOR, CEIL; DOWN toward zero (np.fix), UP away from zero;
    ROUND/HALF_EVEN half to even (np.round), HALF_UP half away from zero, HALF_DOWN half
    toward zero (qonnx.custom_op.general.intquant.resolve_rounding_mode)."""
    q = q.astype(np.int64)
    if d <= 0:
        return np.left_shift(q, -d)
    fl = np.right_shift(q, d)
    rem = q - np.left_shift(fl, d)
    exact = rem == 0
    half = np.int64(1) << (d - 1)
    neg = q < 0
    m = mode.upper()
    if m == "FLOOR":
        return fl
    if m == "CEIL":
        return fl + ~exact
    if m == "DOWN":
        return np.where(neg, fl + ~exact, fl)
    if m == "UP":
        return np.where(neg, fl, fl + ~exact)
    up = rem > half
    tie = rem == half
    if m in ("ROUND", "HALF_EVEN"):
        return fl + (up | (tie & (fl & 1).astype(bool)))
    if m == "HALF_UP":
        return fl + (up | (tie & ~neg))
    if m == "HALF_DOWN":
        return fl + (up | (tie & neg))
    raise GraphError(f"Trunc rounding mode {mode!r} is not one of QONNX's")


def trunc(g: Graph, node: Node, ins: list[Array]) -> Array:
    """QONNX Trunc on codes: the input's value on the output type's grid, rounded by the
    node's mode, then saturated to the output type's range (qonnx trunc_v2: round, divide by
    the power-of-two truncation scale, clamp, round by the mode; clamping before or after a
    monotone rounding of integer bounds is the same)."""
    tin, tout = _t(g, node.inputs[0]), _out(g, node)
    if tout.is_float or tin.is_float:
        raise GraphError(f"node {node.name} (Trunc): needs fixed-point input and output types")
    assert isinstance(tout, FixedType)
    q = trunc_round(ins[0], tin.frac - tout.frac, TruncAttrs.of(node).mode)
    return fx.clamp(q, tout.qmin, tout.qmax)


# What every op of the vocabulary computes (tests/graphs/test_ops.py: all of ops.Op, no other).
OPS: dict[Op, OpFn] = {
    Op.DENSE: dense, Op.ADD: add, Op.SUB: sub, Op.MUL: mul, Op.DIV: div, Op.RELU: relu,
    Op.LEAKY_RELU: leaky_relu, Op.LUT: lut, Op.SOFTMAX: softmax, Op.THRESHOLD: threshold,
    Op.REQUANT: requant, Op.BIPOLAR: bipolar, Op.BATCHNORM: batchnorm, Op.RESHAPE: reshape,
    Op.TRANSPOSE: transpose, Op.CONCAT: concat, Op.GATHER: gather, Op.CONV: conv,
    Op.MAX_POOL: max_pool, Op.AVG_POOL: avg_pool, Op.RESIZE: resize,
    Op.CLIP: clip, Op.TRUNC: trunc,
}


def quantize_inputs(g: Graph, xs: list[Array]) -> list[Array]:
    """Float inputs -> the graph's input representation (codes for fixed-point inputs)."""
    out = []
    for name, x in zip(g.inputs, xs, strict=True):
        t = _t(g, name)
        out.append(_f32(x) if t.is_float else fx.quantize(x, t))
    return out


def execute(g: Graph, inputs: list[Array], trace: bool = False,
            inputs_are_codes: bool = False) -> dict[str, Array]:
    """Run the graph on a batch. Returns every tensor if `trace`, else only the outputs.
    Fixed-point tensors are codes."""
    with np.errstate(all="ignore"):  # float32 overflow to inf is IEEE, as ONNX computes it
        return _execute(g, inputs, trace, inputs_are_codes)


def _execute(g: Graph, inputs: list[Array], trace: bool, inputs_are_codes: bool
             ) -> dict[str, Array]:
    env: dict[str, Array] = {}
    for name, x in zip(g.inputs, inputs if inputs_are_codes else quantize_inputs(g, inputs),
                       strict=True):
        shp = g.tensor(name).shape
        x = np.asarray(x)
        if x.shape[1:] != shp:
            x = x.reshape((-1,) + shp)
        env[name] = x
    for node in g.nodes:
        fn = OPS.get(node.op)
        if fn is None:
            raise GraphError(f"node {node.name}: op {node.op} has no reference definition; "
                             f"supported: {', '.join(sorted(OPS))}")
        ins = [env[i] for i in node.inputs if i and i in env]
        env[node.outputs[0]] = fn(g, node, ins)
    if trace:
        return env
    return {o: env[o] for o in g.outputs}


def to_values(g: Graph, name: str, v: Array) -> Array:
    """Codes (or floats) of tensor `name` -> float values."""
    t = _t(g, name)
    return np.asarray(v, dtype=np.float64) if t.is_float else fx.to_float(v, t)
