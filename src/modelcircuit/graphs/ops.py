"""The op vocabulary of the IR: every op a graph may hold, the categories passes ask about,
and (per op) the inputs it takes and the attributes passes write and backends read.

An op is an `Op` (a str enum: `Op.DENSE == "Dense"`, so graph.json and graph ids are the same
text as before). Passes ask categories (`node.op in LINEAR`), never spell op names; every
backend keys its lowering table by `Op` and lists what it refuses, with a reason, in a second
table — tests/graphs/test_ops.py checks that together they cover the vocabulary.

Attributes stay stored on the node as today (sorted (key, value) pairs of plain JSON values:
types as their text, e.g. acc="fixed<20,8>"), so the canonical JSON does not change. Read them
typed, parsed once per node: `attrs(node)` (any op) or `DenseAttrs.of(node)` (one op, checked).
`graphs/check.py` verifies every node against SPECS after every pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field
from enum import StrEnum
from functools import lru_cache
from numbers import Integral, Real
from typing import Any, ClassVar, TypeVar

import numpy as np

from .ir import GraphError, Node
from .types import FixedType, NumType, parse_type


class Op(StrEnum):
    DENSE = "Dense"            # y = x @ W (+ b), exact accumulator, one requantization
    ADD = "Add"
    SUB = "Sub"
    MUL = "Mul"
    DIV = "Div"                # float only (two activations)
    RELU = "Relu"
    LEAKY_RELU = "LeakyRelu"
    LUT = "Lut"                # a non-linear function as a compile-time table
    SOFTMAX = "Softmax"
    THRESHOLD = "Threshold"    # MultiThreshold: float chains between two quantizers
    REQUANT = "Requant"        # a model quantizer (QONNX Quant, QDQ) on an activation
    BIPOLAR = "Bipolar"        # QONNX BipolarQuant on an activation
    BATCHNORM = "BatchNorm"    # folded away before fixed point; float golden only
    RESHAPE = "Reshape"
    TRANSPOSE = "Transpose"
    CONCAT = "Concat"
    GATHER = "Gather"
    CONV = "Conv"              # 1-D/2-D convolution, channels-last: a Dense per window
    MAX_POOL = "MaxPool"
    AVG_POOL = "AvgPool"       # also GlobalAveragePool (the window is the whole frame)
    RESIZE = "Resize"          # nearest, integer upsampling factors
    CLIP = "Clip"              # saturation to constant bounds (ReLU6): a clamp of the codes
    TRUNC = "Trunc"            # QONNX Trunc on codes: drop/add bits, a QONNX rounding mode
    LSTM = "LSTM"              # forward LSTM over a (T, F) sequence: graphs/recurrent.py
    GRU = "GRU"                # forward GRU over a (T, F) sequence: graphs/recurrent.py
    MATMUL = "MatMul"          # two activations, a @ b per sample: graphs/attention.py
    ATTENTION = "Attention"    # multi-head scaled dot-product attention: graphs/attention.py
    LAYER_NORM = "LayerNorm"   # over the last axis, table rsqrt: graphs/attention.py


# Categories: what passes and backends ask, in one place.
LINEAR = frozenset({Op.DENSE, Op.CONV})
# ops on channels-last frames (L, C) / (H, W, C) with a window over the spatial axes
SPATIAL = frozenset({Op.CONV, Op.MAX_POOL, Op.AVG_POOL, Op.RESIZE})
# ops whose output values are some of their input values (the output type is the input's)
SELECTING = frozenset({Op.MAX_POOL, Op.RESIZE, Op.GATHER})
ELEMENTWISE_BINARY = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV})
ADDITIVE = frozenset({Op.ADD, Op.SUB})
ACTIVATION = frozenset({Op.RELU, Op.LEAKY_RELU, Op.LUT})
TABLE_OPS = frozenset({Op.LUT, Op.SOFTMAX})
QUANTIZERS = frozenset({Op.REQUANT, Op.BIPOLAR, Op.THRESHOLD})
MOVEMENT = frozenset({Op.RESHAPE, Op.TRANSPOSE, Op.CONCAT, Op.GATHER})
LAYOUT = frozenset({Op.RESHAPE, Op.TRANSPOSE})
# float arithmetic that a quantized model keeps between a MatMul and the next quantizer
FLOAT_CHAIN = frozenset({Op.BATCHNORM, Op.MUL, Op.ADD, Op.SUB, Op.DIV, Op.RELU})
# ops whose exact result a following model quantizer can become the output type of
EXACT_PRODUCERS = frozenset({Op.DENSE, Op.CONV, Op.RELU, Op.ADD, Op.SUB, Op.LEAKY_RELU})
# recurrent ops: a per-sample (T, F) sequence in, the (T, H) sequence of states out
RECURRENT = frozenset({Op.LSTM, Op.GRU})
# attention ops (graphs/attention.py has the numeric contract)
ATTENTION_OPS = frozenset({Op.MATMUL, Op.ATTENTION, Op.LAYER_NORM})
ALL = frozenset(Op)

# the float functions a Lut may name (reference.FLOAT_FUNCS defines each; a test says so)
LUT_FUNCS = frozenset({"sigmoid", "tanh", "selu", "exp", "reciprocal", "hardsigmoid",
                       "hardswish", "gelu", "gelu_tanh", "silu"})
SELU_ALPHA, SELU_GAMMA = 1.6732632423543772, 1.0507009873554805  # when a Lut names none


def op_error(name: object) -> str:
    return f"unknown op {name!r}; the vocabulary: {', '.join(o.value for o in Op)}"


def op_of(name: str) -> Op:
    """The vocabulary entry of an op name; a GraphError names the unknown op."""
    try:
        return Op(name)
    except ValueError:
        raise GraphError(op_error(name)) from None


# -- attribute schemas -------------------------------------------------------------------
# Each field's `kind` says how it is stored and parsed: bool, int, float, str; fixed / type
# (the text of a FixedType / any NumType); ints / strs (tuples); index (an int or nested
# tuples of ints). A field without a default is required.
def _a(kind: str, default: Any = MISSING) -> Any:
    return field(default=default, metadata={"kind": kind})


A = TypeVar("A", bound="Attrs")


@dataclass(frozen=True)
class Attrs:
    OP: ClassVar[Op]

    @classmethod
    def of(cls: type[A], node: Node) -> A:
        """This node's attributes, parsed; a GraphError if the node is not of this op."""
        a = attrs(node)
        if not isinstance(a, cls):
            raise GraphError(f"node {node.name} ({node.op}) is not a {cls.OP}")
        return a


