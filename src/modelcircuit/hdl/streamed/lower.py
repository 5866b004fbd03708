"""Graph -> streaming design (hdl/streamed/units.py) for models with spatial ops (Conv, MaxPool,
AvgPool, Resize: graphs/ops.py SPATIAL).

Every channels-last activation ((L, C) or (H, W, C)) is a pixel stream: one token of C codes
per spatial position, raster order (cnn_ir.md, "Streaming"). Per node:
- Conv -> `WindowUnit` with a `Dense` (hdl/units/dense.py) over the kh*kw*Cin window, its
  weights block-diagonal for group > 1 (depthwise: one input channel per output channel;
  zero weights cost nothing at reuse 1); reuse from the plan (parallel over the output
  channels, folded over the window's inputs);
- MaxPool / AvgPool -> `WindowUnit` with `WindowMax` / `WindowAvg`;
- Resize -> `ResizeUnit` (+ a requantization if the output type differs);
- Concat on the last axis -> a per-pixel join (each part requantized to the output type);
- element-wise ops (Relu, LeakyRelu, Requant, Bipolar, Threshold, Add/Sub/Mul with a
  per-channel constant or of two streams) -> the whole-vector lowering (hdl/vector/lower.py) on a
  one-pixel view of the tensors, per token (`MapUnit`);
- Reshape/Flatten of a pixel stream into a vector feeding a Dense -> `FlatDense` (each
  pixel multiplied into the accumulators as it arrives; its reuse R = pixels x cycles per
  pixel); into anything else -> `CollectUnit` (the frame, C order of (H, W, C)); everything
  after it runs on the vector with the whole-vector units.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graphs.ir import Graph, Node, Tensor
from ...graphs.ops import (
    SPATIAL,
    AvgPoolAttrs,
    ConcatAttrs,
    ConvAttrs,
    DenseAttrs,
    MaxPoolAttrs,
    Op,
    ResizeAttrs,
)
from ...graphs.types import FixedType
from ..errors import HdlError
from ..names import instance_name
from ..units.arith import check_fixed, requantize
from ..units.dense import Dense
from ..units.elementwise import Elementwise
from ..vector.lower import LOWERING, Options, lower_node
from .dense import FlatDense, conv_weights
from .top import INPUT, StreamDesign
from .units import (
    CollectUnit,
    Geometry,
    MapUnit,
    ResizeUnit,
    Tok,
    WindowAvg,
    WindowMax,
    WindowUnit,
)

PIXEL_OPS = frozenset({Op.RELU, Op.LEAKY_RELU, Op.REQUANT, Op.BIPOLAR, Op.THRESHOLD, Op.ADD,
                       Op.SUB, Op.MUL, Op.LUT})


def is_streamed(g: Graph) -> bool:
    """A model with a spatial op streams its input pixel by pixel (cnn_ir.md)."""
    return any(n.op in SPATIAL for n in g.nodes)


def _t(g: Graph, name: str, node: Node | None = None) -> FixedType:
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


def _pixel_view(g: Graph, node: Node, c_of: dict[str, int]) -> Graph:
    """The graph with this node's streamed tensors seen as one pixel (C,)."""
    tensors = dict(g.tensors)
    for name in [*g.activations(node), *node.outputs]:
        t = g.tensor(name)
        tensors[name] = Tensor(name, (c_of.get(name, t.shape[-1]),), t.dtype)
    consts = dict(g.constants)
    for name in node.inputs:  # constants must be per channel: no spatial variation
        if name and name in consts:
            c = np.asarray(consts[name])
            while c.ndim > 1 and c.shape[0] == 1:
                c = c[0]
            if c.ndim > 1 and name not in (node.inputs[1:4] if node.op == Op.THRESHOLD else ()):
                raise HdlError(f"node {node.name} ({node.op}): constant {name!r} of shape "
                               f"{list(np.shape(consts[name]))} varies over the frame; the "
                               "streaming circuit takes per-channel constants")
            consts[name] = c
    return g.replace(tensors=tensors, constants=consts)


def _requant_unit(tin: FixedType, tout: FixedType, c: int) -> Elementwise:
    return Elementwise([(tin, c)], (tout, c),
                       lambda ins: [requantize(q, tin.frac, tout) for q in ins[0]])


