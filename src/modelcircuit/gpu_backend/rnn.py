"""The GPU lowering of LSTM and GRU (templates/cuda/rnn.cu.j2): one thread per sample runs
the steps in order, the state in local arrays; the fixed-point path uses no shared memory and
no barrier, so the CPU emulator runs the shipped source (bit-exact with
reference_rnn._rnn_fixed). The template's constants are the shifts and requantizations of the
contract in graphs/recurrent.py, computed here once."""

from __future__ import annotations

from ..graphs.ir import GraphError, Node
from ..graphs.ops import GruAttrs, LstmAttrs, Op, RecurrentAttrs, attrs
from ..graphs.recurrent import clip_code
from ..graphs.reference import rnn_types
from .context import LowerCtx, Lowered, cfloat, cll, requant_args


def lower_rnn(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    a = attrs(node)
    assert isinstance(a, RecurrentAttrs)
    x, out = node.inputs[0], node.outputs[0]
    t_, f_ = ctx.g.tensor(x).shape
    hid = a.hidden
    gates = 4 if node.op == Op.LSTM else 3
    c = ctx.base(node, kname)
    fl = c["is_float"]
    lstm = node.op == Op.LSTM
    c.update(T=int(t_), F=int(f_), H=hid, GH=gates * hid, xt=ctx.ctype(x), acts=list(a.acts),
             alphas=[cfloat(v) for v in a.alphas] or ["0.0f"] * len(a.acts),
             betas=[cfloat(v) for v in a.betas] or ["0.0f"] * len(a.acts),
             clip=None if a.clip is None else cfloat(a.clip),
             emit=LstmAttrs.of(node).emit if lstm else "h",
             lbr=bool(GruAttrs.of(node).lbr) if not lstm else False, acc="")
    wn, rn, bn, h0 = node.inputs[1:5]
    params = [ctx.act("x", x), ctx.const("w", wn, ctx.cval(wn), fl),
              ctx.const("r", rn, ctx.cval(rn), fl),
              ctx.const("bias", bn, ctx.cval(bn).reshape(-1), fl),
              ctx.const("h0", h0, ctx.cval(h0).reshape(-1), fl)]
    if lstm:
        params.append(ctx.const("c0", node.inputs[5], ctx.cval(node.inputs[5]).reshape(-1), fl))
    if not fl:
        _fixed(ctx, node, a, c, params)
    params.append(ctx.act("y", out))
    return "rnn.cu.j2", c, params, 1


def _fixed(ctx: LowerCtx, node: Node, a: RecurrentAttrs, c: dict, params: list) -> None:
    ty = rnn_types(node)
    tx, tw, tb = (ctx.t(node.inputs[i]) for i in (0, 1, 3))
    th, tp, tf, tg = ty["state_type"], ty["pre_type"], ty["f_type"], ty["g_type"]
    if not all(hasattr(t, "frac") for t in (tx, tw, tb)):
        raise GraphError(f"node {node.name} ({node.op}): fixed-point inputs expected")
    fxh = max(tx.frac, th.frac)
    fa = max(fxh + tw.frac, tb.frac)
    ff = tf.frac
    c.update(acc=str(ty["acc"]), x_mul=cll(1 << (fxh - tx.frac)), h_mul=cll(1 << (fxh - th.frac)),
             s_mul=cll(1 << (fa - fxh - tw.frac)), b_mul=cll(1 << (fa - tb.frac)),
             r_pre=requant_args(node, fa, tp), cc=None)
    cc = clip_code(a.clip, tp.frac, tp.qmax)
    c["cc"] = None if cc is None else cll(cc)
    base = 6 if node.op == Op.LSTM else 5
    tabs = node.inputs[base:]
    names = ["tab_f", "tab_g", "tab_h"]
    for k, tn in enumerate(tabs):
        v = ctx.cval(tn)
        params.append(ctx.const(names[k], tn, v.reshape(-1), False))
        c[f"{'fgh'[k]}_size"] = cll(v.shape[0])
    c.update(f_lo=cll(a.f_lo), f_shift=int(a.f_shift), g_lo=cll(a.g_lo), g_shift=int(a.g_shift))
    if node.op == Op.LSTM:
        la = LstmAttrs.of(node)
        tc, tht = ty["cell_type"], ty["h_type"]
        fu = max(ff + tc.frac, ff + tg.frac)
        c.update(h_lo=cll(la.h_lo), h_shift=int(la.h_shift),
                 fc_mul=cll(1 << (fu - ff - tc.frac)), ig_mul=cll(1 << (fu - ff - tg.frac)),
                 r_cell=requant_args(node, fu, tc), r_h=requant_args(node, ff + tht.frac, th))
        return
    fu = max(ff + tg.frac, ff + th.frac)
    c.update(one=cll(1 << ff), zn_mul=cll(1 << (fu - ff - tg.frac)),
             zh_mul=cll(1 << (fu - ff - th.frac)), r_state=requant_args(node, fu, th))
    if GruAttrs.of(node).lbr:
        thn = ty["hn_type"]
        fs = max(fa, ff + thn.frac)
        c.update(r_hn=requant_args(node, fa, thn), axn_mul=cll(1 << (fs - fa)),
                 rhn_mul=cll(1 << (fs - ff - thn.frac)), r_cand=requant_args(node, fs, tp))
    else:
        c["r_rh"] = requant_args(node, ff + th.frac, th)
