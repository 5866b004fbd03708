"""Lowering: compiled graph -> one CUDA module (kernels rendered from templates/cuda) plus
the launch list, the arena plan and the weights blob. One lowering function per op in
`LOWERING`; an op missing there is a compile error naming the op, the node and the list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from ..graphs.ir import Graph, GraphError, Node
from ..graphs.passes.memory_plan import ALIGN, memory_plan, storage_bits
from ..graphs.passes.streams import assign_streams
from ..graphs.types import FixedType, NumType, Overflow, Rounding, parse_type

BLOCK = 128
_CTYPE = {8: "signed char", 16: "short", 32: "int", 64: "long long"}
_NPTYPE = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_RND = {Rounding.TRN: 0, Rounding.RND: 1, Rounding.RND_CONV: 2}


class GpuError(ValueError):
    """The GPU backend cannot do what was asked (user input or machine, exit 2)."""


@dataclass(frozen=True)
class Param:
    name: str  # C parameter name
    ctype: str
    const: bool  # lives in the weights blob (else in the arena)
    tensor: str  # tensor or constant name
    offset: int = 0  # byte offset (per sample for the arena)


@dataclass
class Kernel:
    kname: str
    node: str
    op: str
    per_sample: int  # threads per sample
    params: list[Param]
    source: str


@dataclass
class Program:
    source: str
    kernels: list[Kernel]
    plan: dict[str, Any]
    streams: dict[str, Any]
    weights: dict[str, dict[str, Any]]  # name -> {offset, bytes, bits|float}
    weights_blob: bytes
    inputs: list[str]
    outputs: list[str]
    is_float: dict[str, bool] = field(default_factory=dict)

    @property
    def source_sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


# -- helpers ----------------------------------------------------------------------------
def cll(v: int) -> str:
    """An int64 C literal."""
    v = int(v)
    if v == -(1 << 63):
        return "(-9223372036854775807LL - 1)"
    return f"{v}LL"


def cfloat(v: float) -> str:
    return f"{float(np.float32(v))!r}f".replace("inf", "INFINITY")


def _req(node: Node, frac_in: int, t: NumType) -> dict[str, Any]:
    if not isinstance(t, FixedType):
        raise GraphError(f"node {node.name} ({node.op}): expected a fixed-point output type")
    s = frac_in - t.frac
    if s < -62:
        raise GraphError(f"node {node.name} ({node.op}): shift by {-s} bits is over 62")
    return {"shift": s, **_tq(t)}


def _tq(t: FixedType) -> dict[str, Any]:
    return {"frac": t.frac, "rnd": _RND[t.rounding], "sat": int(t.overflow == Overflow.SAT),
            "qmin": cll(t.qmin), "qmax": cll(t.qmax), "width": t.width, "signed": int(t.signed),
            "narrow": int(t.narrow)}


class _Ctx:
    """What lowering functions need: the graph, C types of tensors, the constants to ship."""

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
        return "float" if p["float"] else _CTYPE[p["bits"]]

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
            v = v.astype(_NPTYPE[bits])
            ctype = _CTYPE[bits]
        base, k = key, 1
        while key in self.consts and not (self.consts[key].dtype == v.dtype
                                          and np.array_equal(self.consts[key], v)):
            k += 1
            key = f"{base}#{k}"
        self.consts[key] = v
        return Param(cname, ctype, True, key)

    def cval(self, name: str) -> np.ndarray:
        return np.asarray(self.g.constants[name])


def _common(ctx: _Ctx, node: Node, kname: str) -> dict[str, Any]:
    out = node.outputs[0]
    t = ctx.t(out)
    return {"kname": kname, "node": node.name, "op": node.op, "is_float": t.is_float,
            "yt": ctx.ctype(out)}


def _bcast(ctx: _Ctx, node: Node, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    try:
        full = np.broadcast_to(value, np.broadcast_shapes(value.shape, (1,) + shape))
    except ValueError:
        raise GraphError(f"node {node.name} ({node.op}): cannot broadcast a constant of shape "
                         f"{list(value.shape)} to {list(shape)}") from None
    if full.shape[1:] != shape or full.shape[0] != 1:
        raise GraphError(f"node {node.name} ({node.op}): a constant of shape "
                         f"{list(value.shape)} would change the shape {list(shape)}")
    return full.reshape(-1)


def _index_map(ctx: _Ctx, node: Node, src: str, out: str) -> np.ndarray | None:
    """Flat per-sample index of `src` for each element of `out` (None when identical)."""
    s, o = ctx.g.tensor(src).shape, ctx.g.tensor(out).shape
    if s == o:
        return None
    idx = np.arange(int(np.prod(s)), dtype=np.int64).reshape(s)
    return _bcast(ctx, node, idx, o)


# -- lowering functions: (ctx, node, kname) -> (template, context, params, per_sample) ------
Lowered = tuple[str, dict[str, Any], list[Param], int]


def lower_dense(ctx: _Ctx, node: Node, kname: str) -> Lowered:
    x, wn = node.inputs[0], node.inputs[1]
    bn = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    w = ctx.cval(wn)
    if w.ndim != 2 or ctx.g.tensor(x).size != w.shape[0]:
        raise GraphError(f"node {node.name} (Dense): weights {list(w.shape)} do not match the "
                         f"input {list(ctx.g.tensor(x).shape)}")
    k, n = int(w.shape[0]), int(w.shape[1])
    c = _common(ctx, node, kname)
    fl = c["is_float"]
    params = [ctx.act("x", x), ctx.const("w", wn, w, fl)]
    c.update(K=k, N=n, relu=bool(node.get("relu", False)), bias=bn is not None,
             xt=ctx.ctype(x), acc=str(node.get("acc")))
    if bn is not None:
        params.append(ctx.const("bias", bn, ctx.cval(bn).reshape(-1), fl))
    if not fl:
        tx, tw = ctx.t(x), ctx.t(wn)
        frac = tx.frac + tw.frac
        if bn is not None:
            tb = ctx.t(bn)
            bf = max(frac, tb.frac)
            c.update(acc_mul=cll(1 << (bf - frac)), bias_mul=cll(1 << (bf - tb.frac)))
            frac = bf
        c["r"] = _req(node, frac, ctx.t(node.outputs[0]))
    params.append(ctx.act("y", node.outputs[0]))
    return "dense.cu.j2", c, params, n


def lower_eltwise(ctx: _Ctx, node: Node, kname: str) -> Lowered:
    g, out = ctx.g, node.outputs[0]
    a = node.inputs[0]
    shape = g.tensor(out).shape
    size = g.tensor(out).size
    c = _common(ctx, node, kname)
    fl = c["is_float"]
    c.update(size=size, a_index=False, b_act=False, b_index=False, b_scalar=False,
             a_size=g.tensor(a).size, b_size=0)
    params = [ctx.act("a", a)]
    amap = _index_map(ctx, node, a, out) if node.op not in ("Reshape", "Transpose") else None
    if node.op == "Reshape":
        if g.tensor(a).size != size:
            raise GraphError(f"node {node.name} (Reshape): {g.tensor(a).size} -> {size} elements")
    if node.op == "Transpose":
        perm = tuple(node.get("perm"))
        ish = g.tensor(a).shape
        amap = np.transpose(np.arange(int(np.prod(ish)), dtype=np.int64).reshape(ish),
                            perm).reshape(-1)
    if amap is not None:
        c["a_index"] = True
    op = node.op
    if op in ("Add", "Sub", "Mul"):
        bname = node.inputs[1]
        if g.is_const(bname):
            bv = _bcast(ctx, node, ctx.cval(bname), shape)
            c["b_scalar"] = bool(np.all(bv == bv.reshape(-1)[0])) if bv.size else True
            params.append(ctx.const("c", bname, bv[:1] if c["b_scalar"] else bv, fl))
        else:
            if op == "Mul":
                raise GraphError(f"node {node.name} (Mul): only a product by a constant is "
                                 "supported")
            c["b_act"] = True
            c["b_size"] = g.tensor(bname).size
            params.append(ctx.act("bv", bname))
            bmap = _index_map(ctx, node, bname, out)
            if bmap is not None:
                c["b_index"] = True
                params.append(ctx.const("ib_map", f"{node.name}__ib_map", bmap, False))
        if not fl:
            ta, tb = ctx.t(a), ctx.t(bname)
            if op == "Mul":
                c["r"] = _req(node, ta.frac + tb.frac, ctx.t(out))
            else:
                f = max(ta.frac, tb.frac)
                c.update(a_mul=cll(1 << (f - ta.frac)), b_mul=cll(1 << (f - tb.frac)))
                c["r"] = _req(node, f, ctx.t(out))
    elif op == "Relu":
        if not fl:
            c["r"] = _req(node, ctx.t(a).frac, ctx.t(out))
    elif op == "LeakyRelu":
        if fl:
            c["alpha"] = cfloat(node.get("alpha"))
        else:
            an = node.inputs[1]
            ta = ctx.t(an)
            params.append(ctx.const("c", an, ctx.cval(an).reshape(-1)[:1], False))
            c["one_mul"] = cll(1 << ta.frac)
            c["r"] = _req(node, ctx.t(a).frac + ta.frac, ctx.t(out))
    elif op == "Lut":
        func = node.get("func")
        c["func"] = func
        if fl:
            if func not in ("sigmoid", "tanh", "exp", "selu", "reciprocal"):
                raise GraphError(f"node {node.name} (Lut): no float kernel for {func!r}")
            c["gamma"] = cfloat(node.get("gamma", 1.0507009873554805))
            c["sel_alpha"] = cfloat(node.get("alpha", 1.6732632423543772))
        else:
            tab = ctx.cval(node.inputs[1])
            params.append(ctx.const("c", node.inputs[1], tab, False))
            c.update(lo=cll(node.get("lo")), shift=int(node.get("shift")), tsize=cll(tab.shape[0]))
    elif op == "Requant":
        tin, tout = ctx.t(a), ctx.t(out)
        c["in_float"] = tin.is_float
        if fl:
            c["qt"] = _tq(parse_type(node.get("quant_type")))
        elif tin.is_float:
            c["qt"] = _tq(tout)
        else:
            c["r"] = _req(node, tin.frac, tout)
    elif op == "Bipolar":
        c["zero"] = "0.0f" if ctx.t(a).is_float else "0"
        c["scale"] = cfloat(node.get("scale", 1.0))
    elif op == "BatchNorm":
        if not fl:
            raise GraphError(f"node {node.name}: BatchNorm must be folded before fixed-point runs")
        ish = g.tensor(a).shape
        c.update(channels=int(ish[0]), inner=int(np.prod(ish[1:], dtype=np.int64)),
                 eps=cfloat(node.get("epsilon")))
        for cname, nm in zip(("c_scale", "c_bias", "c_mean", "c_var"), node.inputs[1:5],
                             strict=True):
            params.append(ctx.const(cname, nm, ctx.cval(nm).reshape(-1), True))
    if amap is not None:
        params.append(ctx.const("ia_map", f"{node.name}__ia_map", amap, False))
    params.append(ctx.act("y", out))
    return "eltwise.cu.j2", c, params, size


def lower_softmax(ctx: _Ctx, node: Node, kname: str) -> Lowered:
    x, out = node.inputs[0], node.outputs[0]
    shape = ctx.g.tensor(x).shape
    if len(shape) != 1:
        raise GraphError(f"node {node.name} (Softmax): only rank-1 inputs per sample are "
                         f"supported, got {list(shape)}")
    c = _common(ctx, node, kname)
    c.update(N=int(shape[0]), xt=ctx.ctype(x))
    params = [ctx.act("x", x)]
    if not c["is_float"]:
        et, rt = ctx.cval(node.inputs[1]), ctx.cval(node.inputs[2])
        params += [ctx.const("exp_t", node.inputs[1], et, False),
                   ctx.const("rec_t", node.inputs[2], rt, False)]
        e_type, r_type = parse_type(node.get("exp_type")), parse_type(node.get("recip_type"))
        c.update(exp_lo=cll(node.get("exp_lo")), exp_shift=int(node.get("exp_shift")),
                 exp_size=cll(et.shape[0]), rec_lo=cll(node.get("recip_lo")),
                 rec_shift=int(node.get("recip_shift")), rec_size=cll(rt.shape[0]),
                 r=_req(node, e_type.frac + r_type.frac, ctx.t(out)))
    params.append(ctx.act("y", out))
    return "softmax.cu.j2", c, params, 1


def lower_threshold(ctx: _Ctx, node: Node, kname: str) -> Lowered:
    x, out = node.inputs[0], node.outputs[0]
    if ctx.t(x).is_float:
        raise GraphError(f"node {node.name}: Threshold needs a fixed-point input")
    thr, steps, base = (ctx.cval(n).astype(np.int64) for n in node.inputs[1:4])
    size = ctx.g.tensor(x).size
    ch = int(thr.shape[0])
    if ch not in (1, size) or base.size not in (1, size):
        raise GraphError(f"node {node.name} (Threshold): {ch} channels for {size} values")
    c = _common(ctx, node, kname)
    c.update(size=size, steps=int(thr.shape[1]), channels=ch, base_scalar=base.size == 1)
    params = [ctx.act("x", x), ctx.const("thr", node.inputs[1], thr, False),
              ctx.const("step", node.inputs[2], steps, False),
              ctx.const("base", node.inputs[3], base.reshape(-1), False), ctx.act("y", out)]
    return "threshold.cu.j2", c, params, size


LOWERING: dict[str, Callable[[_Ctx, Node, str], Lowered]] = {
    "Dense": lower_dense, "Add": lower_eltwise, "Sub": lower_eltwise, "Mul": lower_eltwise,
    "Relu": lower_eltwise, "LeakyRelu": lower_eltwise, "Lut": lower_eltwise,
    "Requant": lower_eltwise, "Bipolar": lower_eltwise, "BatchNorm": lower_eltwise,
    "Reshape": lower_eltwise, "Transpose": lower_eltwise, "Softmax": lower_softmax,
    "Threshold": lower_threshold,
}


# -- templates --------------------------------------------------------------------------------
@cache
def env() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("modelcircuit", "templates/cuda"),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=False)


def render(template: str, **ctx: Any) -> str:
    return env().get_template(template).render(**ctx)


def _kname(i: int, node: Node) -> str:
    safe = "".join(ch if ch.isalnum() else "_" for ch in node.name)[:40]
    return f"mc_k{i}_{node.op.lower()}_{safe}"


def generate(g: Graph, graph_id: str = "", plan: dict[str, Any] | None = None,
             streams: dict[str, Any] | None = None) -> Program:
    """Lower a compiled graph to a Program. Deterministic: same graph, same text and bytes."""
    plan = plan or memory_plan(g)
    streams = streams or assign_streams(g)
    ctx = _Ctx(g, plan)
    kernels: list[Kernel] = []
    for i, node in enumerate(g.nodes):
        fn = LOWERING.get(node.op)
        if fn is None:
            raise GpuError(f"node {node.name}: op {node.op} has no GPU kernel; supported: "
                           f"{', '.join(sorted(LOWERING))}")
        kname = _kname(i, node)
        tpl, c, params, per = fn(ctx, node, kname)
        src = render(tpl, params=params, **c)
        kernels.append(Kernel(kname, node.name, node.op, per, params, src.strip()))
    weights, blob = pack_weights(ctx.consts)
    kernels = [_with_offsets(k, weights) for k in kernels]
    source = render("module.cu.j2", graph_name=g.name, graph_id=graph_id, block=BLOCK,
                    kernels=[k.source for k in kernels])
    return Program(source, kernels, plan, streams, weights, blob, list(g.inputs),
                   list(g.outputs), {k: v["float"] for k, v in plan["tensors"].items()})


def pack_weights(consts: dict[str, np.ndarray]) -> tuple[dict[str, dict[str, Any]], bytes]:
    table, parts, off = {}, [], 0
    for name in sorted(consts):
        v = consts[name]
        raw = v.tobytes()
        pad = (-len(raw)) % 16
        table[name] = {"offset": off, "bytes": len(raw), "dtype": v.dtype.str,
                       "shape": list(v.shape)}
        parts.append(raw + b"\0" * pad)
        off += len(raw) + pad
    return table, b"".join(parts)


def _with_offsets(k: Kernel, weights: dict[str, dict[str, Any]]) -> Kernel:
    ps = [Param(p.name, p.ctype, True, p.tensor, weights[p.tensor]["offset"]) if p.const else p
          for p in k.params]
    return Kernel(k.kname, k.node, k.op, k.per_sample, ps, k.source)


__all__ = ["ALIGN", "BLOCK", "GpuError", "Program", "generate", "render"]
