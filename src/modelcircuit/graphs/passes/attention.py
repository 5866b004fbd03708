"""Types, exact accumulators and tables of the attention ops (graphs/attention.py has the
numeric contract they implement).

`attention_types` (after assign_types and recurrent_types, before quantize_constants): the
output of each MatMul / Attention / LayerNorm keeps the type assign_types gave it (per-layer
map, calibration range, else the precision); this pass adds what is inside:

- MatMul: `acc`, the exact range of a sum of K products of the two input types.
- Attention: `acc` (q.k sums over dk), the scale as a constant code (`scale_code` at
  `scale_frac` fractional bits: c = 1 for a power of two, else 16 significant bits, fewer
  where the q.k accumulator is wider than 44 bits),
  `score_type` (the precision's width; integer bits from a calibration range "<node>::score",
  else the precision's), Softmax's two tables over the scores (exactly passes/tables.py's:
  exp over the 16 units below the row maximum, the reciprocal of the row sum over S keys),
  `prob_type` ufixed<W,1> (W the precision's width, its rounding), `out_acc` (p.v sums over
  S). The constant mask stays an untyped float constant: the reference quantizes its finite
  entries to score_type and drops the -inf ones (a row with no key left is refused here).
- LayerNorm: the three constants g = gamma * sqrt(D) and b = beta (the precision's width,
  integer bits fitted, rounded to nearest), the rsqrt table of M = table_bits + 2 index bits
  (at most 16) at fr = out.frac + (g's integer bits) + 6 fractional bits, the epsilon code E
  and the variance accumulator `acc`. gamma and beta stay untyped floats (the float32
  definition's inputs; the fixed-point one reads g and b).

Every intermediate is checked against the 62-bit limit of the int64 kernels.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from .. import attention as attn
from ..ir import Graph, GraphError, Node, Tensor
from ..ops import ATTENTION_OPS, AttentionAttrs, LayerNormAttrs, Op
from ..types import FixedType, NumType, Rounding, TypeError_, type_for_range
from .precision import DEFAULT_PRECISION, fit_int_bits, fit_type
from .tables import (
    DEFAULT_TABLE_BITS,
    EXP_TYPE,
    RECIP_TYPE,
    check_table_bits,
    make_table,
    shift_for,
)

LIMIT_BITS = 62  # int64 kernels and numpy int64: every intermediate, signed
SCALE_BITS = 16  # significant bits of a scale that is not a power of two
LN_GUARD_BITS = 6  # fractional bits of the normalised value beyond what the output needs
SOFTMAX_SPAN = 16.0  # exp(-16) ~ 1e-7: below the exp type's lsb (as passes/tables.py)


def _where(node: Node) -> str:
    return f"node {node.name} ({node.op})"


def _fixed(g: Graph, node: Node, name: str, what: str) -> FixedType:
    t = g.tensor(name).dtype
    if not isinstance(t, FixedType):
        raise GraphError(f"{_where(node)}: its {what} {name!r} has type {t}; attention ops compute "
                         "in one domain: give the model one fixed-point precision, or make it "
                         "float32")
    return t


def _check(node: Node, lo: int, hi: int, frac: int, what: str) -> FixedType:
    bits = max(abs(int(lo)), abs(int(hi))).bit_length() + 1
    if bits > LIMIT_BITS:
        raise GraphError(f"{_where(node)}: the {what} needs {bits} bits, over the {LIMIT_BITS}-bit "
                         "limit; use a narrower precision")
    try:
        return type_for_range(int(lo), int(hi), frac)
    except TypeError_:  # pragma: no cover - within 62 bits above
        raise GraphError(f"{_where(node)}: the {what} does not fit 64 bits") from None


def _products(a: FixedType, b: FixedType) -> tuple[int, int]:
    p = [a.qmin * b.qmin, a.qmin * b.qmax, a.qmax * b.qmin, a.qmax * b.qmax]
    return min(p), max(p)


def sum_type(node: Node, a: FixedType, b: FixedType, terms: int, what: str) -> FixedType:
    """The exact type of a sum of `terms` products of codes of a and b."""
    lo, hi = _products(a, b)
    return _check(node, min(0, terms * lo), max(0, terms * hi), a.frac + b.frac, what)


def scale_code(scale: float, bits: int = SCALE_BITS) -> tuple[int, int]:
    """(c, fc): scale = c * 2**-fc, exactly for a power of two (c = 1), else c rounded to
    `bits` significant bits."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale {scale} is not a positive finite number")
    m, e = math.frexp(scale)  # scale = m * 2**e, 0.5 <= m < 1
    if m == 0.5:
        return 1, 1 - e
    fc = bits - e
    return int(round(scale * 2.0**fc)), fc


