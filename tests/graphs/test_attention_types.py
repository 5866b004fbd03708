"""The attention types pass (graphs/passes/attention.py) on builder-made encoders: the float32
golden model against a float64 numpy encoder, and fixed point against float within a bound
that grows with what the types round. `encoder(...)` is the small encoder other tests import.
"""

from __future__ import annotations

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.graphs import attention as attn
from modelcircuit.graphs import reference
from modelcircuit.graphs.ir import GraphError
from modelcircuit.graphs.ops import AttentionAttrs, LayerNormAttrs, Op
from modelcircuit.graphs.passes.attention import scale_code


def encoder(tokens: int = 8, d: int = 16, heads: int = 2, ffn: int = 32, classes: int = 5,
            features: int | None = None, act: str = "relu", causal: bool = False,
            layers: int = 1, seed: int = 0):
    """A small transformer encoder built with the graph API: (tokens, features) in ->
    [Dense x3 (Q, K, V, token-wise) -> Attention -> Dense -> residual Add -> LayerNorm -> FFN
    (Dense, Relu or Gelu as a table, Dense) -> Add -> LayerNorm] x layers -> mean over tokens
    -> Dense classifier. Weights are seeded; returns the Graph."""
    rng = np.random.default_rng(seed)
    f = features or d
    b = GraphBuilder(f"encoder_t{tokens}_d{d}_h{heads}_{act}{'_causal' if causal else ''}")
    x = b.input("x", (tokens, f))
    h = x if f == d else b.dense(x, rng.normal(0, 1 / np.sqrt(f), (f, d)), rng.normal(0, 0.1, d),
                                 name="embed")
    mask = None
    if causal:
        mask = np.triu(np.full((tokens, tokens), -np.inf), 1)
    for i in range(layers):
        def w(n_in, n_out):
            return rng.normal(0, 1 / np.sqrt(n_in), (n_in, n_out))
        q = b.dense(h, w(d, d), rng.normal(0, 0.1, d), name=f"l{i}_q")
        k = b.dense(h, w(d, d), rng.normal(0, 0.1, d), name=f"l{i}_k")
        v = b.dense(h, w(d, d), rng.normal(0, 0.1, d), name=f"l{i}_v")
        a = b.attention(q, k, v, heads, mask=mask, name=f"l{i}_attn")
        o = b.dense(a, w(d, d), rng.normal(0, 0.1, d), name=f"l{i}_out")
        r = b.add(h, o, name=f"l{i}_res1")
        n1 = b.layer_norm(r, rng.uniform(0.8, 1.2, d), rng.normal(0, 0.1, d), name=f"l{i}_ln1")
        f1 = b.dense(n1, w(d, ffn), rng.normal(0, 0.1, ffn), name=f"l{i}_ff1")
        f1 = b.relu(f1, name=f"l{i}_act") if act == "relu" else b.activation(f1, act, name=f"l{i}_act")
        f2 = b.dense(f1, w(ffn, d), rng.normal(0, 0.1, d), name=f"l{i}_ff2")
        r2 = b.add(n1, f2, name=f"l{i}_res2")
        h = b.layer_norm(r2, rng.uniform(0.8, 1.2, d), rng.normal(0, 0.1, d), name=f"l{i}_ln2")
    m = b.mean_tokens(h, name="pool")
    y = b.dense(m, w(d, classes) if layers else rng.normal(0, 0.3, (d, classes)),
                rng.normal(0, 0.1, classes), name="classifier")
    b.output(y)
    return b.build()


def _np_encoder(g, x: np.ndarray) -> np.ndarray:
    """The same encoder in float64 numpy, from the graph's constants (an independent
    interpreter of the builder's graph: only Dense/Attention/LayerNorm/Add/Relu/Lut/mean)."""
    env = {g.inputs[0]: x.astype(np.float64)}
    c = g.constants
    for n in g.nodes:
        ins = [env.get(i) for i in n.inputs]
        if n.op == Op.DENSE:
            y = ins[0] @ c[n.inputs[1]] + (c[n.inputs[2]] if len(n.inputs) > 2 else 0)
        elif n.op == Op.ATTENTION:
            a = AttentionAttrs.of(n)
            q, k, v = (attn.split_heads(t, a.heads) for t in ins[:3])
            s = q @ np.swapaxes(k, -1, -2) * a.scale
            if a.masked:
                s = s + c[n.inputs[3]]
            e = np.exp(s - s.max(-1, keepdims=True))
            y = attn.merge_heads((e / e.sum(-1, keepdims=True)) @ v)
        elif n.op == Op.LAYER_NORM:
            z = ins[0] - ins[0].mean(-1, keepdims=True)
            y = z / np.sqrt((z * z).mean(-1, keepdims=True) + LayerNormAttrs.of(n).epsilon)
            y = y * c[n.inputs[1]] + c[n.inputs[2]]
        elif n.op == Op.ADD:
            y = ins[0] + ins[1]
        elif n.op == Op.RELU:
            y = np.maximum(ins[0], 0)
        elif n.op == Op.LUT:
            y = reference.FLOAT_FUNCS[dict(n.attrs)["func"]](ins[0], n)
        elif n.op == Op.AVG_POOL:
            y = ins[0].mean(axis=-2, keepdims=True)
        elif n.op == Op.RESHAPE:
            y = ins[0].reshape((x.shape[0],) + tuple(dict(n.attrs)["shape"]))
        else:
            raise AssertionError(n.op)
        env[n.outputs[0]] = y
    return env[g.outputs[0]]


def _inputs(g, n=64, seed=1):
    shp = g.tensor(g.inputs[0]).shape
    return np.random.default_rng(seed).normal(0, 1, (n,) + shp).astype(np.float32)


