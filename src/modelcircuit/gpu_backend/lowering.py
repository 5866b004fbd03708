"""One lowering function per op of the vocabulary (graphs/ops.py), in `LOWERING`; the ops the
GPU backend does not lower are in `REFUSED`, each with its reason. `lowering_for(node)` is
the one lookup: an op in neither table is a GpuError naming the op, the node and the list.

A lowering function is `(ctx, node, kname) -> (template, context, params, threads per
sample)`. Element-wise ops render the frame `eltwise.cu.j2` around their own body macro in
`eltwise_ops.j2` (named by `body`); Dense, Softmax and Threshold have a template each; the
convolutional ops and Concat are lowered in cnn.py, LSTM/GRU in rnn.py, MatMul, Attention and
LayerNorm in attention.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graphs.ir import GraphError, Node
from ..graphs.ops import (
    LUT_FUNCS,
    BatchNormAttrs,
    BipolarAttrs,
    ClipAttrs,
    DenseAttrs,
    GatherAttrs,
    LeakyReluAttrs,
    LutAttrs,
    Op,
    RequantAttrs,
    SoftmaxAttrs,
    TransposeAttrs,
    TruncAttrs,
)
from ..graphs.reference import clip_codes
from .attention import lower_attention, lower_layernorm, lower_matmul
from .cnn import lower_avgpool, lower_concat, lower_conv, lower_maxpool, lower_resize
from .context import (
    LowerCtx,
    Lowered,
    broadcast,
    cfloat,
    cll,
    index_map,
    linear_tail,
    requant_args,
    type_args,
)
from .kernel import GpuError, Param
from .rnn import lower_rnn

LowerFn = Callable[[LowerCtx, Node, str], Lowered]


def lower_dense(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    x, wn = node.inputs[0], node.inputs[1]
    bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    w = ctx.cval(wn)
    xshape = ctx.g.tensor(x).shape
    if w.ndim != 2 or not xshape or xshape[-1] != w.shape[0]:
        raise GraphError(f"node {node.name} (Dense): weights {list(w.shape)} do not match the "
                         f"input {list(xshape)}")
    k, n = int(w.shape[0]), int(w.shape[1])
    rows = ctx.g.tensor(x).size // k  # a Dense over a sequence: one row per step
    at = DenseAttrs.of(node)
    c = ctx.base(node, kname)
    fl = c["is_float"]
    params = [ctx.act("x", x), ctx.const("w", wn, w, fl)]
    c.update(K=k, N=n, relu=at.relu, bias=bn is not None, xt=ctx.ctype(x), acc=str(at.acc))
    linear_tail(ctx, node, c, params, bn)
    return "dense.cu.j2", c, params, rows * n  # thread i: row i // N (all samples' rows)


def lower_softmax(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    x, out = node.inputs[0], node.outputs[0]
    shape = ctx.g.tensor(x).shape
    if not shape or shape[-1] < 1:
        raise GraphError(f"node {node.name} (Softmax): needs an input with a last axis, got "
                         f"{list(shape)}")
    n = int(shape[-1])  # over the last axis: one thread per row (a rank-1 input: one row)
    c = ctx.base(node, kname)
    c.update(N=n, xt=ctx.ctype(x), rows=ctx.g.tensor(x).size // n)
    params = [ctx.act("x", x)]
    if not c["is_float"]:
        et, rt = ctx.cval(node.inputs[1]), ctx.cval(node.inputs[2])
        params += [ctx.const("exp_t", node.inputs[1], et, False),
                   ctx.const("rec_t", node.inputs[2], rt, False)]
        at = SoftmaxAttrs.of(node)
        if at.exp_type is None or at.recip_type is None:
            raise GraphError(f"node {node.name} (Softmax): no exp/reciprocal tables; compile "
                             "the graph first")
        c.update(exp_lo=cll(at.exp_lo), exp_shift=int(at.exp_shift), exp_size=cll(et.shape[0]),
                 rec_lo=cll(at.recip_lo), rec_shift=int(at.recip_shift), rec_size=cll(rt.shape[0]),
                 r=requant_args(node, at.exp_type.frac + at.recip_type.frac, ctx.t(out)))
    params.append(ctx.act("y", out))
    return "softmax.cu.j2", c, params, c["rows"]


def lower_threshold(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    x, out = node.inputs[0], node.outputs[0]
    if ctx.t(x).is_float:
        raise GraphError(f"node {node.name}: Threshold needs a fixed-point input")
    thr, steps, base = (ctx.cval(n).astype(np.int64) for n in node.inputs[1:4])
    shape = ctx.g.tensor(x).shape
    size = ctx.g.tensor(x).size
    ch = int(thr.shape[0])
    # a row per element, or (a channels-last frame) a row per channel: row = i % ch
    rows_ok = ch in (1, size) or (len(shape) > 1 and ch == shape[-1])
    if not rows_ok or base.size not in (1, ch, size) or size % base.size:
        raise GraphError(f"node {node.name} (Threshold): {ch} channels for {size} values")
    c = ctx.base(node, kname)
    c.update(size=size, steps=int(thr.shape[1]), channels=ch, base_scalar=base.size == 1,
             base_size=int(base.size))
    params = [ctx.act("x", x), ctx.const("thr", node.inputs[1], thr, False),
              ctx.const("step", node.inputs[2], steps, False),
              ctx.const("base", node.inputs[3], base.reshape(-1), False), ctx.act("y", out)]
    return "threshold.cu.j2", c, params, size


# -- element-wise ops: one thread per output element, the frame eltwise.cu.j2 ----------------
@dataclass
class Eltwise:
    """An element-wise kernel being built: template context and params so far; `amap` maps
    each output element to its element of the first input (None: the same index)."""

    c: dict[str, Any]
    params: list[Param]
    amap: np.ndarray | None

    @property
    def is_float(self) -> bool:
        return bool(self.c["is_float"])


def eltwise(ctx: LowerCtx, node: Node, kname: str,
            amap: np.ndarray | None | str = "broadcast") -> Eltwise:
    """Start an element-wise kernel over input `a`. `amap`: "broadcast" (`a` broadcast to the
    output shape), None (same index: Reshape) or an explicit index map (Transpose)."""
    a, out = node.inputs[0], node.outputs[0]
    if isinstance(amap, str):
        amap = index_map(ctx, node, a, out)
    c = ctx.base(node, kname)
    c.update(size=ctx.g.tensor(out).size, a_index=amap is not None, b_act=False, b_index=False,
             b_scalar=False, b_period=0, a_size=ctx.g.tensor(a).size, b_size=0)
    return Eltwise(c, [ctx.act("a", a)], amap)


def finish(ctx: LowerCtx, node: Node, e: Eltwise, body: str) -> Lowered:
    """Close an element-wise kernel whose body is the macro `body` of eltwise_ops.j2."""
    if e.amap is not None:
        e.params.append(ctx.const("ia_map", f"{node.name}__ia_map", e.amap, False))
    e.params.append(ctx.act("y", node.outputs[0]))
    e.c["body"] = body
    return "eltwise.cu.j2", e.c, e.params, e.c["size"]


def second_operand(ctx: LowerCtx, node: Node, e: Eltwise) -> None:
    """The second input of Add/Sub/Mul: a constant (one value or one per element), or an
    activation (`bv`, with an index map when it is broadcast)."""
    g, out, bname = ctx.g, node.outputs[0], node.inputs[1]
    if g.is_const(bname):
        bv = broadcast(node, ctx.cval(bname), g.tensor(out).shape)
        e.c["b_scalar"] = bool(np.all(bv == bv.reshape(-1)[0])) if bv.size else True
        if e.c["b_scalar"]:
            bv = bv[:1]
        else:  # one value per channel of a channels-last frame: ship the C values only
            ch = int(g.tensor(out).shape[-1])
            rows = bv.reshape(-1, ch)
            if len(rows) > 1 and np.all(rows == rows[:1]):
                e.c["b_period"], bv = ch, rows[0]
        e.params.append(ctx.const("c", bname, bv, e.is_float))
        return
    e.c.update(b_act=True, b_size=g.tensor(bname).size)
    e.params.append(ctx.act("bv", bname))
    bmap = index_map(ctx, node, bname, out)
    if bmap is not None:
        e.c["b_index"] = True
        e.params.append(ctx.const("ib_map", f"{node.name}__ib_map", bmap, False))


def _additive(ctx: LowerCtx, node: Node, kname: str, body: str) -> Lowered:
    e = eltwise(ctx, node, kname)
    second_operand(ctx, node, e)
    if not e.is_float:
        ta, tb = ctx.t(node.inputs[0]), ctx.t(node.inputs[1])
        f = max(ta.frac, tb.frac)
        e.c.update(a_mul=cll(1 << (f - ta.frac)), b_mul=cll(1 << (f - tb.frac)),
                   r=requant_args(node, f, ctx.t(node.outputs[0])))
    return finish(ctx, node, e, body)


def lower_add(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    return _additive(ctx, node, kname, "add")


def lower_sub(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    return _additive(ctx, node, kname, "sub")


def lower_mul(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    e = eltwise(ctx, node, kname)
    second_operand(ctx, node, e)
    if not e.is_float:
        frac = ctx.t(node.inputs[0]).frac + ctx.t(node.inputs[1]).frac
        e.c["r"] = requant_args(node, frac, ctx.t(node.outputs[0]))
    return finish(ctx, node, e, "mul")


def lower_relu(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    e = eltwise(ctx, node, kname)
    if not e.is_float:
        e.c["r"] = requant_args(node, ctx.t(node.inputs[0]).frac, ctx.t(node.outputs[0]))
    return finish(ctx, node, e, "relu")


def lower_leaky_relu(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    e = eltwise(ctx, node, kname)
    if e.is_float:
        e.c["alpha"] = cfloat(LeakyReluAttrs.of(node).alpha)
    else:
        an = node.inputs[1]  # alpha as a fixed-point constant
        ta = ctx.t(an)
        e.params.append(ctx.const("c", an, ctx.cval(an).reshape(-1)[:1], False))
        e.c.update(one_mul=cll(1 << ta.frac),
                   r=requant_args(node, ctx.t(node.inputs[0]).frac + ta.frac,
                                  ctx.t(node.outputs[0])))
    return finish(ctx, node, e, "leaky_relu")


FLOAT_FUNCS = LUT_FUNCS  # every Lut function has a float32 kernel


def lower_lut(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    e = eltwise(ctx, node, kname)
    at = LutAttrs.of(node)
    e.c["func"] = at.func
    if e.is_float:
        if at.func not in FLOAT_FUNCS:
            raise GraphError(f"node {node.name} (Lut): no float kernel for {at.func!r}")
        e.c.update(gamma=cfloat(at.selu_gamma), sel_alpha=cfloat(at.selu_alpha))
        if at.func in ("hardsigmoid", "hardswish"):  # reference._hard_sigmoid's defaults
            e.c.update(h_alpha=cfloat((1.0 / 6.0 if at.func == "hardswish" else 0.2)
                                      if at.alpha is None else at.alpha),
                       h_beta=cfloat(0.5 if at.beta is None else at.beta))
    else:
        tab = ctx.cval(node.inputs[1])
        e.params.append(ctx.const("c", node.inputs[1], tab, False))
        e.c.update(lo=cll(at.lo), shift=int(at.shift), tsize=cll(tab.shape[0]))
    return finish(ctx, node, e, "lut")


def lower_requant(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    e = eltwise(ctx, node, kname)
    tin, tout = ctx.t(node.inputs[0]), ctx.t(node.outputs[0])
    e.c["in_float"] = tin.is_float
    if e.is_float:  # float -> float: quantize and dequantize (a fake-quant in float mode)
        e.c["qt"] = type_args(RequantAttrs.of(node).quant_type)
    elif tin.is_float:
        e.c["qt"] = type_args(tout)
    else:
        e.c["r"] = requant_args(node, tin.frac, tout)
    return finish(ctx, node, e, "requant")


def lower_bipolar(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    e = eltwise(ctx, node, kname)
    e.c.update(zero="0.0f" if ctx.t(node.inputs[0]).is_float else "0",
               scale=cfloat(BipolarAttrs.of(node).scale))
    return finish(ctx, node, e, "bipolar")


def lower_batchnorm(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    e = eltwise(ctx, node, kname)
    if not e.is_float:
        raise GraphError(f"node {node.name}: BatchNorm must be folded before fixed-point runs")
    ish = ctx.g.tensor(node.inputs[0]).shape
    e.c.update(channels=int(ish[0]), inner=int(np.prod(ish[1:], dtype=np.int64)),
               eps=cfloat(BatchNormAttrs.of(node).epsilon))
    for cname, nm in zip(("c_scale", "c_bias", "c_mean", "c_var"), node.inputs[1:5], strict=True):
        e.params.append(ctx.const(cname, nm, ctx.cval(nm).reshape(-1), True))
    return finish(ctx, node, e, "batchnorm")


def lower_reshape(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    e = eltwise(ctx, node, kname, amap=None)
    if e.c["a_size"] != e.c["size"]:
        raise GraphError(f"node {node.name} (Reshape): {e.c['a_size']} -> {e.c['size']} elements")
    return finish(ctx, node, e, "reshape")


def lower_transpose(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    ish = ctx.g.tensor(node.inputs[0]).shape
    amap = np.transpose(np.arange(int(np.prod(ish)), dtype=np.int64).reshape(ish),
                        TransposeAttrs.of(node).perm).reshape(-1)
    return finish(ctx, node, eltwise(ctx, node, kname, amap=amap), "transpose")


def lower_gather(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    """np.take with constant indices: a copy through an index map, codes converted to the
    output type where the input's type differs (reference_common.to_out)."""
    a = GatherAttrs.of(node)
    ish = ctx.g.tensor(node.inputs[0]).shape
    amap = np.take(np.arange(int(np.prod(ish)), dtype=np.int64).reshape(ish), a.index_array(),
                   axis=a.axis).reshape(-1)
    e = eltwise(ctx, node, kname, amap=amap)
    if amap.size != e.c["size"]:
        raise GraphError(f"node {node.name} (Gather): {amap.size} indices for {e.c['size']} "
                         "output elements")
    e.c["same_type"] = True
    if not e.is_float:
        tin, tout = ctx.t(node.inputs[0]), ctx.t(node.outputs[0])
        e.c["same_type"] = tin == tout
        if tin != tout:
            e.c["r"] = requant_args(node, tin.frac, tout)
    return finish(ctx, node, e, "gather")


