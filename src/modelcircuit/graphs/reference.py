"""The golden interpreter: the living definition of what every op computes.

Two modes, decided by the tensor types: FloatType tensors are computed in float32 (compared
with onnxruntime), FixedType tensors as int64 codes, bit-exact (DESIGN.md, "Numbers"). Every
backend is tested against this file. Fixed-point arrays here are always codes.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import arithmetic, recurrent
from . import attention as attn
from . import fixed as fx
from .arithmetic import Arithmetic
from .ir import Graph, GraphError, Node
from .ops import (
    AttentionAttrs,
    AvgPoolAttrs,
    BatchNormAttrs,
    BipolarAttrs,
    ClipAttrs,
    ConcatAttrs,
    ConvAttrs,
    DenseAttrs,
    GatherAttrs,
    GruAttrs,
    LayerNormAttrs,
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
    TruncAttrs,
    attrs,
    window_counts,
)
from .threads import golden_threads
from .types import FixedType, NumType, Rounding

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


# -- Dense and Conv: one GEMM each, in the cheapest exact arithmetic (graphs/arithmetic.py) --
# Everything below that depends only on the graph (the arithmetic, weights converted and
# scaled, biases aligned, clip bounds) is prepared once per graph and node and kept while the
# graph lives: the graph is immutable, so this is a cache of a pure function of it.
_PREPARED: dict[int, dict[str, Any]] = {}
_local = threading.local()  # the running execute's BLAS thread control (threads.Threads)
# im2col: at most this many elements of the window matrix at a time (4 MB in float32): a
# batch is cut into frames, a frame into rows of output. Memory stays bounded (a 512x512
# frame does not need gigabytes), and the chunk stays in cache between being written and
# read by the GEMM: 64 frames of 32x32x16, 3x3 -> 16 channels, float32, one thread: 6.1 ms
# in chunks of 2,000-8,000 rows, 17.8 ms as one 65,536-row matrix (7.6 ms of it the copy);
# much smaller chunks pay Python's overhead per chunk.
IM2COL_ELEMENTS = 1 << 20


def _prepared(g: Graph) -> dict[str, Any]:
    key = id(g)
    p = _PREPARED.get(key)
    if p is None:
        p = _PREPARED[key] = {}
        weakref.finalize(g, _PREPARED.pop, key, None)
    return p


def _blas_threads(macs: int) -> None:
    t = getattr(_local, "threads", None)
    if t is not None:
        t.use(macs)


@dataclass(frozen=True)
class Linear:
    """A Dense/Conv prepared for the golden model. w: (K, N), or (groups, K, N/groups) for a
    grouped conv, in the GEMM's dtype (times 2**-s when fused). Fused: y = x @ w + b, then
    floor (TRN, RND: b holds the 1/2) or rint (RND_CONV), clip to [lo, hi] (ReLU in lo).
    Not fused (a float GEMM of the products, or int64): the integer bias and requantization
    of the definition (`_add_bias`, `_finish`)."""

    arith: Arithmetic | None  # None: a float32 model
    w: np.ndarray
    b: np.ndarray | None
    lo: Any = 0  # the clip bounds as scalars of w's dtype
    hi: Any = 0
    rounding: str = ""  # "floor", "rint" or "" (no bits dropped)
    relu: bool = False
    macs: int = 0  # multiply-adds per row

    def __post_init__(self) -> None:
        object.__setattr__(self, "macs", int(np.prod(self.w.shape)))

    @property
    def dtype(self) -> np.dtype:
        return self.w.dtype

    @property
    def out_dtype(self) -> np.dtype:
        """Fused and float32 models keep the GEMM's float type; the others give int64."""
        return self.dtype if self.arith is None or self.arith.fused else np.dtype(np.int64)

    def finish(self, y: Array) -> Array:
        """A fused GEMM result's bias, rounding and clamp, in place (the definition of what
        golden_plan's C epilogue does in one pass)."""
        if self.b is not None:
            y += self.b
        if self.rounding == "floor":
            np.floor(y, out=y)
        elif self.rounding == "rint":
            np.rint(y, out=y)
        return np.clip(y, self.lo, self.hi, out=y)

    def gemm(self, x: Array, out: Array | None = None) -> Array:
        """x (P, K), or (P, groups, K) for a grouped conv, times w: (P, N) (into `out`)."""
        _blas_threads(x.shape[0] * self.macs)
        if self.w.ndim == 2:
            return np.matmul(x, self.w, out=out if out is not None and out.dtype == self.dtype
                             and out.ndim == x.ndim else None)
        y = np.matmul(x.transpose(1, 0, 2), self.w)  # (groups, P, N/groups)
        return y.transpose(1, 0, 2).reshape(x.shape[0], -1)


