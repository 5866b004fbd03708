"""The GPU lowering of the attention ops (graphs/attention.py has their numeric contract):
MatMul of two activations (templates/cuda/matmul.cu.j2, one thread per output element),
Attention (attention.cu.j2, one thread per sample, head and query row: its scores, the row
Softmax and its output row) and LayerNorm (layernorm.cu.j2, one thread per row). The
fixed-point kernels use no shared memory and no barrier, so the CPU emulator runs the
shipped source, bit-exact with graphs/attention.py's integer functions; the shifts and
requantizations of the contract are computed here once."""

from __future__ import annotations

import numpy as np

from ..graphs import attention as attn
from ..graphs import fixed as fx
from ..graphs.ir import GraphError, Node
from ..graphs.ops import AttentionAttrs, LayerNormAttrs
from ..graphs.types import FixedType
from .context import LowerCtx, Lowered, cll, requant_args, type_args


def _fixed_type(node: Node, what: str, t: object) -> FixedType:
    if not isinstance(t, FixedType):
        raise GraphError(f"node {node.name} ({node.op}): {what} has no fixed-point type; "
                         "compile the graph first")
    return t


# -- MatMul of two activations -------------------------------------------------------------
def _lead_bases(lead: tuple[int, ...], out_lead: tuple[int, ...], stride: int) -> np.ndarray:
    """The element offset in a per-sample operand of each leading index of the output,
    size-1 leading axes broadcast (numpy matmul's rule)."""
    idx = np.arange(int(np.prod(lead, dtype=np.int64)), dtype=np.int64).reshape(lead)
    return np.broadcast_to(idx, out_lead).reshape(-1) * stride


