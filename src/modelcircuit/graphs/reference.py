"""The golden interpreter: the living definition of what every op computes.

Two modes, decided by the tensor types: FloatType tensors are computed in float32 (compared
with onnxruntime), FixedType tensors as int64 codes, bit-exact (DESIGN.md, "Numbers"). Every
backend is tested against this file. Fixed-point arrays here are always codes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

import numpy as np

from . import fixed as fx
from . import recurrent
from .ir import Graph, GraphError, Node
from .ops import (
    AvgPoolAttrs,
    BatchNormAttrs,
    BipolarAttrs,
    ConcatAttrs,
    ConvAttrs,
    DenseAttrs,
    GatherAttrs,
    GruAttrs,
    LeakyReluAttrs,
    LstmAttrs,
    LutAttrs,
    MaxPoolAttrs,
    Op,
    RecurrentAttrs,
    RequantAttrs,
    ReshapeAttrs,
    ResizeAttrs,
    SoftmaxAttrs,
    TransposeAttrs,
    attrs,
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
    hits = (flat.astype(np.int64)[..., None] >= thr).astype(np.int64)
    out = base + (hits * steps).sum(axis=-1)
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


# -- recurrent ops (graphs/recurrent.py: the numeric contract) -------------------------
# A traced run (execute(trace=True)) records the float model's internal values of every
# recurrent node here too ("<node>::h", "::c", "::pre", "::hn"): calibration types them.
_PROBES: ContextVar[dict[str, Array] | None] = ContextVar("recurrent_probes", default=None)


def _probe(key: str, v: Array) -> None:
    env = _PROBES.get()
    if env is not None:
        prev = env.get(key)
        env[key] = v if prev is None else np.concatenate([prev.reshape(-1), v.reshape(-1)])


def _rnn_consts(g: Graph, node: Node) -> tuple[Array, Array, Array, Array, Array]:
    w, r, b, h0 = (_const(g, n) for n in node.inputs[1:5])
    c0 = _const(g, node.inputs[5]) if node.op == Op.LSTM else np.zeros_like(h0)
    return w, r, b, h0, c0


def _rnn_float(g: Graph, node: Node, x: Array) -> Array:
    """The ONNX equations in float32, one step after the other (as onnxruntime)."""
    a = attrs(node)
    assert isinstance(a, RecurrentAttrs)
    w, r, b, h0, c0 = (_f32(v) for v in _rnn_consts(g, node))
    x = _f32(x)
    n, hid = x.shape[0], a.hidden
    h = np.broadcast_to(h0, (n, hid)).astype(np.float32)
    c = np.broadcast_to(c0, (n, hid)).astype(np.float32)
    key = getattr(a, "source", None) or node.name
    clip = None if a.clip is None else np.float32(a.clip)

    def cl(v: Array) -> Array:
        return v if clip is None else np.clip(v, -clip, clip)

    ys, pres = [], []
    for t in range(x.shape[1]):
        xt = x[:, t]
        if node.op == Op.LSTM:
            gates = cl(xt @ w + h @ r + (b[0] + b[1]))
            pres.append(gates)
            i, o, f, cc = (gates[:, k * hid:(k + 1) * hid] for k in range(4))
            i, o, f = (recurrent.act(a, 0, v) for v in (i, o, f))
            c = _f32(f * c + i * recurrent.act(a, 1, cc))
            h = _f32(o * recurrent.act(a, 2, c))
            ys.append(c if LstmAttrs.of(node).emit == "c" else h)
        else:
            lbr = GruAttrs.of(node).lbr
            gx = xt @ w + b[0]
            gh = h @ r[:, :2 * hid] + b[1, :2 * hid]
            zr = cl(gx[:, :2 * hid] + gh)
            z, rr = recurrent.act(a, 0, zr[:, :hid]), recurrent.act(a, 0, zr[:, hid:])
            rn, bn = r[:, 2 * hid:], b[1, 2 * hid:]
            if lbr:
                hn = h @ rn + bn
                _probe(f"{key}::hn", hn)
                pre = cl(gx[:, 2 * hid:] + rr * hn)
            else:
                pre = cl(gx[:, 2 * hid:] + (rr * h) @ rn + bn)
            pres.append(np.concatenate([zr, pre], axis=1))
            nn_ = recurrent.act(a, 1, pre)
            h = _f32((np.float32(1) - z) * nn_ + z * h)
            ys.append(h)
        _probe(f"{key}::h", h)
        _probe(f"{key}::c", c)
    _probe(f"{key}::pre", np.stack(pres, axis=1))
    return _f32(np.stack(ys, axis=1))


def _imatmul(v: Array, w: Array, width: int) -> Array:
    """Integer v @ w, exact (float64 BLAS while the accumulator is within 53 bits)."""
    if width <= 53:
        return (v.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
    return np.einsum("bk,kn->bn", v.astype(np.int64), w.astype(np.int64))


def _tab(g: Graph, node: Node, k: int, q: Array, lo: int | None, shift: int | None) -> Array:
    """Table k (0: f, 1: g, 2: LSTM's h) of a compiled recurrent node, at codes q."""
    base = 6 if node.op == Op.LSTM else 5
    if lo is None or shift is None or len(node.inputs) <= base + k:
        raise GraphError(f"node {node.name} ({node.op}): tables not built; compile first")
    t = _const(g, node.inputs[base + k]).astype(np.int64)
    return t[table_index(q, lo, shift, t.shape[0])]


def rnn_types(node: Node) -> dict[str, FixedType]:
    """The fixed-point types of a compiled recurrent node, by role."""
    a = attrs(node)
    names = ["acc", "pre_type", "f_type", "g_type", "state_type"]
    names += ["cell_type", "h_type"] if node.op == Op.LSTM else []
    names += ["hn_type"] if node.op == Op.GRU and GruAttrs.of(node).lbr else []
    out = {}
    for n in names:
        t = getattr(a, n)
        if t is None:
            raise GraphError(f"node {node.name} ({node.op}): {n} not set; compile the graph first")
        out[n] = t
    return out


def _rnn_fixed(g: Graph, node: Node, x: Array) -> Array:
    """The fixed-point contract of graphs/recurrent.py, step by step, on int64 codes."""
    a = attrs(node)
    assert isinstance(a, RecurrentAttrs)
    ty = rnn_types(node)
    tx, tw, tb = _t(g, node.inputs[0]), _t(g, node.inputs[1]), _t(g, node.inputs[3])
    th, tp, tf, tg = ty["state_type"], ty["pre_type"], ty["f_type"], ty["g_type"]
    w, r, b, h0, c0 = (v.astype(np.int64) for v in _rnn_consts(g, node))
    hid, n = a.hidden, x.shape[0]
    fxh = max(tx.frac, th.frac)
    fa = max(fxh + tw.frac, tb.frac)
    sw, sb = fa - (fxh + tw.frac), fa - tb.frac  # alignment of the sums and of the biases
    bias = (b[0] + b[1]) << sb
    wide = ty["acc"].width
    cc = recurrent.clip_code(a.clip, tp.frac, tp.qmax)

    def pre(acc: Array, frac: int = fa) -> Array:
        p = fx.requantize(acc, frac, tp)
        return p if cc is None else np.clip(p, -cc, cc)

    def xsum(xs: Array, hs: Array, cols: slice, rmat: Array | None = None) -> Array:
        s = _imatmul(xs, w[:, cols], wide) + _imatmul(hs, r[:, cols] if rmat is None else rmat, wide)
        return s << sw

    xq = x.astype(np.int64) << (fxh - tx.frac)
    h = np.broadcast_to(h0, (n, hid)).astype(np.int64)
    c = np.broadcast_to(c0, (n, hid)).astype(np.int64)
    ys = []
    for t in range(x.shape[1]):
        xs, hs = xq[:, t], h << (fxh - th.frac)
        if node.op == Op.LSTM:
            la = LstmAttrs.of(node)
            tc, tht = ty["cell_type"], ty["h_type"]
            p = pre(xsum(xs, hs, slice(None)) + bias)
            i, o, f, cg = (p[:, k * hid:(k + 1) * hid] for k in range(4))
            i, o, f = (_tab(g, node, 0, v, a.f_lo, a.f_shift) for v in (i, o, f))
            gg = _tab(g, node, 1, cg, a.g_lo, a.g_shift)
            fu = max(tf.frac + tc.frac, tf.frac + tg.frac)
            u = fx.align(f * c, tf.frac + tc.frac, fu) + fx.align(i * gg, tf.frac + tg.frac, fu)
            c = fx.requantize(u, fu, tc)
            hc = _tab(g, node, 2, c, la.h_lo, la.h_shift)  # clip: gates only (onnxruntime)
            h = fx.requantize(o * hc, tf.frac + tht.frac, th)
            ys.append(c if la.emit == "c" else h)
            continue
        # GRU
        ga = GruAttrs.of(node)
        zr = pre(xsum(xs, hs, slice(0, 2 * hid)) + bias[:2 * hid])
        z = _tab(g, node, 0, zr[:, :hid], a.f_lo, a.f_shift)
        rr = _tab(g, node, 0, zr[:, hid:], a.f_lo, a.f_shift)
        cn = slice(2 * hid, 3 * hid)
        if ga.lbr:
            thn = ty["hn_type"]
            axn = (_imatmul(xs, w[:, cn], wide) << sw) + (b[0, cn] << sb)
            ahn = (_imatmul(hs, r[:, cn], wide) << sw) + (b[1, cn] << sb)
            hn = fx.requantize(ahn, fa, thn)
            fs = max(fa, tf.frac + thn.frac)
            p = pre(fx.align(axn, fa, fs) + fx.align(rr * hn, tf.frac + thn.frac, fs), fs)
        else:
            rh = fx.requantize(rr * h, tf.frac + th.frac, th)
            p = pre(xsum(xs, rh << (fxh - th.frac), cn) + bias[cn])
        nn_ = _tab(g, node, 1, p, a.g_lo, a.g_shift)
        one = np.int64(1) << np.int64(tf.frac)
        fu = max(tf.frac + tg.frac, tf.frac + th.frac)
        u = fx.align((one - z) * nn_, tf.frac + tg.frac, fu) + fx.align(z * h, tf.frac + th.frac, fu)
        h = fx.requantize(u, fu, th)
        ys.append(h)
    return np.stack(ys, axis=1)


def rnn(g: Graph, node: Node, ins: list[Array]) -> Array:
    """LSTM / GRU over the (batch, T, F) input: the (batch, T, H) states (graphs/recurrent.py)."""
    if not _is_fixed(g, node):
        return _rnn_float(g, node, ins[0])
    return _rnn_fixed(g, node, ins[0])


# What every op of the vocabulary computes (tests/graphs/test_ops.py: all of ops.Op, no other).
OPS: dict[Op, OpFn] = {
    Op.DENSE: dense, Op.ADD: add, Op.SUB: sub, Op.MUL: mul, Op.DIV: div, Op.RELU: relu,
    Op.LEAKY_RELU: leaky_relu, Op.LUT: lut, Op.SOFTMAX: softmax, Op.THRESHOLD: threshold,
    Op.REQUANT: requant, Op.BIPOLAR: bipolar, Op.BATCHNORM: batchnorm, Op.RESHAPE: reshape,
    Op.TRANSPOSE: transpose, Op.CONCAT: concat, Op.GATHER: gather, Op.CONV: conv,
    Op.MAX_POOL: max_pool, Op.AVG_POOL: avg_pool, Op.RESIZE: resize,
}


OPS.update({Op.LSTM: rnn, Op.GRU: rnn})


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
        if not trace:
            return _execute(g, inputs, trace, inputs_are_codes)
        probes: dict[str, Array] = {}
        token = _PROBES.set(probes)
        try:
            env = _execute(g, inputs, trace, inputs_are_codes)
        finally:
            _PROBES.reset(token)
        env.update(probes)  # recurrent internals (calibration), names with "::"
        return env


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
