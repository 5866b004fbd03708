"""What the streamed lowering's per-op functions share with the walk that calls them: the
design being built (`Lowering`: where each tensor comes from), the type check and window
geometry every function reads, and the refusal of an op a pixel stream has no circuit for.

Why a module of its own: the per-op functions (hdl/streamed/lower_ops.py) and the table by op
with the walk over the graph (hdl/streamed/lower.py) both need these. Kept apart from both,
the table names the functions and the functions refuse an op without either module importing
the other (no import cycle, tests/test_layering.py). For the same reason the ops that run per
pixel are data here (PER_PIXEL_OPS): the table maps them, the refusal names them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...graphs.ir import Graph, Node
from ...graphs.ops import SPATIAL, Op
from ...graphs.types import FixedType
from ..errors import HdlError
from ..units.arith import check_fixed
from ..vector.lower import Options
from .top import INPUT, StreamDesign
from .units import Tok
from .window import Geometry


def ftype(g: Graph, name: str, node: Node | None = None) -> FixedType:
    where = f"node {node.name} ({node.op}), tensor {name!r}" if node else f"tensor {name!r}"
    return check_fixed(g.tensor(name).dtype, where)


def geometry(shape: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...],
             pads: tuple[int, ...], where: str) -> Geometry:
    """A window over a channels-last (L, C) or (H, W, C) frame."""
    if len(shape) == 2 and len(kernel) == 1:
        return Geometry(1, shape[0], shape[1], 1, kernel[0], 1, strides[0],
                        (0, pads[0], 0, pads[1]))
    if len(shape) == 3 and len(kernel) == 2:
        return Geometry(shape[0], shape[1], shape[2], kernel[0], kernel[1], strides[0],
                        strides[1], (pads[0], pads[1], pads[2], pads[3]))
    raise HdlError(f"{where}: a {len(kernel)}-D window over a tensor of shape {list(shape)}; "
                   "the streaming circuits take channels-last (L, C) or (H, W, C)")


class Lowering:
    """The streamed design being built and where each tensor comes from, handed to the
    per-op functions of STREAM_LOWERING."""

    def __init__(self, g: Graph, opt: Options, d: StreamDesign, xin: str) -> None:
        self.g, self.opt, self.d = g, opt, d
        # tensor -> (source unit or INPUT, token, pixel stream?)
        self.src: dict[str, tuple[int, Tok, bool]] = {xin: (INPUT, d.input, True)}
        self.flat: dict[str, tuple[int, Tok]] = {}  # a Flatten whose Dense streams the pixels

    def get(self, name: str, node: Node) -> tuple[int, Tok, bool]:
        if name not in self.src:
            raise HdlError(f"node {node.name} ({node.op}): input {name!r} is not produced by "
                           "a streamed node")
        return self.src[name]

    def ins(self, node: Node) -> list[tuple[int, Tok, bool]]:
        return [self.get(a, node) for a in self.g.activations(node) if a not in self.flat]

    def on_stream(self, node: Node) -> bool:
        """Lowered by STREAM_LOWERING (a spatial op, or a node reading a pixel stream or a
        Flatten its Dense streams), else by the whole-vector table after a Flatten."""
        acts = self.g.activations(node)
        if node.op in SPATIAL or (acts and acts[0] in self.flat):
            return True
        ins = self.ins(node)
        return bool(ins) and ins[0][2]

    def add(self, inst: str, node: Node, unit: Any, sources: list[int], pixel: bool,
            **meta: Any) -> int:
        """A unit for `node`'s output; returns its index."""
        u = self.d.add(inst, unit, sources)
        self.d.meta[inst] = {"node": node.name, "op": str(node.op), **meta}
        self.src[node.outputs[0]] = (u, self.d.units[u][1].out, pixel)
        return u


StreamLower = Callable[[Lowering, Node, str], None]


def where_of(node: Node) -> str:
    return f"node {node.name} ({node.op})"

# the element-wise ops that run on a pixel stream one pixel at a time (STREAM_LOWERING maps
# them to lower_ops.lower_per_pixel); with Threshold (lower_ops.lower_threshold: folded, or
# per pixel) the ops a refusal names besides the spatial ones
PER_PIXEL_OPS = (Op.RELU, Op.LEAKY_RELU, Op.REQUANT, Op.BIPOLAR, Op.ADD, Op.SUB, Op.MUL, Op.LUT,
                 Op.CLIP, Op.TRUNC)
PIXEL_OPS = frozenset((*PER_PIXEL_OPS, Op.THRESHOLD))


def refuse_on_stream(node: Node) -> None:
    raise HdlError(f"{where_of(node)}: op {node.op} on a pixel stream has no streaming "
                   f"circuit; streamed: Conv, MaxPool, AvgPool, Resize, Concat, "
                   f"Reshape/Flatten, {', '.join(sorted(PIXEL_OPS))}")
