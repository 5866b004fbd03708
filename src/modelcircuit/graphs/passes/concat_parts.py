"""A Gather that takes back exactly one whole input of a Concat along the Concat's axis is
that input: its readers read the input (a Reshape where the Gather's scalar index drops the
axis of size 1), and the Concat goes when nothing else reads it.

torch's stacked nn.LSTM/GRU read as h_n[-1] write this: the layers' final states are
concatenated (Concat along the layer axis) and the last one is gathered back. Every backend
then sees the last layer's state itself; the HDL, which has no whole-vector Concat or Gather,
can build the model. Runs before types exist (front-end normalisation).
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, prune
from ..ops import ConcatAttrs, GatherAttrs, Op
from ._util import rename_input


def forward_concat_parts(g: Graph) -> Graph:
    while True:
        node, part = next(((n, p) for n in g.nodes if (p := _whole_part(g, n)) is not None),
                          (None, None))
        if node is None or part is None:
            return g
        out = node.outputs[0]
        if g.tensor(part).shape == g.tensor(out).shape and out not in g.outputs:
            nodes = tuple(rename_input(n, out, part) for n in g.nodes if n is not node)
        else:  # the same values in the same order: a Reshape
            shape = g.tensor(out).shape
            nodes = tuple(Node.make(node.name, Op.RESHAPE, [part], [out], shape=list(shape))
                          if n is node else n for n in g.nodes)
        g = prune(g.replace(nodes=nodes))


def _whole_part(g: Graph, node: Node) -> str | None:
    """The Concat input that `node` (a Gather of a Concat's output) takes whole, if it does;
    None when the types differ (a model-typed Concat may requantize its inputs)."""
    if node.op != Op.GATHER:
        return None
    cat = g.producer(node.inputs[0])
    if cat is None or cat.op != Op.CONCAT:
        return None
    ga, axis = GatherAttrs.of(node), ConcatAttrs.of(cat).axis
    if ga.axis != axis:
        return None
    idx = ga.index_array()
    off = 0
    for x in cat.inputs:
        n = g.tensor(x).shape[axis]
        want = np.arange(off, off + n)
        if (np.array_equal(idx.reshape(-1), want) and (idx.ndim == 1 or (idx.ndim == 0 and n == 1))
                and g.tensor(x).dtype == g.tensor(node.outputs[0]).dtype
                == g.tensor(cat.outputs[0]).dtype):
            return x
        off += n
    return None