@dataclass(frozen=True)
class DenseAttrs(Attrs):
    OP = Op.DENSE
    acc: FixedType | None = _a("fixed", None)  # exact accumulator (accumulator_types)
    relu: bool = _a("bool", False)             # fused ReLU (fuse_dense_relu)
    exact: bool = _a("bool", False)            # output type = the accumulator (assign_types)


@dataclass(frozen=True)
class AddAttrs(Attrs):          # Add and Sub
    OP = Op.ADD
    acc: FixedType | None = _a("fixed", None)  # exact sum
    exact: bool = _a("bool", False)


@dataclass(frozen=True)
class SubAttrs(AddAttrs):
    OP = Op.SUB


@dataclass(frozen=True)
class MulAttrs(Attrs):
    OP = Op.MUL
    acc: FixedType | None = _a("fixed", None)  # exact product
    exact: bool = _a("bool", False)            # output type = the product (assign_types)


@dataclass(frozen=True)
class DivAttrs(Attrs):
    OP = Op.DIV


@dataclass(frozen=True)
class ReluAttrs(Attrs):
    OP = Op.RELU


@dataclass(frozen=True)
class LeakyReluAttrs(Attrs):
    OP = Op.LEAKY_RELU
    alpha: float = _a("float")                 # float slope (fixed point: the alpha input)
    acc: FixedType | None = _a("fixed", None)  # exact product


