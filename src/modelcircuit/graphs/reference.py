"""The golden interpreter: the living definition of what every op computes.

Two modes, decided by the tensor types: FloatType tensors are computed in float32 (compared
with onnxruntime), FixedType tensors as int64 codes, bit-exact (DESIGN.md, "Numbers"). Every
backend is tested against this file. Fixed-point arrays here are always codes. The longer
definitions live beside it and are gathered into OPS here: Dense and Conv's GEMM in
reference_linear, the window ops in reference_spatial, LSTM/GRU in reference_rnn.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from . import attention as attn
from . import fixed as fx
from .ir import Graph, GraphError, Node
from .ops import (
    AttentionAttrs,
    BatchNormAttrs,
    BipolarAttrs,
    ClipAttrs,
    ConcatAttrs,
    GatherAttrs,
    LayerNormAttrs,
    LeakyReluAttrs,
    LutAttrs,
    Op,
    RequantAttrs,
    ReshapeAttrs,
    SoftmaxAttrs,
    TransposeAttrs,
    TruncAttrs,
)
from .reference_common import Array, OpFn, table_index
from .reference_common import const as _const
from .reference_common import f32 as _f32
from .reference_common import finish as _finish
from .reference_common import is_fixed as _is_fixed
from .reference_common import out_type as _out
from .reference_common import tensor_type as _t
from .reference_common import to_out as _to_out

# `X as X`: defined in the modules split from this one, and read as reference.X by golden_plan,
# golden_chain, bench/, tests/, hdl/ and gpu_backend/
from .reference_linear import Linear as Linear
from .reference_linear import blas_threads as blas_threads
from .reference_linear import conv_linear as conv_linear
from .reference_linear import dense, set_threads
from .reference_linear import dense_linear as dense_linear
from .reference_linear import has_threads as has_threads
from .reference_rnn import PROBES as _PROBES
from .reference_rnn import rnn
from .reference_rnn import rnn_types as rnn_types
from .reference_spatial import IM2COL_ELEMENTS as IM2COL_ELEMENTS
from .reference_spatial import avg_pool, conv, max_pool, resize
from .reference_spatial import conv_rows as conv_rows
from .reference_spatial import conv_sum as conv_sum
from .threads import golden_threads
from .types import FixedType, NumType


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


def _sigmoid(x: Array, n: Node) -> Array:
    return 1.0 / (1.0 + np.exp(-x))


# the float function of each ops.LUT_FUNCS name (the tables are built from these)
FLOAT_FUNCS: dict[str, Callable[[Array, Node], Array]] = {
    "sigmoid": _sigmoid,
    "tanh": lambda x, n: np.tanh(x),
    "exp": lambda x, n: np.exp(x),
    "selu": _selu,
    "reciprocal": lambda x, n: 1.0 / x,
    "hardsigmoid": lambda x, n: _hard_sigmoid(x, n),
    "hardswish": lambda x, n: x * _hard_sigmoid(x, n),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    # SiLU / Swish (torch nn.SiLU, x * torch.sigmoid(x)): x times the sigmoid, each rounded
    # in the dtype of x as the unfused Mul(x, Sigmoid(x)) rounds them
    "silu": lambda x, n: x * _sigmoid(x, n),
}


def lut(g: Graph, node: Node, ins: list[Array]) -> Array:
    a = LutAttrs.of(node)
    if not _is_fixed(g, node):
        x = ins[0].astype(np.float32)
        return _f32(FLOAT_FUNCS[a.func](x, node))
    table = _const(g, node.inputs[1]).astype(np.int64)
    idx = table_index(ins[0], a.lo, a.shift, table.shape[0])
    return table[idx]


def softmax(g: Graph, node: Node, ins: list[Array]) -> Array:
    """softmax(scale * x) over the last axis; fixed point: the exp table holds the scale."""
    x = ins[0]
    a = SoftmaxAttrs.of(node)
    if not _is_fixed(g, node):
        x32 = _f32(x) if a.scale == 1.0 else _f32(_f32(x) * np.float32(a.scale))
        e = np.exp(x32 - x32.max(axis=-1, keepdims=True))
        return _f32(e / e.sum(axis=-1, keepdims=True))
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
        return _f32(fx.to_float(fx.quantize(fx.saturate_inf(x, t), t), t))
    if tin.is_float:  # a quantizer of float work (x / scale may overflow to Inf)
        return fx.quantize(fx.saturate_inf(x, tout), tout)
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
        set_threads(t)
        try:
            env = _execute(g, inputs, trace, inputs_are_codes)
        finally:
            set_threads(None)
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
