"""MatMul (two activations), Attention and LayerNorm kernels (templates/cuda/matmul.cu.j2,
attention.cu.j2, layernorm.cu.j2) in the CPU emulator, one node at a time on hand-typed
graphs: fixed point bit-exact with graphs/attention.py's integer functions (called here
directly, and through the golden model), float32 within a rounding bound computed from the
values; every kernel compiles for sm_90."""

from __future__ import annotations

from math import sqrt

import numpy as np
import pytest

from modelcircuit import gpu_backend
from modelcircuit.gpu_backend import emulator
from modelcircuit.graphs import attention as attn
from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs import reference
from modelcircuit.graphs.ir import Graph, GraphError, Node, Tensor
from modelcircuit.graphs.types import FLOAT32, parse_type
from tests.attention_bounds import attention_bound, layernorm_bound, matmul_bound


def graph(node: Node, acts: dict[str, tuple], out: tuple, consts: dict[str, tuple]) -> Graph:
    """One node: activations {name: (shape, type)}, output (name, shape, type), constants
    {name: (value, type or None)}."""
    tensors = {k: Tensor(k, tuple(s), t) for k, (s, t) in acts.items()}
    tensors[out[0]] = Tensor(out[0], tuple(out[1]), out[2])
    for k, (v, t) in consts.items():
        tensors[k] = Tensor(k, tuple(np.shape(v)), t)
    return Graph("unit", tuple(acts), (out[0],), (node,), tensors,
                 {k: np.asarray(v) for k, (v, _) in consts.items()})


def emulate(g: Graph, xs: list[np.ndarray]) -> np.ndarray:
    prog = gpu_backend.generate(g)
    shapes = {o: g.tensor(o).shape for o in g.outputs}
    return emulator.run(prog, g.name, xs, shapes)[g.outputs[0]]


def golden(g: Graph, xs: list[np.ndarray]) -> np.ndarray:
    return reference.execute(g, xs, inputs_are_codes=True)[g.outputs[0]]


def codes(rng, shape, t, scale=1.0):
    x = rng.normal(0.0, scale, shape)
    x[:1] *= 30.0  # one sample that saturates the type
    return fx.quantize(x, t)


# -- MatMul ------------------------------------------------------------------------------------
MATMUL = {  # a shape, b shape (per sample), a type, b type, output type
    "qk": ((8, 6), (6, 10), "fixed<16,6>", "fixed<16,6>", "fixed<16,6>"),
    "heads": ((2, 8, 4), (2, 4, 8), "fixed<8,3>", "fixed<12,4>", "fixed<12,5,RND>"),
    "bcast": ((1, 5, 4), (3, 4, 7), "fixed<16,6>", "fixed<8,2>", "fixed<10,4,RND_CONV,WRAP>"),
    "bcast_b": ((2, 3, 5, 4), (1, 3, 4, 2), "fixed<6,2>", "ufixed<8,3>", "fixed<16,8>"),
}


def matmul_graph(case: str, float_: bool = False) -> Graph:
    sa, sb, ta, tb, to = MATMUL[case]
    ta, tb, to = (FLOAT32 if float_ else parse_type(t) for t in (ta, tb, to))
    lead = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    return graph(Node.make("mm", "MatMul", ["a", "b"], ["y"]),
                 {"a": (sa, ta), "b": (sb, tb)}, ("y", lead + (sa[-2], sb[-1]), to), {})


@pytest.mark.parametrize("case", sorted(MATMUL))
def test_matmul_fixed_is_bit_exact(case) -> None:
    g = matmul_graph(case)
    ta, tb, to = (g.tensor(n).dtype for n in ("a", "b", "y"))
    rng = np.random.default_rng(len(case))
    a = codes(rng, (9,) + g.tensor("a").shape, ta)
    b = codes(rng, (9,) + g.tensor("b").shape, tb)
    want = fx.requantize(attn.exact_matmul(a, b), ta.frac + tb.frac, to)
    got = emulate(g, [a, b])
    assert np.array_equal(got, want)
    assert np.array_equal(golden(g, [a, b]), want)
    assert len(np.unique(want)) > 10  # not a constant output


@pytest.mark.parametrize("case", sorted(MATMUL))
def test_matmul_float_within_the_rounding_bound(case) -> None:
    g = matmul_graph(case, float_=True)
    rng = np.random.default_rng(3)
    a = rng.normal(0, 1, (9,) + g.tensor("a").shape).astype(np.float32)
    b = rng.normal(0, 1, (9,) + g.tensor("b").shape).astype(np.float32)
    got = emulate(g, [a, b]).astype(np.float64)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = matmul_bound(a.astype(np.float64), b.astype(np.float64), 0 * a, 0 * b)
    assert np.all(np.abs(got - want) <= 4 * bound)
    assert np.all(np.abs(golden(g, [a, b]) - want) <= 4 * bound)


