"""Structural rewrites before types exist: bias into Dense, BatchNorm into Dense,
model quantizers into the op that produces their input."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node, Tensor, prune
from ..ops import EXACT_PRODUCERS, FLOAT_CHAIN, LINEAR, BatchNormAttrs, Op, attrs
from ._util import single_consumer, splice


def fuse_bias(g: Graph) -> Graph:
    """Dense(x, W) followed by Add(., c) with c of shape (N,) -> Dense(x, W, c)."""
    changed = True
    while changed:
        changed = False
        for d in g.nodes:
            if d.op != Op.DENSE or len(d.inputs) != 2:
                continue
            add = single_consumer(g, d.outputs[0])
            if add is None or add.op != Op.ADD or not g.is_const(add.inputs[1]):
                continue
            if g.tensor(d.outputs[0]).dtype is not None or g.tensor(add.outputs[0]).dtype is not None:
                continue  # a typed Add: the model's own type, or the float tail on the host
            if _float_operand(g, add) and all(g.tensor(i).dtype is not None for i in d.inputs):
                continue  # a float bias on integer operands: exact as thresholds, not as a type
            n = g.tensor(d.outputs[0]).shape[-1]  # a Dense over a sequence: per feature
            cv = np.asarray(g.constants[add.inputs[1]])
            if cv.size not in (1, n) or (cv.size == n and cv.shape[-1] != n):
                continue  # not one value per output feature
            c = np.broadcast_to(cv.reshape(-1), (n,)).copy()
            cname = add.inputs[1]
            consts = dict(g.constants)
            consts[cname] = c.astype(np.float64)
            tensors = dict(g.tensors)
            tensors[cname] = dataclasses.replace(g.tensor(cname), shape=(n,))
            nd = dataclasses.replace(d, inputs=d.inputs + (cname,), outputs=add.outputs)
            g = prune(g.replace(nodes=splice(g, {add.name}, {d.name: nd}), constants=consts,
                                tensors=tensors))
            changed = True
            break
    return g


def _per_feature(g: Graph, name: str, n: int) -> np.ndarray | None:
    """A constant as one value per output feature (shape (n,)), or None if it is not one."""
    v = np.asarray(g.constants[name], dtype=np.float64)
    if v.size == 1:
        return np.full(n, float(v.reshape(-1)[0]))
    if v.size == n and v.shape[-1] == n:
        return v.reshape(n)
    return None


def _affine(g: Graph, node, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(k, c) with node(x) = x * k + c per feature, for a per-feature affine op."""
    if node.op == Op.BATCHNORM:
        s, b, m, v = (np.asarray(g.constants[i], dtype=np.float64).reshape(-1)
                      for i in node.inputs[1:5])
        k = s / np.sqrt(v + BatchNormAttrs.of(node).epsilon)
        return k, b - m * k
    if node.op not in (Op.ADD, Op.SUB, Op.MUL, Op.DIV) or len(node.inputs) != 2:
        return None
    if not g.is_const(node.inputs[1]):
        return None
    c = _per_feature(g, node.inputs[1], n)
    if c is None or (node.op == Op.DIV and np.any(c == 0)):
        return None
    one, zero = np.ones(n), np.zeros(n)
    return {Op.ADD: (one, c), Op.SUB: (one, -c), Op.MUL: (c, zero),
            Op.DIV: (1.0 / c, zero)}[node.op]


def fold_batchnorm(g: Graph, expand: bool = False) -> Graph:
    """A BatchNorm, or a per-feature Add/Sub/Mul/Div by a constant (a BatchNorm the exporter
    expanded into element-wise ops), after a float Dense folds into its weights and bias (in
    float64): one requantization instead of one per op in fixed point.

    After a Dense with model-quantized weights it stays: it is float arithmetic between two
    quantizers and becomes thresholds later (or the host tail).

    `expand` (fixed point): a BatchNorm that nothing folds into (no Dense/Conv before it,
    e.g. a model that starts with one) becomes x * k + c per channel (expand_batchnorm), ops
    that every backend computes in fixed point; otherwise the compile would succeed and the
    first fixed-point run fail.
    """
    g = _fold_batchnorm(g)
    return expand_batchnorm(g) if expand else g


