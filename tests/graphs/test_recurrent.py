"""ONNX LSTM / GRU: import (layouts, outputs, refusals), the float32 golden model against
onnxruntime within the computed rounding bound, and the fixed-point contract
(graphs/recurrent.py)."""

from __future__ import annotations

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.graphs.ir import GraphError
from modelcircuit.graphs.ops import attrs
from tests.conftest import assert_float32_close
from tests.graphs.rnn_models import ort_run, rnn_model, stacked_h_n_model

FLOAT_CASES = {
    "lstm_transpose": dict(op="LSTM"),
    "lstm_seq_first": dict(op="LSTM", wrap="seq"),
    "lstm_states": dict(op="LSTM", h0=True, c0=True, t=9, f=4, h=6),
    "lstm_clip": dict(op="LSTM", clip=0.7, scale=1.5),
    "lstm_yh": dict(op="LSTM", output="Y_h"),
    "lstm_yc": dict(op="LSTM", output="Y_c"),
    "lstm_seq_head": dict(op="LSTM", head="seq"),
    "lstm_acts": dict(op="LSTM", activations=["Sigmoid", "Tanh", "Tanh"]),
    "gru_lbr0": dict(op="GRU", lbr=0),
    "gru_lbr1": dict(op="GRU", lbr=1, h0=True),
    "gru_lbr1_clip_seq": dict(op="GRU", lbr=1, clip=0.5, wrap="seq", head="seq", scale=1.2),
    "gru_yh": dict(op="GRU", lbr=1, output="Y_h", t=12, f=8, h=12),
    "lstm_const_lens": dict(op="LSTM", seq_lens="const"),
    # torch's batch_first=False export: (T, batch, F) with a symbolic batch, zero states made
    # from Shape(x) (the batch is dimension 1)
    "lstm_seq_first_dyn_batch": dict(op="LSTM", wrap="seq", seq_batch="batch", shape_h0=True),
    "gru_seq_first_dyn_batch": dict(op="GRU", lbr=1, wrap="seq", seq_batch="batch",
                                    shape_h0=True, head="seq"),
    "lstm_shape_h0": dict(op="LSTM", shape_h0=True),
}


