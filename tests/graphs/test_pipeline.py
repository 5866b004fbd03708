"""The compiler as a whole (pipeline.py) on small hand-built graphs: fusion with
bit-exact results against exact rationals, WRAP overflow."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.graphs.types import FixedType
from tests.graphs.helpers import mlp


def test_dense_relu_fused_and_bit_exact_against_fractions():
    g = mlp(1)
    c = mc.compile(g, precision="fixed<10,4>")
    cg = c.graph
    assert [n.op for n in cg.nodes] == ["Dense", "Dense"] and cg.nodes[0].get("relu")
    x = np.random.default_rng(2).normal(size=(50, 6))
    out = mc.run(c, x, codes=True)
    # independent model: exact rationals, floor requantization, saturation
    t = FixedType(10, 4)

    def q(v: Fraction) -> int:
        k = int(np.floor(v * 2**t.frac))
        return min(max(k, t.qmin), t.qmax)

    W1, b1 = (cg.constants[i] for i in cg.nodes[0].inputs[1:])
    W2 = cg.constants[cg.nodes[1].inputs[1]]
    for row, got in zip(x, out, strict=True):
        xv = [q(Fraction(float(v))) for v in row]
        h = [max(q(sum(Fraction(int(xv[i]) * int(W1[i, j]), 2 ** (2 * t.frac)) for i in range(6))
                   + Fraction(int(b1[j]), 2**t.frac)), 0) for j in range(5)]
        y = [q(sum(Fraction(h[i] * int(W2[i, j]), 2 ** (2 * t.frac)) for i in range(5)))
             for j in range(3)]
        assert list(got) == y


def test_wrap_output_flips_sign_like_hls4ml():
    b = GraphBuilder("w")
    x = b.input("x", 1)
    b.output(b.dense(x, np.array([[3.0]]), None, name="d"))
    y_wrap = mc.run(mc.compile(b.build(), precision="fixed<8,3,TRN,WRAP>"), np.array([[1.5]]))
    y_sat = mc.run(mc.compile(b.build(), precision="fixed<8,3>"), np.array([[1.5]]))
    assert y_sat[0, 0] == pytest.approx(4 - 2**-5)  # saturates at the top of fixed<8,3>
    assert y_wrap[0, 0] == pytest.approx(4.5 - 8.0)  # 4.5 wraps to -3.5



def test_compile_takes_an_onnx_path_and_refuses_other_things(tmp_path):
    from pathlib import Path

    from modelcircuit.data import DEFAULT_MODEL, bundled
    from modelcircuit.graphs.ir import GraphError

    path = Path(bundled(DEFAULT_MODEL))
    by_graph = mc.compile(mc.load_onnx(path), precision="fixed<8,3>")
    for p in (path, str(path)):  # a path, as str or PathLike: the same graph id
        assert mc.compile(p, precision="fixed<8,3>").graph_id == by_graph.graph_id
    with pytest.raises(GraphError, match="got int"):
        mc.compile(3)
    with pytest.raises(GraphError, match="model file"):  # the loader's one-line refusal
        mc.compile(tmp_path / "missing.onnx")
