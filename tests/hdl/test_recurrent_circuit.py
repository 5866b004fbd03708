"""The recurrent circuit (hdl/streamed/recurrent.py): LSTM / GRU models streamed one time
step per handshake, bit-exact against the golden model (graphs/reference.py, the contract of
graphs/recurrent.py) in Amaranth's simulator with input gaps and output backpressure; the
simulated II per step and the sequence latency equal to the compile-time report; the reuse
plan over [W; R]; and `verify --backends golden,rtl,gpu-emu` under Verilator (one small case
in the default suite, the others `slow`), where a corrupted expected bit fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import modelcircuit as mc
from modelcircuit.graphs import reference
from modelcircuit.hdl import build_top, plan_top
from modelcircuit.hdl.errors import HdlError
from modelcircuit.hdl.plan.circuit import resolve_plan
from modelcircuit.hdl.plan.size import dense_weights
from modelcircuit.sim import rtl
from modelcircuit.sim.amaranth_sim import simulate
from tests.graphs.rnn_models import rnn_model, stacked_h_n_model

pytestmark = pytest.mark.xdist_group("sim")

CASES = {
    "lstm": dict(op="LSTM", t=4, f=3, h=3),
    "lstm_states_yc": dict(op="LSTM", t=4, f=2, h=3, h0=True, c0=True, output="Y_c"),
    "lstm_seq_head": dict(op="LSTM", t=4, f=3, h=3, head="seq"),
    "lstm_clip_seq_out": dict(op="LSTM", t=3, f=2, h=2, head="none", wrap="seq", clip=0.6,
                              scale=1.5),
    "gru_lbr0": dict(op="GRU", lbr=0, t=4, f=3, h=3),
    "gru_lbr1_clip_yh": dict(op="GRU", lbr=1, t=4, f=3, h=3, clip=0.7, output="Y_h", h0=True),
}


def _compiled(kw: dict, tmp_path, precision: str = "fixed<16,6>", **opts):
    p = tmp_path / "m.onnx"
    onnx.save(rnn_model(**kw), p)
    return mc.compile(mc.load_onnx(p), precision=precision, **opts)


def _x(kw: dict, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, kw["t"], kw["f"])).astype(np.float32)


def _golden(c, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    codes = reference.quantize_inputs(c.graph, [x])[0]
    return codes, reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]


def _run(c, reuse: int, codes: np.ndarray, want: np.ndarray, **kw):
    top, info = build_top(c, reuse)
    n, t = codes.shape[:2]
    per_seq = int(np.prod(want.shape[1:-1])) if want.ndim > 2 else 1
    res = simulate(top, info, codes.reshape(n * t, -1), n_out=n * per_seq, **kw)
    return res, info, per_seq


@pytest.mark.parametrize("reuse", [1, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bit_exact_with_gaps_and_backpressure(case: str, reuse: int, tmp_path) -> None:
    kw = CASES[case]
    c = _compiled(kw, tmp_path)
    codes, want = _golden(c, _x(kw, 3, 1))
    res, info, _ = _run(c, reuse, codes, want, gap=0.3, backpressure=0.4, seed=reuse)
    assert res.outputs.shape[0] == want.size // want.shape[-1], "outputs missing"
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)


@pytest.mark.parametrize("case", ["lstm", "gru_lbr0", "gru_lbr1_clip_yh", "lstm_seq_head"])
def test_step_ii_and_sequence_latency_as_compiled(case: str, tmp_path) -> None:
    """Without stalls the input is accepted once every step II (the compile-time figure the
    recurrent layer reports) and each sequence's last output comes `latency` cycles after its
    first input; the II grows with the reuse factor (the gate MACs are folded)."""
    kw = CASES[case]
    c = _compiled(kw, tmp_path)
    codes, want = _golden(c, _x(kw, 3, 2))
    iis = {}
    for reuse in (1, 4):
        res, info, per_seq = _run(c, reuse, codes, want)
        np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)
        rnn = [u for u in info["layers"] if u["op"] in ("LSTM", "GRU")][0]
        assert rnn["step_ii"] == info["ii"]
        assert rnn["sequence_cycles"] == kw["t"] * rnn["step_ii"]
        steps = np.diff(res.accepted)
        assert set(steps.tolist()) == {info["ii"]}, steps
        t = kw["t"]
        for s in range(codes.shape[0]):
            first_in = res.accepted[s * t]
            last_out = res.delivered[(s + 1) * per_seq - 1]
            assert last_out - first_in == info["latency"], (s, info["latency"])
        iis[reuse] = info["ii"]
    assert iis[4] > iis[1]


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_stacked_layers_h_n_is_built(op: str, tmp_path) -> None:
    """Two stacked layers read as h_n[-1] (a Concat of the layers' Y_h, then a Gather of the
    last): the circuit is the two layers and the head, bit-exact with gaps and backpressure
    (before passes/concat_parts.py: 'op Concat has no HDL lowering')."""
    p = tmp_path / "m.onnx"
    onnx.save(stacked_h_n_model(op), p)
    c = mc.compile(mc.load_onnx(p), precision="fixed<16,6>")
    kw = {"t": 6, "f": 3}
    codes, want = _golden(c, _x(kw, 3, 7))
    res, _, _ = _run(c, 1, codes, want, gap=0.3, backpressure=0.4, seed=2)
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)


def test_states_reset_between_sequences(tmp_path) -> None:
    """The same sequence twice in a row gives the same outputs (h0 / c0 restored after the
    last step), and a different first sequence does not change the second's."""
    kw = CASES["lstm_states_yc"]
    c = _compiled(kw, tmp_path)
    x = _x(kw, 2, 3)
    x[1] = x[0]
    codes, want = _golden(c, x)
    res, _, _ = _run(c, 1, codes, want)
    got = res.outputs.reshape(want.shape)
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got, want)