def lower_clip(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    """min(max(x, lo), hi): float32 bounds, or the codes clamped to reference.clip_codes and
    one requantization."""
    e = eltwise(ctx, node, kname)
    a = ClipAttrs.of(node)
    if e.is_float:
        e.c.update(lo="-INFINITY" if a.lo is None else cfloat(a.lo),
                   hi="INFINITY" if a.hi is None else cfloat(a.hi))
    else:
        tin = ctx.t(node.inputs[0])
        lo, hi = clip_codes(a, tin)
        e.c.update(lo=cll(lo), hi=cll(hi), r=requant_args(node, tin.frac, ctx.t(node.outputs[0])))
    return finish(ctx, node, e, "clip")


_TRUNC_MODES = {"FLOOR": 0, "CEIL": 1, "DOWN": 2, "UP": 3, "ROUND": 4, "HALF_EVEN": 4,
                "HALF_UP": 5, "HALF_DOWN": 6}


def lower_trunc(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    """QONNX Trunc on codes (reference.trunc): a shift by d bits rounded by the mode, then the
    output type's saturation."""
    e = eltwise(ctx, node, kname)
    tin, tout = ctx.t(node.inputs[0]), ctx.t(node.outputs[0])
    if e.is_float or tin.is_float:
        raise GraphError(f"node {node.name} (Trunc): needs fixed-point input and output types")
    d = tin.frac - tout.frac
    if not -62 <= d <= 62:
        raise GraphError(f"node {node.name} (Trunc): shift by {d} bits is over 62")
    e.c.update(d=d, mode=_TRUNC_MODES[TruncAttrs.of(node).mode.upper()],
               qmin=cll(tout.qmin), qmax=cll(tout.qmax))
    return finish(ctx, node, e, "trunc")


LOWERING: dict[Op, LowerFn] = {
    Op.DENSE: lower_dense, Op.ADD: lower_add, Op.SUB: lower_sub, Op.MUL: lower_mul,
    Op.RELU: lower_relu, Op.LEAKY_RELU: lower_leaky_relu, Op.LUT: lower_lut,
    Op.SOFTMAX: lower_softmax, Op.THRESHOLD: lower_threshold, Op.REQUANT: lower_requant,
    Op.BIPOLAR: lower_bipolar, Op.BATCHNORM: lower_batchnorm, Op.RESHAPE: lower_reshape,
    Op.TRANSPOSE: lower_transpose, Op.CONCAT: lower_concat, Op.GATHER: lower_gather,
    Op.CONV: lower_conv, Op.MAX_POOL: lower_maxpool, Op.AVG_POOL: lower_avgpool,
    Op.RESIZE: lower_resize, Op.CLIP: lower_clip, Op.TRUNC: lower_trunc,
    Op.RESIZE: lower_resize, Op.LSTM: lower_rnn, Op.GRU: lower_rnn,
    Op.MATMUL: lower_matmul, Op.ATTENTION: lower_attention, Op.LAYER_NORM: lower_layernorm,
}

REFUSED: dict[Op, str] = {
    Op.DIV: "division of two activations is float only and has no GPU kernel yet; "
            "the golden model runs it",
}


def lowering_for(node: Node) -> LowerFn:
    """The lowering function of a node's op; a GpuError names the op, the node and the
    supported list (and the reason, for an op of the vocabulary that is refused)."""
    fn = LOWERING.get(node.op)  # an Op is a str: "Dense" finds Op.DENSE
    if fn is not None:
        return fn
    why = REFUSED.get(node.op)
    reason = f" ({why})" if why else ""
    raise GpuError(f"node {node.name}: op {node.op} has no GPU kernel{reason}; supported: "
                   f"{', '.join(sorted(LOWERING))}")
