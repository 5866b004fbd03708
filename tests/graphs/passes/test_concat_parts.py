"""A Gather that takes back one whole input of a Concat (passes/concat_parts.py)."""

from __future__ import annotations

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.graphs.ops import Op
from modelcircuit.graphs.passes.concat_parts import forward_concat_parts


def _graph(indices, indices_shape, extra_reader: bool = False) -> mc.Graph:
    """x (4,) -> two Dense (1, 3) rows a, b -> Concat on axis 0 (2, 3) -> Gather on axis 0 ->
    Dense. `extra_reader`: the Concat is a second output too."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("cat")
    x = b.input("x", 4)
    rows = [b.reshape(b.dense(x, rng.normal(size=(4, 3)), None, name=f"d{k}"), (1, 3))
            for k in range(2)]
    cat = b._node(Op.CONCAT, rows, (2, 3), "cat", axis=0)
    n = int(np.prod(indices_shape)) if indices_shape else 1
    oshape = (n, 3) if indices_shape else (3,)
    got = b._node(Op.GATHER, [cat], oshape, "pick", axis=0, indices=indices,
                  indices_shape=list(indices_shape))
    b.output(b.dense(b.reshape(got, (n * 3,)), rng.normal(size=(n * 3, 2)), None, name="fc"))
    if extra_reader:
        b.output(cat)
    return b.build()


def _float(g: mc.Graph, x: np.ndarray) -> list[np.ndarray]:
    out = mc.run(mc.compile(g, precision="float32"), x)
    return out if isinstance(out, list) else [out]


@pytest.mark.parametrize("indices,shape,op", [([1], [1], None), (1, [], Op.RESHAPE),
                                              (0, [], Op.RESHAPE)])
def test_a_whole_input_replaces_gather_and_concat(indices, shape, op):
    g = _graph(indices, shape)
    h = forward_concat_parts(g)
    ops = [n.op for n in h.nodes]
    assert Op.CONCAT not in ops and Op.GATHER not in ops
    # the input read directly (same shape), or through a Reshape dropping the unit axis
    assert {n.name: n.op for n in h.nodes}.get("pick") == op
    unread = "d1" if indices == 0 else "d0"  # the other row's Dense goes with the Concat
    assert unread not in {n.name for n in h.nodes}
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    assert np.array_equal(_float(g, x)[0], _float(h, x)[0])


@pytest.mark.parametrize("indices,shape", [([0, 1], [2]), ([1, 0], [2])])
def test_gathers_of_more_or_other_than_one_input_stay(indices, shape):
    g = _graph(indices, shape)
    assert forward_concat_parts(g) is g


def test_a_concat_read_elsewhere_stays():
    h = forward_concat_parts(_graph([1], [1], extra_reader=True))
    ops = [n.op for n in h.nodes]
    assert Op.CONCAT in ops and Op.GATHER not in ops
