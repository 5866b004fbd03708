"""What every lowering function shares: the graph with its arena plan and the constants to
ship (`LowerCtx`), C literals, the requantization arguments of the templates, and index maps
for broadcasting and layout changes."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..graphs.analysis.memory_plan import storage_bits
from ..graphs.ir import Graph, GraphError, Node
from ..graphs.types import FixedType, NumType, Overflow, Rounding
from .kernel import Param

CTYPE = {8: "signed char", 16: "short", 32: "int", 64: "long long"}
NPTYPE = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
RND = {Rounding.TRN: 0, Rounding.RND: 1, Rounding.RND_CONV: 2}

# What a lowering function returns: (template, template context, kernel params, threads per sample)
Lowered = tuple[str, dict[str, Any], list[Param], int]


def cll(v: int) -> str:
    """An int64 C literal."""
    v = int(v)
    if v == -(1 << 63):
        return "(-9223372036854775807LL - 1)"
    return f"{v}LL"


def cfloat(v: float) -> str:
    """A float32 C literal."""
    return f"{float(np.float32(v))!r}f".replace("inf", "INFINITY")


def type_args(t: FixedType) -> dict[str, Any]:
    """A fixed-point type as the template arguments of mc_quantize / mc_overflow."""
    return {"frac": t.frac, "rnd": RND[t.rounding], "sat": int(t.overflow == Overflow.SAT),
            "qmin": cll(t.qmin), "qmax": cll(t.qmax), "width": t.width, "signed": int(t.signed),
            "narrow": int(t.narrow)}


def requant_args(node: Node, frac_in: int, t: NumType) -> dict[str, Any]:
    """The arguments of mc_requant (macros.rq): codes at `frac_in` fractional bits -> t."""
    if not isinstance(t, FixedType):
        raise GraphError(f"node {node.name} ({node.op}): expected a fixed-point output type")
    s = frac_in - t.frac
    if s < -62:
        raise GraphError(f"node {node.name} ({node.op}): shift by {-s} bits is over 62")
    return {"shift": s, **type_args(t)}


class LowerCtx:
    """The graph being lowered, the C types of its tensors, and the constants to ship."""

    def __init__(self, g: Graph, plan: dict[str, Any]):
        self.g = g
        self.plan = plan
        self.consts: dict[str, np.ndarray] = {}

    def t(self, name: str) -> NumType:
        t = self.g.tensor(name).dtype
        if t is None:
            raise GraphError(f"tensor {name!r} has no type; compile the graph first")
        return t

    def ctype(self, name: str) -> str:
        p = self.plan["tensors"][name]
        return "float" if p["float"] else CTYPE[p["bits"]]

    def act(self, cname: str, tensor: str) -> Param:
        return Param(cname, self.ctype(tensor), False, tensor, self.plan["tensors"][tensor]["offset"])

    def const(self, cname: str, key: str, value: np.ndarray, as_float: bool) -> Param:
        """Ship a constant (already in its final layout); floats as float32, codes in the
        narrowest integer that holds them."""
        v = np.ascontiguousarray(value)
        if as_float:
            v = v.astype(np.float32)
            ctype = "float"
        else:
            v = v.astype(np.int64)
            lo, hi = (int(v.min()), int(v.max())) if v.size else (0, 0)
            bits = storage_bits(FixedType(2, 2), lo, hi)
            v = v.astype(NPTYPE[bits])
            ctype = CTYPE[bits]
        base, k = key, 1
        while key in self.consts and not (self.consts[key].dtype == v.dtype
                                          and np.array_equal(self.consts[key], v)):
            k += 1
            key = f"{base}#{k}"
        self.consts[key] = v
        return Param(cname, ctype, True, key)

    def cval(self, name: str) -> np.ndarray:
        return np.asarray(self.g.constants[name])

    def base(self, node: Node, kname: str) -> dict[str, Any]:
        """The template context every kernel has: names, float or fixed, output C type."""
        out = node.outputs[0]
        return {"kname": kname, "node": node.name, "op": node.op, "is_float": self.t(out).is_float,
                "yt": self.ctype(out)}


def broadcast(node: Node, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A per-sample constant broadcast to `shape`, flat; refuses one that would grow it."""
    try:
        full = np.broadcast_to(value, np.broadcast_shapes(value.shape, (1,) + shape))
    except ValueError:
        raise GraphError(f"node {node.name} ({node.op}): cannot broadcast a constant of shape "
                         f"{list(value.shape)} to {list(shape)}") from None
    if full.shape[1:] != shape or full.shape[0] != 1:
        raise GraphError(f"node {node.name} ({node.op}): a constant of shape "
                         f"{list(value.shape)} would change the shape {list(shape)}")
    return full.reshape(-1)


def index_map(ctx: LowerCtx, node: Node, src: str, out: str) -> np.ndarray | None:
    """Flat per-sample index of `src` for each element of `out` (None when identical)."""
    s, o = ctx.g.tensor(src).shape, ctx.g.tensor(out).shape
    if s == o:
        return None
    idx = np.arange(int(np.prod(s)), dtype=np.int64).reshape(s)
    return broadcast(node, idx, o)


def linear_tail(ctx: LowerCtx, node: Node, c: dict[str, Any], params: list[Any],
                bn: str | None) -> None:
    """Bias, alignment and requantization of an exact sum of products (templates/cuda/
    linear.j2), shared by Dense and Conv: inputs x and w are params[0] and params[1]."""
    fl = c["is_float"]
    x, wn = node.inputs[0], node.inputs[1]
    if bn is not None:
        params.append(ctx.const("bias", bn, ctx.cval(bn).reshape(-1), fl))
    if not fl:
        frac = ctx.t(x).frac + ctx.t(wn).frac
        if bn is not None:
            tb = ctx.t(bn)
            bf = max(frac, tb.frac)
            c.update(acc_mul=cll(1 << (bf - frac)), bias_mul=cll(1 << (bf - tb.frac)))
            frac = bf
        c["r"] = requant_args(node, frac, ctx.t(node.outputs[0]))
    params.append(ctx.act("y", node.outputs[0]))