def _ranged(base: FixedType, ranges: Mapping[str, tuple[float, float]], name: str) -> FixedType:
    if name not in ranges:
        return base
    lo, hi = ranges[name]
    return base.with_(signed=True, int_bits=fit_int_bits(max(abs(lo), abs(hi)), base.width, True))


def _matmul(g: Graph, node: Node) -> tuple[Node, dict, dict]:
    ta = _fixed(g, node, node.inputs[0], "input a")
    tb = _fixed(g, node, node.inputs[1], "input b")
    k = g.tensor(node.inputs[0]).shape[-1]
    acc = sum_type(node, ta, tb, k, "accumulator")
    return node.with_attrs(acc=str(acc)), {}, {}


def _softmax_tables(node: Node, score: FixedType, keys: int, bits: int) -> dict:
    span = max(1, math.ceil(SOFTMAX_SPAN * 2.0**score.frac))
    span = min(span, score.qmax - score.qmin)
    shift = shift_for(span + 1, bits)
    k = -(-span // (1 << shift))
    exp_lo = -(k << shift)
    exp_table = make_table("exp", node, exp_lo, 0, shift, score, EXP_TYPE)
    one = 1 << EXP_TYPE.frac
    if int(exp_table[-1]) != one:  # pragma: no cover - the middle of [-(2**shift)+1, 0]
        raise GraphError(f"{_where(node)}: exp table does not map 0 to 1.0")
    r_lo, r_hi = one, keys * int(exp_table.max())
    r_shift = shift_for(r_hi - r_lo + 1, bits)
    r_lo = (r_lo >> r_shift) << r_shift
    recip_table = make_table("reciprocal", node, r_lo, r_hi, r_shift, EXP_TYPE, RECIP_TYPE)
    return {"exp": exp_table, "recip": recip_table, "exp_lo": exp_lo, "exp_shift": shift,
            "recip_lo": r_lo, "recip_shift": r_shift}


def _attention(g: Graph, node: Node, base: FixedType, ranges: Mapping[str, tuple[float, float]],
               bits: int) -> tuple[Node, dict, dict]:
    a = AttentionAttrs.of(node)
    tq = _fixed(g, node, node.inputs[0], "query")
    tk = _fixed(g, node, node.inputs[1], "key")
    tv = _fixed(g, node, node.inputs[2], "value")
    _fixed(g, node, node.outputs[0], "output")
    t, hdk = g.tensor(node.inputs[0]).shape[-2:]
    s = g.tensor(node.inputs[2]).shape[-2]
    dk = hdk // a.heads
    acc = sum_type(node, tq, tk, dk, "q.k accumulator")
    try:  # 16 significant bits, fewer where the q.k sum is wide (the product within 62 bits)
        c, fc = scale_code(a.scale, max(4, min(SCALE_BITS, LIMIT_BITS - 2 - acc.width)))
    except ValueError as e:
        raise GraphError(f"{_where(node)}: {e}") from None
    _check(node, acc.qmin * c, acc.qmax * c, acc.frac + fc, "scaled score")
    score = _ranged(base.with_(signed=True), ranges, f"{node.name}::score")
    consts: dict[str, np.ndarray] = {}
    tensors: dict[str, Tensor] = {}
    if a.masked:
        mn = node.inputs[3]
        mask = np.asarray(g.constants[mn], dtype=np.float64)
        keep = attn.mask_keep(mask)
        assert keep is not None
        if not np.all(np.broadcast_to(keep, (t, s)).any(axis=-1)):
            raise GraphError(f"{_where(node)}: the mask {mn!r} removes every key of some query "
                             "row (a row of -inf); its softmax is undefined")
        if np.any(np.isnan(mask)) or np.any(np.isposinf(mask)):
            raise GraphError(f"{_where(node)}: the mask {mn!r} holds NaN or +inf")
        tensors[mn] = dataclasses.replace(g.tensor(mn), dtype=None)
    tab = _softmax_tables(node, score, s, bits)
    prob = FixedType(base.width, 1, signed=False, rounding=base.rounding)
    out_acc = sum_type(node, prob, tv, s, "p.v accumulator")
    en, rn = f"{node.name}_exp_table", f"{node.name}_recip_table"
    consts[en], consts[rn] = tab["exp"], tab["recip"]
    tensors[en] = Tensor(en, tab["exp"].shape, EXP_TYPE)
    tensors[rn] = Tensor(rn, tab["recip"].shape, RECIP_TYPE)
    node = node.with_attrs(
        acc=str(acc), scale_code=c, scale_frac=fc, score_type=str(score), prob_type=str(prob),
        out_acc=str(out_acc), exp_type=str(EXP_TYPE), exp_lo=tab["exp_lo"],
        exp_shift=tab["exp_shift"], recip_type=str(RECIP_TYPE), recip_lo=tab["recip_lo"],
        recip_shift=tab["recip_shift"])
    node = dataclasses.replace(node, inputs=node.inputs + (en, rn))
    return node, consts, tensors


def rsqrt_bits(table_bits: int) -> int:
    return min(16, table_bits + 2)


def _layer_norm(g: Graph, node: Node, base: FixedType, bits: int) -> tuple[Node, dict, dict]:
    a = LayerNormAttrs.of(node)
    tx = _fixed(g, node, node.inputs[0], "input")
    out = _fixed(g, node, node.outputs[0], "output")
    d = g.tensor(node.inputs[0]).shape[-1]
    gn, bn = node.inputs[1], node.inputs[2]
    gamma = np.broadcast_to(np.asarray(g.constants[gn], dtype=np.float64), (d,))
    beta = np.broadcast_to(np.asarray(g.constants[bn], dtype=np.float64), (d,))
    rnd = base.with_(rounding=Rounding.RND)
    tg = fit_type(gamma * math.sqrt(d), rnd.with_(signed=True))
    tb = fit_type(beta, rnd.with_(signed=True))
    m = rsqrt_bits(bits)
    fr = max(m, out.frac + tg.int_bits + LN_GUARD_BITS)
    if tb.frac > fr + tg.frac:
        tb = tb.with_(int_bits=tb.width - (fr + tg.frac))
    eps = attn.layernorm_eps_code(a.epsilon, d, tx.frac)
    span = tx.qmax - tx.qmin
    dmax = d * span  # |D q_i - S| <= (D - 1) * span
    vmax = d * dmax * dmax + eps
    acc = _check(node, 0, vmax, 2 * tx.frac, "variance sum")
    _check(node, -dmax * (1 << fr), dmax * (1 << fr), fr, "normalised product")
    # t_i < 2**fr (|x - mean| / sqrt(var) <= sqrt(D - 1)), so t * g + b is bounded by
    _check(node, -(1 << fr) * (abs(tg.qmin) + 1) - (abs(tb.qmin) << (fr + tg.frac - tb.frac)),
           (1 << fr) * (abs(tg.qmin) + 1) + (abs(tb.qmin) << (fr + tg.frac - tb.frac)),
           fr + tg.frac, "scaled sum")
    table = attn.rsqrt_table(m, fr)
    tt = FixedType(fr + 2, 2, signed=False)
    names = [f"{node.name}_g", f"{node.name}_b", f"{node.name}_rsqrt_table"]
    consts = {names[0]: gamma * math.sqrt(d), names[1]: np.array(beta), names[2]: table}
    tensors = {names[0]: Tensor(names[0], (d,), tg), names[1]: Tensor(names[1], (d,), tb),
               names[2]: Tensor(names[2], table.shape, tt),
               gn: dataclasses.replace(g.tensor(gn), dtype=None),
               bn: dataclasses.replace(g.tensor(bn), dtype=None)}
    node = node.with_attrs(acc=str(acc), eps_code=int(eps), rsqrt_bits=m, rsqrt_frac=fr)
    node = dataclasses.replace(node, inputs=node.inputs[:3] + tuple(names))
    return node, consts, tensors


def attention_types(g: Graph, precision: NumType | None = None,
                    ranges: Mapping[str, tuple[float, float]] | None = None,
                    table_bits: int = DEFAULT_TABLE_BITS) -> Graph:
    if not any(n.op in ATTENTION_OPS for n in g.nodes):
        return g
    if precision is not None and precision.is_float:
        return g
    bits = check_table_bits(table_bits)
    base = precision if isinstance(precision, FixedType) else DEFAULT_PRECISION
    ranges = ranges or {}
    nodes, consts, tensors = [], dict(g.constants), dict(g.tensors)
    for node in g.nodes:
        if node.op == Op.MATMUL:
            node, c, t = _matmul(g, node)
        elif node.op == Op.ATTENTION and len(node.inputs) == 3 + AttentionAttrs.of(node).masked:
            node, c, t = _attention(g, node, base, ranges, bits)
        elif node.op == Op.LAYER_NORM and len(node.inputs) == 3:
            node, c, t = _layer_norm(g, node, base, bits)
        else:
            nodes.append(node)
            continue
        nodes.append(node)
        consts.update(c)
        tensors.update(t)
    return g.replace(nodes=tuple(nodes), constants=consts, tensors=tensors)


__all__ = ["attention_types", "rsqrt_bits", "scale_code", "sum_type"]
