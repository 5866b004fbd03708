"""Which graphs stream and which Dense reads a flattened frame pixel by pixel: asked by the
lowering (hdl/streamed/lower.py), by the circuit plan (hdl/plan, before any unit exists) and
by the estimate, so it lives apart from the lowering, which imports the plan."""

from __future__ import annotations

import numpy as np

from ...graphs.ir import Graph, Node
from ...graphs.ops import RECURRENT, SPATIAL, Op
from .attention import streams_tokens


def is_streamed(g: Graph) -> bool:
    """A model with a spatial op streams its input pixel by pixel (cnn_ir.md); a recurrent
    model its sequence step by step (one (F,) token per time step)."""
    return any(n.op in SPATIAL or n.op in RECURRENT or streams_tokens(g, n) for n in g.nodes)


def flat_source(g: Graph, n: Node) -> tuple[int, int] | None:
    """(pixels, channels) when a streamed model's Dense takes a Flatten of a frame pixel by
    pixel (`FlatDense`, hdl/streamed/dense.py), else None."""
    if n.op != Op.DENSE or not is_streamed(g):
        return None
    p = g.producer(n.inputs[0])
    if p is None or p.op != Op.RESHAPE or len(g.consumers(n.inputs[0])) != 1:
        return None
    shp = g.tensor(p.inputs[0]).shape
    return (int(np.prod(shp[:-1])), int(shp[-1])) if len(shp) >= 2 else None
