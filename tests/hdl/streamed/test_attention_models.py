"""Transformer encoders as streamed circuits (hdl/streamed/attention.py, hdl/units/layernorm.py):
builder encoders (tests/graphs/test_attention_types.py `encoder`) bit-exact against the golden
model in Amaranth's simulator under input gaps and output backpressure; the II per token and
the latency per sequence equal to the compile-time report; `--reuse auto` planning them with
the attention circuits counted; refusals naming the node; and `verify --backends golden,rtl`
under Verilator (one small case in the default suite, bigger ones `slow`), where a corrupted
expected bit fails."""

from __future__ import annotations

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.graphs import reference
from modelcircuit.hdl import build_top, plan_top
from modelcircuit.hdl.errors import HdlError
from modelcircuit.hdl.plan.circuit import resolve_plan
from modelcircuit.hdl.streamed.attention import row_cycles, sequence_cycles
from modelcircuit.sim import rtl
from modelcircuit.sim.amaranth_sim import simulate
from tests.graphs.test_attention_types import encoder

pytestmark = pytest.mark.xdist_group("sim")

SMALL = dict(tokens=4, d=8, heads=2, ffn=16, classes=3)
CASES = {
    "small": SMALL,
    "causal_gelu_embed": dict(tokens=5, d=8, heads=2, ffn=12, classes=2, features=3,
                              act="gelu", causal=True),
    "two_layers_4_heads": dict(tokens=4, d=8, heads=4, ffn=8, classes=3, layers=2, seed=3),
}


def _compiled(kw: dict, precision: str = "fixed<16,6>", **opts):
    return mc.compile(encoder(**kw), precision=precision, **opts)


def _golden(c, n: int, seed: int):
    shp = c.graph.tensor(c.graph.inputs[0]).shape
    x = np.random.default_rng(seed).normal(size=(n, *shp)).astype(np.float32)
    codes = reference.quantize_inputs(c.graph, [x])[0]
    return x, codes, reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]


def _sim(c, plan, codes, **kw):
    top, info = build_top(c, plan)
    res = simulate(top, info, codes.reshape(-1, codes.shape[-1]), n_out=codes.shape[0], **kw)
    return res, info


@pytest.mark.parametrize("case", sorted(CASES))
def test_encoder_bit_exact_with_gaps_and_backpressure(case: str) -> None:
    c = _compiled(CASES[case])
    _, codes, want = _golden(c, 3, 1)
    res, _ = _sim(c, 1, codes, gap=0.3, backpressure=0.4, seed=2)
    assert res.outputs.shape[0] == want.shape[0], "outputs missing"
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)


