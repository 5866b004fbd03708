"""SiLU and HardSwish written as a product of two activations: `Mul(x, Sigmoid(x))` and
`Mul(x, HardSigmoid(x))` (either input order) become one `Lut` of x, func silu / hardswish
(the HardSigmoid's alpha and beta kept), a table in fixed point like every other non-linear
function (DESIGN.md, "Numbers"). Without it the product of two activations is golden-only:
gpu-emu and the circuit multiply by constants only.

What exporters write (torch 2.13): nn.SiLU and x * torch.sigmoid(x) are Sigmoid + Mul at
every opset and with dynamo=True; nn.Hardswish is HardSigmoid(alpha=1/6) + Mul with
TorchScript at opsets 11 to 13 (MobileNetV3's usual export), the HardSwish op from opset 14
on and with dynamo=True (handlers.py takes that one).

Decided where the Mul is imported, after the gate: the gate's Lut is then dead and the
import's final prune drops it, and the Mul's layout handling (channels-first frames of a CNN)
is the one every Mul of two activations gets. Fused only when the gate reads the same tensor
x as the Mul and nothing else reads the gate's output (not a graph output either); a
quantizer between them (QONNX Quant, QDQ) is no such gate, so quantized models import as
before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from ...graphs.ir import Node
from .layout import act_shape

if TYPE_CHECKING:
    from .state import ImportState

_FUSED = {"sigmoid": "silu", "hardsigmoid": "hardswish"}
_HARDSWISH = (np.float32(1.0 / 6.0), 0.5)  # ONNX HardSwish's alpha, beta


def _gate(im: ImportState, s: str) -> Node | None:
    """The Sigmoid/HardSigmoid Lut whose own output is s (not an alias of it), if any."""
    if im.src(s) != s:
        return None
    for n in reversed(im.nodes):
        if s in n.outputs:
            ok = n.op == "Lut" and n.get("func") in _FUSED and len(n.inputs) == 1
            return n if ok else None
    return None


def _only_reader(im: ImportState, s: str, node: onnx.NodeProto) -> bool:
    return s not in {o.name for o in im.g.output} and all(
        n is node for n in im.g.node if s in n.input)


def swish(im: ImportState, node: onnx.NodeProto) -> bool:
    """Import `node` (a Mul of two activations) as a silu/hardswish Lut when it is x times
    a sigmoid or hard sigmoid of x (module docstring); False, emitting nothing, otherwise."""
    if node.op_type != "Mul":
        return False
    a, b = node.input
    for x, s in ((a, b), (b, a)):
        gate = _gate(im, s)
        if gate is None or gate.inputs[0] != im.src(x) or not _only_reader(im, s, node):
            continue
        func = _FUSED[gate.get("func")]
        extra = {}
        if func == "hardswish":
            alpha, beta = float(gate.get("alpha", 0.2)), float(gate.get("beta", 0.5))
            if (np.float32(alpha), beta) != _HARDSWISH:  # else: as an ONNX HardSwish imports
                extra = {"alpha": alpha, "beta": beta}
        im.emit(node, "Lut", [x], node.output[0], act_shape(im, x), func=func, **extra)
        return True
    return False