def lower_matmul(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    an, bn = node.inputs[:2]
    out = node.outputs[0]
    ash, bsh = ctx.g.tensor(an).shape, ctx.g.tensor(bn).shape
    if len(ash) < 2 or len(ash) != len(bsh) or ash[-1] != bsh[-2]:
        raise GraphError(f"node {node.name} (MatMul): needs two per-sample operands of one rank "
                         f">= 2, (..., M, K) @ (..., K, N); got {list(ash)} @ {list(bsh)}")
    m_, k_, n_ = int(ash[-2]), int(ash[-1]), int(bsh[-1])
    try:
        lead = tuple(np.broadcast_shapes(ash[:-2], bsh[:-2]))
    except ValueError:
        raise GraphError(f"node {node.name} (MatMul): leading axes {list(ash[:-2])} and "
                         f"{list(bsh[:-2])} do not broadcast") from None
    if tuple(ctx.g.tensor(out).shape) != lead + (m_, n_):
        raise GraphError(f"node {node.name} (MatMul): output shape "
                         f"{list(ctx.g.tensor(out).shape)} is not {list(lead + (m_, n_))}")
    c = ctx.base(node, kname)
    nl = int(np.prod(lead, dtype=np.int64))
    params = [ctx.act("a", an), ctx.act("b", bn)]
    bcast = ash[:-2] != lead or bsh[:-2] != lead
    c.update(M=m_, K=k_, N=n_, L=nl, a_size=ctx.g.tensor(an).size,
             b_size=ctx.g.tensor(bn).size, bcast=bcast, at=ctx.ctype(an), bt=ctx.ctype(bn))
    if bcast:
        params += [ctx.const("a_base", f"{node.name}__a_base",
                             _lead_bases(ash[:-2], lead, m_ * k_), False),
                   ctx.const("b_base", f"{node.name}__b_base",
                             _lead_bases(bsh[:-2], lead, k_ * n_), False)]
    if not c["is_float"]:
        ta = _fixed_type(node, "input a", ctx.t(an))
        tb = _fixed_type(node, "input b", ctx.t(bn))
        c["r"] = requant_args(node, ta.frac + tb.frac, ctx.t(out))
    params.append(ctx.act("y", out))
    return "matmul.cu.j2", c, params, nl * m_ * n_


# -- Attention -------------------------------------------------------------------------------
def _head_mask(node: Node, mask: np.ndarray, heads: int, t_: int, s_: int) -> np.ndarray:
    """The constant mask as (H, T, S) (its own shape broadcast, as the reference adds it to
    the (N, H, T, S) scores)."""
    m = np.asarray(mask)
    while m.ndim > 3 and m.shape[0] == 1:
        m = m[0]
    try:
        return np.broadcast_to(m, (heads, t_, s_))
    except ValueError:
        raise GraphError(f"node {node.name} (Attention): a mask of shape {list(mask.shape)} "
                         f"does not broadcast to the scores ({heads}, {t_}, {s_})") from None


def lower_attention(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    a = AttentionAttrs.of(node)
    qn, kn, vn = node.inputs[:3]
    out = node.outputs[0]
    qs, ks, vs = (ctx.g.tensor(n).shape for n in (qn, kn, vn))
    h = int(a.heads)
    if (len(qs) != 2 or len(ks) != 2 or len(vs) != 2 or h < 1 or qs[1] % h or vs[1] % h
            or ks[1] != qs[1] or vs[0] != ks[0]):
        raise GraphError(f"node {node.name} (Attention): needs q (T, H*dk), k (S, H*dk), "
                         f"v (S, H*dv) with {h} heads; got {list(qs)}, {list(ks)}, {list(vs)}")
    t_, s_, hdk, hdv = int(qs[0]), int(ks[0]), int(qs[1]), int(vs[1])
    c = ctx.base(node, kname)
    fl = c["is_float"]
    c.update(T=t_, S=s_, H=h, DK=hdk // h, DV=hdv // h, HDK=hdk, HDV=hdv, qt=ctx.ctype(qn),
             kt=ctx.ctype(kn), vt=ctx.ctype(vn), masked=bool(a.masked), has_keep=False,
             has_mcodes=False, m_hstride=0)
    params = [ctx.act("q", qn), ctx.act("k", kn), ctx.act("v", vn)]
    mask = None
    if a.masked:
        mask = _head_mask(node, ctx.cval(node.inputs[3]).astype(np.float64), h, t_, s_)
        same = bool(np.all(mask == mask[:1]))
        c["m_hstride"] = 0 if same else t_ * s_
        mask = mask[:1] if same else mask
    if fl:
        c["scale"] = f"{float(np.float32(a.scale))!r}f"
        if mask is not None:
            params.append(ctx.const("mask", node.inputs[3], mask.reshape(-1), True))
        params.append(ctx.act("y", out))
        return "attention.cu.j2", c, params, h * t_
    _attention_fixed(ctx, node, a, c, params, mask)
    params.append(ctx.act("y", out))
    return "attention.cu.j2", c, params, h * t_


def _attention_fixed(ctx: LowerCtx, node: Node, a: AttentionAttrs, c: dict, params: list,
                     mask: np.ndarray | None) -> None:
    for f in ("score_type", "prob_type", "exp_type", "recip_type", "scale_code", "scale_frac",
              "exp_lo", "exp_shift", "recip_lo", "recip_shift"):
        if getattr(a, f) is None:
            raise GraphError(f"node {node.name} (Attention): no {f}; compile the graph first")
    tq, tk, tv = (_fixed_type(node, f"input {w}", ctx.t(n))
                  for w, n in zip("qkv", node.inputs[:3], strict=True))
    out_t = ctx.t(node.outputs[0])
    if mask is not None:  # reference.attention: -inf removes a key, finite entries are codes
        keep = attn.mask_keep(mask)
        if not keep.all():
            c["has_keep"] = True
            params.append(ctx.const("keep", f"{node.name}__keep", keep.reshape(-1), False))
        finite = np.where(keep, mask, 0.0)
        if finite.any():
            c["has_mcodes"] = True
            params.append(ctx.const("mcodes", f"{node.name}__mask_codes",
                                    fx.quantize(finite, a.score_type).reshape(-1), False))
    et, rt = (ctx.cval(n) for n in node.inputs[-2:])
    params += [ctx.const("exp_t", node.inputs[-2], et.reshape(-1), False),
               ctx.const("rec_t", node.inputs[-1], rt.reshape(-1), False)]
    c.update(scale_code=cll(a.scale_code), st=type_args(a.score_type),
             r_score=requant_args(node, tq.frac + tk.frac + int(a.scale_frac), a.score_type),
             exp_lo=cll(a.exp_lo), exp_shift=int(a.exp_shift), exp_size=cll(et.shape[0]),
             rec_lo=cll(a.recip_lo), rec_shift=int(a.recip_shift), rec_size=cll(rt.shape[0]),
             r_prob=requant_args(node, a.exp_type.frac + a.recip_type.frac, a.prob_type),
             r_out=requant_args(node, a.prob_type.frac + tv.frac, out_t))


# -- LayerNorm -------------------------------------------------------------------------------
def lower_layernorm(ctx: LowerCtx, node: Node, kname: str) -> Lowered:
    a = LayerNormAttrs.of(node)
    x, out = node.inputs[0], node.outputs[0]
    shape = ctx.g.tensor(x).shape
    if not shape:
        raise GraphError(f"node {node.name} (LayerNorm): needs an input with a last axis")
    d = int(shape[-1])
    c = ctx.base(node, kname)
    fl = c["is_float"]
    c.update(D=d, xt=ctx.ctype(x))
    params = [ctx.act("x", x)]
    rows = ctx.g.tensor(x).size // d
    if fl:
        gam, bet = (ctx.cval(n).astype(np.float64) for n in node.inputs[1:3])
        for cname, nm, v in (("gamma", node.inputs[1], gam), ("beta", node.inputs[2], bet)):
            params.append(ctx.const(cname, nm, np.broadcast_to(v, (d,)), True))
        c["eps"] = f"{float(np.float32(a.epsilon))!r}f"
        params.append(ctx.act("y", out))
        return "layernorm.cu.j2", c, params, rows
    if len(node.inputs) < 6 or None in (a.eps_code, a.rsqrt_bits, a.rsqrt_frac):
        raise GraphError(f"node {node.name} (LayerNorm): no fixed-point constants (g, b, "
                         "rsqrt table); compile the graph first")
    gn, bn, tn = node.inputs[3:6]
    tg = _fixed_type(node, "g", ctx.t(gn))
    tb = _fixed_type(node, "b", ctx.t(bn))
    fr = int(a.rsqrt_frac)
    if tb.frac > fr + tg.frac:
        raise GraphError(f"node {node.name} (LayerNorm): beta has {tb.frac} fractional bits, "
                         f"more than the product's {fr + tg.frac}")
    tab = ctx.cval(tn)
    params += [ctx.const("g", gn, np.broadcast_to(ctx.cval(gn), (d,)), False),
               ctx.const("b", bn, np.broadcast_to(ctx.cval(bn), (d,)), False),
               ctx.const("rs_t", tn, tab.reshape(-1), False)]
    c.update(eps_code=cll(a.eps_code), bits=int(a.rsqrt_bits),
             b_mul=cll(1 << (fr + tg.frac - tb.frac)),
             r=requant_args(node, fr + tg.frac, ctx.t(out)))
    params.append(ctx.act("y", out))
    return "layernorm.cu.j2", c, params, rows