def test_reuse_plan_covers_the_recurrent_weights(tmp_path) -> None:
    kw = CASES["gru_lbr0"]
    c = _compiled(kw, tmp_path)
    w = dense_weights(c.graph)
    assert w["rnn"].shape == (kw["f"] + kw["h"], 3 * kw["h"])
    plan = resolve_plan(c, {"rnn": 5})
    assert plan.reuse["rnn"] == 5
    info = plan_top(c, plan)
    assert [u for u in info["layers"] if u["op"] == "GRU"][0]["reuse"] == 5
    with pytest.raises(HdlError, match="larger than its fan-in"):
        resolve_plan(c, {"rnn": w["rnn"].size + 1})


def test_refused_gather_of_steps_reversed(tmp_path) -> None:
    """A Gather of a sequence stream picks one step (SelectUnit) or increasing steps (a crop
    of the time axis, PickUnit); steps in reverse order would need the whole sequence
    buffered: refused, naming the node."""
    import dataclasses

    from modelcircuit.graphs.ops import Op

    kw = CASES["lstm"]
    c = _compiled(kw, tmp_path)
    g = c.graph
    nodes = []
    for n in g.nodes:
        if n.op == Op.GATHER:
            n = n.with_attrs(indices=(1, 0), indices_shape=(2,))
        nodes.append(n)
    bad = dataclasses.replace(c, graph=g.replace(nodes=tuple(nodes)))
    with pytest.raises(HdlError, match="node pick .*Gather.*repeat or reverse"):
        plan_top(bad, resolve_plan(c, 1))


# -- Verilator: verify --backends golden,rtl,gpu-emu ------------------------------------
@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("rnncache")


SMALL = dict(op="GRU", lbr=1, t=3, f=2, h=2)


def _verify(c, x) -> dict:
    from io import StringIO

    from modelcircuit.sim.verify import verify

    out = StringIO()
    code, rep = verify(c, x, ["golden", "rtl", "gpu-emu"], out=out)
    assert code == 0, out.getvalue()
    n = rep["notes"]["rtl"]
    assert n["latency"] == n["latency_expected"] and n["ii"] == n["ii_expected"], n
    assert all(p["bit_exact"] for p in rep["pairs"])
    return rep