def test_matmul_of_unequal_ranks_is_refused_naming_the_node() -> None:
    t = parse_type("fixed<8,3>")
    g = graph(Node.make("mm", "MatMul", ["a", "b"], ["y"]), {"a": ((2, 4, 3), t),
                                                           "b": ((3, 5), t)},
              ("y", (2, 4, 5), t), {})
    with pytest.raises(GraphError, match=r"^node mm \(MatMul\): .*\[2, 4, 3\] @ \[3, 5\]$"):
        gpu_backend.generate(g)


# -- Attention ---------------------------------------------------------------------------------
def softmax_tables(score_t, exp_t, rec_t):
    """Tables as the contract test builds them: exp over [-16, 0) of the scores' grid / 16,
    the reciprocal of the sum over 2048 entries."""
    lo, shift, size = -(16 << score_t.frac), max(0, score_t.frac - 6), None
    size = (-lo) >> shift
    idx = np.arange(size)
    exp_tab = fx.quantize(np.exp(((idx << shift) + lo) * 2.0 ** -score_t.frac), exp_t)
    rlo, rshift, rsize = 0, max(0, exp_t.frac - 6), 2048
    sums = (np.arange(rsize) << rshift) + rlo + (1 << max(rshift - 1, 0))
    rec_tab = fx.quantize(1.0 / np.maximum(sums * 2.0 ** -exp_t.frac, 1.0), rec_t)
    return (exp_tab, lo, shift), (rec_tab, rlo, rshift)


ATTN = {  # T, S, heads, dk, dv, mask kind, input type, score type, prob type, out type, scale
    "plain": (8, 8, 2, 4, 4, None, "fixed<16,6>", "fixed<16,6>", "ufixed<16,1>",
              "fixed<16,6>", 0.5),
    "causal": (8, 8, 2, 8, 8, "causal", "fixed<16,6>", "fixed<16,6>", "ufixed<16,1>",
               "fixed<16,6>", 1 / sqrt(8)),
    "additive": (6, 10, 4, 2, 3, "additive", "fixed<12,4,RND>", "fixed<14,5,RND>",
                 "ufixed<12,1,RND>", "fixed<12,4,RND>", 1 / sqrt(2)),
    "mixed_heads": (5, 5, 2, 3, 2, "per_head", "fixed<8,3>", "fixed<10,4,RND_CONV,WRAP>",
                    "ufixed<8,0>", "fixed<8,3,RND_CONV>", 0.75),
    "one_head": (16, 16, 1, 16, 16, None, "fixed<16,6>", "fixed<16,6>", "ufixed<16,1>",
                 "fixed<16,6>", 0.25),
}


def make_mask(kind, h, t, s):
    if kind is None:
        return None
    if kind == "causal":
        return np.where(np.triu(np.ones((t, s)), 1) > 0, -np.inf, 0.0)
    rng = np.random.default_rng(9)
    m = rng.normal(0, 1.5, (t, s))
    if kind == "additive":
        m[:, -2:] = -np.inf  # padding keys
        return m
    m = np.stack([m, -m])  # one mask per head, some keys removed in one head only
    m[0, :, 0] = -np.inf
    m[1, 2:, 3] = -np.inf
    return m[:h]


def attention_graph(case: str, float_: bool = False):
    t, s, h, dk, dv, mk, ti, ts, tp, to, scale = ATTN[case]
    ti, ts, tp, to = (parse_type(x) for x in (ti, ts, tp, to))
    mask = make_mask(mk, h, t, s)
    et, rt = parse_type("ufixed<18,1>"), parse_type("ufixed<18,1>")
    (etab, elo, esh), (rtab, rlo, rsh) = softmax_tables(ts, et, rt)
    fc = 12
    attrs = dict(heads=h, scale=scale, masked=mask is not None)
    if not float_:
        attrs.update(scale_code=round(scale * 2**fc), scale_frac=fc, score_type=str(ts),
                     prob_type=str(tp), exp_type=str(et), exp_lo=elo, exp_shift=esh,
                     recip_type=str(rt), recip_lo=rlo, recip_shift=rsh,
                     acc="fixed<40,20>", out_acc="fixed<40,20>")
    ins = ["q", "k", "v"] + (["mask"] if mask is not None else [])
    consts = {"mask": (mask, None)} if mask is not None else {}
    if not float_:
        ins += ["exp_t", "rec_t"]
        consts.update(exp_t=(etab, et), rec_t=(rtab, rt))
    tin = FLOAT32 if float_ else ti
    g = graph(Node.make("attn", "Attention", ins, ["y"], **attrs),
              {"q": ((t, h * dk), tin), "k": ((s, h * dk), tin), "v": ((s, h * dv), tin)},
              ("y", (t, h * dv), FLOAT32 if float_ else to), consts)
    return g, mask