def _linear(g: Graph, node: Node, w: Array) -> Linear:
    """The prepared weights `w` (already in GEMM layout, codes or floats) of node."""
    key = node.name
    prep = _prepared(g)
    lp = prep.get(key)
    if lp is not None:
        return lp
    bn = node.inputs[2] if len(node.inputs) > 2 else None
    relu = bool(attrs(node).relu)  # type: ignore[attr-defined]
    if not _is_fixed(g, node):
        lp = Linear(None, _f32(w), _f32(_const(g, bn)) if bn else None, relu=relu)
    else:
        if getattr(attrs(node), "acc", None) is None:
            raise GraphError(f"node {node.name}: accumulator type not computed; compile first")
        ar = arithmetic.choose(g, node, force=_FORCE.get("dtype"))
        dt = np.dtype(ar.dtype)
        if not ar.fused:
            lp = Linear(ar, np.asarray(w).astype(dt), None, relu=relu)
        else:
            tx, tw, out = _t(g, node.inputs[0]), _t(g, node.inputs[1]), _out(g, node)
            assert isinstance(out, FixedType)
            frac = tx.frac + tw.frac
            f = max(frac, _t(g, bn).frac) if bn else frac  # the accumulator's binary point
            s = f - out.frac  # bits the requantization drops (>= 0 when fused)
            n_out = w.shape[-1] * (w.shape[0] if w.ndim == 3 else 1)
            b = np.zeros(n_out)
            if bn:  # exact: integers under 2**m times powers of two
                b = np.ldexp(_const(g, bn).astype(np.float64), f - _t(g, bn).frac - s)
            rnd = out.rounding == Rounding.RND and s > 0
            if rnd:
                b = b + 0.5  # floor(v + 1/2): half up
            lp = Linear(ar, np.ldexp(np.asarray(w).astype(np.float64), f - frac - s).astype(dt),
                        b.astype(dt) if (bn or rnd) else None,
                        lo=dt.type(max(out.qmin, 0) if relu else out.qmin), hi=dt.type(out.qmax),
                        rounding="" if s == 0 else
                        ("rint" if out.rounding == Rounding.RND_CONV else "floor"), relu=relu)
    prep[key] = lp
    return lp


def _linear_out(g: Graph, node: Node, lp: Linear, x: Array, out: Array | None = None
                ) -> Array:
    """One Dense/Conv GEMM on rows x (P, K) [or (P, groups, K)] and what follows it: the
    node's output codes (or float32 values), (P, N) of lp.out_dtype (written into `out`
    where given)."""
    if lp.arith is None:  # float32 model
        y = lp.gemm(_f32(x), out)
        if lp.b is not None:
            y += lp.b
        y = np.maximum(y, 0, out=y) if lp.relu else y
        return _into(y, out)
    xd = x if x.dtype == lp.dtype else x.astype(lp.dtype)
    y = lp.gemm(xd, out)
    if lp.arith.fused:
        return _into(lp.finish(y), out)
    tx, tw = _t(g, node.inputs[0]), _t(g, node.inputs[1])
    bn = node.inputs[2] if len(node.inputs) > 2 else None
    acc, frac = _add_bias(g, y.astype(np.int64), tx.frac + tw.frac, bn)
    y = _finish(g, node, acc, frac)
    return _into(np.maximum(y, 0) if lp.relu else y, out)


def _into(y: Array, out: Array | None) -> Array:
    if out is None or y is out:
        return y
    out[...] = y
    return out


# a test hook: {"dtype": "float32"} forces that arithmetic on every fixed-point Dense/Conv
# prepared afterwards, to show that an inexact choice is caught (tests/graphs/test_arithmetic)
_FORCE: dict[str, str] = {}