@pytest.mark.parametrize("case", ["small", "causal_gelu_embed"])
def test_ii_and_sequence_latency_as_compiled(case: str) -> None:
    """Without stalls every input token is accepted `ii` cycles after the one before and each
    sequence's output comes `latency` cycles after its first token: the compile-time figures,
    which the attention layer's own report explains (its load and T rows of 3S + 8)."""
    kw = CASES[case]
    c = _compiled(kw)
    _, codes, want = _golden(c, 3, 2)
    res, info = _sim(c, 1, codes)
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)
    t = kw["tokens"]
    att = [u for u in info["layers"] if u["op"] == "Attention"][0]
    assert att["row_cycles"] == row_cycles(t) == 3 * t + 8
    assert att["row_interval"] == 2 * t + 5
    assert att["sequence_cycles"] == sequence_cycles(t, t) == t + (t - 1) * (2 * t + 5) + (
        3 * t + 8)
    assert info["busiest"] == att["instance"]
    assert info["ii"] == -(-att["sequence_cycles"] // t)
    assert info["frame_cycles"] == info["ii"] * t
    assert set(np.diff(res.accepted).tolist()) == {info["ii"]}
    for s in range(codes.shape[0]):
        assert res.delivered[s] - res.accepted[s * t] == info["latency"], s


def test_reuse_auto_counts_the_attention_circuits() -> None:
    """--reuse auto on ecp5-85k: the fit block carries the Attention and LayerNorm costs, the
    token-wise Dense layers fold within the frame time (T x R cycles; R 32 since issue 25:
    at R 16, within the attention's sequence time, the Dense lanes the DSP blocks do not
    take, 70 of them, make it 59.6k LUT estimated, 44,612 LUT4 + 4,692 CCU2C in synth_ecp5,
    over the 60 % auto keeps to), the LayerNorms fold within the token time the design takes
    anyway (the Dense layers' R 32, more than the attention's row time), and the planned
    circuit stays bit-exact."""
    from modelcircuit.hdl.flow.fit import plan_circuit

    kw = dict(tokens=8, d=16, heads=2, ffn=32, classes=5)
    c = _compiled(kw, profile="ecp5-85k", reuse="auto")
    plan = plan_circuit(c, "auto")
    names = [lay["node"] for lay in plan.fit["layers"]]
    assert "l0_attn (attention)" in names and "l0_ln1 (layernorm)" in names
    info = plan_top(c, plan)
    seq = sequence_cycles(8, 8)
    assert info["frame_cycles"] == 8 * 32 > seq
    for n in ("l0_q", "l0_k", "l0_v", "l0_ff1", "l0_ff2"):
        assert 1 < plan.reuse[n] and 8 * plan.reuse[n] <= info["frame_cycles"], (n, plan.reuse[n])
    ln = [u for u in info["layers"] if u["op"] == "LayerNorm"]
    assert all(seq // 8 < u["ii"] <= 32 and u["multipliers"] < 3 * 16 for u in ln), ln
    est = plan.fit["estimate"]
    att = [lay for lay in plan.fit["layers"] if lay["node"] == "l0_attn (attention)"][0]
    # q.k, the scale, e * r, p * v per head (hdl/streamed/attention.fixed_products)
    assert att["multipliers"] == 2 * (8 + 1 + 1 + 8) and att["bram"] >= 3
    assert att["dsp_blocks"] == 2 * (8 + 2 + 1 + 8)  # the 35 x 17 scale: 2 blocks
    assert est["multipliers"] >= sum(lay["multipliers"] for lay in plan.fit["layers"]
                                     if "(" in lay["node"])
    _, codes, want = _golden(c, 2, 3)
    res, _ = _sim(c, plan, codes, gap=0.2, backpressure=0.2, seed=1)
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)


def test_matmul_of_two_activations_is_refused_on_a_stream() -> None:
    b = GraphBuilder("mm")
    x = b.input("x", (4, 6))
    q = b.dense(x, np.eye(6), name="proj")
    s = b.matmul(q, b.transpose(x, (1, 0), name="xt"), name="scores")
    b.output(b.mean_tokens(s, name="pool"))
    c = mc.compile(b.build(), precision="fixed<16,6>")
    with pytest.raises(HdlError, match=r"node (xt|scores) \((Transpose|MatMul)\)"):
        plan_top(c, resolve_plan(c, 1))


# -- Verilator: verify --backends golden,rtl ---------------------------------------------
@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("attncache")


def _verify(c, x) -> dict:
    from io import StringIO

    from modelcircuit.sim.verify import verify

    out = StringIO()
    code, rep = verify(c, x, ["golden", "rtl"], out=out)
    assert code == 0, out.getvalue()
    n = rep["notes"]["rtl"]
    assert n["latency"] == n["latency_expected"] and n["ii"] == n["ii_expected"], n
    assert all(p["bit_exact"] for p in rep["pairs"])
    return rep


@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
def test_verify_small_encoder(cache, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default suite's one Verilator build (shared with the corrupted-bit test)."""
    monkeypatch.setenv("MODELCIRCUIT_SIM_CACHE", str(cache))
    c = _compiled(SMALL)
    x, _, _ = _golden(c, 4, 4)
    rep = _verify(c, x)
    info = plan_top(c, resolve_plan(c))
    assert rep["notes"]["rtl"]["ii"] == info["ii"]
    assert rep["notes"]["rtl"]["latency"] == info["latency"]


@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
def test_corrupted_expected_bit_fails(cache) -> None:
    c = _compiled(SMALL)
    _, codes, want = _golden(c, 3, 6)
    r = rtl.execute(c, codes, cache_dir=cache, seed=1)
    assert r["ok"] and r["checks"]["bit_exact"], r["checks"]
    exp = want.copy()
    exp[1, 2] ^= 1 << 4
    r = rtl.execute(c, codes, expected=exp, cache_dir=cache)
    assert not r["ok"] and not r["checks"]["bit_exact"]
    assert r["checks"]["first_mismatch"]["vector"] == 1
    assert r["checks"]["first_mismatch"]["element"] == 2


@pytest.mark.slow
@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
@pytest.mark.parametrize("kw,reuse", [
    (dict(tokens=8, d=16, heads=2, ffn=32, classes=5), "auto"),
    (dict(tokens=8, d=16, heads=4, ffn=32, classes=5, layers=2, act="gelu", causal=True), 4),
])
def test_verify_encoders(kw: dict, reuse, cache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELCIRCUIT_SIM_CACHE", str(cache))
    opts = {"profile": "ecp5-85k"} if reuse == "auto" else {}
    c = _compiled(kw, reuse=reuse, **opts)
    x, _, _ = _golden(c, 3, 5)
    _verify(c, x)


def test_layernorm_of_a_vector_in_the_whole_vector_model() -> None:
    """LayerNorm of a (D,) vector: hdl/vector/lower.py's entry (the parallel unit, II 1)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("ln_vec")
    x = b.input("x", (12,))
    h = b.dense(x, rng.normal(0, 0.3, (12, 10)), rng.normal(0, 0.1, 10), name="d1")
    h = b.layer_norm(h, rng.uniform(0.8, 1.2, 10), rng.normal(0, 0.1, 10), name="ln")
    b.output(b.dense(h, rng.normal(0, 0.3, (10, 4)), name="d2"))
    c = mc.compile(b.build(), precision="fixed<16,6>")
    xs = rng.normal(size=(6, 12)).astype(np.float32)
    codes = reference.quantize_inputs(c.graph, [xs])[0]
    want = reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]
    top, info = build_top(c, 1)
    assert not info.get("streamed") and info["ii"] == 1
    res = simulate(top, info, codes, gap=0.3, backpressure=0.3, seed=4)
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)
