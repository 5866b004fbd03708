"""Accumulator widths from the constant weights and the input types: computed, never guessed.

For each Dense output j the exact range of sum_i x_i * w_ij + b_j over every input in the
input type's range gives the smallest exact type. Over 64 bits is a compile error.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, GraphError, Node, Tensor
from ..ops import (
    ADDITIVE,
    ELEMENTWISE_BINARY,
    LAYOUT,
    LINEAR,
    QUANTIZERS,
    SELECTING,
    AddAttrs,
    AvgPoolAttrs,
    MulAttrs,
    Op,
    attrs,
    window_counts,
)
from ..types import FixedType, TypeError_, type_for_range


def dense_range(xt: FixedType, w: np.ndarray, b: np.ndarray | None, bt: FixedType | None,
                wt: FixedType) -> tuple[int, int, int]:
    """(lo, hi, frac) of the exact accumulator; Python ints, no overflow possible (int64
    where every partial sum provably stays under 2**62, else Python ints)."""
    fast = _dense_range_int64(xt, w, b, bt, wt)
    if fast is not None:
        return fast
    w = np.asarray(w, dtype=object)
    lo_p = np.minimum(w * xt.qmin, w * xt.qmax)
    hi_p = np.maximum(w * xt.qmin, w * xt.qmax)
    lo_col, hi_col = lo_p.sum(axis=0), hi_p.sum(axis=0)
    frac = xt.frac + wt.frac
    if b is not None and bt is not None:
        bf = max(frac, bt.frac)
        sh_acc, sh_b = bf - frac, bf - bt.frac
        bb = np.asarray(b, dtype=object)
        lo_col = lo_col * (1 << sh_acc) + bb * (1 << sh_b)
        hi_col = hi_col * (1 << sh_acc) + bb * (1 << sh_b)
        frac = bf
    return int(min(lo_col.min(), 0)), int(max(hi_col.max(), 0)), frac


def _integral_int64(v: np.ndarray) -> np.ndarray | None:
    """v as int64 if every value is an integer under 2**53 in magnitude, else None."""
    v = np.asarray(v)
    if v.dtype.kind in "iub":
        return v.astype(np.int64) if v.size == 0 or int(np.abs(v).max()) < (1 << 53) else None
    if v.dtype.kind != "f" or not np.all(np.isfinite(v)) or (v.size and (
            np.abs(v).max() >= 2.0 ** 53 or not np.array_equal(v, np.round(v)))):
        return None
    return v.astype(np.int64)


def _dense_range_int64(xt: FixedType, w: np.ndarray, b: np.ndarray | None,
                       bt: FixedType | None, wt: FixedType) -> tuple[int, int, int] | None:
    """dense_range in int64 (the same integers, ~100x faster on big layers) where the
    weights and bias are integers and every sum is bounded under 2**62; None otherwise."""
    wi = _integral_int64(w)
    if wi is None or wi.ndim != 2 or wi.size == 0:
        return None
    xmax = max(abs(xt.qmin), abs(xt.qmax))
    bound = int(np.abs(wi).max()) * xmax * wi.shape[0]
    frac = xt.frac + wt.frac
    sh_acc = sh_b = 0
    bi = None
    if b is not None and bt is not None:
        bi = _integral_int64(b)
        if bi is None:
            return None
        bf = max(frac, bt.frac)
        sh_acc, sh_b = bf - frac, bf - bt.frac
        bound = (bound << sh_acc) + ((int(np.abs(bi).max()) if bi.size else 0) << sh_b)
        frac = bf
    if bound >= 1 << 62:
        return None
    a, c = wi * xt.qmin, wi * xt.qmax
    lo_col = np.minimum(a, c).sum(axis=0)
    hi_col = np.maximum(a, c).sum(axis=0)
    if bi is not None:
        lo_col = (lo_col << sh_acc) + (bi << sh_b)
        hi_col = (hi_col << sh_acc) + (bi << sh_b)
    return int(min(int(lo_col.min()), 0)), int(max(int(hi_col.max()), 0)), frac


def linear_weights(g: Graph, node: Node) -> np.ndarray:
    """A Dense's (K, N) weights, or a Conv's as (window * Cin/group, Cout): each output
    channel's exact range is that of a Dense column (a padded position contributes 0, which
    every column's range holds)."""
    w = np.asarray(g.constants[node.inputs[1]])
    return w if node.op == Op.DENSE else w.reshape(-1, w.shape[-1])