@dataclass(frozen=True)
class LutAttrs(Attrs):
    OP = Op.LUT
    func: str = _a("str")                      # a LUT_FUNCS name
    alpha: float | None = _a("float", None)    # selu's parameters (None: ONNX defaults)
    gamma: float | None = _a("float", None)
    lo: int | None = _a("int", None)           # table indexing (build_tables), see
    shift: int | None = _a("int", None)        # reference.table_index
    size: int | None = _a("int", None)
    beta: float | None = _a("float", None)     # hardsigmoid/hardswish: alpha * x + beta

    @property
    def selu_alpha(self) -> float:
        return SELU_ALPHA if self.alpha is None else self.alpha

    @property
    def selu_gamma(self) -> float:
        return SELU_GAMMA if self.gamma is None else self.gamma


@dataclass(frozen=True)
class SoftmaxAttrs(Attrs):
    OP = Op.SOFTMAX
    exp_type: FixedType | None = _a("fixed", None)    # the two tables (build_tables)
    exp_lo: int | None = _a("int", None)
    exp_shift: int | None = _a("int", None)
    recip_type: FixedType | None = _a("fixed", None)
    recip_lo: int | None = _a("int", None)
    recip_shift: int | None = _a("int", None)
    scale: float = _a("float", 1.0)   # softmax(scale * x): a quantizer's scale on its codes
    # (passes/scales.py), which the exp table holds in fixed point


@dataclass(frozen=True)
class ThresholdAttrs(Attrs):
    OP = Op.THRESHOLD
    source_ops: tuple[str, ...] = _a("strs", ())    # the float chain it replaces


@dataclass(frozen=True)
class RequantAttrs(Attrs):
    OP = Op.REQUANT
    quant_type: NumType = _a("type")           # the model quantizer's type


@dataclass(frozen=True)
class BipolarAttrs(Attrs):
    OP = Op.BIPOLAR
    scale: float = _a("float", 1.0)            # float output: +-scale


@dataclass(frozen=True)
class BatchNormAttrs(Attrs):
    OP = Op.BATCHNORM
    epsilon: float = _a("float")


@dataclass(frozen=True)
class ReshapeAttrs(Attrs):
    OP = Op.RESHAPE
    shape: tuple[int, ...] = _a("ints")        # per-sample output shape


@dataclass(frozen=True)
class TransposeAttrs(Attrs):
    OP = Op.TRANSPOSE
    perm: tuple[int, ...] = _a("ints")         # per-sample axes


@dataclass(frozen=True)
class ConcatAttrs(Attrs):
    OP = Op.CONCAT
    axis: int = _a("int")                      # per-sample axis


@dataclass(frozen=True)
class GatherAttrs(Attrs):
    OP = Op.GATHER
    axis: int = _a("int")                      # per-sample axis
    indices: int | tuple[Any, ...] = _a("index")  # non-negative, nested as indices_shape
    indices_shape: tuple[int, ...] = _a("ints")

    def index_array(self) -> np.ndarray:
        return np.asarray(self.indices, dtype=np.int64).reshape(self.indices_shape)


@dataclass(frozen=True)
class ConvAttrs(Attrs):
    """Channels-last convolution (docs: /work/notes/cnn_ir.md). W is (k..., Cin/group, Cout);
    zero padding; each output is the exact sum over its window and group, then one
    requantization, as Dense."""
    OP = Op.CONV
    kernel: tuple[int, ...] = _a("ints")       # one per spatial axis
    strides: tuple[int, ...] = _a("ints")
    pads: tuple[int, ...] = _a("ints")         # ONNX order: begins per axis, then ends
    group: int = _a("int", 1)                  # 1, or Cin (depthwise)
    acc: FixedType | None = _a("fixed", None)
    relu: bool = _a("bool", False)
    exact: bool = _a("bool", False)


@dataclass(frozen=True)
class MaxPoolAttrs(Attrs):
    OP = Op.MAX_POOL
    kernel: tuple[int, ...] = _a("ints")
    strides: tuple[int, ...] = _a("ints")
    pads: tuple[int, ...] = _a("ints")         # padding never wins