def _x(m_kw: dict, n: int = 6, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(
        size=(n, m_kw.get("t", 7), m_kw.get("f", 3))).astype(np.float32)


def _load(tmp_path, m) -> object:
    import onnx

    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    return mc.load_onnx(p)


@pytest.mark.parametrize("case", sorted(FLOAT_CASES))
def test_float_golden_matches_onnxruntime(case: str, tmp_path) -> None:
    kw = FLOAT_CASES[case]
    m = rnn_model(**kw)
    g = _load(tmp_path, m)
    assert sum(n.op in ("LSTM", "GRU") for n in g.nodes) >= 1
    c = mc.compile(g, precision="float32")
    x = _x(kw)
    got = np.asarray(mc.run(c, x))
    want = ort_run(m, x, kw.get("wrap", "transpose"))
    assert_float32_close(got, want, c, x, f"golden - onnxruntime ({case})")


def test_layout1_matches_the_onnx_reference(tmp_path) -> None:
    """layout=1 (batch-first X, Y, Y_h): onnxruntime refuses it, onnx's reference runs it."""
    from onnx.reference import ReferenceEvaluator

    m = rnn_model("LSTM", wrap="layout1", opset=14, h0=True, c0=True)
    g = _load(tmp_path, m)
    c = mc.compile(g, precision="float32")
    x = _x({})
    want = np.stack([ReferenceEvaluator(m).run(None, {"x": x[i:i + 1]})[0].reshape(-1)
                     for i in range(len(x))])
    assert_float32_close(np.asarray(mc.run(c, x)), want, c, x, "golden - onnx reference")


def test_float_bound_catches_a_changed_weight(tmp_path) -> None:
    """The bound is tight enough to see one recurrent weight off by 1e-3 of itself."""
    m = rnn_model("LSTM", seed=3)
    g = _load(tmp_path, m)
    w = [n for n in g.nodes if n.op == "LSTM"][0].inputs[2]  # R
    consts = dict(g.constants)
    consts[w] = consts[w].copy()
    consts[w][0, 0] *= 1.001
    c = mc.compile(g.replace(constants=consts), precision="float32")
    x = _x({}, n=8)
    with pytest.raises(AssertionError, match="float32 rounding bound"):
        assert_float32_close(np.asarray(mc.run(c, x)), ort_run(m, x), c, x)


@pytest.mark.parametrize("kw, what", [
    (dict(direction="bidirectional"), "direction bidirectional"),
    (dict(direction="reverse"), "direction reverse"),
    (dict(peephole=True), "peepholes"),
    (dict(seq_lens="input"), "sequence_lens 'lens' is given at run time"),
    (dict(seq_lens="short"), "sequence_lens [6] differ"),
    (dict(h0_input=True), "initial_h 'h0' is given at run time"),
    (dict(input_forget=1), "input_forget=1"),
    (dict(activations=["Sigmoid", "Gelu", "Tanh"]), "activation Gelu has no table"),
    (dict(activations=["Sigmoid", "Tanh"]), "activations lists 2 functions"),
])
def test_refusals_name_the_node(kw: dict, what: str, tmp_path) -> None:
    m = rnn_model("LSTM", **kw)
    with pytest.raises(GraphError) as e:
        _load(tmp_path, m)
    msg = str(e.value)
    assert "node rnn (LSTM)" in msg and what in msg and "\n" not in msg, msg


def test_import_absorbs_the_layout_wrappers(tmp_path) -> None:
    """torch's Transpose / Squeeze / Transpose around the LSTM leave no IR node: the graph is
    the LSTM, the Gather of the last step and the Dense."""
    g = _load(tmp_path, rnn_model("LSTM"))
    assert [n.op for n in g.nodes] == ["LSTM", "Gather", "Dense"]
    assert g.tensor(g.inputs[0]).shape == (7, 3)
    g = _load(tmp_path, rnn_model("GRU", lbr=1, head="seq"))
    assert [n.op for n in g.nodes] == ["GRU", "Dense", "Add"]
    assert g.tensor(g.outputs[0]).shape == (7, 2)


def test_token_wise_matmul_imports_as_one_dense(tmp_path) -> None:
    g = _load(tmp_path, rnn_model("GRU", lbr=1, head="seq"))
    c = mc.compile(g, precision="fixed<16,6>")
    dense = [n for n in c.graph.nodes if n.op == "Dense"]
    assert len(dense) == 1 and len(dense[0].inputs) == 3  # the bias fused into it
    assert c.graph.tensor(dense[0].outputs[0]).shape == (7, 2)


@pytest.mark.parametrize("case", ["lstm_states", "lstm_clip", "gru_lbr0", "gru_lbr1",
                                  "gru_lbr1_clip_seq", "lstm_yc"])
def test_fixed_point_follows_the_float_model(case: str, tmp_path) -> None:
    """fixed<16,6> (tables of 1024 entries) stays near the float model; the error is a few
    table steps (sigmoid's table step here is 2**-6 of its input: 1/256 of its output)."""
    kw = FLOAT_CASES[case]
    g = _load(tmp_path, rnn_model(**kw))
    x = _x(kw, n=16)
    fl = np.asarray(mc.run(mc.compile(g, precision="float32"), x), dtype=np.float64)
    fxd = np.asarray(mc.run(mc.compile(g, precision="fixed<16,6>"), x), dtype=np.float64)
    fxv = fxd if fxd.dtype.kind == "f" else None
    c = mc.compile(g, precision="fixed<16,6>")
    from modelcircuit.graphs import reference

    codes = reference.quantize_inputs(c.graph, [x])[0]
    out = reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]
    fxv = reference.to_values(c.graph, c.graph.outputs[0], out)
    assert np.abs(fxv.reshape(fl.shape) - fl).max() < 0.08 * max(1.0, np.abs(fl).max())