def avg_recip(node: Node, acc: FixedType, count: int) -> tuple[FixedType, int]:
    """The reciprocal of an AvgPool's window count as a fixed-point constant: exact for a
    power of two (F = log2(count)), else round(2**F / count) with F = 32 fractional bits (at
    most what keeps sum * recip within 62 bits)."""
    rt, codes = avg_recips(node, acc, [count])
    return rt, int(codes[count])


def avg_recips(node: Node, acc: FixedType, counts) -> tuple[FixedType, np.ndarray]:
    """The reciprocals of the window counts `counts` (count_include_pad=0: one per window
    geometry) in one fixed-point type: a table indexed by the count, entry c = round(2**F /
    c) (half up), entry 0 unused (0). F = log2 of the largest count where every count is a
    power of two (each reciprocal exact), else 32 (at most what keeps sum * recip within 62
    bits)."""
    cs = sorted({int(c) for c in counts})
    if all(c & (c - 1) == 0 for c in cs):
        f = cs[-1].bit_length() - 1
    else:
        f = min(32, 62 - acc.width - 1)
        if f < 8:
            raise GraphError(f"node {node.name} (AvgPool): the window sum is {acc.width} bits "
                             "wide, too wide to divide by the window size in 64 bits")
    table = np.zeros(cs[-1] + 1, dtype=np.int64)
    for c in range(1, cs[-1] + 1):
        table[c] = (2 * (1 << f) + c) // (2 * c)  # round half up
    return FixedType(f + 2, 2, False), table


def _check(node: Node, lo: int, hi: int, frac: int, what: str) -> FixedType:
    """The exact type of a sum, refused past int64: the golden model, the GPU kernels and the
    simulators' scoreboards hold sums as int64, so an unsigned 64-bit range (ufixed<64>) is
    over the limit too (it wrapped in the golden model until a property test drew one)."""
    try:
        if lo < -(1 << 63) or hi >= 1 << 63:
            raise TypeError_("over int64")
        return type_for_range(lo, hi, frac)
    except TypeError_:
        bits = max(abs(lo), abs(hi)).bit_length() + 1
        raise GraphError(f"node {node.name} ({node.op}): the {what} needs {bits} bits, over the "
                         "64-bit limit; use a narrower precision") from None


def _check_fixed_elementwise(g: Graph, node: Node) -> None:
    """Fixed point supports Add/Sub/Mul of two activations of one shape; division of two
    activations and broadcasting between activations are float only (a clear refusal)."""
    acts = g.activations(node)
    in_chain = g.tensor(node.outputs[0]).dtype is None  # float arithmetic -> thresholds
    if node.op == Op.DIV and not in_chain:
        what = "two activations" if len(acts) == 2 else "an activation by a constant outside " \
            "the float arithmetic before a model quantizer"
        raise GraphError(f"node {node.name} (Div): division of {what} is not supported in "
                         "fixed point (float32 only)")
    if node.op in ELEMENTWISE_BINARY and len(acts) == 2:  # Add, Sub, Mul (Div: refused above)
        out = g.tensor(node.outputs[0]).shape
        shapes = [g.tensor(a).shape for a in acts]
        if any(s != out for s in shapes):
            raise GraphError(f"node {node.name} ({node.op}): broadcasting between activations "
                             f"({' and '.join(str(list(s)) for s in shapes)}) is not supported "
                             "in fixed point (float32 only)")


def _check_one_domain(node, types: tuple) -> None:
    """A Dense/Conv with a fixed-point input computes its exact sum on codes: a float weight
    or bias (a per-layer file's {"weight": "float32"}) has no code to sum with."""
    for part, t in zip(("input", "weight", "bias"), types, strict=True):
        if t is not None and not isinstance(t, FixedType):
            raise GraphError(f"node {node.name} ({node.op}): its {part} has type {t} while the "
                             "rest is fixed point; a layer computes in one domain: give its "
                             "input, weight and bias fixed-point types, or make the whole "
                             "model float32")


def _check_float_into_fixed(g: Graph, node, tensors: dict) -> None:
    """Only a quantizer turns float values into codes. Any other op with a fixed-point result
    and a float32 activation (a per-layer file typing one layer float32 inside a fixed-point
    model) would read float values as codes: refused here, at compile time, naming both."""
    out_t = tensors[node.outputs[0]].dtype
    if not isinstance(out_t, FixedType) or node.op in QUANTIZERS:
        return
    for i in node.inputs:
        t = tensors[i].dtype if i and not g.is_const(i) else None
        if t is not None and t.is_float:
            raise GraphError(f"node {node.name} ({node.op}): input {i!r} is {t} but its result "
                             f"is {out_t}; only a quantizer turns float values into fixed point "
                             "(type the float layer's consumers float32 too, or make it fixed "
                             "point)")


