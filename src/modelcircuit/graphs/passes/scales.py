"""Scaled integers -> an integer Dense and float scales after it (FINN's streamlining).

onnx_quant writes a quantizer with a non-power-of-two scale s and zero point z as
s * (q - z) around integer codes q, and a weight quantizer's result as values c * w_j (integer
codes c, a scale per output column; the scales are in graph meta `weight_scales`). A Dense on
such operands computes

    y_j = s * w_j * (q @ c)_j  -  s * z * w_j * sum_i c_ij  +  b_j

so it becomes an exact integer Dense(q, c) followed by Mul(s * w_j) and Add(b'_j): float
arithmetic on the accumulator (a float bias the model did not quantize moves out the same way), which passes/thresholds.py turns into exact thresholds before
the next quantizer, or which stays a float tail run on the host (graphs/host.py).
A Conv is the same per window, its weights (window * Cin/group, Cout) as the columns (with a
zero point only without padding: a padded position holds the value 0, not the code 0).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, GraphError, Node, Tensor, prune
from ..ops import LAYOUT, LINEAR, SELECTING, ConvAttrs, Op
from ..types import FixedType, type_for_range
from ._util import single_consumer, splice

MAX_CODE = 1 << 24  # weight codes beyond this are not a quantizer's


def factor_columns(w: np.ndarray, scales: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """w (K, N) == codes * scale[None, :] exactly, codes integers, each column's scale one of
    `scales` (tried largest first: the fewest code bits); None if some column has none."""
    codes = np.zeros_like(w, dtype=np.float64)
    col_scale = np.ones(w.shape[1], dtype=np.float64)
    sv = np.asarray(scales, dtype=np.float64)
    with np.errstate(all="ignore"):
        for j in range(w.shape[1]):
            col = w[:, j]
            if not np.any(col):
                continue
            # candidates: the scales under which the column's largest element is a code (a
            # necessary condition of the test below, the same arithmetic, for every scale at
            # once: a model with per-channel scales has thousands)
            v = col[np.argmax(np.abs(col))]
            cv = np.round(v / sv)
            ok = (np.abs(cv) < MAX_CODE) & (cv * sv == v)
            for s in (scales[i] for i in np.flatnonzero(ok)):
                c = np.round(col / s)
                if np.all(np.abs(c) < MAX_CODE) and np.array_equal(c * s, col):
                    codes[:, j], col_scale[j] = c, s
                    break
            else:
                return None
    return codes, col_scale


def _scalar(g: Graph, name: str) -> float | None:
    if not g.is_const(name):
        return None
    v = np.asarray(g.constants[name], dtype=np.float64)
    u = np.unique(v)
    return float(u[0]) if u.size == 1 else None


def _per_channel(g: Graph, name: str, channels: int) -> np.ndarray | None:
    """A constant that varies along the last (channel) axis only, as (channels,), or None."""
    if not g.is_const(name):
        return None
    v = np.asarray(g.constants[name], dtype=np.float64)
    if v.ndim == 0 or v.shape[-1] != channels or any(d != 1 for d in v.shape[:-1]):
        return None
    return v.reshape(channels)


def _depthwise(g: Graph, d: Node | None) -> int:
    """The input channels of a depthwise Conv (group = its input channels), else 0."""
    if d is None or d.op != Op.CONV:
        return 0
    cin = int(g.tensor(d.inputs[0]).shape[-1])
    return cin if ConvAttrs.of(d).group == cin > 1 else 0


def _input_scale(g: Graph, x: str, reader: Node | None = None
                 ) -> tuple[str, float | np.ndarray, float | np.ndarray, set[str]]:
    """(codes tensor, scale, zero point, nodes absorbed) of a Dense input s * (q - z). Into a
    depthwise Conv (each output channel reads one input channel) the scale and zero point may
    be per channel: (Cin,) arrays."""
    p = g.producer(x)
    if p is None or p.op != Op.MUL or single_consumer(g, x) is None:
        return x, 1.0, 0.0, set()
    s = _scalar(g, p.inputs[1])
    cin = _depthwise(g, reader)
    if s is None and cin and isinstance(g.tensor(p.inputs[0]).dtype, FixedType):
        s = _per_channel(g, p.inputs[1], cin)
    if s is None:
        if g.is_const(p.inputs[1]) and isinstance(g.tensor(p.inputs[0]).dtype, FixedType):
            raise GraphError(
                f"node {p.name} (Mul): a quantizer with one scale per feature feeds a Dense "
                f"({[c.name for c in g.consumers(x)][0]}); per-feature activation scales times "
                "the weights have no integer form (per-tensor activation scales and "
                "per-output-channel weight scales are supported)")
        return x, 1.0, 0.0, set()
    cur, z, used = p.inputs[0], 0.0, {p.name}
    a = g.producer(cur)
    if a is not None and a.op == Op.ADD and single_consumer(g, cur) is not None:
        neg_z = _scalar(g, a.inputs[1])
        if neg_z is None and cin:
            neg_z = _per_channel(g, a.inputs[1], cin)
        if neg_z is not None:
            cur, z, used = a.inputs[0], -neg_z, used | {a.name}
    if not isinstance(g.tensor(cur).dtype, FixedType):
        return x, 1.0, 0.0, set()
    return cur, s, z, used


def _typed(g: Graph, name: str):
    """A tensor's type, or that of what a chain of layout ops (a Transpose of the input
    frame to channels-last) moves, which is the same."""
    t = g.tensor(name).dtype
    p = g.producer(name)
    while t is None and p is not None and p.op in LAYOUT:
        t = g.tensor(p.inputs[0]).dtype
        p = g.producer(p.inputs[0])
    return t


def _frame_layout(g: Graph, n: Node) -> bool:
    """A Reshape/Transpose that puts a frame channels-last for the Conv it feeds, or that
    moves one operand of a residual join (Add/Sub of two activations) into the other's layout
    (through scalar Mul/Add already moved after it)."""
    if n.op not in LAYOUT:
        return False
    cur = single_consumer(g, n.outputs[0])
    while cur is not None and cur.op in (Op.MUL, Op.ADD) and _scalar(g, cur.inputs[1]) is not None:
        cur = single_consumer(g, cur.outputs[0])
    return cur is not None and (cur.op in LINEAR or (
        cur.op in (Op.ADD, Op.SUB) and not any(g.is_const(i) for i in cur.inputs)))


def sink_scales(g: Graph) -> Graph:
    """A MaxPool or Resize after a per-tensor scale (Mul by a positive scalar, Add of a scalar:
    a scaled-integer quantizer's s * (q - z)) moves before it: max and repetition commute with
    both, so the pooling runs on the integer codes and the scale reaches the next Conv. So does
    the Reshape/Transpose that puts an input frame channels-last for a Conv."""
    changed = True
    while changed:
        changed = False
        for n in g.nodes:
            if n.op not in SELECTING and not _frame_layout(g, n):
                continue
            p = g.producer(n.inputs[0])
            if p is None or p.op not in (Op.MUL, Op.ADD) or single_consumer(g, p.outputs[0]) is None:
                continue
            c = _scalar(g, p.inputs[1])
            if c is None or (p.op == Op.MUL and c <= 0) or g.is_const(p.inputs[0]):
                continue
            t, k = f"{n.name}_codes", 1
            while t in g.tensors:
                t, k = f"{n.name}_codes{k}", k + 1
            tensors = dict(g.tensors)
            tensors[t] = Tensor(t, g.tensor(n.outputs[0]).shape, g.tensor(p.inputs[0]).dtype)
            pooled = dataclasses.replace(n, inputs=(p.inputs[0],) + n.inputs[1:], outputs=(t,))
            scaled = dataclasses.replace(p, inputs=(t,) + p.inputs[1:], outputs=n.outputs)
            g = prune(g.replace(nodes=splice(g, set(), {p.name: pooled, n.name: scaled}),
                                tensors=tensors))
            changed = True
            break
    return g


def sink_sum_scales(g: Graph) -> Graph:
    """Add/Sub of two activations with one per-tensor scale (a residual join: both operands
    quantized by one quantizer, s * q1 + s * q2) -> s * (q1 + q2): the sum runs on the integer
    codes (exact), the scale after it reaches the next quantizer's thresholds or Conv."""
    for n in list(g.nodes):
        if n.op not in (Op.ADD, Op.SUB) or any(g.is_const(i) for i in n.inputs):
            continue
        ps = [g.producer(i) for i in n.inputs]
        if any(p is None or p.op != Op.MUL or single_consumer(g, p.outputs[0]) is None
               or not isinstance(g.tensor(p.inputs[0]).dtype, FixedType) for p in ps):
            continue
        sc = [_scalar(g, p.inputs[1]) for p in ps]  # type: ignore[union-attr]
        if sc[0] is None or sc[0] != sc[1] or sc[0] <= 0 or g.tensor(n.outputs[0]).dtype:
            continue
        a, b = ps  # type: ignore[misc]
        t, k = f"{n.name}_codes", 1
        while t in g.tensors:
            t, k = f"{n.name}_codes{k}", k + 1
        tensors = dict(g.tensors)
        tensors[t] = Tensor(t, g.tensor(n.outputs[0]).shape)
        summed = dataclasses.replace(n, inputs=(a.inputs[0], b.inputs[0]), outputs=(t,))
        scaled = dataclasses.replace(a, inputs=(t, a.inputs[1]), outputs=n.outputs)
        nodes = []
        for m in g.nodes:
            if m.name in (a.name, b.name):
                continue
            nodes.extend([summed, scaled] if m.name == n.name else [m])
        g = prune(g.replace(nodes=tuple(nodes), tensors=tensors))
    return g


def split_shared_scales(g: Graph) -> Graph:
    """A quantizer's s * (q - z) read by several nodes (a residual block's input: the first
    Conv and the skip) -> one copy of the Mul (and its zero-point Add) per reader, so each
    reader factors the scale out for itself (a Conv into its integer Dense, the join into the
    sum on codes); shared, none could, and the Conv would run on a default-precision value."""
    changed = True
    while changed:
        changed = False
        for p in g.nodes:
            x = p.outputs[0]
            cons = g.consumers(x)
            if (p.op != Op.MUL or _scalar(g, p.inputs[1]) is None or g.is_const(p.inputs[0])
                    or len(cons) + (x in g.outputs) < 2):
                continue
            chain = [p]
            a = g.producer(p.inputs[0])
            if (a is not None and a.op == Op.ADD and _scalar(g, a.inputs[1]) is not None
                    and single_consumer(g, a.outputs[0]) is not None):
                chain.insert(0, a)
            if not isinstance(_typed(g, chain[0].inputs[0]), FixedType):
                continue
            tensors, extra, rewired = dict(g.tensors), [], {}
            for k, c in enumerate(cons[1:] if x not in g.outputs else cons, start=1):
                prev, copies = chain[0].inputs[0], []
                for m in chain:
                    t, j = f"{m.outputs[0]}_u{k}", 0
                    while t in tensors:
                        j += 1
                        t = f"{m.outputs[0]}_u{k}_{j}"
                    tensors[t] = dataclasses.replace(g.tensor(m.outputs[0]), name=t)
                    copies.append(dataclasses.replace(m, name=f"{m.name}_u{k}",
                                                      inputs=(prev,) + m.inputs[1:], outputs=(t,)))
                    prev = t
                extra.extend(copies)
                rewired[c.name] = dataclasses.replace(
                    rewired.get(c.name, c),
                    inputs=tuple(prev if i == x else i for i in rewired.get(c.name, c).inputs))
            nodes = []
            for n in g.nodes:
                nodes.append(rewired.get(n.name, n))
                if n.name == p.name:
                    nodes.extend(extra)
            g = prune(g.replace(nodes=tuple(nodes), tensors=tensors))
            changed = True
            break
    return g


def _float_input(g: Graph, src: str) -> bool:
    """The model's own float input (a frame through its channels-last move, or a vector),
    read by a Conv or Dense with quantized weights and no input quantizer (brevitas_examples'
    ResNet-18, an MLP whose first layer has none): the input gets the compile's fixed-point
    type, so the layer is an integer one on its codes and the scales after it stay exact
    (folded into the weights, they were rounded to that type)."""
    p = g.producer(src)
    while p is not None and p.op in LAYOUT:
        src, p = p.inputs[0], g.producer(p.inputs[0])
    return src in g.inputs and g.tensor(src).dtype is None


def factor_scales(g: Graph) -> Graph:
    g = split_shared_scales(g)
    g = sink_scales(g)
    g = sink_sum_scales(g)
    scales = tuple(float(s) for s in (g.get_meta("weight_scales") or ()))
    for d in list(g.nodes):
        if d.op not in LINEAR or g.tensor(d.outputs[0]).dtype is not None:
            continue
        src, s, z, used = _input_scale(g, d.inputs[0], d)
        if not isinstance(_typed(g, src), FixedType) and not _float_input(g, src):
            continue
        wname = d.inputs[1]
        w_full = np.asarray(g.constants[wname], dtype=np.float64)
        # a Conv's weights as a Dense's columns: (window * Cin/group, Cout)
        w = w_full if d.op == Op.DENSE else w_full.reshape(-1, w_full.shape[-1])
        if np.ndim(s) or np.ndim(z):  # per channel into a depthwise Conv: output o reads
            mult = w.shape[1] // _depthwise(g, d)  # input channel o // multiplier
            s = np.repeat(np.broadcast_to(s, (_depthwise(g, d),)), mult)
            z = np.repeat(np.broadcast_to(z, (_depthwise(g, d),)), mult)
        if d.op == Op.CONV and np.any(z != 0.0) and any(ConvAttrs.of(d).pads):
            zs = f"{z:g}" if np.ndim(z) == 0 else f"{float(z[np.argmax(np.abs(z))]):g}"
            raise GraphError(f"node {d.name} (Conv): its input quantizer has zero point "
                             f"{zs}, and the padding (value 0, code {zs}) is not the code 0 "
                             "the integer Conv pads with; a zero point with padding is not "
                             "supported")
        wt = g.tensor(wname).dtype
        if isinstance(wt, FixedType):  # power-of-two weights: keep their type
            codes, col_scale, new_w = w, np.ones(w.shape[1]), False
        else:
            f = factor_columns(w, scales) if scales else None
            if f is None:
                continue
            codes, col_scale = f
            new_w = True
        float_bias = (len(d.inputs) > 2 and g.tensor(d.inputs[2]).dtype is None
                      and bool(g.get_meta("typed_by_model")))
        if not new_w and np.all(s == 1.0) and np.all(z == 0.0) and not float_bias:
            continue
        k = s * col_scale
        b = (np.asarray(g.constants[d.inputs[2]], dtype=np.float64) if len(d.inputs) > 2
             else np.zeros(w.shape[1]))
        b2 = np.broadcast_to(b, (w.shape[1],)) - s * z * col_scale * codes.sum(axis=0)
        consts, tensors = dict(g.constants), dict(g.tensors)

        def const(name: str, v: np.ndarray, t: FixedType | None = None, consts=consts,
                  tensors=tensors) -> str:
            consts[name] = v
            tensors[name] = Tensor(name, tuple(v.shape), t)
            return name

        cn = wname
        if new_w:
            cn = const(f"{d.name}_codes", codes.reshape(w_full.shape),
                       type_for_range(int(codes.min(initial=0)), int(codes.max(initial=0)), 0))
        acc, scaled = f"{d.name}_acc", f"{d.name}_scaled"
        for t in (acc, scaled):
            tensors[t] = Tensor(t, g.tensor(d.outputs[0]).shape)
        kv = np.asarray(k[0]) if np.all(k == k[0]) else k
        has_bias = bool(np.any(b2))
        new = [dataclasses.replace(d, inputs=(src, cn), outputs=(acc,))]
        if np.all(k == 1.0):
            scaled = acc
        else:
            new.append(Node.make(f"{d.name}_scale", Op.MUL, [acc, const(f"{d.name}_k", kv)],
                                 [scaled if has_bias else d.outputs[0]]))
        if has_bias:
            new.append(Node.make(f"{d.name}_bias", Op.ADD, [scaled, const(f"{d.name}_b", b2)],
                                 [d.outputs[0]]))
        elif scaled == acc:  # nothing to apply: the Dense computes the output itself
            new = [dataclasses.replace(d, inputs=(src, cn))]
        nodes = []
        for n in g.nodes:
            if n.name in used:
                continue
            nodes.extend(new if n.name == d.name else [n])
        g = prune(g.replace(nodes=tuple(nodes), constants=consts, tensors=tensors))
    return g