@pytest.mark.parametrize("case", sorted(ATTN))
def test_attention_fixed_is_bit_exact(case) -> None:
    g, mask = attention_graph(case)
    a = g.nodes[0]
    at = {k: v for k, v in a.attrs}
    tq, to = g.tensor("q").dtype, g.tensor("y").dtype
    rng = np.random.default_rng(11)
    q, k, v = (codes(rng, (13,) + g.tensor(n).shape, tq) for n in ("q", "k", "v"))
    keep = attn.mask_keep(mask)
    st = parse_type(at["score_type"])
    mcodes = None if mask is None else fx.quantize(np.where(keep, mask, 0.0), st)
    et, rt = parse_type(at["exp_type"]), parse_type(at["recip_type"])
    want = attn.attention_codes(
        q, k, v, at["heads"], fq=tq.frac, fk=tq.frac, fv=tq.frac, scale_code=at["scale_code"],
        scale_frac=at["scale_frac"], score_type=st, mask_codes=mcodes, keep=keep,
        exp_t=g.constants["exp_t"], exp_lo=at["exp_lo"], exp_shift=at["exp_shift"],
        f_exp=et.frac, rec_t=g.constants["rec_t"], recip_lo=at["recip_lo"],
        recip_shift=at["recip_shift"], f_recip=rt.frac, prob_type=parse_type(at["prob_type"]),
        out_type=to)
    got = emulate(g, [q, k, v])
    assert np.array_equal(got, want)
    assert np.array_equal(golden(g, [q, k, v]), want)
    assert len(np.unique(want)) > 20
    rem = np.zeros((1, 1), bool) if mask is None else np.isneginf(mask)
    rem = rem.all(axis=0) if rem.ndim == 3 else rem
    if rem.any():  # a key removed for a query (in every head) never changes its output
        tt, ss = np.nonzero(rem)
        v2 = v.copy()
        v2[:, ss[0]] = -v2[:, ss[0]] // 3 + 1
        k2 = k.copy()
        k2[:, ss[0]] = k2[:, ss[0]] // 2 + 3
        got2 = emulate(g, [q, k2, v2])
        assert np.array_equal(got2[:, tt[0]], got[:, tt[0]])


def attention_f64(q, k, v, heads, scale, mask):
    """attention_float's definition in float64 (the exact value the bound is about)."""
    qh, kh, vh = (attn.split_heads(x.astype(np.float64), heads) for x in (q, k, v))
    s = np.matmul(qh, np.swapaxes(kh, -1, -2)) * scale + (0.0 if mask is None else mask)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return attn.merge_heads(np.matmul(e / e.sum(axis=-1, keepdims=True), vh))


@pytest.mark.parametrize("case", sorted(ATTN))
def test_attention_float_within_the_rounding_bound(case) -> None:
    g, mask = attention_graph(case, float_=True)
    rng = np.random.default_rng(12)
    q, k, v = (rng.normal(0, 1.5, (9,) + g.tensor(n).shape).astype(np.float32)
               for n in ("q", "k", "v"))
    h, scale = g.nodes[0].get("heads"), g.nodes[0].get("scale")
    got = emulate(g, [q, k, v]).astype(np.float64)
    gold = golden(g, [q, k, v]).astype(np.float64)
    want = attention_f64(q, k, v, h, scale, mask)
    bound = attention_bound(q, k, v, 0 * q, 0 * k, 0 * v, h, scale, mask)
    for x in (got, gold):
        assert np.all(np.abs(x - want) <= 4 * bound), np.max(np.abs(x - want) / bound)


# -- LayerNorm ---------------------------------------------------------------------------------
LN = {  # rows, D, input type, output type, rsqrt bits, rsqrt frac, g frac, b frac, epsilon
    "d16": (8, 16, "fixed<16,6>", "fixed<16,6>", 10, 16, 12, 12, 1e-5),
    "d32_rnd": (4, 32, "fixed<16,6>", "fixed<12,4,RND>", 12, 18, 10, 8, 1e-5),
    "d24_wrap": (5, 24, "fixed<8,3>", "fixed<8,3,RND_CONV,WRAP>", 8, 14, 8, 6, 1e-3),
    "d6": (3, 6, "fixed<12,2>", "fixed<16,6>", 6, 12, 8, 8, 0.1),
}