@pytest.mark.parametrize("kw", [{}, {"act": "gelu", "causal": True}, {"heads": 4, "d": 32,
                                                                       "tokens": 16, "layers": 2}])
def test_float32_golden_is_the_encoder(kw):
    g = encoder(**kw)
    x = _inputs(g)
    got = mc.run(mc.compile(g, precision="float32"), x, backend="golden")
    ref = _np_encoder(g, x)
    # float32 rounding: a few ulp per op on values of the size of the activations, times the
    # depth (every op of the graph), scaled to the logits' size
    depth = len(g.nodes)
    bound = depth * 16 * np.finfo(np.float32).eps * (1 + np.abs(ref).max())
    assert np.abs(got - ref).max() <= bound, (np.abs(got - ref).max(), bound)


@pytest.mark.parametrize("kw", [{}, {"act": "gelu", "causal": True}, {"act": "gelu_tanh"},
                                {"heads": 4, "d": 32, "tokens": 16, "layers": 2}])
def test_fixed_16_6_runs_and_follows_float(kw):
    g = encoder(**kw)
    cg = mc.compile(g, precision="fixed<16,6>")
    ops = {n.op for n in cg.graph.nodes}
    assert {Op.ATTENTION, Op.LAYER_NORM} <= ops
    x = _inputs(g)
    got = mc.run(cg, x, backend="golden")
    again = mc.run(cg, x, backend="golden")
    assert np.array_equal(got, again)
    ref = _np_encoder(g, x)
    err = np.abs(got - ref)
    # fixed<16,6> keeps 10 fractional bits per tensor: each rounding <= 2**-10 (TRN) times
    # the gain of what follows; the Gelu table's step is 2**-4 of x (10 index bits over 16
    # bits of codes); one lsb per node, scaled by the size of the logits.
    step = 2.0**-4 if kw.get("act", "relu") != "relu" else 2.0**-10
    bound = (len(g.nodes) * 2.0**-10 + step) * (1 + np.abs(ref).max())
    assert err.max() <= bound, (err.max(), bound)
    assert (got.argmax(-1) == ref.argmax(-1)).mean() >= 0.9


def test_types_of_the_internals():
    g = encoder()
    cg = mc.compile(g, precision="fixed<16,6>")
    att = next(n for n in cg.graph.nodes if n.op == Op.ATTENTION)
    a = AttentionAttrs.of(att)
    # q, k at fixed<16,6>: products at 20 fractional bits, sums of dk = 8 of them
    assert a.acc.frac == 20 and a.acc.width >= 2 * 16 + 3
    # 1/sqrt(8) is not a power of two: 16 significant bits
    assert a.scale_code == scale_code(1 / np.sqrt(8))[0] and 2**15 <= a.scale_code < 2**16
    assert abs(a.scale_code * 2.0**-a.scale_frac - 1 / np.sqrt(8)) <= 2.0**-a.scale_frac
    assert str(a.prob_type) == "ufixed<16,1>"
    assert len(att.inputs) == 5  # q, k, v, exp_table, recip_table
    ln = next(n for n in cg.graph.nodes if n.op == Op.LAYER_NORM)
    la = LayerNormAttrs.of(ln)
    assert la.rsqrt_bits == 12 and len(ln.inputs) == 6
    assert cg.graph.constants[ln.inputs[5]].shape == (2**12,)


def test_scale_code_of_a_power_of_two_is_exact():
    assert scale_code(0.25) == (1, 2)
    assert scale_code(1.0) == (1, 0)
    c, f = scale_code(0.3)
    assert abs(c * 2.0**-f - 0.3) <= 2.0 ** -(f + 1)


def test_a_mask_without_any_key_in_a_row_is_refused():
    b = GraphBuilder("m")
    x = b.input("x", (4, 8))
    mask = np.zeros((4, 4))
    mask[2, :] = -np.inf
    y = b.attention(x, x, x, 2, mask=mask, name="att")
    b.output(y)
    with pytest.raises(GraphError, match="node att .*every key"):
        mc.compile(b.build(), precision="fixed<16,6>")


def test_matmul_of_two_activations_is_exact_then_rounded_once():
    """a @ b^T of two token-wise projections: the exact sum of code products, requantized
    once (fixed<16,6>, TRN: the result is within one lsb below the exact product of the
    quantized operands), and float32 golden equals numpy."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("mm")
    x = b.input("x", (6, 8))
    a = b.dense(x, rng.normal(0, 0.3, (8, 8)), name="pa")
    k = b.dense(x, rng.normal(0, 0.3, (8, 8)), name="pk")
    kt = b.transpose(k, (1, 0))
    y = b.matmul(a, kt, name="scores")
    b.output(y)
    g = b.build()
    xs = rng.normal(0, 1, (32, 6, 8)).astype(np.float32)
    c = mc.compile(g, precision="fixed<16,6>")
    env = mc.run(c, xs, trace=True)
    qa, qk = env["pa"].astype(np.float64), env["pk"].astype(np.float64)
    exact = qa @ np.swapaxes(qk, -1, -2)
    got = np.asarray(mc.run(c, xs), dtype=np.float64)
    assert np.all(got <= exact + 1e-12) and np.all(exact - got < 2.0**-10 + 1e-12)
    f = mc.compile(g, precision="float32")
    ef = mc.run(f, xs, trace=True)
    want = ef["pa"].astype(np.float64) @ np.swapaxes(ef["pk"].astype(np.float64), -1, -2)
    assert np.abs(np.asarray(mc.run(f, xs), np.float64) - want).max() <= 8 * 2.0**-23 * (
        np.abs(ef["pa"]) @ np.swapaxes(np.abs(ef["pk"]), -1, -2)).max()
