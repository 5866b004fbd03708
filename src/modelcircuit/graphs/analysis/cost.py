"""The cost ledger: per node FLOPs, bytes, multipliers, and predicted time on a profile.

Multipliers count what a circuit with constant weights really needs: a zero weight costs
nothing and a power of two is a shift, so only the other non-zero weights count (a Conv's
weights once: the circuit reuses them for every pixel; its FLOPs count every pixel).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..ir import Graph, Node
from ..ops import ELEMENTWISE_BINARY, LINEAR, Op
from ..types import FixedType


@dataclass(frozen=True)
class NodeCost:
    node: str
    op: str
    flops: int
    bytes: int
    multipliers: int
    shifts: int
    zero_weights: int
    predicted_s: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _bytes(g: Graph, name: str) -> int:
    t = g.tensor(name)
    bits = t.dtype.width if isinstance(t.dtype, FixedType) else 32
    return (t.size * bits + 7) // 8


def is_pow2(v: np.ndarray) -> np.ndarray:
    a = np.abs(v.astype(np.int64))
    return (a != 0) & ((a & (a - 1)) == 0)


# one operation per output element (Div, of two float activations, is counted as none)
_ONE_FLOP = (ELEMENTWISE_BINARY - {Op.DIV}) | {Op.RELU, Op.LEAKY_RELU, Op.REQUANT, Op.BIPOLAR,
                                               Op.BATCHNORM}
_ONE_MULT = frozenset({Op.MUL, Op.LEAKY_RELU})


def node_cost(g: Graph, node: Node, profile: dict[str, Any] | None = None) -> NodeCost:
    flops = mults = shifts = zeros = 0
    out = g.tensor(node.outputs[0])
    if node.op in LINEAR:
        w = np.asarray(g.constants[node.inputs[1]])
        # a Conv is a Dense per output pixel: (window * Cin/group) x Cout products each
        pixels = 1 if node.op == Op.DENSE else out.size // out.shape[-1]
        flops = 2 * w.size * pixels + (out.size if len(node.inputs) > 2 else 0)
        if isinstance(g.tensor(node.inputs[1]).dtype, FixedType):
            nz = w != 0
            p2 = is_pow2(w)
            zeros, shifts = int((~nz).sum()), int(p2.sum())
            mults = int((nz & ~p2).sum())
        else:
            mults = int(w.size)
    elif node.op in _ONE_FLOP:
        flops = out.size
        if node.op in _ONE_MULT:
            mults = out.size
    elif node.op in (Op.LUT, Op.THRESHOLD):
        flops = out.size
    elif node.op in (Op.MAX_POOL, Op.AVG_POOL):  # a compare or an add per window element
        k = int(np.prod(node.get("kernel")))
        flops = out.size * (k - 1) + (out.size if node.op == Op.AVG_POOL else 0)
        mults = out.size if node.op == Op.AVG_POOL else 0
    elif node.op == Op.SOFTMAX:
        flops = 4 * out.size
        mults = out.size
    elif node.op in (Op.MATMUL, Op.ATTENTION, Op.LAYER_NORM):
        flops = _attention_flops(g, node)
    nbytes = sum(_bytes(g, i) for i in node.inputs if i) + _bytes(g, node.outputs[0])
    pred = None
    if profile and profile.get("kind") == "gpu":
        peak = profile["fp32_tflops"] * 1e12
        pred = max(flops / peak, nbytes / (profile["bandwidth_gbs"] * 1e9))
    return NodeCost(node.name, node.op, int(flops), int(nbytes), mults, shifts, zeros, pred)


def _attention_flops(g: Graph, node: Node) -> int:
    """MatMul of two activations: 2K per output. Attention (q (T, H dk), k (S, H dk),
    v (S, H dv)): 2 dk per score, one for its scale, Softmax's 4 per score, 2 per score and
    output column for p @ v. LayerNorm: 7 per element (the sum, the difference, its square
    and sum, the normalisation, gamma and beta). Products of two activations are not counted
    as multipliers: those are the circuit's to plan (hdl/flow)."""
    out = g.tensor(node.outputs[0])
    if node.op == Op.MATMUL:
        return 2 * g.tensor(node.inputs[0]).shape[-1] * out.size
    if node.op == Op.LAYER_NORM:
        return 7 * out.size
    (t, hdk), (s, hdv) = g.tensor(node.inputs[0]).shape, g.tensor(node.inputs[2]).shape
    h = int(node.get("heads"))
    return t * s * (2 * hdk + 5 * h + 2 * hdv)


def ledger(g: Graph, profile: dict[str, Any] | None = None) -> list[NodeCost]:
    return [node_cost(g, n, profile) for n in g.nodes]


def totals(rows: list[NodeCost]) -> dict[str, Any]:
    return {
        "flops": sum(r.flops for r in rows),
        "bytes": sum(r.bytes for r in rows),
        "multipliers": sum(r.multipliers for r in rows),
        "shifts": sum(r.shifts for r in rows),
        "zero_weights": sum(r.zero_weights for r in rows),
        "predicted_s": (sum(r.predicted_s for r in rows)
                        if rows and all(r.predicted_s is not None for r in rows) else None),
    }
