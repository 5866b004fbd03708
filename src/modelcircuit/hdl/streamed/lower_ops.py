"""The streamed lowering's per-op functions: each turns one node on a pixel (or token)
stream into the stream units that compute it (hdl/streamed/units.py, window.py, dense.py,
depthwise.py, threshold.py, recurrent.py) and adds them to the design being built.

Why a module of its own: this is the op-by-op knowledge of the streamed backend (which
circuit, which checks, which refusal) and it changes whenever a circuit does; the table that
names these functions and the walk over the graph (hdl/streamed/lower.py) change only when
the structure does. lower.py's docstring says which op becomes which unit; the state the
functions share is in hdl/streamed/lower_context.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graphs.ir import Graph, Node, Tensor
from ...graphs.ops import (
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
from ..units.arith import requantize
from ..units.dense import Dense
from ..units.elementwise import Elementwise
from ..vector.lower import LOWERING as VECTOR_LOWERING
from ..vector.lower import lower_node
from .dense import FlatDense, conv_weights
from .depthwise import depthwise_unit, is_depthwise
from .lower_context import Lowering, ftype, geometry, refuse_on_stream, where_of
from .pick import PickUnit
from .recurrent import RecurrentUnit, SelectUnit
from .threshold import ThresholdFold, fold_thresholds
from .top import INPUT
from .units import CollectUnit, MapUnit, ResizeUnit, Tok
from .window import WindowAvg, WindowMax, WindowUnit


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



def lower_window(lw: Lowering, node: Node, inst: str) -> None:
    """Conv -> WindowUnit over a Dense; MaxPool/AvgPool -> WindowUnit over WindowMax/Avg."""
    g, opt, where = lw.g, lw.opt, where_of(node)
    s, tok, px = lw.ins(node)[0]
    if not px:
        raise HdlError(f"{where}: its input is not a pixel stream")
    x, out = g.activations(node)[0], node.outputs[0]
    oshape = tuple(g.tensor(out).shape)
    tx, tout = ftype(g, x, node), ftype(g, out, node)
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
            unit = depthwise_unit(geo, tok, w4, ftype(g, node.inputs[1], node),
                                  None if bn is None else np.asarray(g.constants[bn]),
                                  None if bn is None else ftype(g, bn, node), tout, a.acc,
                                  a.relu, r, opt.adder_levels, opt.schedule,
                                  opt.strategy if isinstance(opt.strategy, str)
                                  else opt.strategy.get(node.name, "mult"))
            lw.add(inst, node, unit, [s], True, reuse=r, kind="depthwise")
            return
        wd = conv_weights(w4, a.group)
        inner: Any = Dense(tx, wd, ftype(g, node.inputs[1], node),
                           None if bn is None else np.asarray(g.constants[bn]),
                           None if bn is None else ftype(g, bn, node), tout, a.acc,
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


def lower_resize(lw: Lowering, node: Node, inst: str) -> None:
    """Resize -> ResizeUnit (+ a requantization if the output type differs)."""
    g, d, where = lw.g, lw.d, where_of(node)
    acts, out = g.activations(node), node.outputs[0]
    s, tok, px = lw.ins(node)[0]
    sc = ResizeAttrs.of(node).scales
    ishape = tuple(g.tensor(acts[0]).shape)
    if not px or len(sc) != len(ishape) - 1 or len(sc) not in (1, 2):
        raise HdlError(f"{where}: needs a pixel stream (L, C) or (H, W, C) and one "
                       "scale per spatial axis")
    h, w_, sh, sw = (1, ishape[0], 1, sc[0]) if len(sc) == 1 else \
        (ishape[0], ishape[1], sc[0], sc[1])
    tx, tout = ftype(g, acts[0], node), ftype(g, out, node)
    u = lw.add(inst, node, ResizeUnit(tx, h, w_, ishape[-1], sh, sw,
                                      lw.opt.schedule.lutram_depth), [s], True)
    if tout != tx:
        tk = d.units[u][1].out
        lw.add(inst + "_rq", node, MapUnit(_requant_unit(tx, tout, tk.elements), [tk],
                                           Tok(tout, tk.elements, tk.per_frame)), [u], True)
        d.meta.pop(inst + "_rq")  # the requantization is part of the Resize's entry


def lower_concat(lw: Lowering, node: Node, inst: str) -> None:
    """Concat on the channel axis -> a per-pixel join (each part requantized)."""
    g, where = lw.g, where_of(node)
    acts, out, ins = g.activations(node), node.outputs[0], lw.ins(node)
    oshape = tuple(g.tensor(out).shape)
    axis = ConcatAttrs.of(node).axis
    rank = len(oshape)
    if axis not in (-1, rank - 1) or not all(i[2] for i in ins):
        raise HdlError(f"{where}: a streamed Concat joins pixel streams on the "
                       f"channel axis (the last), not axis {axis}")
    tout = ftype(g, out, node)
    specs = [(ftype(g, a_, node), i[1].elements) for a_, i in zip(acts, ins, strict=True)]
    unit = Elementwise(specs, (tout, oshape[-1]), lambda vs, specs=specs, tout=tout: [
        requantize(q, specs[k][0].frac, tout) for k, v in enumerate(vs) for q in v])
    per = ins[0][1].per_frame
    lw.add(inst, node, MapUnit(unit, [i[1] for i in ins], Tok(tout, oshape[-1], per)),
           [i[0] for i in ins], True)


def lower_reshape(lw: Lowering, node: Node, inst: str) -> None:
    """A reshape that keeps the channels last: a new name; a Flatten into a Dense: the Dense
    takes the pixels (FlatDense); any other Flatten: CollectUnit (the whole frame)."""
    g, where = lw.g, where_of(node)
    acts, out = g.activations(node), node.outputs[0]
    oshape = tuple(g.tensor(out).shape)
    s, tok, _ = lw.ins(node)[0]
    ishape = tuple(g.tensor(acts[0]).shape)
    t_o = ftype(g, out, node)
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


def lower_flat_dense(lw: Lowering, node: Node, inst: str) -> None:
    """A Dense fed by a Flatten of a pixel stream: FlatDense, accumulated pixel by pixel."""
    g, where = lw.g, where_of(node)
    acts, out = g.activations(node), node.outputs[0]
    if not (acts and acts[0] in lw.flat):
        if acts and lw.get(acts[0], node)[2] and node.inputs[1] in g.constants:
            _token_dense(lw, node, inst)
            return
        refuse_on_stream(node)
    s, tok = lw.flat[acts[0]]
    a = DenseAttrs.of(node)
    if a.acc is None:
        raise HdlError(f"{where}: no accumulator type; compile the graph first")
    bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    r = int(lw.opt.reuse.get(node.name, 1))
    unit = FlatDense(tok, np.asarray(g.constants[node.inputs[1]], dtype=np.int64),
                     ftype(g, node.inputs[1], node),
                     None if bn is None else np.asarray(g.constants[bn]),
                     None if bn is None else ftype(g, bn, node), ftype(g, out, node), a.acc,
                     a.relu, max(1, r // tok.per_frame))
    lw.add(inst, node, unit, [s], False, kind="Flatten + Dense, per pixel")


def _token_dense(lw: Lowering, node: Node, inst: str) -> None:
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
    lw.add(inst, node, MapUnit(unit, [tok], Tok(ftype(g, out, node), oshape[-1], tok.per_frame)),
           [s], True, reuse=int(lw.opt.reuse.get(node.name, 1)), kind="Dense per token")


def lower_recurrent(lw: Lowering, node: Node, inst: str) -> None:
    """LSTM / GRU -> RecurrentUnit (hdl/streamed/recurrent.py): one step per token."""
    from ...graphs.reference import rnn_types

    g, where = lw.g, where_of(node)
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
        str(node.op), tok, ftype(g, node.inputs[0], node), ftype(g, node.inputs[1], node),
        ftype(g, node.inputs[3], node), c[node.inputs[1]], c[node.inputs[2]], c[node.inputs[3]],
        c[node.inputs[4]], c[node.inputs[5]] if node.op == Op.LSTM else None, types, tables,
        a.clip, bool(getattr(a, "lbr", False)), getattr(a, "emit", "h"),
        int(lw.opt.reuse.get(node.name, 1)), lw.opt.adder_levels, lw.opt.schedule,
        lw.opt.strategy if isinstance(lw.opt.strategy, str)
        else lw.opt.strategy.get(node.name, "mult"))
    lw.add(inst, node, unit, [s], True, reuse=unit.reuse, step_ii=unit.step_ii,
           sequence_cycles=unit.step_ii * tok.per_frame)


def lower_gather(lw: Lowering, node: Node, inst: str) -> None:
    """A Gather of one step of a sequence stream (Y_h, or Y[-1]) -> SelectUnit; of a list of
    positions along a spatial axis of a pixel stream (a crop, increasing) or of channels ->
    PickUnit (hdl/streamed/pick.py)."""
    g, where = lw.g, where_of(node)
    s, tok, px = lw.ins(node)[0]
    a = GatherAttrs.of(node)
    idx = a.index_array()
    ishape = tuple(g.tensor(g.activations(node)[0]).shape)
    if (not px and a.axis == 0 and ishape[:1] == (1,) and idx.size == 1
            and ftype(g, node.outputs[0], node) == tok.t):
        lw.src[node.outputs[0]] = (s, tok, False)  # the only row of a vector: a new name
        return
    same = ftype(g, node.outputs[0], node) == tok.t
    if px and a.axis == 0 and idx.size == 1 and same and len(ishape) == 2:
        lw.add(inst, node, SelectUnit(tok, int(idx.reshape(-1)[0]) % tok.per_frame), [s],
               False, kind="one step of the sequence")
        return
    if not px or idx.ndim != 1 or len(ishape) < 2 or not same:
        raise HdlError(f"{where}: a streamed Gather picks one token of a sequence (axis 0, "
                       "one index) or, with a list of indices, positions along one axis or "
                       "channels of a pixel stream, of the same type")
    dims, c = ishape[:-1], ishape[-1]
    keep, chans = [range(d) for d in dims], list(range(c))
    if a.axis == len(dims):
        chans = idx.tolist()
    elif np.all(np.diff(idx) > 0):
        keep[a.axis] = idx.tolist()
    else:
        raise HdlError(f"{where}: indices {idx.tolist()} of axis {a.axis} repeat or reverse "
                       "positions of a pixel stream (a negative Slice step): the stream would "
                       "need a frame buffer; only increasing positions (crops, steps > 0) "
                       "stream")
    lw.add(inst, node, PickUnit(tok, dims, keep, chans), [s], True,
           kind="channels" if a.axis == len(dims) else f"crop of axis {a.axis}")


def lower_per_pixel(lw: Lowering, node: Node, inst: str) -> None:
    """An element-wise op on pixel streams: the whole-vector unit on a one-pixel view of the
    tensors (hdl/vector/lower.py), once per token (MapUnit)."""
    g, where = lw.g, where_of(node)
    acts, out, ins = g.activations(node), node.outputs[0], lw.ins(node)
    oshape = tuple(g.tensor(out).shape)
    if not all(i[2] for i in ins) or len({i[1].per_frame for i in ins}) != 1:
        raise HdlError(f"{where}: mixes a pixel stream with a vector")
    c_of = {a_: i[1].elements for a_, i in zip(acts, ins, strict=True)}
    c_of[out] = oshape[-1]
    unit = lower_node(_pixel_view(g, node, c_of), node, lw.opt)
    tout = ftype(g, out, node)
    lw.add(inst, node, MapUnit(unit, [i[1] for i in ins],
                               Tok(tout, oshape[-1], ins[0][1].per_frame)),
           [i[0] for i in ins], True)


def lower_threshold(lw: Lowering, node: Node, inst: str) -> None:
    """Threshold on a pixel stream: from FOLD_MIN_THRESHOLDS thresholds per channel on, the
    binary search or, where exact, the product (hdl/streamed/threshold.py), else the
    comparators per pixel."""
    g, ins = lw.g, lw.ins(node)
    thr = np.asarray(g.constants.get(node.inputs[1], np.zeros((0, 0))))
    c = ins[0][1].elements if len(ins) == 1 else 0
    if (len(ins) != 1 or not ins[0][2] or thr.ndim != 2 or thr.shape[0] not in (1, c)
            or not fold_thresholds(thr.shape[1])):
        lower_per_pixel(lw, node, inst)
        return
    s, tok, _ = ins[0]
    tout = ftype(g, node.outputs[0], node)
    # as many cycles per pixel as the busiest unit before it takes (the frame time is at
    # least that): its channels on that many fewer lanes
    per = max(1, tok.per_frame)
    budget = max([u.busy() for _, u, _ in lw.d.units] + [per]) // per
    unit = ThresholdFold(ftype(g, node.inputs[0], node), c, thr, g.constants[node.inputs[2]],
                         g.constants[node.inputs[3]], tout, -(-c // max(1, budget)))
    kind = (f"threshold multiply, {unit.lanes} lanes" if unit.multiply
            else f"threshold search, {unit.levels} stages, {unit.lanes} lanes")
    if _chain_into(lw, node, s, unit, kind):
        return
    lw.add(inst, node, MapUnit(unit, [tok], Tok(tout, c, tok.per_frame)), [s], True,
           kind=kind)


def _chain_into(lw: Lowering, node: Node, s: int, unit: Any, kind: str) -> bool:
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


def lower_vector(lw: Lowering, node: Node, inst: str) -> None:
    """A node after a Flatten: the whole-vector lowering (hdl/vector/lower.py), one token
    per frame."""
    g, where = lw.g, where_of(node)
    out, ins = node.outputs[0], lw.ins(node)
    if node.op == Op.GATHER:  # of a vector: the trivial one (a squeeze), else refused
        lower_gather(lw, node, inst)
        return
    if node.op not in VECTOR_LOWERING:
        lower_node(g, node, lw.opt)  # raises the usual refusal
    if any(i[1].per_frame != 1 for i in ins):
        raise HdlError(f"{where}: mixes a pixel stream with a vector")
    unit = lower_node(g, node, lw.opt)
    tout = ftype(g, out, node)
    lw.add(inst, node, MapUnit(unit, [i[1] for i in ins], Tok(tout, int(g.tensor(out).size), 1)),
           [i[0] for i in ins], False)


# The lowering table of nodes on a pixel stream (a node after a Flatten takes the
# whole-vector table instead, hdl/vector/lower.py). An op missing here is refused on a