def test_fixed_point_contract_by_hand(tmp_path) -> None:
    """One LSTM step of one sample, computed here from the compiled constants and the
    contract of graphs/recurrent.py with Python integers, equals the golden model."""
    from modelcircuit.graphs import fixed as fx
    from modelcircuit.graphs import reference

    m = rnn_model("LSTM", t=1, f=2, h=3, h0=True, c0=True, head="none", output="Y_c")
    g = _load(tmp_path, m)
    c = mc.compile(g, precision="fixed<12,4>")
    node = next(n for n in c.graph.nodes if n.op == "LSTM")
    a = attrs(node)
    G = c.graph
    x = np.array([[[0.75, -1.25]]], dtype=np.float32)
    xq = reference.quantize_inputs(G, [x])[0]
    W, R, B, h0, c0, tf_, tg_, th_ = (np.asarray(G.constants[i]).astype(int)
                                       for i in node.inputs[1:])
    tx, tw, tb = (G.tensor(node.inputs[i]).dtype for i in (0, 1, 3))
    th, tc, tp = a.state_type, a.cell_type, a.pre_type
    fxh = max(tx.frac, th.frac)
    fa = max(fxh + tw.frac, tb.frac)
    acc = [sum(int(xq[0, 0, i]) << (fxh - tx.frac) << (fa - fxh - tw.frac) for i in [])
           for _ in range(12)]
    for j in range(12):
        s = sum((int(xq[0, 0, i]) << (fxh - tx.frac)) * int(W[i, j]) for i in range(2))
        s += sum((int(h0[i]) << (fxh - th.frac)) * int(R[i, j]) for i in range(3))
        acc[j] = (s << (fa - fxh - tw.frac)) + ((int(B[0, j]) + int(B[1, j])) << (fa - tb.frac))
    p = [int(fx.requantize(np.int64(v), fa, tp)) for v in acc]

    def tab(tbl, lo, shift, q):
        return int(tbl[int(reference.table_index(np.array([q]), lo, shift, len(tbl))[0])])

    i_, o_, f_ = ([tab(tf_, a.f_lo, a.f_shift, p[k * 3 + j]) for j in range(3)] for k in range(3))
    g_ = [tab(tg_, a.g_lo, a.g_shift, p[9 + j]) for j in range(3)]
    ff, fc, fg = a.f_type.frac, tc.frac, a.g_type.frac
    fu = max(ff + fc, ff + fg)
    cnew = [int(fx.requantize(np.int64((f_[j] * int(c0[j]) << (fu - ff - fc))
                                       + (i_[j] * g_[j] << (fu - ff - fg))), fu, tc))
            for j in range(3)]
    golden = reference.execute(G, [xq], inputs_are_codes=True)
    cells = next(n for n in G.nodes if n.op == "LSTM" and attrs(n).emit == "c")
    got = golden if cells.outputs[0] in golden else reference.execute(
        G, [xq], trace=True, inputs_are_codes=True)
    assert list(got[cells.outputs[0]].reshape(-1)) == cnew


def test_calibration_types_the_states(tmp_path) -> None:
    """--calibrate: the state types take the integer bits of the float model's ranges."""
    m = rnn_model("LSTM", scale=1.5)
    g = _load(tmp_path, m)
    x = _x({}, n=32)
    c = mc.compile(g, precision="fixed<12,6>", calibrate=x)
    a = attrs(next(n for n in c.graph.nodes if n.op == "LSTM"))
    assert a.state_type.int_bits == 1  # |h| < 1: the sign bit only
    assert 2 <= a.cell_type.int_bits <= 5 and a.pre_type.width == 12
    c2 = mc.compile(g, precision="fixed<12,6>", calibrate=x)
    assert c.graph_id == c2.graph_id  # deterministic


def test_too_wide_state_is_a_compile_error(tmp_path) -> None:
    g = _load(tmp_path, rnn_model("LSTM", head="none"))
    with pytest.raises(GraphError, match=r"node rnn \(LSTM\): the gate accumulator needs "
                       r"\d+ bits, over the 62-bit limit"):
        mc.compile(g, precision="fixed<31,8>")


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_stacked_layers_h_n_concat(op: str, tmp_path) -> None:
    """h_n of two stacked layers (a Concat of the layers' Y_h, sequence-first) imports and
    matches onnxruntime; fixed point runs."""
    m = stacked_h_n_model(op)
    g = _load(tmp_path, m)
    assert [n.op for n in g.nodes].count(op) == 2
    c = mc.compile(g, precision="float32")
    x = _x({"t": 6, "f": 3})
    want = ort_run(m, x)
    assert_float32_close(np.asarray(mc.run(c, x)), want, c, x, f"golden - onnxruntime ({op})")
    assert np.all(np.isfinite(mc.run(mc.compile(g, precision="fixed<16,6>"), x)))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_stacked_layers_h_n_reads_the_last_layer_itself(op: str, tmp_path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The Gather of the last layer from the Concat of both layers' Y_h is that layer's Y_h
    (passes/concat_parts.py): no Concat or Gather of it is left for the backends (the HDL has
    neither), and the outputs are those of the graph with the Concat, float32 and fixed point
    alike."""
    from modelcircuit.graphs import pipeline

    g = _load(tmp_path, stacked_h_n_model(op))
    assert "Concat" in [n.op for n in g.nodes]
    x = _x({"t": 6, "f": 3}, n=16)
    runs = {}
    for p in ("float32", "fixed<16,6>"):
        c = mc.compile(g, precision=p)
        assert not any(n.op == "Concat" for n in c.graph.nodes), p
        runs[p] = mc.run(c, x)
    monkeypatch.setattr(pipeline, "forward_concat_parts", lambda gr: gr)
    for p, want in runs.items():
        c = mc.compile(g, precision=p)
        assert any(n.op == "Concat" for n in c.graph.nodes)
        assert np.array_equal(mc.run(c, x), want), p