def build_design(g: Graph, opt: Options) -> tuple[StreamDesign, list[int], list[int]]:
    """The streaming design of a graph with spatial ops. Returns (design, input frame
    shape, output frame shape)."""
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise HdlError(f"graph {g.name!r}: the HDL backend needs exactly one input and one "
                       f"output, got {len(g.inputs)} and {len(g.outputs)}")
    xin = g.inputs[0]
    shp = tuple(g.tensor(xin).shape)
    if len(shp) < 2:
        raise HdlError(f"graph {g.name!r}: input {xin!r} of shape {list(shp)} is not a "
                       "channels-last frame ((L, C) or (H, W, C)); the streaming circuit "
                       "takes one pixel per handshake")
    tin = _t(g, xin)
    d = StreamDesign(g.name, Tok(tin, shp[-1], int(np.prod(shp[:-1]))))
    # tensor -> (source unit or INPUT, token, pixel stream?)
    src: dict[str, tuple[int, Tok, bool]] = {xin: (INPUT, d.input, True)}
    flat: dict[str, tuple[int, Tok]] = {}  # a Flatten whose Dense streams the pixels

    def get(name: str, node: Node) -> tuple[int, Tok, bool]:
        if name not in src:
            raise HdlError(f"node {node.name} ({node.op}): input {name!r} is not produced by "
                           "a streamed node")
        return src[name]

    for idx, node in enumerate(g.nodes):
        inst = instance_name(idx, node.name)
        out = node.outputs[0]
        oshape = tuple(g.tensor(out).shape)
        acts = g.activations(node)
        ins = [get(a, node) for a in acts if a not in flat]
        where = f"node {node.name} ({node.op})"
        pixel = bool(ins) and ins[0][2]
        if node.op in (Op.CONV, Op.MAX_POOL, Op.AVG_POOL):
            s, tok, px = ins[0]
            if not px:
                raise HdlError(f"{where}: its input is not a pixel stream")
            x = acts[0]
            tx, tout = _t(g, x, node), _t(g, out, node)
            ishape = tuple(g.tensor(x).shape)
            if node.op == Op.CONV:
                a: Any = ConvAttrs.of(node)
                if a.acc is None:
                    raise HdlError(f"{where}: no accumulator type; compile the graph first")
                w = np.asarray(g.constants[node.inputs[1]], dtype=np.int64)
                geo = geometry(ishape, a.kernel, a.strides, a.pads, where)
                w4 = w.reshape((1,) + w.shape) if w.ndim == 3 else w
                wd = conv_weights(w4, a.group)
                bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
                inner: Any = Dense(tx, wd, _t(g, node.inputs[1], node),
                                   None if bn is None else np.asarray(g.constants[bn]),
                                   None if bn is None else _t(g, bn, node), tout, a.acc,
                                   a.relu, opt.reuse.get(node.name, 1), opt.adder_levels,
                                   opt.schedule, opt.strategy if isinstance(opt.strategy, str)
                                   else opt.strategy.get(node.name, "mult"))
                pad, cout = 0, wd.shape[1]
            elif node.op == Op.MAX_POOL:
                a = MaxPoolAttrs.of(node)
                geo = geometry(ishape, a.kernel, a.strides, a.pads, where)
                inner = WindowMax(tx, geo.kh * geo.kw, geo.c, tout)
                pad, cout = tx.qmin, geo.c
            else:
                a = AvgPoolAttrs.of(node)
                if a.recip_type is None or len(node.inputs) < 2:
                    raise HdlError(f"{where}: no reciprocal; compile the graph first")
                geo = geometry(ishape, a.kernel, a.strides, a.pads, where)
                recip = int(np.asarray(g.constants[node.inputs[1]]).reshape(-1)[0])
                inner = WindowAvg(tx, geo.kh * geo.kw, geo.c, recip, a.recip_type.frac, tout)
                pad, cout = 0, geo.c
            if (geo.ho * geo.wo, cout) != (int(np.prod(oshape[:-1])), oshape[-1]):
                raise HdlError(f"{where}: output shape {list(oshape)} does not match the "
                               f"window ({geo.ho}x{geo.wo}x{cout})")
            u = d.add(inst, WindowUnit(geo, tx, inner, tout, cout, pad), [s])
            d.meta[inst] = {"node": node.name, "op": str(node.op),
                            "reuse": int(opt.reuse.get(node.name, 1))}
            src[out] = (u, d.units[u][1].out, True)
        elif node.op == Op.RESIZE:
            s, tok, px = ins[0]
            sc = ResizeAttrs.of(node).scales
            ishape = tuple(g.tensor(acts[0]).shape)
            if not px or len(sc) != len(ishape) - 1 or len(sc) not in (1, 2):
                raise HdlError(f"{where}: needs a pixel stream (L, C) or (H, W, C) and one "
                               "scale per spatial axis")
            h, w_, sh, sw = (1, ishape[0], 1, sc[0]) if len(sc) == 1 else \
                (ishape[0], ishape[1], sc[0], sc[1])
            tx, tout = _t(g, acts[0], node), _t(g, out, node)
            u = d.add(inst, ResizeUnit(tx, h, w_, ishape[-1], sh, sw), [s])
            d.meta[inst] = {"node": node.name, "op": str(node.op)}
            if tout != tx:
                tk = d.units[u][1].out
                u = d.add(inst + "_rq", MapUnit(_requant_unit(tx, tout, tk.elements), [tk],
                                                Tok(tout, tk.elements, tk.per_frame)), [u])
            src[out] = (u, d.units[u][1].out, True)
        elif node.op == Op.CONCAT and pixel:
            axis = ConcatAttrs.of(node).axis
            rank = len(oshape)
            if axis not in (-1, rank - 1) or not all(i[2] for i in ins):
                raise HdlError(f"{where}: a streamed Concat joins pixel streams on the "
                               f"channel axis (the last), not axis {axis}")
            tout = _t(g, out, node)
            specs = [(_t(g, a_, node), i[1].elements) for a_, i in zip(acts, ins, strict=True)]
            unit = Elementwise(specs, (tout, oshape[-1]), lambda vs, specs=specs, tout=tout: [
                requantize(q, specs[k][0].frac, tout) for k, v in enumerate(vs) for q in v])
            per = ins[0][1].per_frame
            u = d.add(inst, MapUnit(unit, [i[1] for i in ins], Tok(tout, oshape[-1], per)),
                      [i[0] for i in ins])
            d.meta[inst] = {"node": node.name, "op": str(node.op)}
            src[out] = (u, d.units[u][1].out, True)
        elif node.op in (Op.RESHAPE, Op.TRANSPOSE) and pixel:
            s, tok, _ = ins[0]
            ishape = tuple(g.tensor(acts[0]).shape)
            t_o = _t(g, out, node)
            if node.op == Op.RESHAPE and len(oshape) >= 2 and oshape[-1] == ishape[-1]:
                src[out] = (s, tok, True)  # the same raster order: a new name only
            elif node.op == Op.RESHAPE and int(np.prod(oshape)) == int(np.prod(ishape)):
                if t_o != tok.t:
                    raise HdlError(f"{where}: changes the type")
                cons = g.consumers(out)
                if (len(cons) == 1 and cons[0].op == Op.DENSE and cons[0].inputs[0] == out
                        and out not in g.outputs and cons[0].inputs[1] in g.constants):
                    flat[out] = (s, tok)  # the Dense takes the pixels itself (FlatDense)
                    continue
                u = d.add(inst, CollectUnit(tok), [s])
                d.meta[inst] = {"node": node.name, "op": str(node.op),
                                "kind": "Flatten (collect the frame)"}
                src[out] = (u, d.units[u][1].out, False)
            else:
                raise HdlError(f"{where}: a {node.op} of a pixel stream {list(ishape)} -> "
                               f"{list(oshape)} has no streaming circuit (only a Flatten "
                               "into a vector, or a reshape that keeps the channels last)")
        elif node.op == Op.DENSE and acts and acts[0] in flat:
            s, tok = flat[acts[0]]
            a = DenseAttrs.of(node)
            if a.acc is None:
                raise HdlError(f"{where}: no accumulator type; compile the graph first")
            bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
            r = int(opt.reuse.get(node.name, 1))
            unit = FlatDense(tok, np.asarray(g.constants[node.inputs[1]], dtype=np.int64),
                             _t(g, node.inputs[1], node),
                             None if bn is None else np.asarray(g.constants[bn]),
                             None if bn is None else _t(g, bn, node), _t(g, out, node), a.acc,
                             a.relu, max(1, r // tok.per_frame))
            u = d.add(inst, unit, [s])
            d.meta[inst] = {"node": node.name, "op": str(node.op),
                            "kind": "Flatten + Dense, per pixel"}
            src[out] = (u, d.units[u][1].out, False)
        elif pixel:
            if node.op not in PIXEL_OPS:
                raise HdlError(f"{where}: op {node.op} on a pixel stream has no streaming "
                               f"circuit; streamed: Conv, MaxPool, AvgPool, Resize, Concat, "
                               f"Reshape/Flatten, {', '.join(sorted(PIXEL_OPS))}")
            if not all(i[2] for i in ins) or len({i[1].per_frame for i in ins}) != 1:
                raise HdlError(f"{where}: mixes a pixel stream with a vector")
            c_of = {a_: i[1].elements for a_, i in zip(acts, ins, strict=True)}
            c_of[out] = oshape[-1]
            unit = lower_node(_pixel_view(g, node, c_of), node, opt)
            tout = _t(g, out, node)
            u = d.add(inst, MapUnit(unit, [i[1] for i in ins],
                                    Tok(tout, oshape[-1], ins[0][1].per_frame)),
                      [i[0] for i in ins])
            d.meta[inst] = {"node": node.name, "op": str(node.op)}
            src[out] = (u, d.units[u][1].out, True)
        else:  # the whole-vector path after a Flatten
            if node.op not in LOWERING:
                lower_node(g, node, opt)  # raises the usual refusal
            if any(i[1].per_frame != 1 for i in ins):
                raise HdlError(f"{where}: mixes a pixel stream with a vector")
            unit = lower_node(g, node, opt)
            tout = _t(g, out, node)
            u = d.add(inst, MapUnit(unit, [i[1] for i in ins],
                                    Tok(tout, int(g.tensor(out).size), 1)),
                      [i[0] for i in ins])
            d.meta[inst] = {"node": node.name, "op": str(node.op)}
            src[out] = (u, d.units[u][1].out, False)
    res = src[g.outputs[0]]
    if res[0] != len(d.units) - 1 or res[0] == INPUT:
        raise HdlError(f"graph {g.name!r}: the output {g.outputs[0]!r} is not made by the "
                       "last streamed node")
    oshape = list(g.tensor(g.outputs[0]).shape)
    return d, list(shp), oshape


class StreamModel:
    """Builds the streamed model's top (hdl/streamed/units.py `StreamTop`) from a compiled graph, as
    hdl/vector/top.py `ModelTop` does for whole-vector models: the register schedule, the reuse
    plan (Dense and Conv nodes), then `build_design`."""

    def __init__(self, compiled: Any, reuse: Any = None, adder_levels: int | None = None,
                 pipeline: str | None = None):
        from ..plan.reuse import ReusePlan, resolve_reuse
        from ..plan.schedule import resolve_schedule
        from .top import StreamTop

        g = compiled.graph
        self.schedule, sched = resolve_schedule(compiled, pipeline, adder_levels)
        if reuse is None:
            reuse = compiled.options.get("reuse", 1)
        plan = resolve_reuse(compiled, reuse)
        self.fit = reuse.fit if isinstance(reuse, ReusePlan) else None
        self.adder_levels = sched.adder_levels
        # the Dense strategy per layer, as hdl/vector/top.py ModelTop resolves it (a Conv's window
        # Dense takes its node's)
        strategy = compiled.options.get("strategy", "mult")
        if isinstance(reuse, ReusePlan) and getattr(reuse, "strategy", None) is not None:
            strategy = dict(reuse.strategy)
        elif strategy == "auto":
            strategy = "da"
        self.strategy = strategy
        design, self.in_shape, self.out_shape = build_design(
            g, Options(plan, sched.adder_levels, sched, strategy))
        self.top = StreamTop(design)
        self.graph = g

    def info(self) -> dict[str, Any]:
        from .top import design_info

        g = self.graph
        return {**design_info(self.top, self.in_shape, self.out_shape, g.inputs[0],
                              g.outputs[0]),
                "pipeline": self.schedule, "adder_levels": self.adder_levels,
                **({"fit": self.fit} if self.fit is not None else {})}
