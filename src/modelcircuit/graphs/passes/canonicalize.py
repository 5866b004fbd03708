"""Structural rewrites before types exist: bias into Dense, BatchNorm into Dense,
model quantizers into the op that produces their input."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, prune
from ..ops import EXACT_PRODUCERS, FLOAT_CHAIN, BatchNormAttrs, Op
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
            n = g.tensor(d.outputs[0]).shape[0]
            c = np.broadcast_to(np.asarray(g.constants[add.inputs[1]]), (n,)).copy()
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


def fold_batchnorm(g: Graph) -> Graph:
    """BatchNorm after a float Dense folds into its weights and bias (in float64).

    A BatchNorm after a Dense with model-quantized weights stays: it is float arithmetic
    between two quantizers and becomes thresholds later.
    """
    for bn in list(g.nodes):
        if bn.op != Op.BATCHNORM:
            continue
        d = g.producer(bn.inputs[0])
        if d is None or d.op != Op.DENSE or single_consumer(g, d.outputs[0]) is None:
            continue
        if g.tensor(d.inputs[1]).dtype is not None or g.tensor(d.outputs[0]).dtype is not None:
            continue
        s, b, m, v = (np.asarray(g.constants[n], dtype=np.float64) for n in bn.inputs[1:5])
        k = s / np.sqrt(v + BatchNormAttrs.of(bn).epsilon)
        W = np.asarray(g.constants[d.inputs[1]], dtype=np.float64) * k[None, :]
        b0 = (np.asarray(g.constants[d.inputs[2]], dtype=np.float64)
              if len(d.inputs) > 2 else np.zeros_like(k))
        consts = dict(g.constants)
        tensors = dict(g.tensors)
        wn, bn_name = f"{d.name}_W_bn", f"{d.name}_b_bn"
        consts[wn], consts[bn_name] = W, (b0 - m) * k + b
        tensors[wn] = dataclasses.replace(g.tensor(d.inputs[1]), name=wn)
        tensors[bn_name] = dataclasses.replace(g.tensor(bn.inputs[2]), name=bn_name,
                                               shape=(W.shape[1],))
        nd = dataclasses.replace(d, inputs=(d.inputs[0], wn, bn_name), outputs=bn.outputs)
        g = prune(g.replace(nodes=splice(g, {bn.name}, {d.name: nd}), constants=consts,
                            tensors=tensors))
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
        if g.tensor(p.outputs[0]).dtype is not None or _after_float_chain(g, p):
            continue
        np_ = dataclasses.replace(p, outputs=r.outputs)
        g = prune(g.replace(nodes=splice(g, {r.name}, {p.name: np_})))
    return g
