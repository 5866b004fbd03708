"""Attention in ONNX: the patterns exporters write, fused before the walk (the handlers of
the fused nodes and of the other transformer-encoder ops are in frontend/onnx/encoder.py).

`fuse(model)` rewrites a ModelProto (a copy) before the walk:

- **Attention.** Each Softmax fed (through a constant additive mask and constant scalar
  Mul/Div) by a MatMul of two activations, whose probabilities feed a MatMul with a third
  activation, is one scaled dot-product attention, whatever layout ops the exporter put
  around it: torch.onnx's nn.MultiheadAttention / nn.TransformerEncoderLayer (TorchScript and
  dynamo exporters write the same Python code: a packed in-projection, the heads split by
  Reshape/Transpose/Gather, sqrt(scale) on q and k), F.scaled_dot_product_attention
  (separate projections, Transpose of heads, one scale). From each of q, k^T, v the walk goes
  back through layout ops (Reshape, Transpose, Squeeze, Unsqueeze, Gather, Slice, Split,
  Flatten, Identity), constant scalar Mul/Div and at most one projection (MatMul/Gemm by a
  constant, its bias Add) to the tensor X they come from; from the output through layout ops
  and at most one projection to Y. Then the sub-model is *evaluated* (onnx.reference, float64)
  on random X of two samples and the projections are fitted: q = X Wq + bq for each head
  arrangement, exact to float64 rounding; a layout that does not fit (heads across samples,
  attention over the batch axis: batch_first=False) is refused. The fitted weights are the
  model's float32 weights (recovered exactly: the evaluation is float64), the scalars on the
  q/k paths and on the scores make `scale`. The sub-graph becomes standard
  MatMul+Add (token-wise Dense) x3, one `Attention` node of DOMAIN, MatMul+Add.
- **Gelu.** An element-wise sub-graph of one tensor x around an Erf or Tanh whose values are
  those of Gelu (erf form) or its tanh approximation (checked on a grid, float64) becomes a
  `Lut` node of DOMAIN (func gelu / gelu_tanh).

Refused in one line naming the node: cross-attention (q and k/v from different tensors), a
key/value cache (a Concat on the key or value path), a mask computed from an input
(data-dependent), a per-head or per-sample mask, a layout that is not batch-first. Mask
entries at or below -1e30 are -inf (a removed key), as torch's float masks mean.

Where the parts are: the graph view and sub-model evaluation in frontend/onnx/fuse_graph.py,
the walks that find the pattern in frontend/onnx/attention_walk.py, the Gelu table in
frontend/onnx/gelu_fuse.py; this module fits the attention's weights, writes the
replacement nodes and runs `fuse`.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .attention_walk import (
    Walk,
    arrangements,
    deps,
    direct,
    direct_out,
    score_chain,
    walk_back,
    walk_forward,
)
from .fuse_graph import DOMAIN, Foreign, Fused, OnnxModel, dyn_inputs, err, shapes
from .gelu_fuse import gelu_fuse
from .io import q
from .layout import attrs

MASK_NEG_INF = -1e30
FIT_TOL = 1e-9  # relative residual of a fitted projection (float64 evaluation)


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """y = x W + b over rows (least squares, float64): (W, b, relative residual)."""
    xr = x.reshape(-1, x.shape[-1])
    yr = y.reshape(-1, y.shape[-1])
    a = np.concatenate([xr, np.ones((xr.shape[0], 1))], axis=1)
    sol, *_ = np.linalg.lstsq(a, yr, rcond=None)
    res = float(np.abs(a @ sol - yr).max()) / (1.0 + float(np.abs(yr).max()))
    return sol[:-1], sol[-1], res


def _probe_shape(info: dict[str, list[int | None]], x: str, site: onnx.NodeProto
                 ) -> tuple[int, ...]:
    shp = info.get(x)
    if shp is None or len(shp) != 3 or any(d is None for d in shp[1:]):
        raise err(site, f"attention over {q(x)} of shape {shp}: the importer needs a "
                   "batch-first (N, T, D) token sequence with T and D fixed")
    return (2 if shp[0] is None or shp[0] != 1 else 1, int(shp[1]), int(shp[2]))


def _attention(m: OnnxModel, sm: onnx.NodeProto, info: dict, out: Fused, k: int) -> None:
    chain = score_chain(m, sm)
    if chain is None:
        return
    mm1, s_scale, mask, s_nodes = chain
    cons = m.cons(sm.output[0])
    if len(cons) != 1 or cons[0].op_type != "MatMul" or cons[0].input[0] != sm.output[0] \
            or len(dyn_inputs(m, cons[0])) != 2:
        return
    mm2 = cons[0]
    a = attrs(sm)
    rank = len(info.get(sm.input[0]) or []) or 4
    if int(a.get("axis", -1 if m.opset >= 13 else 1)) % rank != rank - 1:
        raise err(sm, "attention's Softmax must be over the keys (the last axis)")
    rng0 = np.random.default_rng(1000 + k)
    shq = m.info.get(mm1.input[0])
    bsz = 2 if not shq or shq[0] is None or shq[0] != 1 else 1
    dq = direct(m, mm1.input[0], bsz, False, rng0)
    dk_ = direct(m, mm1.input[1], bsz, True, rng0) if dq else None
    dv = direct(m, mm2.input[1], bsz, False, rng0) if dk_ else None
    if dq and dk_ and dv and _attention_direct(m, sm, mm1, mm2, s_scale, mask, s_nodes,
                                               (dq, dk_, dv), bsz, out, rng0):
        return
    pq = walk_back(m, mm1.input[0], mm1, "query")
    pk = walk_back(m, mm1.input[1], mm1, "key")
    pv = walk_back(m, mm2.input[1], mm2, "value")
    if not (pq.source == pk.source == pv.source):
        raise err(mm1, f"cross-attention: the queries come from {q(pq.source)}, the keys from "
                   f"{q(pk.source)} and the values from {q(pv.source)}; only self-attention "
                   "(q, k, v projections of one token sequence) is supported")
    x = pq.source
    y, f_nodes = walk_forward(m, mm2.output[0])
    b, t, d = _probe_shape(info, x, mm1)
    rng = np.random.default_rng(k)
    probes = [rng.normal(0, 1, (b, t, d)) for _ in range(3)]
    try:
        vals = [m.evaluate([mm1.input[0], mm1.input[1], mm2.input[1]], {x: p}, b)
                for p in probes]
    except Foreign as e:
        raise err(mm1, f"the attention reads {q(e.name)} besides its input {q(x)}; only "
                   "self-attention over one token sequence is supported") from None
    except Exception as e:  # an evaluation the reference cannot do: not our pattern
        raise err(mm1, f"cannot read this attention pattern ({type(e).__name__}: "
                   f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None

    def fit(idx: int, transpose: bool, what: str, path: Walk):
        best = None
        per = [np.swapaxes(v[idx], -1, -2) if transpose else v[idx] for v in vals]
        for arr_name, arranged in arrangements(per[0], b, t):
            ys = [dict(arrangements(a_, b, t))[arr_name] for a_ in per]
            w, bias, res = _fit(np.concatenate(probes), np.concatenate(ys))
            if best is None or res < best[2]:
                best = (w, bias, res, arranged.shape[-1] // per[0].shape[-1], arr_name)
        if best is None or best[2] > FIT_TOL:
            raise err(mm1, f"the {what} of this attention are not a per-token projection of "
                       f"{q(x)} split into heads (layout not recognised: attention must run "
                       "over axis 1 of a batch-first (N, T, D) sequence, batch_first=True)")
        w, bias, _, h, arr_name = best
        return (w / path.scale).astype(np.float32), (bias / path.scale).astype(np.float32), h, \
            arr_name

    wq, bq, hq, arr_q = fit(0, False, "queries", pq)
    wk, bk, hk, arr_k = fit(1, True, "keys", pk)
    wv, bv, hv, arr_v = fit(2, False, "values", pv)
    if not hq == hk == hv:
        raise err(mm1, f"queries, keys and values split into {hq}, {hk}, {hv} heads")
    heads = hq
    dk = wq.shape[1] // heads
    scale = pq.scale * pk.scale * s_scale
    if not (math.isfinite(scale) and scale > 0):
        raise err(mm1, f"the scores' scale {scale} is not a positive number")
    # the output: probe the attention result (per head) through the forward nodes
    o_shape = vals[0][2].shape[:-2] + (vals[0][0].shape[-2], vals[0][2].shape[-1])
    wo = bo = None
    if f_nodes:
        ps = [rng.normal(0, 1, o_shape) for _ in range(3)]
        try:
            ys = [m.evaluate([y], {mm2.output[0]: p}, b)[0] for p in ps]
        except Exception as e:
            raise err(mm2, f"cannot read the attention's output layout ({type(e).__name__})") \
                from None
        if ys[0].shape[:2] != (b, t) or ys[0].ndim != 3:
            raise err(mm2, f"the attention's output {q(y)} has shape {list(ys[0].shape)}; a "
                       f"batch-first ({b}, {t}, D) sequence was expected (batch_first=True)")
        xs = [dict(arrangements(p, b, t))[arr_v] for p in ps]
        wo, bo, res = _fit(np.concatenate(xs), np.concatenate(ys))
        if res > FIT_TOL:
            raise err(mm2, "the attention's output is not a per-token projection of its heads "
                       "(layout not recognised)")
        wo, bo = wo.astype(np.float32), bo.astype(np.float32)
        if wo.shape[0] == wo.shape[1] and np.array_equal(wo, np.eye(wo.shape[0])) \
                and not bo.any():
            wo = bo = None
    mask_v = _mask(m, sm, mask, t)
    # the replacement (batch-first, standard ops + one Attention node)
    base = f"attn{k}"
    nodes: list[onnx.NodeProto] = []

    def init(name: str, v: np.ndarray) -> str:
        nm = f"{base}_{name}"
        out.inits.append(numpy_helper.from_array(np.ascontiguousarray(v), nm))
        return nm

    def proj(name: str, src: str, w: np.ndarray, bias: np.ndarray | None, dst: str) -> str:
        mid = dst if bias is None else f"{base}_{name}_mm"
        nodes.append(helper.make_node("MatMul", [src, init(f"{name}_w", w)], [mid],
                                      name=f"{base}/{name}/MatMul"))
        if bias is not None:
            nodes.append(helper.make_node("Add", [mid, init(f"{name}_b", bias)], [dst],
                                          name=f"{base}/{name}/Add"))
        return dst

    qn = proj("q", x, wq, bq, f"{base}_q")
    kn = proj("k", x, wk, bk, f"{base}_k")
    vn = proj("v", x, wv, bv, f"{base}_v")
    ins = [qn, kn, vn]
    if mask_v is not None:
        ins.append(init("mask", mask_v.astype(np.float32)))
    att_out = y if wo is None else f"{base}_heads"
    nodes.append(helper.make_node("Attention", ins, [att_out], name=mm1.name or f"{base}/Attention",
                                  domain=DOMAIN, heads=int(heads), scale=float(scale),
                                  head_dim=int(dk)))
    if wo is not None:
        proj("out", att_out, wo, bo, y)
    region = pq.nodes + pk.nodes + pv.nodes + s_nodes + [mm1, sm, mm2] + f_nodes
    for n in region:
        out.remove.add(id(n))
    out.new_nodes.append((mm1, nodes))


def _mask(m: OnnxModel, sm: onnx.NodeProto, mask: str | None, t: int) -> np.ndarray | None:
    if mask is None:
        return None
    mv = np.asarray(m.value(mask), dtype=np.float64)
    lead = mv.shape[:-2]
    full = np.broadcast_to(mv, lead + (t, t)) if mv.ndim >= 2 else np.broadcast_to(mv, (t, t))
    flat = full.reshape(-1, t, t)
    if not all(np.array_equal(flat[0], f) for f in flat[1:]):
        raise err(sm, f"the attention mask {q(mask)} differs between heads or samples; "
                   "only one (T, S) mask for every head is supported")
    mask_v = np.where(flat[0] <= MASK_NEG_INF, -np.inf, flat[0])
    return mask_v if mask_v.any() else None


def _attention_direct(m: OnnxModel, sm: onnx.NodeProto, mm1: onnx.NodeProto,
                      mm2: onnx.NodeProto, s_scale: float, mask: str | None,
                      s_nodes: list[onnx.NodeProto], srcs: tuple, b: int, out: Fused,
                      rng: np.random.Generator) -> bool:
    """q, k, v are layouts of batch-first projections (SDPA-style exports, QAT models with
    quantizers on the projections): the Attention reads them as they are. False (nothing
    changed) when the heads are not merged back into a batch-first tensor by layout ops
    alone: then the general walk and fit reads the pattern (one head of torch's
    MultiheadAttention: its (N*1, T, d) heads look batch-first, but the output goes back
    through the (T*N, D) out-projection)."""
    (pq, cq, nq, hq, arr, sq), (pk, ck, nk, hk, _, _), (pv, cv, nv, hv, arr_v, sv) = srcs
    dq, dk, dv = (deps(m, t) for t in (pq, pk, pv))
    t = m.info[pq][1]
    if not dq == dk == dv or m.info[pk][1] != t:
        raise err(mm1, f"cross-attention: the queries come from {q(pq)}, the keys from "
                   f"{q(pk)} and the values from {q(pv)}, not one token sequence; only "
                   "self-attention is supported")
    if not hq == hk == hv:
        raise err(mm1, f"queries, keys and values split into {hq}, {hk}, {hv} heads")
    if cv != 1.0:
        raise err(mm2, f"the values are scaled by {cv}; only the scores may be scaled")
    scale = cq * ck * s_scale
    if not (math.isfinite(scale) and scale > 0):
        raise err(mm1, f"the scores' scale {scale} is not a positive number")
    o = direct_out(m, mm2, b, arr_v, tuple(sq[:-1]) + (sv[-1],), rng)
    if o is None:
        return False
    y, f_nodes = o
    mask_v = _mask(m, sm, mask, t)
    ins = [pq, pk, pv]
    base = f"attn{len(out.new_nodes)}"
    if mask_v is not None:
        nm = f"{base}_mask"
        out.inits.append(numpy_helper.from_array(mask_v.astype(np.float32), nm))
        ins.append(nm)
    node = helper.make_node("Attention", ins, [y], name=mm1.name or f"{base}/Attention",
                            domain=DOMAIN, heads=int(hq), scale=float(scale))
    for n in nq + nk + nv + s_nodes + [mm1, sm, mm2] + f_nodes:
        out.remove.add(id(n))
    out.new_nodes.append((mm2, [node]))
    return True


def fuse(model: onnx.ModelProto, base_dir: str | bytes | None = None) -> onnx.ModelProto:
    """The model with attention and Gelu patterns fused (module docstring); the model itself
    when there is none. GraphError (one line, naming the node) for what is refused.
    `base_dir`: the model's folder, where initializers kept in external data are read."""
    ops = {n.op_type for n in model.graph.node}
    if not ops & {"Softmax", "Erf", "Tanh"}:
        return model
    m = OnnxModel(model, base_dir)
    out = Fused()
    info = shapes(model) if "Softmax" in ops else {}
    m.info = info
    for k, n in enumerate(model.graph.node):
        if id(n) in out.remove:
            continue
        if n.op_type == "Softmax" and n.domain in ("", "ai.onnx") and n.input[0] in m.dynamic:
            _attention(m, n, info, out, k)
        elif n.op_type in ("Erf", "Tanh") and n.input[0] in m.dynamic:
            gelu_fuse(m, n, out)
    if not out.new_nodes:
        return model
    new = onnx.ModelProto()
    new.CopyFrom(model)
    anchors = {id(a): nodes for a, nodes in out.new_nodes}
    kept: list[onnx.NodeProto] = []
    for n in model.graph.node:
        if id(n) in anchors:
            kept.extend(anchors[id(n)])
        if id(n) not in out.remove:
            kept.append(n)
    kept = _topo(kept, {t.name for t in model.graph.initializer} |
                 {vi.name for vi in model.graph.input})
    kept = _dead(kept, {o.name for o in model.graph.output})
    del new.graph.node[:]
    new.graph.node.extend(kept)
    new.graph.initializer.extend(out.inits)
    if not any(o.domain == DOMAIN for o in new.opset_import):
        new.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    del new.graph.value_info[:]  # shapes of removed tensors; the walk computes its own
    return new


def _topo(nodes: list[onnx.NodeProto], avail: set[str]) -> list[onnx.NodeProto]:
    """The nodes in an order where each input is defined first (the new nodes sit at the
    first node of their pattern; the projections read tensors defined before it)."""
    avail = set(avail) | {""}
    out, todo = [], list(nodes)
    while todo:
        rest = []
        for n in todo:
            if all(i in avail for i in n.input):
                out.append(n)
                avail.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(todo):  # inputs never defined: left for the walk to name
            out.extend(rest)
            break
        todo = rest
    return out


def _dead(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """Drop nodes none of whose outputs is read (the shape arithmetic of removed layouts)."""
    while True:
        used = set(outputs) | {i for n in nodes for i in n.input}
        keep = [n for n in nodes if any(o in used for o in n.output if o)]
        if len(keep) == len(nodes):
            return nodes
        nodes = keep


__all__ = ["fuse"]