@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
def test_verify_small_gru(tmp_path, cache, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default suite's one Verilator build (shared with the corrupted-bit test)."""
    monkeypatch.setenv("MODELCIRCUIT_SIM_CACHE", str(cache))
    c = _compiled(SMALL, tmp_path)
    rep = _verify(c, _x(SMALL, 5, 4))
    assert rep["notes"]["rtl"]["ii"] == plan_top(c, resolve_plan(c))["ii"]


@pytest.mark.slow
@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
@pytest.mark.parametrize("kw", [dict(op="LSTM", t=6, f=3, h=4),
                                dict(op="GRU", lbr=0, t=6, f=3, h=4, head="seq")])
def test_verify_lstm_gru(kw: dict, tmp_path, cache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELCIRCUIT_SIM_CACHE", str(cache))
    c = _compiled(kw, tmp_path, reuse=2)
    _verify(c, _x(kw, 6, 5))


@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
def test_corrupted_expected_bit_fails(tmp_path, cache) -> None:
    c = _compiled(SMALL, tmp_path)
    codes, want = _golden(c, _x(SMALL, 4, 6))
    r = rtl.execute(c, codes, cache_dir=cache, seed=1)
    assert r["ok"] and r["checks"]["bit_exact"], r["checks"]
    exp = want.copy()
    exp[2, 1] ^= 1 << 3
    r = rtl.execute(c, codes, expected=exp, cache_dir=cache)
    assert not r["built"]  # the build above
    assert not r["ok"] and not r["checks"]["bit_exact"]
    assert r["checks"]["first_mismatch"]["vector"] == 2
    assert r["checks"]["first_mismatch"]["element"] == 1


def test_reuse_auto_plans_the_recurrent_layer(tmp_path) -> None:
    """--reuse auto plans the gate MACs like any Dense, with the state update's products and
    the gate tables (one block-RAM ROM copy per two lookups) in the estimate: on an ECP5-85k
    the plan fits and its II is the circuit's step II; on an iCE40 UP5K (8 DSP, 30 BRAM)
    the LSTM folds as far as it can and the plan names what is still over the budget."""
    from modelcircuit.hdl.flow import plan_circuit
    from modelcircuit.hdl.flow.stream_fit import refusal

    kw = dict(op="LSTM", t=8, f=4, h=8)
    c = _compiled(kw, tmp_path, profile="ecp5-85k")
    plan = plan_circuit(c, "auto")
    fit = plan.fit
    assert fit is not None and fit["reuse"]["rnn"] == plan.reuse["rnn"]
    assert fit["stream"]["logic_fits"] and not fit["stream"]["over"], fit["stream"]
    assert fit["estimate"]["bram"] >= 20  # (24 + 8 + 8 lookups) / 2 ROM copies
    info = plan_top(c, plan)
    rnn = [u for u in info["layers"] if u["op"] == "LSTM"][0]
    assert rnn["reuse"] == plan.reuse["rnn"] and info["ii"] == rnn["step_ii"]

    small = _compiled(kw, tmp_path, profile="ice40-up5k")
    p2 = plan_circuit(small, "auto")
    assert p2.reuse["rnn"] > plan.reuse["rnn"]
    assert "BRAM" in (refusal(small, _FitView(p2.fit)) or "")


class _FitView:
    """The attributes `refusal` reads of a fit plan, from its JSON block."""

    def __init__(self, fit: dict) -> None:
        self.stream, self.device = fit["stream"], fit["device"]
        self.lut_unit = fit.get("lut_unit", "LUT4")


EXPORTS = Path(__file__).resolve().parents[1] / "data" / "exporters"


@pytest.mark.parametrize("name", ["torch_gru_f3_h12_t10_hn.onnx", "torch_lstm_f4_h8_t12.onnx"])
def test_torch_exports_bit_exact(name: str) -> None:
    """The circuits of torch's exports (h_n[0]: a Gather of Y_h's one row; y[:, -1]: a
    Gather of the last step) in Amaranth's simulator, folded, with gaps and backpressure."""
    c = mc.compile(mc.load_onnx(EXPORTS / name), precision="fixed<16,6>")
    t, f = c.graph.tensor(c.graph.inputs[0]).shape
    x = np.random.default_rng(7).normal(size=(2, t, f)).astype(np.float32)
    codes, want = _golden(c, x)
    res, _, _ = _run(c, 4, codes, want, gap=0.2, backpressure=0.3, seed=7)
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)