@dataclass(frozen=True)
class AvgPoolAttrs(Attrs):
    """Mean over the window, padding counted (count_include_pad=1), or with `exclude_pad`
    over the window's positions inside the input only (count_include_pad=0: a count per
    window, window_counts). Fixed point: to_output_type(window sum * recip), recip =
    round(2**F / count) in recip_type (F its fractional bits), a constant input once
    accumulator_types has computed it: a scalar, or with exclude_pad a table indexed by the
    window's count (entry 0 unused)."""
    OP = Op.AVG_POOL
    kernel: tuple[int, ...] = _a("ints")
    strides: tuple[int, ...] = _a("ints")
    pads: tuple[int, ...] = _a("ints")
    acc: FixedType | None = _a("fixed", None)        # exact window sum
    recip_type: FixedType | None = _a("fixed", None)
    exclude_pad: bool = _a("bool", False)            # count_include_pad=0


@dataclass(frozen=True)
class ResizeAttrs(Attrs):
    OP = Op.RESIZE
    scales: tuple[int, ...] = _a("ints")      # nearest, one integer factor per spatial axis


@dataclass(frozen=True)
class ClipAttrs(Attrs):
    """min(max(x, lo), hi) with constant bounds (None: unbounded on that side). Fixed point:
    the input codes clamped to [ceil(lo * 2**F), floor(hi * 2**F)] (F the input's fractional
    bits: the bounds rounded inward onto the input's grid), then one requantization."""
    OP = Op.CLIP
    lo: float | None = _a("float", None)
    hi: float | None = _a("float", None)


# QONNX's rounding modes (qonnx.custom_op.general.intquant.resolve_rounding_mode)
TRUNC_MODES = frozenset({"ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP",
                         "HALF_DOWN"})


@dataclass(frozen=True)
class TruncAttrs(Attrs):
    """QONNX Trunc on integer codes (reference.trunc): the input's value rounded onto the
    output type's grid by `mode` (one of TRUNC_MODES, as QONNX defines it: HALF_UP / UP round
    away from zero, HALF_DOWN / DOWN toward it), then saturated to the output type's range.
    The output type's own rounding mode is not used."""
    OP = Op.TRUNC
    mode: str = _a("str", "FLOOR")


@dataclass(frozen=True)
class RecurrentAttrs(Attrs):
    """What LSTM and GRU share (graphs/recurrent.py has the numeric contract). `acts`: the
    activation functions (LSTM f, g, h; GRU f, g) by recurrent.RNN_FUNCS name, with their
    `alphas`/`betas` (one each per function, 0.0 where unused). The types and table indexing
    are set by passes/recurrent.py; one pre-activation type for every gate."""
    OP: ClassVar[Op]
    hidden: int = _a("int")
    acts: tuple[str, ...] = _a("strs")
    alphas: tuple[float, ...] = _a("floats", ())
    betas: tuple[float, ...] = _a("floats", ())
    clip: float | None = _a("float", None)         # |pre-activation| <= clip
    acc: FixedType | None = _a("fixed", None)      # exact gate sums (x.W + h.R + biases)
    pre_type: FixedType | None = _a("fixed", None)  # each gate's one requantization
    f_type: FixedType | None = _a("fixed", None)   # table f's output (the sigmoid gates)
    g_type: FixedType | None = _a("fixed", None)   # table g's output (the candidate)
    state_type: FixedType | None = _a("fixed", None)  # the hidden state h
    f_lo: int | None = _a("int", None)             # table indexing (reference.table_index)
    f_shift: int | None = _a("int", None)
    g_lo: int | None = _a("int", None)
    g_shift: int | None = _a("int", None)


