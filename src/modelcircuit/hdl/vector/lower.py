"""The lowering table: one function per op of the vocabulary (graphs/ops.py), graph node ->
Unit (an Amaranth component, hdl/units/base.py).

`LOWERING` maps each op the circuit builds to its function; `REFUSED` names every other op of
the vocabulary with the reason (tests/graphs/test_ops.py: together they are the vocabulary,
no overlap). An op in neither, or a refused one, is a compile error naming the op, the node
and the supported list: never a silent fallback. Every function reproduces reference.py bit
for bit; attributes are read typed (graphs/ops.py `*Attrs.of`), never re-parsed here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from amaranth.hdl import Mux, Value

from ...graphs.ir import Graph, Node
from ...graphs.ops import (
    ClipAttrs,
    DenseAttrs,
    LutAttrs,
    Op,
    SoftmaxAttrs,
    TransposeAttrs,
    TruncAttrs,
)
from ...graphs.reference import clip_codes
from ...graphs.types import FixedType
from ..errors import HdlError
from ..plan.schedule import SCHEDULES, Schedule
from ..units.arith import check_fixed, const_mul, fit, relu, requantize
from ..units.base import Unit
from ..units.dense import Dense
from ..units.elementwise import Elementwise, Lut, Wiring
from ..units.layernorm import lower_layer_norm
from ..units.softmax import SOFT_PRODUCT_SLICE, SOFT_SUM_LEVELS, Softmax, SoftmaxSerial, use_serial
from ..units.threshold import Threshold


@dataclass(frozen=True)
class Options:
    reuse: dict[str, int]  # Dense node name -> reuse factor (missing: 1)
    adder_levels: int = 4
    schedule: Schedule = SCHEDULES["latency"]  # the register schedule
    strategy: Any = "mult"  # "mult" | "da", or Dense node name -> that (missing: "mult")
    dsp_lanes: Any = None  # folded Dense node name -> lanes with a DSP (CircuitPlan.dsp_lanes)


def _t(g: Graph, name: str, node: Node) -> FixedType:
    return check_fixed(g.tensor(name).dtype, f"node {node.name} ({node.op}), tensor {name!r}")


def _n(g: Graph, name: str) -> int:
    return g.tensor(name).size


def _acts(g: Graph, node: Node) -> list[str]:
    return g.activations(node)


def _spec(g: Graph, name: str, node: Node) -> tuple[FixedType, int]:
    return _t(g, name, node), _n(g, name)


def _out(g: Graph, node: Node) -> tuple[FixedType, int]:
    return _spec(g, node.outputs[0], node)


def _const(g: Graph, name: str, shape: tuple[int, ...]) -> list[int]:
    """A constant operand broadcast (numpy rules) to the per-sample shape, flattened."""
    c = np.asarray(g.constants[name], dtype=np.int64)
    while c.ndim > len(shape) and c.shape[0] == 1:
        c = c[0]
    return [int(v) for v in np.broadcast_to(c, shape).reshape(-1)]


def lower_dense(g: Graph, node: Node, opt: Options) -> Unit:
    x, wn = node.inputs[0], node.inputs[1]
    bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    tx, tout = _t(g, x, node), _out(g, node)[0]
    a = DenseAttrs.of(node)
    if a.acc is None:
        raise HdlError(f"node {node.name} (Dense): no accumulator type; compile the graph first")
    w = np.asarray(g.constants[wn], dtype=np.int64)
    if w.ndim != 2 or g.tensor(x).size != w.shape[0]:
        raise HdlError(f"node {node.name} (Dense): weights of shape {list(w.shape)} do not "
                       f"match the input of {g.tensor(x).size} elements")
    return Dense(tx, w, _t(g, wn, node), None if bn is None else np.asarray(g.constants[bn]),
                 None if bn is None else _t(g, bn, node), tout, a.acc, a.relu,
                 opt.reuse.get(node.name, 1), opt.adder_levels, opt.schedule,
                 opt.strategy if isinstance(opt.strategy, str)
                 else opt.strategy.get(node.name, "mult"),
                 dsp_lanes=None if opt.dsp_lanes is None else opt.dsp_lanes.get(node.name))


def _elementwise(g: Graph, node: Node, fn: Callable[[list[list[Value]]], list[Value]],
                 multipliers: int = 0) -> Unit:
    ins = [_spec(g, a, node) for a in _acts(g, node)]
    return Elementwise(ins, _out(g, node), fn, multipliers)


def lower_add(g: Graph, node: Node, opt: Options, sign: int = 1) -> Unit:
    ta = _t(g, node.inputs[0], node)
    bn = node.inputs[1]
    tb = _t(g, bn, node)
    tout, n = _out(g, node)
    f = max(ta.frac, tb.frac)
    const_b = _const(g, bn, g.tensor(node.outputs[0]).shape) if g.is_const(bn) else None

    def fn(ins: list[list[Value]]) -> list[Value]:
        a = ins[0]
        b = const_b if const_b is not None else ins[1]
        return [requantize((Value.cast(a[i]) << (f - ta.frac)) +
                           sign * (Value.cast(b[i]) << (f - tb.frac)), f, tout)
                for i in range(n)]

    return _elementwise(g, node, fn)


def lower_sub(g: Graph, node: Node, opt: Options) -> Unit:
    return lower_add(g, node, opt, sign=-1)


def lower_mul(g: Graph, node: Node, opt: Options) -> Unit:
    if not g.is_const(node.inputs[1]):
        raise HdlError(f"node {node.name} (Mul): the HDL backend multiplies by constants only; "
                       "a product of two activations has no lowering yet")
    tx, tc = _t(g, node.inputs[0], node), _t(g, node.inputs[1], node)
    tout, n = _out(g, node)
    c = _const(g, node.inputs[1], g.tensor(node.outputs[0]).shape)
    n_mul = sum(1 for v in c if v and abs(v) & (abs(v) - 1))

    def fn(ins: list[list[Value]]) -> list[Value]:
        out = []
        for i, q in enumerate(ins[0]):
            p, _ = const_mul(q, c[i])
            out.append(requantize(0 if p is None else p, tx.frac + tc.frac, tout))
        return out

    return _elementwise(g, node, fn, n_mul)


def lower_relu(g: Graph, node: Node, opt: Options) -> Unit:
    tx = _t(g, node.inputs[0], node)
    tout = _out(g, node)[0]
    return _elementwise(g, node, lambda ins: [requantize(relu(q), tx.frac, tout)
                                              for q in ins[0]])


def lower_leaky_relu(g: Graph, node: Node, opt: Options) -> Unit:
    tx, ta = _t(g, node.inputs[0], node), _t(g, node.inputs[1], node)
    tout, n = _out(g, node)
    alpha = int(np.asarray(g.constants[node.inputs[1]]).reshape(-1)[0])

    def fn(ins: list[list[Value]]) -> list[Value]:
        out = []
        for q in ins[0]:
            neg, _ = const_mul(q, alpha)
            y = Mux(q >= 0, Value.cast(q) << ta.frac, 0 if neg is None else neg)
            out.append(requantize(y, tx.frac + ta.frac, tout))
        return out

    return _elementwise(g, node, fn, n)


def lower_requant(g: Graph, node: Node, opt: Options) -> Unit:
    tx = _t(g, node.inputs[0], node)
    tout = _out(g, node)[0]
    return _elementwise(g, node, lambda ins: [requantize(q, tx.frac, tout) for q in ins[0]])


def lower_bipolar(g: Graph, node: Node, opt: Options) -> Unit:
    _t(g, node.inputs[0], node)
    return _elementwise(g, node, lambda ins: [Mux(q >= 0, 1, -1) for q in ins[0]])


def lower_threshold(g: Graph, node: Node, opt: Options) -> Unit:
    thr, steps, base = (np.asarray(g.constants[n], dtype=np.int64) for n in node.inputs[1:4])
    tin, n = _spec(g, node.inputs[0], node)
    return Threshold(tin, n, thr, steps, base, _out(g, node)[0])


def lower_lut(g: Graph, node: Node, opt: Options) -> Unit:
    tin, n = _spec(g, node.inputs[0], node)
    a = LutAttrs.of(node)
    return Lut(tin, n, _out(g, node)[0], np.asarray(g.constants[node.inputs[1]]), a.lo, a.shift)


def lower_softmax(g: Graph, node: Node, opt: Options) -> Unit:
    """The parallel Softmax (II 1), or the serial one (hdl/units/softmax.py: one exp-table
    port, one product, II 3n + 2, 3n + 4 under "fmax") where the design's II budget covers
    3n + 4 (`use_serial`: the input pixels per frame of a streamed model, else the largest
    Dense reuse), so the choice never slows the design down. The serial product is split
    for a 16 x 16 DSP under the lean schedules ("area": iCE40; "latency")."""
    tin, n = _spec(g, node.inputs[0], node)
    if len(node.inputs) < 3:
        raise HdlError(f"node {node.name} (Softmax): no exp/reciprocal tables; compile first")
    a = SoftmaxAttrs.of(node)
    args = (tin, n, _out(g, node)[0], np.asarray(g.constants[node.inputs[1]]),
            a.exp_type, a.exp_lo, a.exp_shift, np.asarray(g.constants[node.inputs[2]]),
            a.recip_type, a.recip_lo, a.recip_shift)
    deep = opt.schedule.mul_levels is None  # "fmax": table outputs, products registered
    if use_serial(g, node, opt.reuse):
        return SoftmaxSerial(*args, split=opt.schedule.lean, deep=deep)
    # `--strategy da` (no DSP block): products as registered slices
    split = SOFT_PRODUCT_SLICE if opt.strategy == "da" else 0
    return Softmax(*args, deep=deep, split=split, sum_levels=SOFT_SUM_LEVELS)


def lower_reshape(g: Graph, node: Node, opt: Options) -> Unit:
    t, n = _spec(g, node.inputs[0], node)
    return Wiring(t, range(n))


def lower_transpose(g: Graph, node: Node, opt: Options) -> Unit:
    t, n = _spec(g, node.inputs[0], node)
    shp = g.tensor(node.inputs[0]).shape
    perm = np.arange(n).reshape(shp).transpose(TransposeAttrs.of(node).perm).reshape(-1)
    return Wiring(t, perm)


def lower_clip(g: Graph, node: Node, opt: Options) -> Unit:
    """The codes clamped to reference.clip_codes (two comparisons with constants), then one
    requantization: a saturation."""
    tx = _t(g, node.inputs[0], node)
    tout = _out(g, node)[0]
    lo, hi = clip_codes(ClipAttrs.of(node), tx)

    def fn(ins: list[list[Value]]) -> list[Value]:
        out = []
        for q in ins[0]:
            v = Mux(q < lo, lo, q) if lo > tx.qmin else q
            v = Mux(v > hi, hi, v) if hi < tx.qmax else v
            out.append(requantize(v, tx.frac, tout))
        return out
    return _elementwise(g, node, fn)


def trunc_value(q: Value, d: int, mode: str, t: FixedType) -> Value:
    """reference.trunc in logic: q / 2**d rounded by a QONNX mode (the low d bits decide),
    then saturated to t's range."""
    if d <= 0:
        v = q << -d
    else:
        fl = q >> d  # arithmetic for a signed q: floor
        rem = q.as_unsigned()[:d]
        nz = rem != 0
        neg = q[-1] if q.shape().signed else 0
        half = 1 << (d - 1)
        up, tie = rem > half, rem == half
        inc = {"FLOOR": 0, "CEIL": nz, "DOWN": nz & neg, "UP": nz & ~neg if q.shape().signed
               else nz, "ROUND": up | (tie & fl[0]), "HALF_EVEN": up | (tie & fl[0]),
               "HALF_UP": up | (tie & ~neg) if q.shape().signed else up | tie,
               "HALF_DOWN": up | (tie & neg)}[mode.upper()]
        v = fl + inc
    return fit(Mux(v < t.qmin, t.qmin, Mux(v > t.qmax, t.qmax, v)), t.width, t.signed)