def layernorm_graph(case: str, float_: bool = False):
    rows, d, ti, to, bits, fr, fg, fb, eps = LN[case]
    ti, to = parse_type(ti), parse_type(to)
    rng = np.random.default_rng(d)
    gamma, beta = rng.uniform(0.5, 1.5, d), rng.uniform(-0.5, 0.5, d)
    consts = {"gamma": (gamma, FLOAT32), "beta": (beta, FLOAT32)}
    ins = ["x", "gamma", "beta"]
    attrs = dict(epsilon=eps)
    if not float_:
        tg, tb = parse_type(f"fixed<24,{24 - fg}>"), parse_type(f"fixed<20,{20 - fb}>")
        consts.update(g=(fx.quantize(gamma * sqrt(d), tg), tg), b=(fx.quantize(beta, tb), tb),
                      rs=(attn.rsqrt_table(bits, fr), None))
        ins += ["g", "b", "rs"]
        attrs.update(eps_code=attn.layernorm_eps_code(eps, d, ti.frac), rsqrt_bits=bits,
                     rsqrt_frac=fr, acc="fixed<60,30>")
    tin = FLOAT32 if float_ else ti
    return graph(Node.make("ln", "LayerNorm", ins, ["y"], **attrs), {"x": ((rows, d), tin)},
                 ("y", (rows, d), FLOAT32 if float_ else to), consts)


@pytest.mark.parametrize("case", sorted(LN))
def test_layernorm_fixed_is_bit_exact(case) -> None:
    g = layernorm_graph(case)
    a = g.nodes[0]
    tx, to = g.tensor("x").dtype, g.tensor("y").dtype
    rng = np.random.default_rng(21)
    x = codes(rng, (17,) + g.tensor("x").shape, tx)
    x[1, 0] = 0  # a row of zeros (V = E: the table's small entries) and a constant row
    x[1, 1] = 5
    x[2] = tx.qmax  # all at the top: d = 0 everywhere
    x[3, :, ::2] = tx.qmin  # the widest spread the type allows
    want = attn.layernorm_codes(x, g.constants["g"], g.tensor("g").dtype.frac,
                                g.constants["b"], g.tensor("b").dtype.frac, a.get("eps_code"),
                                a.get("rsqrt_bits"), a.get("rsqrt_frac"), g.constants["rs"],
                                to)
    got = emulate(g, [x])
    assert np.array_equal(got, want)
    assert np.array_equal(golden(g, [x]), want)
    assert len(np.unique(want)) > 20


@pytest.mark.parametrize("case", sorted(LN))
def test_layernorm_float_within_the_rounding_bound(case) -> None:
    g = layernorm_graph(case, float_=True)
    rng = np.random.default_rng(22)
    x = (rng.normal(0, 2, (9,) + g.tensor("x").shape) + rng.normal(0, 3, (9, 1, 1))
         ).astype(np.float32)
    gamma, beta, eps = g.constants["gamma"], g.constants["beta"], g.nodes[0].get("epsilon")
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    want = want * gamma + beta
    bound = layernorm_bound(x, np.zeros(x.shape), gamma, beta, eps)
    for got in (emulate(g, [x]), golden(g, [x])):
        r = np.abs(got.astype(np.float64) - want) / bound
        assert np.all(r <= 4), r.max()


# -- every kernel compiles for sm_90 -----------------------------------------------------------
@pytest.mark.parametrize("compiler", ["nvcc", "cupy-nvrtc", "libnvrtc"])
def test_attention_kernels_compile_for_sm90(compiler) -> None:
    import re

    from modelcircuit.gpu_backend import nvrtc

    if compiler not in nvrtc.available():
        pytest.skip(f"no {compiler} here")
    graphs = ([matmul_graph(c, f) for c in MATMUL for f in (False, True)]
              + [attention_graph(c, f)[0] for c in ATTN for f in (False, True)]
              + [layernorm_graph(c, f) for c in LN for f in (False, True)])
    for g in graphs:
        prog = gpu_backend.generate(g)
        ptx = gpu_backend.compile_ptx(prog.source, arch="sm_90", backend=compiler).decode()
        assert set(re.findall(r"\.entry\s+(\w+)", ptx)) == {k.kname for k in prog.kernels}
        assert "__syncthreads" not in prog.source and "__shared__" not in prog.source
