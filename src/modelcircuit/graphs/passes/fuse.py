"""Fusions that keep the numbers identical: Dense (or Conv) + ReLU."""

from __future__ import annotations

import dataclasses

from ..ir import Graph, prune
from ..ops import LINEAR, Op, attrs
from ..types import FixedType, Overflow
from ._util import single_consumer, splice


def fuse_dense_relu(g: Graph) -> Graph:
    """Dense -> Relu becomes Dense(relu=True): out = max(requant(acc), 0).

    Exact when the two output types are equal (relu of codes already in the type), or when the
    Dense output is its exact accumulator and the Relu saturates: requant is monotone with
    requant(0) = 0, so max(requant(acc), 0) = requant(max(acc, 0)).
    """
    for d in list(g.nodes):
        if d.op not in LINEAR or attrs(d).relu:  # type: ignore[attr-defined]
            continue
        r = single_consumer(g, d.outputs[0])
        if r is None or r.op != Op.RELU:
            continue
        td, tr = g.tensor(d.outputs[0]).dtype, g.tensor(r.outputs[0]).dtype
        ok = td == tr or (isinstance(tr, FixedType) and tr.overflow == Overflow.SAT
                          and attrs(d).exact)  # type: ignore[attr-defined]
        if td is not None and td.is_float and tr is not None and tr.is_float:
            ok = True
        if not ok:
            continue
        nd = dataclasses.replace(d.with_attrs(relu=True, exact=False), outputs=r.outputs)
        g = prune(g.replace(nodes=splice(g, {r.name}, {d.name: nd})))
    return g