def exact_matmul(x: Array, w: Array, bound_bits: int) -> Array:
    """Integer x @ w, exact. BLAS in float64 is exact while every partial sum stays under
    2**53, which the accumulator width (computed at compile time) guarantees."""
    if bound_bits <= 53:
        return (x.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
    return np.einsum("bk,kn->bn", x.astype(np.int64), w.astype(np.int64))


def dense_linear(g: Graph, node: Node) -> Linear:
    """The prepared `Linear` of a Dense node."""
    lp = _prepared(g).get(node.name)
    if lp is None:
        lp = _linear(g, node, _const(g, node.inputs[1]))
    return lp


def linear_out(g: Graph, node: Node, lp: Linear, x: Array, out: Array | None = None) -> Array:
    """What a Dense/Conv computes from its GEMM rows x (see `_linear_out`)."""
    return _linear_out(g, node, lp, x, out)


def set_threads(t: Any) -> None:
    """The thread control (threads.Threads) of the golden run now starting on this thread
    (None when it ends): `blas_threads` uses it."""
    _local.threads = t


def has_threads() -> bool:
    """A golden run's thread control is set on this thread (set_threads)."""
    return getattr(_local, "threads", None) is not None


def blas_threads(macs: int) -> None:
    """Before a product of `macs` multiply-adds inside `execute` or a golden plan's run: the
    BLAS threads it may use (graphs/threads.py)."""
    _blas_threads(macs)


def dense(g: Graph, node: Node, ins: list[Array]) -> Array:
    """y = x @ W + b (ReLU if fused): float32, or for fixed point the exact sum of the
    products of the codes plus the aligned bias, requantized once to the output type
    (`_add_bias`, `_finish`: the definition; `Linear` computes the same integers faster)."""
    lp = _prepared(g).get(node.name)
    if lp is None:
        lp = _linear(g, node, _const(g, node.inputs[1]))
    return _linear_out(g, node, lp, ins[0])


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


_ERF = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: Array, n: Node) -> Array:
    """Gelu x * Phi(x) (ONNX Gelu, approximate "none"; torch's erf form), in the dtype of x
    (float32 for the float model, float64 where the tables are built).

    The tables (part of the graph id) keep math.erf. The float32 model takes scipy's
    vectorised erf: 6x faster than math.erf element by element (80 % of a Gelu encoder's
    float golden time); the two differ by at most 3 ulp of float64, far below the float32
    rounding its result gets and the error bound the float model is checked with."""
    dt = x.dtype if x.dtype.kind == "f" else np.float64
    x64 = np.asarray(x, dtype=np.float64)
    if dt == np.float32:
        from scipy.special import erf  # scikit-learn's dependency, declared in pyproject

        return (0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))).astype(dt)
    return (0.5 * x64 * (1.0 + _ERF(x64 / math.sqrt(2.0)).astype(np.float64))).astype(dt)


def _gelu_tanh(x: Array, n: Node) -> Array:
    """Gelu's tanh approximation (ONNX approximate "tanh", torch approximate="tanh")."""
    dt = x.dtype if x.dtype.kind == "f" else np.float64
    x64 = np.asarray(x, dtype=np.float64)
    return (0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                        * (x64 + 0.044715 * x64**3)))).astype(dt)


