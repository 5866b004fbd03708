"""The readers every op's definition goes through: a tensor's type, a constant, the node's
output type and its one requantization, the table indexing, and the golden run's state per
thread. A module of their own because reference.py gathers its ops from reference_linear,
reference_spatial and reference_rnn, which need them too and may not import reference.py
back (tests/test_layering.py: no import cycles).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from . import fixed as fx
from .ir import Graph, GraphError, Node
from .types import FixedType, NumType

Array = np.ndarray
OpFn = Callable[[Graph, Node, list[Array]], Array]
# per thread: the running execute's BLAS thread control (`threads`, threads.Threads: set by
# reference_linear.set_threads) and im2col's reused work buffers (`scratch`: reference_spatial)
PER_THREAD = threading.local()


def tensor_type(g: Graph, name: str) -> NumType:
    t = g.tensor(name).dtype
    if t is None:
        raise GraphError(f"tensor {name!r} has no type; compile the graph first")
    return t


def const(g: Graph, name: str) -> Array:
    return np.asarray(g.constants[name])


def out_type(g: Graph, node: Node) -> NumType:
    return tensor_type(g, node.outputs[0])


def is_fixed(g: Graph, node: Node) -> bool:
    return not out_type(g, node).is_float


def finish(g: Graph, node: Node, q: Array, frac: int) -> Array:
    """Requantize exact codes at `frac` to the node's output type."""
    t = out_type(g, node)
    assert isinstance(t, FixedType)
    return fx.requantize(q, frac, t)


def f32(v: Array) -> Array:
    return np.asarray(v, dtype=np.float32)


def to_out(g: Graph, node: Node, name: str, v: Array) -> Array:
    """An input's values in the node's output representation (data movement ops):
    float32, or its codes requantized to the output type (exact when the types agree)."""
    if not is_fixed(g, node):
        return f32(v)
    return fx.requantize(v.astype(np.int64), tensor_type(g, name).frac, out_type(g, node))


def table_index(q: Array, lo: int, shift: int, size: int) -> Array:
    """The documented table indexing: clip the code into the table's domain
    [lo, lo + (size << shift) - 1], subtract lo and drop `shift` low bits."""
    hi = lo + (size << shift) - 1
    return np.right_shift(np.clip(q.astype(np.int64), lo, hi) - lo, shift)
