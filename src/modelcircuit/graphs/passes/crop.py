"""A crop of a Conv's output folded into the Conv: the cheapest circuit for a crop.

A Gather that is the only reader of a Conv's output (group 1 for the channel case) and keeps
- a contiguous run of a spatial axis whose dropped outputs are windows over the padding
  (TCN's Chomp1d after a Conv1d padded by (k-1)*d on both ends: `x[:, :, :-(k-1)*d]`),
  becomes the Conv with smaller pads on that axis: output o of the Conv reads inputs
  s*o - pad_begin + [0, k), so keeping outputs a .. a+n-1 is the Conv with pad_begin - s*a
  before and the least end pad that gives n outputs (both >= 0, else no fold);
- some channels (any order) becomes the Conv with those weight columns and biases.
The Conv computes exactly the kept values, so every backend stays bit-exact and nothing is
computed to be dropped. Any other Gather stays one (golden, GPU and the streamed circuits run
it). Runs before types exist (front-end normalisation); a crop of a crop folds again.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node, prune
from ..ops import ConvAttrs, GatherAttrs, Op
from ._util import single_consumer


def fold_crops(g: Graph) -> Graph:
    while True:
        hit = next(((n, c) for n in g.nodes if (c := _folded(g, n)) is not None), None)
        if hit is None:
            return g
        gather, (conv, consts) = hit
        out = gather.outputs[0]
        tensors = dict(g.tensors)
        tensors[out] = dataclasses.replace(g.tensor(conv.outputs[0]), name=out,
                                           shape=g.tensor(out).shape)
        constants = dict(g.constants)
        for name, (v, was) in consts.items():  # typed as the constant they cut
            constants[name] = v
            tensors[name] = dataclasses.replace(g.tensor(was), name=name, shape=tuple(v.shape))
        nodes = tuple(conv if n.name == conv.name else n for n in g.nodes
                      if n.name != gather.name)
        g = prune(g.replace(nodes=nodes, tensors=tensors, constants=constants))


def _folded(g: Graph, node: Node) -> tuple[Node, dict[str, tuple[np.ndarray, str]]] | None:
    """(the Conv that computes `node`'s output itself, its new constants: name -> (value, the
    constant it is cut from)) where node is a
    Gather that folds into the Conv before it, else None."""
    if node.op != Op.GATHER:
        return None
    conv = g.producer(node.inputs[0])
    if conv is None or conv.op != Op.CONV or single_consumer(g, conv.outputs[0]) is not node:
        return None
    ga, ca = GatherAttrs.of(node), ConvAttrs.of(conv)
    idx = ga.index_array()
    shp = g.tensor(conv.outputs[0]).shape
    if idx.ndim != 1 or not 0 <= ga.axis < len(shp):
        return None
    outs = (node.outputs[0],)
    if ga.axis == len(shp) - 1:  # channels: weight columns and biases
        if ca.group != 1 or not all(g.is_const(i) for i in conv.inputs[1:]):
            return None
        stem = f"{conv.name}_{node.name}"
        w, b = conv.inputs[1], conv.inputs[2] if len(conv.inputs) > 2 else ""
        consts = {f"{stem}_w": (np.asarray(g.constants[w])[..., idx], w)}
        ins = [conv.inputs[0], f"{stem}_w"]
        if b:
            consts[f"{stem}_b"] = (np.asarray(g.constants[b]).reshape(-1)[idx], b)
            ins.append(f"{stem}_b")
        return dataclasses.replace(conv, inputs=tuple(ins), outputs=outs), consts
    a, n = int(idx[0]), int(idx.size)
    if not np.array_equal(idx, np.arange(a, a + n)):
        return None
    r, ax = len(ca.kernel), ga.axis
    s, k = ca.strides[ax], ca.kernel[ax]
    length = g.tensor(conv.inputs[0]).shape[ax]
    begin = ca.pads[ax] - s * a
    end = (n - 1) * s + k - length - begin
    if begin < 0 or end < 0:
        return None
    pads = list(ca.pads)
    pads[ax], pads[ax + r] = begin, end
    return dataclasses.replace(conv.with_attrs(pads=pads), outputs=outs), {}