# the float function of each ops.LUT_FUNCS name (the tables are built from these)
FLOAT_FUNCS: dict[str, Callable[[Array, Node], Array]] = {
    "sigmoid": lambda x, n: 1.0 / (1.0 + np.exp(-x)),
    "tanh": lambda x, n: np.tanh(x),
    "exp": lambda x, n: np.exp(x),
    "selu": _selu,
    "reciprocal": lambda x, n: 1.0 / x,
    "hardsigmoid": lambda x, n: _hard_sigmoid(x, n),
    "hardswish": lambda x, n: x * _hard_sigmoid(x, n),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
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


def gemm_weights(w: Array, group: int) -> Array:
    """Conv weights (*kernel, Cin/group, Cout) in the layout of `conv_rows`' window rows:
    (K * Cin, Cout), or (group, Cin/group * K, Cout/group) for a grouped conv."""
    if group == 1:
        return w.reshape(-1, w.shape[-1])
    r = w.ndim - 2
    wt = np.moveaxis(w, r, 0)  # (Cin/group, *kernel, Cout): the rows' (channel, offset) order
    return np.moveaxis(wt.reshape(-1, group, w.shape[-1] // group), 1, 0)


def conv_rows(x: Array, a: ConvAttrs, out_sp: tuple[int, ...], dtype: np.dtype, cout: int,
              out_dtype: np.dtype, fn: Callable[[Array, Array], Array],
              out: Array | None = None) -> Array:
    """Convolution as one GEMM per chunk: the window of every output position is one row
    (im2col through a strided view of the padded input); `fn(rows, out)` writes the
    (rows, cout) results into `out`, a view of the (N, *out_sp, cout) result.
    Rows are (*kernel, Cin) (K * Cin values), or (group, Cin/group * K) for a grouped conv.
    The input is converted to the GEMM's dtype once, into a zero-padded buffer (padding
    costs no extra copy); chunks of whole frames, or of output rows within a frame, keep
    the window matrix under IM2COL_ELEMENTS. `out`: the result's array, where the caller
    keeps one (golden_plan reuses it call to call), else a fresh one."""
    r = len(a.kernel)
    n = x.shape[0]
    per_pos = int(np.prod(a.kernel)) * x.shape[-1]
    per_row = int(np.prod(out_sp[1:])) * per_pos  # window elements of one output row
    per_frame = per_row * out_sp[0]
    if per_frame <= IM2COL_ELEMENTS:
        frames, rows = max(1, IM2COL_ELEMENTS // max(per_frame, 1)), out_sp[0]
    else:
        frames, rows = 1, max(1, IM2COL_ELEMENTS // max(per_row, 1))
    if out is None:
        out = np.empty((n,) + out_sp + (cout,), dtype=out_dtype)
    pad_frames = max(frames, max(1, (1 << 24) // max(per_frame // max(len(a.kernel), 1), 1)))
    for p0 in range(0, n, pad_frames):  # padded copies of a bounded number of frames
        xp = _padded(x[p0:p0 + pad_frames], a.pads, dtype)
        win = np.lib.stride_tricks.sliding_window_view(xp, a.kernel, axis=tuple(range(1, r + 1)))
        win = win[(slice(None),) + tuple(slice(0, (o - 1) * st + 1, st)
                                         for o, st in zip(out_sp, a.strides, strict=True))]
        if a.group == 1:
            win = np.moveaxis(win, r + 1, -1)  # (frames, *out_sp, *kernel, C)
        # else (frames, *out_sp, C, *kernel): C = (group, C/group)
        for f0 in range(0, xp.shape[0], frames):
            for o0 in range(0, out_sp[0], rows):
                part = win[f0:f0 + frames, o0:o0 + rows]
                m = int(np.prod(part.shape[:r + 1]))
                buf = _scratch("cols", m * per_pos, dtype).reshape(part.shape)
                np.copyto(buf, part)  # the im2col copy, into memory reused chunk to chunk
                cols = buf.reshape((m, per_pos) if a.group == 1
                                   else (m, a.group, per_pos // a.group))
                fn(cols, out[p0 + f0:p0 + f0 + part.shape[0], o0:o0 + rows].reshape(m, cout))
    return out


def _scratch(key: str, size: int, dtype: np.dtype) -> Array:
    """A work buffer of `size` elements, kept per thread and reused: fresh large arrays cost
    a page fault per 4 KB on first touch (3,000 a call on a 32x32x16 conv layer, about half
    its time), reused ones do not."""
    bufs = getattr(_local, "scratch", None)
    if bufs is None:
        bufs = _local.scratch = {}
    nbytes = size * dtype.itemsize
    b = bufs.get(key)
    if b is None or b.nbytes < nbytes:
        b = bufs[key] = np.empty(nbytes, dtype=np.uint8)
    return b[:nbytes].view(dtype)


def _padded(x: Array, pads: tuple[int, ...], dtype: np.dtype) -> Array:
    """x in `dtype`, zero-padded: a view when there is nothing to do, else a reused buffer
    (its borders zeroed) the conversion writes into."""
    r = len(pads) // 2
    if not any(pads):
        return x if x.dtype == dtype else x.astype(dtype)
    sp = tuple(x.shape[1 + i] + pads[i] + pads[i + r] for i in range(r))
    shape = (x.shape[0],) + sp + (x.shape[-1],)
    xp = _scratch("pad", int(np.prod(shape)), dtype).reshape(shape)
    inner = tuple(slice(pads[i], pads[i] + x.shape[1 + i]) for i in range(r))
    for i in range(r):  # the border slabs of each spatial axis
        lo = (slice(None),) + inner[:i] + (slice(0, pads[i]),)
        hi = (slice(None),) + inner[:i] + (slice(pads[i] + x.shape[1 + i], None),)
        xp[lo] = 0
        xp[hi] = 0
    xp[(slice(None),) + inner] = x
    return xp


def conv_sum(x: Array, w: Array, a: ConvAttrs, out_sp: tuple[int, ...]) -> Array:
    """sum over each window and group of x * w, in the dtype of x and w (float32: the float
    model; float64 exact while every partial sum stays under 2**53; int64 beyond). x (N, *S,
    Cin), w (*kernel, Cin/group, Cout)."""
    dt = np.result_type(x, w)
    wg = gemm_weights(np.asarray(w, dtype=dt), a.group)

    def fn(cols: Array, out: Array) -> Array:
        if wg.ndim == 2:
            return np.matmul(cols, wg, out=out)
        out[...] = np.matmul(cols.transpose(1, 0, 2), wg).transpose(1, 0, 2).reshape(len(cols), -1)
        return out

    return conv_rows(np.asarray(x), a, out_sp, dt, np.asarray(w).shape[-1], dt, fn)


def conv_linear(g: Graph, node: Node) -> Linear:
    """The prepared `Linear` of a Conv node (weights in the window rows' GEMM layout)."""
    lp = _prepared(g).get(node.name)
    if lp is None:
        lp = _linear(g, node, gemm_weights(_const(g, node.inputs[1]), ConvAttrs.of(node).group))
    return lp


def conv(g: Graph, node: Node, ins: list[Array], out: Array | None = None) -> Array:
    """Channels-last convolution: per window and group, what Dense computes (the same
    `Linear`, one GEMM over every window of the batch)."""
    a = ConvAttrs.of(node)
    lp = conv_linear(g, node)
    dt = np.dtype(np.float32) if lp.arith is None else lp.dtype
    cout = g.tensor(node.outputs[0]).shape[-1]
    return conv_rows(ins[0], a, _out_spatial(g, node), dt, cout, lp.out_dtype,
                     lambda cols, o: _linear_out(g, node, lp, cols, o), out)


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
    """Mean over each window, padding counted as zeros (count_include_pad=1), or with
    exclude_pad over the window's positions inside the input (ops.window_counts). Fixed
    point: the exact window sum times the constant recip = round(2**F / count) (recip_type,
    F its fractional bits; with exclude_pad the table entry of the window's count), one
    requantization to the output type; float32: sum / count."""
    a = AvgPoolAttrs.of(node)
    out_sp = _out_spatial(g, node)
    fixed = _is_fixed(g, node)
    x = ins[0].astype(np.int64) if fixed else _f32(ins[0])
    if a.exclude_pad:
        counts = window_counts(tuple(x.shape[1:-1]), a.kernel, a.strides, a.pads)
        counts = counts.reshape((1,) + out_sp + (1,))
    else:
        counts = np.asarray(int(np.prod(a.kernel)), dtype=np.int64)
    acc = np.zeros((x.shape[0],) + out_sp + (x.shape[-1],), dtype=x.dtype)
    for _, sl in _windows(_pad(x, a.pads, 0), a.kernel, a.strides, out_sp):
        acc += sl
    if not fixed:
        return _f32(acc / counts.astype(np.float32))
    if a.recip_type is None or len(node.inputs) < 2:
        raise GraphError(f"node {node.name}: AvgPool reciprocal not computed; compile first")
    rc = _const(g, node.inputs[1]).astype(np.int64)
    recip = rc[counts] if a.exclude_pad else rc.reshape(-1)[0]
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
    Op.CLIP: clip, Op.TRUNC: trunc,
}


OPS.update({Op.LSTM: rnn, Op.GRU: rnn})


# -- attention (graphs/attention.py has the numeric contract) ------------------------------
def matmul(g: Graph, node: Node, ins: list[Array]) -> Array:
    a, b = ins
    if not _is_fixed(g, node):
        return _f32(np.matmul(_f32(a), _f32(b)))
    fa, fb = _t(g, node.inputs[0]).frac, _t(g, node.inputs[1]).frac
    return _finish(g, node, attn.exact_matmul(a, b), fa + fb)


def attention(g: Graph, node: Node, ins: list[Array]) -> Array:
    a = AttentionAttrs.of(node)
    q, k, v = ins[:3]
    mask = _const(g, node.inputs[3]) if a.masked else None
    if not _is_fixed(g, node):
        return attn.attention_float(q, k, v, a.heads, a.scale, mask)
    keep = attn.mask_keep(mask)
    mask_codes = None
    if mask is not None:
        finite = np.where(keep, mask, 0.0)
        mask_codes = fx.quantize(finite, a.score_type) if finite.any() else None
    tq, tk, tv = (_t(g, n) for n in node.inputs[:3])
    exp_t, rec_t = (_const(g, n).astype(np.int64) for n in node.inputs[-2:])
    return attn.attention_codes(
        q, k, v, a.heads, fq=tq.frac, fk=tk.frac, fv=tv.frac, scale_code=a.scale_code,
        scale_frac=a.scale_frac, score_type=a.score_type, mask_codes=mask_codes, keep=keep,
        exp_t=exp_t, exp_lo=a.exp_lo, exp_shift=a.exp_shift, f_exp=a.exp_type.frac,
        rec_t=rec_t, recip_lo=a.recip_lo, recip_shift=a.recip_shift,
        f_recip=a.recip_type.frac, prob_type=a.prob_type, out_type=_out(g, node))


def layer_norm(g: Graph, node: Node, ins: list[Array]) -> Array:
    a = LayerNormAttrs.of(node)
    if not _is_fixed(g, node):
        return attn.layernorm_float(ins[0], _const(g, node.inputs[1]),
                                    _const(g, node.inputs[2]), a.epsilon)
    gn, bn, tn = node.inputs[3:6]
    return attn.layernorm_codes(ins[0], _const(g, gn), _t(g, gn).frac, _const(g, bn),
                                _t(g, bn).frac, a.eps_code, a.rsqrt_bits, a.rsqrt_frac,
                                _const(g, tn).astype(np.int64), _out(g, node))


OPS.update({Op.MATMUL: matmul, Op.ATTENTION: attention, Op.LAYER_NORM: layer_norm})


def quantize_inputs(g: Graph, xs: list[Array]) -> list[Array]:
    """Float inputs -> the graph's input representation (codes for fixed-point inputs)."""
    out = []
    for name, x in zip(g.inputs, xs, strict=True):
        t = _t(g, name)
        out.append(_f32(x) if t.is_float else fx.quantize(x, t))
    return out


def execute(g: Graph, inputs: list[Array], trace: bool = False,
            inputs_are_codes: bool = False) -> dict[str, Array]:
    """Run the graph on a batch. Returns every tensor if `trace`, else only the outputs;
    with `trace`, the recurrent ops' internals too (names with "::", for calibration).
    Fixed-point tensors are codes (int64). BLAS threads: one for every product too small to
    gain from more (graphs/threads.py), the caller's setting back on return."""
    probes: dict[str, Array] = {}
    token = _PROBES.set(probes) if trace else None
    with np.errstate(all="ignore"), golden_threads() as t:  # float32 overflow to inf is IEEE
        _local.threads = t
        try:
            env = _execute(g, inputs, trace, inputs_are_codes)
        finally:
            _local.threads = None
            if token is not None:
                _PROBES.reset(token)
    # fixed-point tensors may be held as exact float codes between Dense/Conv layers
    for k, v in env.items():
        if v.dtype.kind == "f" and not _t(g, k).is_float:
            env[k] = v.astype(np.int64)
    env.update(probes)
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