@dataclass(frozen=True)
class LstmAttrs(RecurrentAttrs):
    """Inputs x (T, F), W (F, 4H), R (H, 4H), B (2, 4H) (rows: W's bias, R's bias), h0 (H,),
    c0 (H,) [, table f, table g, table h]; gate columns in ONNX order i, o, f, c. `emit`: the
    output sequence is the hidden state h ("h") or the cell state c ("c", for Y_c)."""
    OP = Op.LSTM
    emit: str = _a("str", "h")
    cell_type: FixedType | None = _a("fixed", None)  # the cell state c
    h_type: FixedType | None = _a("fixed", None)     # table h's output (of c)
    h_lo: int | None = _a("int", None)
    h_shift: int | None = _a("int", None)


@dataclass(frozen=True)
class GruAttrs(RecurrentAttrs):
    """Inputs x (T, F), W (F, 3H), R (H, 3H), B (2, 3H), h0 (H,) [, table f, table g]; gate
    columns in ONNX order z, r, h. `lbr`: linear_before_reset."""
    OP = Op.GRU
    lbr: bool = _a("bool", False)
    hn_type: FixedType | None = _a("fixed", None)  # lbr: h.Rh + Rbh, requantized


@dataclass(frozen=True)
class MatMulAttrs(Attrs):
    """a @ b of two activations over the last two axes (graphs/attention.py)."""
    OP = Op.MATMUL
    acc: FixedType | None = _a("fixed", None)  # exact sum of products


@dataclass(frozen=True)
class AttentionAttrs(Attrs):
    """Multi-head scaled dot-product attention (graphs/attention.py has the contract).
    Inputs q (T, H*dk), k (S, H*dk), v (S, H*dv) [, mask (T, S) when `masked`] [, exp_table,
    recip_table]. `scale` multiplies the scores (1/sqrt(dk) unless the model says other);
    the fixed-point fields are set by the types pass."""
    OP = Op.ATTENTION
    heads: int = _a("int")
    scale: float = _a("float")
    masked: bool = _a("bool", False)
    acc: FixedType | None = _a("fixed", None)          # exact q.k sums
    scale_code: int | None = _a("int", None)           # the scale as c * 2**-scale_frac
    scale_frac: int | None = _a("int", None)
    score_type: FixedType | None = _a("fixed", None)   # scores after the scale
    prob_type: FixedType | None = _a("fixed", None)    # softmax output
    out_acc: FixedType | None = _a("fixed", None)      # exact p.v sums
    exp_type: FixedType | None = _a("fixed", None)     # Softmax's two tables
    exp_lo: int | None = _a("int", None)
    exp_shift: int | None = _a("int", None)
    recip_type: FixedType | None = _a("fixed", None)
    recip_lo: int | None = _a("int", None)
    recip_shift: int | None = _a("int", None)


@dataclass(frozen=True)
class LayerNormAttrs(Attrs):
    """LayerNormalization over the last axis (graphs/attention.py has the contract). Inputs
    x, gamma, beta [, g, b, rsqrt_table] (the last three set by the types pass: gamma *
    sqrt(D) and beta quantized, the rsqrt table)."""
    OP = Op.LAYER_NORM
    epsilon: float = _a("float")
    acc: FixedType | None = _a("fixed", None)          # the exact variance sum V
    eps_code: int | None = _a("int", None)             # E of step 2
    rsqrt_bits: int | None = _a("int", None)           # M: the table has 2**M entries
    rsqrt_frac: int | None = _a("int", None)           # fr


def window_shape(in_spatial: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...],
                 pads: tuple[int, ...]) -> tuple[int, ...]:
    """Output spatial shape of a window op (floor mode)."""
    r = len(kernel)
    return tuple((in_spatial[i] + pads[i] + pads[i + r] - kernel[i]) // strides[i] + 1
                 for i in range(r))


def window_counts(in_spatial: tuple[int, ...], kernel: tuple[int, ...],
                  strides: tuple[int, ...], pads: tuple[int, ...]) -> np.ndarray:
    """For each output position of a window op (floor mode), how many of its window's
    positions lie inside the input (not in the padding): an int64 array of the output's
    spatial shape (the divisor of an AveragePool with count_include_pad=0)."""
    r = len(kernel)
    out = window_shape(in_spatial, kernel, strides, pads)
    counts = np.ones((), dtype=np.int64)
    for i in range(r):
        start = np.arange(out[i], dtype=np.int64) * strides[i] - pads[i]
        n = np.minimum(start + kernel[i], in_spatial[i]) - np.maximum(start, 0)
        counts = np.multiply.outer(counts, n)
    return counts