def expand_batchnorm(g: Graph) -> Graph:
    """Every BatchNorm left untyped in a graph the model does not type -> Mul by k = scale /
    sqrt(var + eps), then Add of c = bias - mean * k (float64, as the importer does for a
    channels-first frame: frontend/onnx/channels.py). The Add keeps the BatchNorm's name and
    output, so a per-layer precision for the BatchNorm types its result. In a model-typed
    (QONNX) graph a BatchNorm between two quantizers becomes exact thresholds of the float
    model's own arithmetic instead (passes/thresholds.py), so it is left alone there."""
    if g.get_meta("typed_by_model"):
        return g
    bns = [n for n in g.nodes if n.op == Op.BATCHNORM and g.tensor(n.outputs[0]).dtype is None]
    if not bns:
        return g
    consts, tensors, swap = dict(g.constants), dict(g.tensors), {}

    def fresh(base: str) -> str:
        name, i = base, 0
        while name in tensors:
            i += 1
            name = f"{base}_{i}"
        return name

    for bn in bns:
        x, out = bn.inputs[0], bn.outputs[0]
        shape = g.tensor(x).shape
        n = shape[0]
        k, c = _affine(g, bn, n)  # type: ignore[misc]
        bshape = (n,) + (1,) * (len(shape) - 1)  # an IR BatchNorm normalises axis 0
        kn, cn, mid = fresh(f"{bn.name}_k"), fresh(f"{bn.name}_c"), fresh(f"{out}_scaled")
        consts[kn], consts[cn] = k.reshape(bshape), c.reshape(bshape)
        tensors[kn], tensors[cn] = Tensor(kn, bshape), Tensor(cn, bshape)
        tensors[mid] = Tensor(mid, shape)
        mul_name = bn.name + "_scale"
        while any(m.name == mul_name for m in g.nodes):
            mul_name += "_"
        swap[bn.name] = (Node.make(mul_name, Op.MUL, [x, kn], [mid]),
                         Node.make(bn.name, Op.ADD, [mid, cn], [out]))
    nodes = tuple(m for nd in g.nodes for m in swap.get(nd.name, (nd,)))
    return prune(g.replace(nodes=nodes, constants=consts, tensors=tensors))


def _fold_batchnorm(g: Graph) -> Graph:
    changed = True
    while changed:
        changed = False
        for d in g.nodes:
            if d.op not in LINEAR or attrs(d).relu:  # type: ignore[attr-defined]
                continue
            nxt = single_consumer(g, d.outputs[0])
            if nxt is None or nxt.inputs[0] != d.outputs[0]:
                continue
            if g.tensor(d.inputs[1]).dtype is not None or g.tensor(d.outputs[0]).dtype is not None:
                continue
            if g.tensor(nxt.outputs[0]).dtype is not None:
                continue
            w = np.asarray(g.constants[d.inputs[1]], dtype=np.float64)
            n_out = w.shape[-1]  # Dense (K, N), Conv (*kernel, Cin/group, Cout)
            if nxt.op == Op.BATCHNORM and d.op != Op.DENSE:
                continue  # an IR BatchNorm normalises axis 0; a frame's channels are last
            aff = _affine(g, nxt, n_out)
            if aff is None:
                continue
            k, c = aff
            b0 = (np.asarray(g.constants[d.inputs[2]], dtype=np.float64).reshape(-1)
                  if len(d.inputs) > 2 else np.zeros(n_out))
            consts, tensors = dict(g.constants), dict(g.tensors)
            wn, bname = f"{nxt.name}_W", f"{nxt.name}_b"
            consts[wn], consts[bname] = w * k, b0 * k + c  # k scales the last axis
            tensors[wn] = dataclasses.replace(g.tensor(d.inputs[1]), name=wn)
            tensors[bname] = Tensor(bname, (n_out,))
            nd = dataclasses.replace(d, inputs=(d.inputs[0], wn, bname), outputs=nxt.outputs)
            g = prune(g.replace(nodes=splice(g, {nxt.name}, {d.name: nd}), constants=consts,
                                tensors=tensors))
            changed = True
            break
    return g


_SCALING = frozenset({Op.MUL, Op.DIV, Op.BATCHNORM})  # float-chain ops whose constants are not exact


def _inexact(g: Graph, n) -> bool:
    """A float-chain op that no fixed-point type computes exactly: a scaling, or an Add/Sub
    of a float constant the model did not quantize (a Brevitas float bias)."""
    return n.op in _SCALING or (n.op in FLOAT_CHAIN and _float_operand(g, n))


def _float_operand(g: Graph, n) -> bool:
    return bool(g.get_meta("typed_by_model")) and any(
        g.is_const(c) and g.tensor(c).dtype is None for c in n.inputs[1:] if c)


def _after_float_chain(g: Graph, node) -> bool:
    """Does an untyped Mul/BatchNorm (or float bias) feed `node` through element-wise ops?
    Then the whole chain belongs to the thresholds pass, not to one exact op."""
    cur = node
    while cur is not None and cur.op in FLOAT_CHAIN:
        if cur is not node and _inexact(g, cur):
            return True
        nxt = cur.inputs[0]
        if g.tensor(nxt).dtype is not None:
            return False
        cur = g.producer(nxt)
        if cur is not None and _inexact(g, cur):
            return True
    return False


def fold_requant(g: Graph) -> Graph:
    """A model quantizer right after Dense/Relu/Add/Sub becomes that op's output type.

    Exact because those ops compute their exact result before one requantization; Mul and
    BatchNorm chains are left for the thresholds pass (their float constants are not exact).
    """
    for r in list(g.nodes):
        if r.op != Op.REQUANT:
            continue
        p = g.producer(r.inputs[0])
        if p is None or p.op not in EXACT_PRODUCERS or single_consumer(g, p.outputs[0]) is None:
            continue
        if (g.tensor(p.outputs[0]).dtype is not None or _after_float_chain(g, p)
                or _float_operand(g, p)):  # a float bias: exact as thresholds, not a type
            continue
        np_ = dataclasses.replace(p, outputs=r.outputs)
        g = prune(g.replace(nodes=splice(g, {r.name}, {p.name: np_})))
    return g