def accumulator_types(g: Graph) -> Graph:
    tensors = dict(g.tensors)
    nodes = []
    for node in g.nodes:
        if ((node.op in LAYOUT or node.op in SELECTING) and tensors[node.outputs[0]].dtype is None
                and tensors[node.inputs[0]].dtype is not None):  # after an exact producer
            tensors[node.outputs[0]] = dataclasses.replace(tensors[node.outputs[0]],
                                                           dtype=tensors[node.inputs[0]].dtype)
        out_t = tensors[node.outputs[0]].dtype
        in_t = [tensors[i].dtype for i in node.inputs if i]
        _check_float_into_fixed(g, node, tensors)
        if any(isinstance(t, FixedType) for t in in_t) and (out_t is None or not out_t.is_float):
            _check_fixed_elementwise(g, node)
            if node.op in LINEAR:
                xt, wt = in_t[0], in_t[1]
                b = g.constants[node.inputs[2]] if len(node.inputs) > 2 else None
                bt = in_t[2] if len(in_t) > 2 else None
                _check_one_domain(node, (xt, wt, bt))
                lo, hi, frac = dense_range(xt, linear_weights(g, node), b, bt, wt)
                acc = _check(node, lo, hi, frac, "accumulator")
                node = node.with_attrs(acc=str(acc))
                if attrs(node).exact:  # type: ignore[attr-defined]
                    tensors[node.outputs[0]] = dataclasses.replace(tensors[node.outputs[0]], dtype=acc)
            elif node.op == Op.AVG_POOL and isinstance(in_t[0], FixedType):
                xt = in_t[0]
                pa = AvgPoolAttrs.of(node)
                count = int(np.prod(pa.kernel))
                acc = _check(node, count * xt.qmin, count * xt.qmax, xt.frac, "window sum")
                if pa.exclude_pad:  # a reciprocal per window count, indexed by the count
                    isp = tuple(tensors[node.inputs[0]].shape[:-1])
                    rt, code = avg_recips(node, acc, window_counts(
                        isp, pa.kernel, pa.strides, pa.pads).reshape(-1))
                else:
                    rt, code = avg_recip(node, acc, count)
                rn = f"{node.name}_recip"
                consts = dict(g.constants)
                consts[rn] = np.asarray(code, dtype=np.int64)
                tensors[rn] = Tensor(rn, np.shape(code), rt)
                g = g.replace(constants=consts)
                node = node.with_attrs(acc=str(acc), recip_type=str(rt))
                node = dataclasses.replace(node, inputs=(node.inputs[0], rn))
            elif node.op in ADDITIVE and all(isinstance(t, FixedType) for t in in_t):
                a, b = in_t[0], in_t[1]
                f = max(a.frac, b.frac)
                lo = (a.qmin << (f - a.frac)) + min(b.qmin << (f - b.frac), -(b.qmax << (f - b.frac)))
                hi = (a.qmax << (f - a.frac)) + max(b.qmax << (f - b.frac), -(b.qmin << (f - b.frac)))
                acc = _check(node, lo, hi, f, "sum")
                node = node.with_attrs(acc=str(acc))
                if AddAttrs.of(node).exact:
                    tensors[node.outputs[0]] = dataclasses.replace(tensors[node.outputs[0]], dtype=acc)
            elif node.op in (Op.MUL, Op.LEAKY_RELU) and all(isinstance(t, FixedType) for t in in_t):
                x, c = in_t[0], in_t[1]
                if g.is_const(node.inputs[1]):
                    cv = [int(v) for v in np.asarray(g.constants[node.inputs[1]]).reshape(-1)]
                else:  # product of two activations: every code of y is possible
                    cv = [c.qmin, c.qmax]
                prods = [x.qmin * v for v in cv] + [x.qmax * v for v in cv]
                if node.op == Op.LEAKY_RELU:
                    if c.frac < 0:  # x >= 0 passes as x << frac: needs frac >= 0
                        raise GraphError(f"node {node.name} (LeakyRelu): alpha is too large for "
                                         f"fixed-point width {c.width} (it would need {c}, "
                                         "with no fractional bits); alpha must be below "
                                         f"2**{c.width - 1}")
                    prods.append(x.qmax << c.frac)
                acc = _check(node, min(prods + [0]), max(prods + [0]), x.frac + c.frac, "product")
                node = node.with_attrs(acc=str(acc))
                if node.op == Op.MUL and MulAttrs.of(node).exact:
                    tensors[node.outputs[0]] = dataclasses.replace(tensors[node.outputs[0]], dtype=acc)
        nodes.append(node)
    return g.replace(nodes=tuple(nodes), tensors=tensors)