# -- inputs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpSpec:
    """What a node of one op holds. `counts`: the allowed numbers of inputs (None: one or
    more). `consts`: "rest" — every input after the first is a constant; "any" — the second
    input may be either; "none" — every input is an activation. The first input is always an
    activation."""

    attrs: type[Attrs]
    signature: str
    counts: frozenset[int] | None
    consts: str = "rest"
    activations: int = 1  # how many leading inputs are activations ("rest": the others not)


def _n(*k: int) -> frozenset[int]:
    return frozenset(k)


SPECS: dict[Op, OpSpec] = {
    Op.DENSE: OpSpec(DenseAttrs, "x, W[, b]", _n(2, 3)),
    Op.ADD: OpSpec(AddAttrs, "a, b", _n(2), "any"),
    Op.SUB: OpSpec(SubAttrs, "a, b", _n(2), "any"),
    Op.MUL: OpSpec(MulAttrs, "a, b", _n(2), "any"),
    Op.DIV: OpSpec(DivAttrs, "a, b", _n(2), "any"),
    Op.RELU: OpSpec(ReluAttrs, "x", _n(1)),
    Op.LEAKY_RELU: OpSpec(LeakyReluAttrs, "x[, alpha]", _n(1, 2)),
    Op.LUT: OpSpec(LutAttrs, "x[, table]", _n(1, 2)),
    Op.SOFTMAX: OpSpec(SoftmaxAttrs, "x[, exp_table, recip_table]", _n(1, 3)),
    Op.THRESHOLD: OpSpec(ThresholdAttrs, "x, thresholds, steps, base", _n(4)),
    Op.REQUANT: OpSpec(RequantAttrs, "x", _n(1)),
    Op.BIPOLAR: OpSpec(BipolarAttrs, "x", _n(1)),
    Op.BATCHNORM: OpSpec(BatchNormAttrs, "x, scale, bias, mean, var", _n(5)),
    Op.RESHAPE: OpSpec(ReshapeAttrs, "x", _n(1)),
    Op.TRANSPOSE: OpSpec(TransposeAttrs, "x", _n(1)),
    Op.CONCAT: OpSpec(ConcatAttrs, "x1, x2, ...", None, "none"),
    Op.GATHER: OpSpec(GatherAttrs, "x", _n(1)),
    Op.CONV: OpSpec(ConvAttrs, "x, W[, b]", _n(2, 3)),
    Op.MAX_POOL: OpSpec(MaxPoolAttrs, "x", _n(1)),
    Op.AVG_POOL: OpSpec(AvgPoolAttrs, "x[, recip]", _n(1, 2)),
    Op.RESIZE: OpSpec(ResizeAttrs, "x", _n(1)),
    Op.CLIP: OpSpec(ClipAttrs, "x", _n(1)),
    Op.TRUNC: OpSpec(TruncAttrs, "x", _n(1)),
    Op.LSTM: OpSpec(LstmAttrs, "x, W, R, B, h0, c0[, table_f, table_g, table_h]", _n(6, 9)),
    Op.GRU: OpSpec(GruAttrs, "x, W, R, B, h0[, table_f, table_g]", _n(5, 7)),
    Op.MATMUL: OpSpec(MatMulAttrs, "a, b", _n(2), "none"),
    Op.ATTENTION: OpSpec(AttentionAttrs, "q, k, v[, mask][, exp_table, recip_table]",
                         _n(3, 4, 5, 6), "rest", 3),
    Op.LAYER_NORM: OpSpec(LayerNormAttrs, "x, gamma, beta[, g, b, rsqrt_table]", _n(3, 6)),
}


