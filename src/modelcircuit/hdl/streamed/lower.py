"""Graph -> streaming design (hdl/streamed/units.py) for models with spatial ops (Conv, MaxPool,
AvgPool, Resize: graphs/ops.py SPATIAL).

Every channels-last activation ((L, C) or (H, W, C)) is a pixel stream: one token of C codes
per spatial position, raster order (cnn_ir.md, "Streaming"). Per node:
- Conv -> `WindowUnit` with a `Dense` (hdl/units/dense.py) over the kh*kw*Cin window, its
  weights block-diagonal for 1 < group < Cin; reuse from the plan (parallel over the output
  channels, folded over the window's inputs); a depthwise Conv (group = Cin) -> one Dense
  lane per channel, or, over the whole frame, an accumulator per channel
  (hdl/streamed/depthwise.py);
- Threshold with many thresholds per channel -> a binary search (or, where exact, a
  product) on lanes
  (hdl/streamed/threshold.py); with few, the comparators per pixel as below;
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

from collections.abc import Callable
from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ir import Graph, Node, Tensor
from ...graphs.ops import (
    SPATIAL,
    AvgPoolAttrs,
    ConcatAttrs,
    ConvAttrs,
    DenseAttrs,
    GatherAttrs,
    GruAttrs,
    LstmAttrs,
    MaxPoolAttrs,
    Op,
    ResizeAttrs,
)
from ...graphs.types import FixedType
from ..errors import HdlError
from ..names import instance_name
from ..plan.circuit import CircuitPlan
from ..units.arith import check_fixed, requantize
from ..units.dense import Dense
from ..units.elementwise import Elementwise
from ..vector.lower import LOWERING as VECTOR_LOWERING
from ..vector.lower import Options, lower_node
from .attention import lower_attention, lower_layer_norm
from .dense import FlatDense, conv_weights
from .depthwise import depthwise_unit, is_depthwise
from .memory import budget_lut_ram
from .recurrent import RecurrentUnit, SelectUnit
from .threshold import ThresholdFold, fold_thresholds
from .top import INPUT, StreamDesign
from .units import CollectUnit, MapUnit, ResizeUnit, Tok
from .window import Geometry, WindowAvg, WindowMax, WindowUnit


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


class _Lowering:
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


StreamLower = Callable[[_Lowering, Node, str], None]


def _where(node: Node) -> str:
    return f"node {node.name} ({node.op})"


def _window(lw: _Lowering, node: Node, inst: str) -> None:
    """Conv -> WindowUnit over a Dense; MaxPool/AvgPool -> WindowUnit over WindowMax/Avg."""
    g, opt, where = lw.g, lw.opt, _where(node)
    s, tok, px = lw.ins(node)[0]
    if not px:
        raise HdlError(f"{where}: its input is not a pixel stream")
    x, out = g.activations(node)[0], node.outputs[0]
    oshape = tuple(g.tensor(out).shape)
    tx, tout = _t(g, x, node), _t(g, out, node)
    ishape = tuple(g.tensor(x).shape)
    if node.op == Op.CONV:
        a: Any = ConvAttrs.of(node)
        if a.acc is None:
            raise HdlError(f"{where}: no accumulator type; compile the graph first")
        w = np.asarray(g.constants[node.inputs[1]], dtype=np.int64)
        geo = geometry(ishape, a.kernel, a.strides, a.pads, where)
        w4 = w.reshape((1,) + w.shape) if w.ndim == 3 else w
        bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        if is_depthwise(w4, a.group, geo.c):  # one MAC lane per channel (depthwise.py)
            r = int(opt.reuse.get(node.name, 1))
            unit = depthwise_unit(geo, tok, w4, _t(g, node.inputs[1], node),
                                  None if bn is None else np.asarray(g.constants[bn]),
                                  None if bn is None else _t(g, bn, node), tout, a.acc,
                                  a.relu, r, opt.adder_levels, opt.schedule,
                                  opt.strategy if isinstance(opt.strategy, str)
                                  else opt.strategy.get(node.name, "mult"))
            lw.add(inst, node, unit, [s], True, reuse=r, kind="depthwise")
            return
        wd = conv_weights(w4, a.group)
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
        if a.exclude_pad:
            raise HdlError(f"{where}: AveragePool with count_include_pad=0 (a divisor per "
                           "window) has no streamed circuit yet; count_include_pad=1 has")
        if a.recip_type is None or len(node.inputs) < 2:
            raise HdlError(f"{where}: no reciprocal; compile the graph first")
        geo = geometry(ishape, a.kernel, a.strides, a.pads, where)
        recip = int(np.asarray(g.constants[node.inputs[1]]).reshape(-1)[0])
        inner = WindowAvg(tx, geo.kh * geo.kw, geo.c, recip, a.recip_type.frac, tout)
        pad, cout = 0, geo.c
    if (geo.ho * geo.wo, cout) != (int(np.prod(oshape[:-1])), oshape[-1]):
        raise HdlError(f"{where}: output shape {list(oshape)} does not match the "
                       f"window ({geo.ho}x{geo.wo}x{cout})")
    lw.add(inst, node, WindowUnit(geo, tx, inner, tout, cout, pad, opt.schedule.lutram_depth),
           [s], True, reuse=int(opt.reuse.get(node.name, 1)))


def _resize(lw: _Lowering, node: Node, inst: str) -> None:
    """Resize -> ResizeUnit (+ a requantization if the output type differs)."""
    g, d, where = lw.g, lw.d, _where(node)
    acts, out = g.activations(node), node.outputs[0]
    s, tok, px = lw.ins(node)[0]
    sc = ResizeAttrs.of(node).scales
    ishape = tuple(g.tensor(acts[0]).shape)
    if not px or len(sc) != len(ishape) - 1 or len(sc) not in (1, 2):
        raise HdlError(f"{where}: needs a pixel stream (L, C) or (H, W, C) and one "
                       "scale per spatial axis")
    h, w_, sh, sw = (1, ishape[0], 1, sc[0]) if len(sc) == 1 else \
        (ishape[0], ishape[1], sc[0], sc[1])
    tx, tout = _t(g, acts[0], node), _t(g, out, node)
    u = lw.add(inst, node, ResizeUnit(tx, h, w_, ishape[-1], sh, sw,
                                      lw.opt.schedule.lutram_depth), [s], True)
    if tout != tx:
        tk = d.units[u][1].out
        lw.add(inst + "_rq", node, MapUnit(_requant_unit(tx, tout, tk.elements), [tk],
                                           Tok(tout, tk.elements, tk.per_frame)), [u], True)
        d.meta.pop(inst + "_rq")  # the requantization is part of the Resize's entry


def _concat(lw: _Lowering, node: Node, inst: str) -> None:
    """Concat on the channel axis -> a per-pixel join (each part requantized)."""
    g, where = lw.g, _where(node)
    acts, out, ins = g.activations(node), node.outputs[0], lw.ins(node)
    oshape = tuple(g.tensor(out).shape)
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
    lw.add(inst, node, MapUnit(unit, [i[1] for i in ins], Tok(tout, oshape[-1], per)),
           [i[0] for i in ins], True)


def _reshape(lw: _Lowering, node: Node, inst: str) -> None:
    """A reshape that keeps the channels last: a new name; a Flatten into a Dense: the Dense
    takes the pixels (FlatDense); any other Flatten: CollectUnit (the whole frame)."""
    g, where = lw.g, _where(node)
    acts, out = g.activations(node), node.outputs[0]
    oshape = tuple(g.tensor(out).shape)
    s, tok, _ = lw.ins(node)[0]
    ishape = tuple(g.tensor(acts[0]).shape)
    t_o = _t(g, out, node)
    if node.op == Op.RESHAPE and len(oshape) >= 2 and oshape[-1] == ishape[-1]:
        lw.src[out] = (s, tok, True)  # the same raster order: a new name only
    elif node.op == Op.RESHAPE and int(np.prod(oshape)) == int(np.prod(ishape)):
        if t_o != tok.t:
            raise HdlError(f"{where}: changes the type")
        cons = g.consumers(out)
        if (len(cons) == 1 and cons[0].op == Op.DENSE and cons[0].inputs[0] == out
                and out not in g.outputs and cons[0].inputs[1] in g.constants):
            lw.flat[out] = (s, tok)  # the Dense takes the pixels itself (FlatDense)
            return
        lw.add(inst, node, CollectUnit(tok), [s], False, kind="Flatten (collect the frame)")
    else:
        raise HdlError(f"{where}: a {node.op} of a pixel stream {list(ishape)} -> "
                       f"{list(oshape)} has no streaming circuit (only a Flatten "
                       "into a vector, or a reshape that keeps the channels last)")


def _flat_dense(lw: _Lowering, node: Node, inst: str) -> None:
    """A Dense fed by a Flatten of a pixel stream: FlatDense, accumulated pixel by pixel."""
    g, where = lw.g, _where(node)
    acts, out = g.activations(node), node.outputs[0]
    if not (acts and acts[0] in lw.flat):
        if acts and lw.get(acts[0], node)[2] and node.inputs[1] in g.constants:
            _token_dense(lw, node, inst)
            return
        _refuse_on_stream(node)
    s, tok = lw.flat[acts[0]]
    a = DenseAttrs.of(node)
    if a.acc is None:
        raise HdlError(f"{where}: no accumulator type; compile the graph first")
    bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    r = int(lw.opt.reuse.get(node.name, 1))
    unit = FlatDense(tok, np.asarray(g.constants[node.inputs[1]], dtype=np.int64),
                     _t(g, node.inputs[1], node),
                     None if bn is None else np.asarray(g.constants[bn]),
                     None if bn is None else _t(g, bn, node), _t(g, out, node), a.acc,
                     a.relu, max(1, r // tok.per_frame))
    lw.add(inst, node, unit, [s], False, kind="Flatten + Dense, per pixel")


def _token_dense(lw: _Lowering, node: Node, inst: str) -> None:
    """A Dense applied to every token of a stream (the token-wise Dense after a recurrent
    layer): the whole-vector Dense on one token, once per token (MapUnit)."""
    g = lw.g
    x, out = g.activations(node)[0], node.outputs[0]
    s, tok, _ = lw.get(x, node)
    oshape = tuple(g.tensor(out).shape)
    tensors = dict(g.tensors)
    tensors[x] = Tensor(x, (tok.elements,), g.tensor(x).dtype)
    tensors[out] = Tensor(out, (oshape[-1],), g.tensor(out).dtype)
    unit = lower_node(g.replace(tensors=tensors), node, lw.opt)
    lw.add(inst, node, MapUnit(unit, [tok], Tok(_t(g, out, node), oshape[-1], tok.per_frame)),
           [s], True, reuse=int(lw.opt.reuse.get(node.name, 1)), kind="Dense per token")


def _recurrent(lw: _Lowering, node: Node, inst: str) -> None:
    """LSTM / GRU -> RecurrentUnit (hdl/streamed/recurrent.py): one step per token."""
    from ...graphs.reference import rnn_types

    g, where = lw.g, _where(node)
    s, tok, px = lw.ins(node)[0]
    if not px:
        raise HdlError(f"{where}: its input is not a sequence stream")
    a: Any = LstmAttrs.of(node) if node.op == Op.LSTM else GruAttrs.of(node)
    base = 6 if node.op == Op.LSTM else 5
    if len(node.inputs) <= base + 1:
        raise HdlError(f"{where}: no gate tables; compile the graph first")
    types = rnn_types(node)
    lohi = [(a.f_lo, a.f_shift), (a.g_lo, a.g_shift)]
    if node.op == Op.LSTM:
        lohi.append((a.h_lo, a.h_shift))
    tables = [(np.asarray(g.constants[node.inputs[base + k]], dtype=np.int64), int(lo),
               int(sh)) for k, (lo, sh) in enumerate(lohi)]
    c = g.constants
    unit = RecurrentUnit(
        str(node.op), tok, _t(g, node.inputs[0], node), _t(g, node.inputs[1], node),
        _t(g, node.inputs[3], node), c[node.inputs[1]], c[node.inputs[2]], c[node.inputs[3]],
        c[node.inputs[4]], c[node.inputs[5]] if node.op == Op.LSTM else None, types, tables,
        a.clip, bool(getattr(a, "lbr", False)), getattr(a, "emit", "h"),
        int(lw.opt.reuse.get(node.name, 1)), lw.opt.adder_levels, lw.opt.schedule,
        lw.opt.strategy if isinstance(lw.opt.strategy, str)
        else lw.opt.strategy.get(node.name, "mult"))
    lw.add(inst, node, unit, [s], True, reuse=unit.reuse, step_ii=unit.step_ii,
           sequence_cycles=unit.step_ii * tok.per_frame)


def _gather(lw: _Lowering, node: Node, inst: str) -> None:
    """A Gather of one step of a sequence stream (Y_h, or Y[-1]) -> SelectUnit."""
    g, where = lw.g, _where(node)
    s, tok, px = lw.ins(node)[0]
    a = GatherAttrs.of(node)
    idx = a.index_array()
    ishape = tuple(g.tensor(g.activations(node)[0]).shape)
    if (not px and a.axis == 0 and ishape[:1] == (1,) and idx.size == 1
            and _t(g, node.outputs[0], node) == tok.t):
        lw.src[node.outputs[0]] = (s, tok, False)  # the only row of a vector: a new name
        return
    if not px or a.axis != 0 or idx.size != 1 or _t(g, node.outputs[0], node) != tok.t:
        raise HdlError(f"{where}: a streamed Gather picks one token of a sequence (axis 0, "
                       "one index, the same type)")
    lw.add(inst, node, SelectUnit(tok, int(idx.reshape(-1)[0]) % tok.per_frame), [s], False,
           kind="one step of the sequence")


def _per_pixel(lw: _Lowering, node: Node, inst: str) -> None:
    """An element-wise op on pixel streams: the whole-vector unit on a one-pixel view of the
    tensors (hdl/vector/lower.py), once per token (MapUnit)."""
    g, where = lw.g, _where(node)
    acts, out, ins = g.activations(node), node.outputs[0], lw.ins(node)
    oshape = tuple(g.tensor(out).shape)
    if not all(i[2] for i in ins) or len({i[1].per_frame for i in ins}) != 1:
        raise HdlError(f"{where}: mixes a pixel stream with a vector")
    c_of = {a_: i[1].elements for a_, i in zip(acts, ins, strict=True)}
    c_of[out] = oshape[-1]
    unit = lower_node(_pixel_view(g, node, c_of), node, lw.opt)
    tout = _t(g, out, node)
    lw.add(inst, node, MapUnit(unit, [i[1] for i in ins],
                               Tok(tout, oshape[-1], ins[0][1].per_frame)),
           [i[0] for i in ins], True)


def _threshold(lw: _Lowering, node: Node, inst: str) -> None:
    """Threshold on a pixel stream: from FOLD_MIN_THRESHOLDS thresholds per channel on, the
    binary search or, where exact, the product (hdl/streamed/threshold.py), else the
    comparators per pixel."""
    g, ins = lw.g, lw.ins(node)
    thr = np.asarray(g.constants.get(node.inputs[1], np.zeros((0, 0))))
    c = ins[0][1].elements if len(ins) == 1 else 0
    if (len(ins) != 1 or not ins[0][2] or thr.ndim != 2 or thr.shape[0] not in (1, c)
            or not fold_thresholds(thr.shape[1])):
        _per_pixel(lw, node, inst)
        return
    s, tok, _ = ins[0]
    tout = _t(g, node.outputs[0], node)
    # as many cycles per pixel as the busiest unit before it takes (the frame time is at
    # least that): its channels on that many fewer lanes
    per = max(1, tok.per_frame)
    budget = max([u.busy() for _, u, _ in lw.d.units] + [per]) // per
    unit = ThresholdFold(_t(g, node.inputs[0], node), c, thr, g.constants[node.inputs[2]],
                         g.constants[node.inputs[3]], tout, -(-c // max(1, budget)))
    kind = (f"threshold multiply, {unit.lanes} lanes" if unit.multiply
            else f"threshold search, {unit.levels} stages, {unit.lanes} lanes")
    if _chain_into(lw, node, s, unit, kind):
        return
    lw.add(inst, node, MapUnit(unit, [tok], Tok(tout, c, tok.per_frame)), [s], True,
           kind=kind)


def _chain_into(lw: _Lowering, node: Node, s: int, unit: Any, kind: str) -> bool:
    """`unit` (node's circuit) after the inner unit of window unit s, where node alone reads
    that window's output and is no slower than it (ChainUnit, hdl/streamed/units.py): no
    FIFO of the wide accumulator tokens and no stream unit between them."""
    g, d = lw.g, lw.d
    x = node.inputs[0]
    if s == INPUT or x in g.outputs or len(g.consumers(x)) != 1:
        return False
    name, win, srcs = d.units[s]
    if (not isinstance(win, WindowUnit) or unit.ii > max(1, win.inner.ii)
            or any(s in ss for _, _, ss in d.units)):
        return False
    fused = win.then(unit)
    d.units[s] = (name, fused, srcs)
    d.meta[name] = {**d.meta[name], "then": {"node": node.name, "op": str(node.op),
                                              "kind": kind}}
    lw.src[node.outputs[0]] = (s, fused.out, True)
    return True


def _vector(lw: _Lowering, node: Node, inst: str) -> None:
    """A node after a Flatten: the whole-vector lowering (hdl/vector/lower.py), one token
    per frame."""
    g, where = lw.g, _where(node)
    out, ins = node.outputs[0], lw.ins(node)
    if node.op == Op.GATHER:  # of a vector: the trivial one (a squeeze), else refused
        _gather(lw, node, inst)
        return
    if node.op not in VECTOR_LOWERING:
        lower_node(g, node, lw.opt)  # raises the usual refusal
    if any(i[1].per_frame != 1 for i in ins):
        raise HdlError(f"{where}: mixes a pixel stream with a vector")
    unit = lower_node(g, node, lw.opt)
    tout = _t(g, out, node)
    lw.add(inst, node, MapUnit(unit, [i[1] for i in ins], Tok(tout, int(g.tensor(out).size), 1)),
           [i[0] for i in ins], False)


# The lowering table of nodes on a pixel stream (a node after a Flatten takes the
# whole-vector table instead, hdl/vector/lower.py). An op missing here is refused on a
# stream with the reason in STREAM_REFUSED; tests/graphs/test_ops.py checks that the two
# cover the vocabulary.
STREAM_LOWERING: dict[Op, StreamLower] = {
    Op.CONV: _window, Op.MAX_POOL: _window, Op.AVG_POOL: _window,
    Op.RESIZE: _resize,
    Op.CONCAT: _concat,
    Op.RESHAPE: _reshape, Op.TRANSPOSE: _reshape,
    Op.DENSE: _flat_dense,
    Op.LSTM: _recurrent, Op.GRU: _recurrent,
    Op.GATHER: _gather,
    Op.ATTENTION: lower_attention, Op.LAYER_NORM: lower_layer_norm,  # hdl/streamed/attention.py
    Op.THRESHOLD: _threshold,
    **{op: _per_pixel for op in (Op.RELU, Op.LEAKY_RELU, Op.REQUANT, Op.BIPOLAR,
                                 Op.ADD, Op.SUB, Op.MUL, Op.LUT, Op.CLIP, Op.TRUNC)},
}
PIXEL_OPS = frozenset(op for op, fn in STREAM_LOWERING.items()
                      if fn in (_per_pixel, _threshold))
STREAM_REFUSED: dict[Op, str] = {
    op: "no streaming circuit on a pixel stream (after a Flatten it runs on the whole vector, "
        "hdl/vector/lower.py)"
    for op in Op if op not in STREAM_LOWERING}
STREAM_REFUSED[Op.MATMUL] = ("a product of two activations streams only inside an Attention "
                             "node (hdl/streamed/attention.py)")


def _refuse_on_stream(node: Node) -> None:
    raise HdlError(f"{_where(node)}: op {node.op} on a pixel stream has no streaming "
                   f"circuit; streamed: Conv, MaxPool, AvgPool, Resize, Concat, "
                   f"Reshape/Flatten, {', '.join(sorted(PIXEL_OPS))}")


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
    d = StreamDesign(g.name, Tok(_t(g, xin), shp[-1], int(np.prod(shp[:-1]))))
    lw = _Lowering(g, opt, d, xin)
    for idx, node in enumerate(g.nodes):
        inst = instance_name(idx, node.name)
        if not lw.on_stream(node):
            _vector(lw, node, inst)
            continue
        fn = STREAM_LOWERING.get(node.op)
        if fn is None:
            _refuse_on_stream(node)
        fn(lw, node, inst)
    res = lw.src[g.outputs[0]]
    if res[0] != len(d.units) - 1 or res[0] == INPUT:
        raise HdlError(f"graph {g.name!r}: the output {g.outputs[0]!r} is not made by the "
                       "last streamed node")
    oshape = list(g.tensor(g.outputs[0]).shape)
    budget_lut_ram(d, opt.schedule.lutram_cells)
    return d, list(shp), oshape


class StreamModel:
    """The streamed model as data, from a `CircuitPlan` (hdl/plan/circuit.py), as
    hdl/vector/top.py `VectorDesign` is for whole-vector models: the design (units as plans),
    its compile-time schedule (hdl/streamed/top.py `schedule`) and ports. Nothing is built:
    `component()` is the top-level `StreamTop`."""

    def __init__(self, compiled: CompiledGraph, plan: CircuitPlan):
        from .top import schedule

        g = compiled.graph
        self.plan = plan
        self.schedule = plan.schedule_name
        self.fit = plan.fit
        self.adder_levels = plan.adder_levels
        self.strategy = plan.strategy
        # no dsp_lanes: a streamed Dense writes every lane as a `$mul` and yosys moves those
        # beyond the DSP budget to logic (`booth`); issue 25, the small encoder at R 16 on
        # ECP5 (70 lanes without a block): booth 44,612 LUT4 + 4,692 CCU2C + 31,612 FF,
        # the plan's registered coefficient slices 43,541 + 9,139 + 46,876
        self.design, self.in_shape, self.out_shape = build_design(
            g, Options(plan.reuse, plan.adder_levels, plan.schedule, plan.strategy))
        self.timing = schedule(self.design)
        self.graph = g

    def component(self) -> Any:
        from .top import StreamTop

        return StreamTop(self.design, self.timing)

    def info(self) -> dict[str, Any]:
        from .top import design_info

        g = self.graph
        return {**design_info(self.design, self.timing, self.in_shape, self.out_shape,
                              g.inputs[0], g.outputs[0]),
                "pipeline": self.schedule, "adder_levels": self.adder_levels,
                **({"fit": self.fit} if self.fit is not None else {})}