def lower_trunc(g: Graph, node: Node, opt: Options) -> Unit:
    tx = _t(g, node.inputs[0], node)
    tout = _out(g, node)[0]
    mode = TruncAttrs.of(node).mode
    return _elementwise(g, node, lambda ins: [
        trunc_value(q, tx.frac - tout.frac, mode, tout) for q in ins[0]])


Lowering = Callable[[Graph, Node, Options], Unit]
LOWERING: dict[Op, Lowering] = {
    Op.DENSE: lower_dense, Op.ADD: lower_add, Op.SUB: lower_sub, Op.MUL: lower_mul,
    Op.RELU: lower_relu, Op.LEAKY_RELU: lower_leaky_relu, Op.REQUANT: lower_requant,
    Op.BIPOLAR: lower_bipolar, Op.THRESHOLD: lower_threshold, Op.LUT: lower_lut,
    Op.SOFTMAX: lower_softmax, Op.RESHAPE: lower_reshape, Op.TRANSPOSE: lower_transpose,
    Op.CLIP: lower_clip, Op.TRUNC: lower_trunc,
    Op.LAYER_NORM: lower_layer_norm,  # hdl/units/layernorm.py
}

REFUSED: dict[Op, str] = {
    Op.DIV: "a quotient of two activations is float only; a circuit needs fixed point",
    Op.BATCHNORM: "folded into the preceding Dense before fixed point; float golden only",
    Op.CONCAT: "no whole-vector circuit yet (channel concat of pixel streams: hdl/streamed/lower.py)",
    Op.GATHER: "no circuit yet (the golden model runs it)",
    Op.CONV: "a model with spatial ops streams pixels: hdl/streamed/lower.py lowers it",
    Op.MAX_POOL: "a model with spatial ops streams pixels: hdl/streamed/lower.py lowers it",
    Op.AVG_POOL: "a model with spatial ops streams pixels: hdl/streamed/lower.py lowers it",
    Op.RESIZE: "a model with spatial ops streams pixels: hdl/streamed/lower.py lowers it",
    Op.LSTM: "a recurrent layer streams one time step per handshake: "
             "hdl/streamed/recurrent.py lowers it",
    Op.GRU: "a recurrent layer streams one time step per handshake: "
            "hdl/streamed/recurrent.py lowers it",
    Op.MATMUL: "a product of two activations has no circuit outside an attention pattern",
    Op.ATTENTION: "attention streams tokens: hdl/streamed/attention.py lowers it",
}


def lower_node(g: Graph, node: Node, opt: Options) -> Unit:
    fn = LOWERING.get(node.op)  # an Op is a str: "Dense" finds Op.DENSE
    if fn is None:
        why = REFUSED.get(node.op)
        raise HdlError(f"node {node.name}: op {node.op} has no HDL lowering"
                       f"{f' ({why})' if why else ''}; supported: "
                       f"{', '.join(sorted(LOWERING))}")
    return fn(g, node, opt)