# -- parsing -------------------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, Integral) and not isinstance(v, (bool, np.bool_))


def _index(v: Any) -> bool:
    return _is_int(v) or (isinstance(v, tuple) and all(_index(x) for x in v))


@lru_cache(maxsize=1024)
def _type_text(text: str) -> NumType:
    return parse_type(text)


def _parse_value(kind: str, v: Any) -> Any:
    """The typed value of a stored attribute; ValueError names what was expected."""
    if kind == "bool" and isinstance(v, (bool, np.bool_)):
        return bool(v)
    if kind == "int" and _is_int(v):
        return int(v)
    if kind == "float" and isinstance(v, Real) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    if kind == "str" and isinstance(v, str):
        return v
    if kind in ("fixed", "type") and isinstance(v, str):
        t = _type_text(v)  # TypeError_ (a ValueError) names the text
        if kind == "fixed" and not isinstance(t, FixedType):
            raise ValueError(f"{v!r} is not a fixed-point type")
        return t
    if kind == "ints" and isinstance(v, tuple) and all(_is_int(x) for x in v):
        return tuple(int(x) for x in v)
    if kind == "strs" and isinstance(v, tuple) and all(isinstance(x, str) for x in v):
        return v
    if kind == "floats" and isinstance(v, tuple) and all(
            isinstance(x, Real) and not isinstance(x, (bool, np.bool_)) for x in v):
        return tuple(float(x) for x in v)
    if kind == "index" and _index(v):
        return v
    expected = {"fixed": "the text of a fixed-point type", "type": "the text of a number type",
                "ints": "a tuple of ints", "strs": "a tuple of strings",
                "floats": "a tuple of numbers",
                "index": "an int or nested tuples of ints"}.get(kind, f"a {kind}")
    raise ValueError(f"{v!r} is not {expected}")


# per op: its schema, the kind of each field, the required fields
_SCHEMAS = {op: (s.attrs, {f.name: f.metadata["kind"] for f in dataclasses.fields(s.attrs)},
                 tuple(f.name for f in dataclasses.fields(s.attrs) if f.default is MISSING))
            for op, s in SPECS.items()}


def parse_attrs(op: str, stored: tuple[tuple[str, Any], ...], node_name: str = "?") -> Attrs:
    """Stored (key, value) pairs of an op -> its typed attributes. GraphError on an unknown
    op, an unknown or missing key, or a value of the wrong kind."""
    schema = _SCHEMAS.get(op)  # type: ignore[call-overload]
    if schema is None:
        raise GraphError(f"node {node_name}: {op_error(op)}")
    cls, kinds, required = schema
    values: dict[str, Any] = {}
    for key, v in stored:
        kind = kinds.get(key)
        if kind is None:
            raise GraphError(f"node {node_name} ({op}): unknown attribute {key!r}; {op} has: "
                             f"{', '.join(kinds) or 'none'}")
        try:
            values[key] = _parse_value(kind, v)
        except ValueError as e:
            raise GraphError(f"node {node_name} ({op}): attribute {key!r}: {e}") from None
    for key in required:
        if key not in values:
            raise GraphError(f"node {node_name} ({op}): missing attribute {key!r}")
    return cls(**values)


@lru_cache(maxsize=4096)
def _cached(op: str, stored: tuple[tuple[str, Any], ...], node_name: str,
            kinds: tuple[type, ...]) -> Attrs:
    return parse_attrs(op, stored, node_name)


def attrs(node: Node) -> Attrs:
    """The node's typed attributes (DenseAttrs, LutAttrs, …), parsed once per distinct node.

    The cache key holds the value types, as equal values of other types must not share an
    entry (relu=1 is not relu=True); tuples (whose items' types the key does not see) and
    unhashable values are parsed every time."""
    kinds = tuple(type(v) for _, v in node.attrs)
    if tuple not in kinds:
        try:
            return _cached(node.op, node.attrs, node.name, kinds)
        except TypeError:  # unhashable
            pass
    return parse_attrs(node.op, node.attrs, node.name)
