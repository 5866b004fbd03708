"""The cost ledger counts the attention ops' FLOPs (graphs/analysis/cost.py), so `inspect`
and the GPU profile's predicted time see them."""

from __future__ import annotations

import modelcircuit as mc
from modelcircuit.graphs.analysis.cost import ledger
from tests.graphs.test_attention_types import encoder


def test_attention_layernorm_and_matmul_flops():
    c = mc.compile(encoder(), precision="fixed<16,6>")  # 8 tokens, d 16, 2 heads of 8
    rows = {r.op: r for r in ledger(c.graph)}
    # scores 8 x 8 x 2 heads: 16 multiply-adds each (2048), scale 128, Softmax 4 x 128 = 512,
    # p @ v: 8 x 8 keys x 16 columns x 2 = 2048
    assert rows["Attention"].flops == 2048 + 128 + 512 + 2048
    assert rows["LayerNorm"].flops == 7 * 8 * 16
    assert rows["Attention"].multipliers == 0


def test_matmul_flops():
    from modelcircuit.frontend.builder import GraphBuilder

    b = GraphBuilder("mm")
    x = b.input("x", (2, 3, 5))
    y = b.input("y", (2, 5, 4))
    b.output(b.matmul(x, y, name="mm"))
    [row] = ledger(mc.compile(b.build(), precision="float32").graph)
    assert row.flops == 2 * 5 * (2 * 3 * 4)
