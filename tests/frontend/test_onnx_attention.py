"""The attention group of tests/data/exporters/ (tests/exporters/attention_models.py): the
patterns torch.onnx (TorchScript and dynamo) and brevitas write for transformer encoders are
fused into token-wise Dense + Attention (+ LayerNorm, Gelu tables, token means). The float32
golden == onnxruntime check (within conftest.float32_error_bound) runs with every float export
in test_exporter_models.py; here: what the import makes of each file, fixed<16,6> and the QAT
model's own types in golden, refusals, determinism, and that the float check can fail."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import modelcircuit as mc
from modelcircuit.graphs.ir import GraphError
from tests.conftest import assert_float32_close

DATA = Path(__file__).resolve().parents[1] / "data" / "exporters"
MODELS = {m["file"]: m for m in json.loads((DATA / "models.json").read_text())["models"]}
ATTN_FLOAT = sorted(f for f, m in MODELS.items() if m["kind"] == "float"
                    and ("token_task" in m["training"] or "jet_task" in m["training"]))
QAT = sorted(f for f, m in MODELS.items() if m["kind"] == "qonnx_attention")
REFUSED = sorted(f for f, m in MODELS.items() if m["kind"] == "refused")


def _x(g, n: int, seed: int) -> np.ndarray:
    shp = g.tensor(g.inputs[0]).shape
    return np.random.default_rng(seed).normal(size=(n, *shp)).astype(np.float32)


def test_the_attention_group_is_there():
    assert len(ATTN_FLOAT) >= 8 and len(QAT) >= 1 and len(REFUSED) >= 2
    assert any("dynamo=True" in MODELS[f]["exporter"] for f in ATTN_FLOAT)
    assert any("dynamo=False" in MODELS[f]["exporter"] for f in ATTN_FLOAT)
    assert any("particle" in f for f in ATTN_FLOAT)


@pytest.mark.parametrize("name", ATTN_FLOAT + QAT)
def test_import_fuses_every_attention(name):
    """One Attention per Softmax of the file, nothing of the head layouts left (no MatMul of
    two activations, no Transpose), LayerNorm and token means where the model has them."""
    model = onnx.load(str(DATA / name))
    g = mc.load_onnx(DATA / name)
    ops = [str(n.op) for n in g.nodes]
    softmaxes = sum(n.op_type == "Softmax" for n in model.graph.node)
    assert ops.count("Attention") == softmaxes >= 1
    assert "MatMul" not in ops and "Transpose" not in ops and "Softmax" not in ops
    if any(n.op_type == "LayerNormalization" for n in model.graph.node):
        assert ops.count("LayerNorm") == sum(n.op_type == "LayerNormalization"
                                             for n in model.graph.node)
    if any(n.op_type in ("Erf", "Tanh") for n in model.graph.node):
        assert any(n.op == "Lut" and n.get("func") in ("gelu", "gelu_tanh") for n in g.nodes)
    assert "AvgPool" in ops  # the mean over the tokens
    causal = "causal" in name
    att = [n for n in g.nodes if n.op == "Attention"]
    assert all(bool(n.get("masked")) == causal for n in att)
    if causal:
        m = g.constants[att[0].inputs[3]]
        assert np.array_equal(np.isneginf(m), np.triu(np.ones(m.shape, bool), 1))


@pytest.mark.parametrize("name", ATTN_FLOAT)
def test_fixed_16_6_follows_the_float_model(name):
    g = mc.load_onnx(DATA / name)
    x = _x(g, 200, 0)
    fl = np.asarray(mc.run(mc.compile(g, precision="float32"), x), dtype=np.float64)
    c = mc.compile(g, precision="fixed<16,6>")
    a = np.asarray(mc.run(c, x), dtype=np.float64)
    assert np.array_equal(a, mc.run(c, x))  # deterministic
    same = float((fl.argmax(axis=1) == a.argmax(axis=1)).mean())
    # 10 fractional bits per tensor, Gelu tables of 2**-4 steps: the logits move by a few
    # hundredths, far less than their spread
    assert same >= 0.95, (name, same, np.abs(fl - a).max())
    assert np.abs(fl - a).max() < 0.1 * (1 + np.abs(fl).max()), np.abs(fl - a).max()


@pytest.mark.parametrize("name", QAT)
def test_qat_model_compiles_with_its_own_types_and_runs(name):
    """brevitas' 8-bit QAT: the model's quantizers (8-bit codes, their float scales) stay on
    q, k, v and every projection; the compiler types the attention's internals. Golden with
    the model's types decides as the float execution of the same graph (quantizers applied
    in float: equal to qonnx's execution of the file within float32 rounding)."""
    g = mc.load_onnx(DATA / name)
    x = _x(g, 200, 1)
    c = mc.compile(g)
    # the 8-bit activation quantizers: exact thresholds between integer layers (or Requant)
    req = [n for n in c.graph.nodes if n.op in ("Requant", "Threshold")]
    assert len(req) >= 6 and all(c.graph.tensor(n.outputs[0]).dtype.width == 8 for n in req)
    att = next(n for n in c.graph.nodes if n.op == "Attention")
    for i in att.inputs[:3]:
        t = c.graph.tensor(i).dtype
        assert t is not None and not t.is_float, (i, t)
    q = np.asarray(mc.run(c, x), dtype=np.float64)
    fl = np.asarray(mc.run(mc.compile(g, precision="float32"), x), dtype=np.float64)
    # the model's 8-bit grids are kept; the attention's internals (16-bit scores, ufixed<16,1>
    # probabilities, 18-bit exp and reciprocal tables) move the logits by about 1e-2
    assert float((fl.argmax(axis=1) == q.argmax(axis=1)).mean()) >= 0.95
    assert np.abs(fl - q).max() < 0.02 * (1 + np.abs(fl).max()), np.abs(fl - q).max()
    # a user precision compiles and runs too (it replaces the model's types: not QAT)
    f16 = mc.run(mc.compile(g, precision="fixed<16,6>"), x[:8])
    assert np.all(np.isfinite(f16))


def test_the_float_check_sees_a_wrong_scale():
    """A scale off by 1e-4 of itself (what a wrongly fused sqrt(dk) would give, far less)
    fails the float32 comparison with onnxruntime."""
    import onnxruntime as ort

    name = "torch_encoder_d16_h2_t8.onnx"
    g = mc.load_onnx(DATA / name)
    x = _x(g, 200, 2)
    s = ort.InferenceSession(str(DATA / name), providers=["CPUExecutionProvider"])
    want = s.run(None, {s.get_inputs()[0].name: x})[0].astype(np.float64)
    c = mc.compile(g, precision="float32")
    assert_float32_close(np.asarray(mc.run(c, x)), want, c, x)
    nodes = tuple(n.with_attrs(scale=n.get("scale") * (1 + 1e-4)) if n.op == "Attention" else n
                  for n in g.nodes)
    bad = mc.compile(dataclasses.replace(g, nodes=nodes), precision="float32")
    with pytest.raises(AssertionError, match="float32 rounding bound"):
        assert_float32_close(np.asarray(mc.run(bad, x)), want, bad, x)


def test_import_is_deterministic():
    for name in ("torch_encoder_d16_h2_t8.onnx", "torch_sdpa_gelu_tanh_d16_h4_t12.onnx"):
        a = mc.compile(mc.load_onnx(DATA / name), precision="fixed<16,6>")
        b = mc.compile(mc.load_onnx(DATA / name), precision="fixed<16,6>")
        assert a.graph_id == b.graph_id


@pytest.mark.parametrize("name,what", [("refuse_cross_attention.onnx", "cross-attention"),
                                       ("refuse_input_mask.onnx", "data-dependent mask")])
def test_refusals_name_the_node(name, what, tmp_path):
    with pytest.raises(GraphError, match=what) as e:
        mc.load_onnx(DATA / name)
    assert str(e.value).startswith("node '") and "\n" not in str(e.value)
    out = tmp_path / "art"
    r = subprocess.run([sys.executable, "-m", "modelcircuit", "compile", str(DATA / name),
                        "--target", "golden", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: node '") and what in lines[0]
    assert not out.exists()


def _kv_cache_model() -> onnx.ModelProto:
    """q from x; k and v from Concat(past, x): a key/value cache (hand-written)."""
    from onnx import TensorProto, helper

    t, d = 4, 8
    nodes = [helper.make_node("Concat", ["past", "x"], ["kv"], axis=1),
             helper.make_node("Transpose", ["kv"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["x", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "kv"], ["y"])]
    g = helper.make_graph(nodes, "kv", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", t, d]),
        helper.make_tensor_value_info("past", TensorProto.FLOAT, ["n", t, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", t, d])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_kv_cache_is_refused_naming_the_node():
    from modelcircuit.frontend.onnx.importer import import_model

    with pytest.raises(GraphError, match=r"node 'MatMul|node that writes 's' \(MatMul\).*cache"):
        import_model(_kv_cache_model())


def test_attention_over_the_batch_axis_is_refused():
    """batch_first=False layout: the sequence on ONNX axis 0 (T, N, D) with a symbolic N in
    the middle is not a per-sample sequence; the import says so in one line."""
    from onnx import TensorProto, helper

    from modelcircuit.frontend.onnx.importer import import_model

    t, d = 4, 8
    w = helper.make_tensor("w", TensorProto.FLOAT, [d, d],
                           np.random.default_rng(0).normal(size=d * d).tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["q"]),
             helper.make_node("Transpose", ["q"], ["qb"], perm=[1, 0, 2]),  # (N, T, D)
             helper.make_node("Transpose", ["q"], ["kt"], perm=[1, 2, 0]),  # (N, D, T)
             helper.make_node("MatMul", ["qb", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "qb"], ["o"]),
             helper.make_node("Transpose", ["o"], ["y"], perm=[1, 0, 2])]
    g = helper.make_graph(nodes, "seqfirst", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, "n", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [t, "n", d])], initializer=[w])
    with pytest.raises(GraphError) as e:
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert "\n" not in str(e.value) and str(e.value).startswith("node that writes 's' (MatMul)")


def test_a_softmax_of_two_branches_is_not_taken_for_attention():
    """Softmax(a + b) of two activations with no MatMul of two activations before it is not
    an attention (no 'data-dependent mask' refusal): it is imported, or refused, as before."""
    from onnx import TensorProto, helper

    from modelcircuit.frontend.onnx.importer import import_model

    w = [helper.make_tensor(f"w{i}", TensorProto.FLOAT, [4, 3],
                            np.random.default_rng(i).normal(size=12).tolist()) for i in (1, 2)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]),
             helper.make_node("MatMul", ["x", "w2"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                          initializer=w)
    ir = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert [str(n.op) for n in ir.nodes] == ["Dense", "Dense", "Add", "Softmax"]


@pytest.mark.parametrize("name", ["torch_encoder_d16_h2_t8_dynamo.onnx",
                                  "torch_sdpa_gelu_d16_h2_t12_dynamo.onnx"])
def test_weights_in_external_data_are_read_by_the_fusions(name, tmp_path):
    """torch.onnx's dynamo exporter writes the weights to `<model>.onnx.data` beside the model.
    The attention fit and the Gelu check evaluate sub-models with those initializers: they
    read the external file as the import does (not 'cannot read this attention pattern')."""
    model = onnx.load(str(DATA / name))
    path = tmp_path / name
    onnx.save_model(model, str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=name + ".data", size_threshold=0)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL
               for t in onnx.load(str(path), load_external_data=False).graph.initializer)
    inline = mc.load_onnx(DATA / name)
    ext = mc.load_onnx(path)
    assert [str(n.op) for n in ext.nodes] == [str(n.op) for n in inline.nodes]
    x = _x(inline, 8, 0)
    a = mc.run(mc.compile(inline, precision="fixed<16,6>"), x)
    b = mc.run(mc.compile(ext, precision="fixed<16,6>"), x)
    assert np.array_equal(a, b)


def test_gelu_with_its_constants_in_external_data_is_fused(tmp_path):
    """The erf Gelu's constants (1/sqrt(2), 1, 0.5) as external initializers: still one Lut."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    c = {"w": rng.normal(size=(4, 6)).astype(np.float32), "r2": np.float32(np.sqrt(2.0)),
         "one": np.float32(1.0), "half": np.float32(0.5),
         "w2": rng.normal(size=(6, 3)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Div", ["h", "r2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]),
             helper.make_node("Mul", ["h", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["y"])]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["n", 3])],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in c.items()])
    path = tmp_path / "gelu.onnx"
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                    str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="gelu.onnx.data", size_threshold=0)
    ir = mc.load_onnx(path)
    assert any(n.op == "Lut" and n.get("func") == "gelu" for n in ir.nodes)


def _one_head_mha_model(heads: int) -> onnx.ModelProto:
    """torch's nn.MultiheadAttention(batch_first=True) as the dynamo exporter writes it
    (hand-written): x (N, T, D) -> Transpose to (T, N, D) -> the packed in-projection, sliced
    into q/k/v -> Reshape to
    (T, N*H, d) -> Transpose, Reshape to (N*H, T, d) heads -> scores, Softmax, P V -> Transpose ->
    Reshape (T*N, D) -> out-projection Gemm -> Reshape (T, N, D) -> Transpose back. With one
    head the (N*1, T, d) heads look like batch-first projections."""
    from onnx import TensorProto, helper, numpy_helper

    t, d = 5, 8
    rng = np.random.default_rng(7)
    c = {f"w{n}": (rng.normal(size=(d, k * d)) * 0.4).astype(np.float32)
         for n, k in (("in", 3), ("o", 1))}
    c.update({f"b{n}": (rng.normal(size=k * d) * 0.1).astype(np.float32)
              for n, k in (("in", 3), ("o", 1))})
    c.update({f"at{i}": np.array([i * d], np.int64) for i in range(4)})
    c["last"] = np.array([2], np.int64)
    c["heads_shape"] = np.array([t, -1, d // heads], np.int64)
    c["nh_shape"] = np.array([-1, t, d // heads], np.int64)
    c["flat"] = np.array([-1, d], np.int64)
    c["tnd"] = np.array([t, -1, d], np.int64)
    c["sc"] = np.array((d // heads) ** -0.25, np.float32)
    mk = helper.make_node
    nodes = [mk("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             mk("MatMul", ["xt", "win"], ["pm"]), mk("Add", ["pm", "bin"], ["pr"])]
    for i, n in enumerate("qkv"):
        nodes += [mk("Slice", ["pr", f"at{i}", f"at{i + 1}", "last"], [n]),
                  mk("Reshape", [n, "heads_shape"], [f"{n}r"]),
                  mk("Transpose", [f"{n}r"], [f"{n}tr"], perm=[1, 0, 2]),
                  mk("Reshape", [f"{n}tr", "nh_shape"], [f"{n}h"])]
    nodes += [mk("Mul", ["qh", "sc"], ["qs"]),
              mk("Transpose", ["kh"], ["kt"], perm=[0, 2, 1]), mk("Mul", ["kt", "sc"], ["ks"]),
              mk("MatMul", ["qs", "ks"], ["s"]), mk("Softmax", ["s"], ["p"], axis=-1),
              mk("MatMul", ["p", "vh"], ["o"]),
              mk("Transpose", ["o"], ["ot"], perm=[1, 0, 2]),
              mk("Reshape", ["ot", "flat"], ["of"]),
              mk("Gemm", ["of", "wo", "bo"], ["og"]),
              mk("Reshape", ["og", "tnd"], ["otnd"]),
              mk("Transpose", ["otnd"], ["y"], perm=[1, 0, 2])]
    g = helper.make_graph(nodes, "mha", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", t, d])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["n", t, d])],
        initializer=[numpy_helper.from_array(v, k) for k, v in c.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("heads", [1, 2])
def test_multihead_attention_layout_of_any_head_count(heads, tmp_path):
    """One head: the heads (N*1, T, d) look batch-first, but the output goes back through
    the (T*N, D) out-projection; the pattern is read by the general walk, not refused."""
    import onnxruntime as ort

    m = _one_head_mha_model(heads)
    path = tmp_path / "mha.onnx"
    onnx.save(m, str(path))
    g = mc.load_onnx(path)
    assert [str(n.op) for n in g.nodes].count("Attention") == 1
    c = mc.compile(g, precision="float32")
    x = _x(g, 6, 0)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = s.run(None, {"x": x})[0].astype(np.float64)
    assert_float32_close(np.asarray(mc.run(c, x), dtype=np.float64).reshape(want.shape), want,
                         c, x, "golden - onnxruntime")


def _packed_sdpa_model(parts: str) -> onnx.ModelProto:
    """F.scaled_dot_product_attention on qkv(x).chunk(3, -1) (hand-written): one packed
    projection (D, 3D) cut into q, k, v by `parts`: "split18" (the dynamo exporter's Split with
    num_outputs), "split13" (a Split with its sizes as an input) or "slice" (TorchScript's
    Slices); heads by Reshape/Transpose, the out-projection on (N, T, D)."""
    from onnx import TensorProto, helper, numpy_helper

    t, d, h = 5, 8, 2
    rng = np.random.default_rng(11)
    c = {"win": (rng.normal(size=(d, 3 * d)) * 0.4).astype(np.float32),
         "bin": (rng.normal(size=3 * d) * 0.1).astype(np.float32),
         "wo": (rng.normal(size=(d, d)) * 0.4).astype(np.float32),
         "bo": (rng.normal(size=d) * 0.1).astype(np.float32),
         "heads": np.array([-1, t, h, d // h], np.int64), "merged": np.array([-1, t, d], np.int64),
         "sc": np.array((d // h) ** -0.5, np.float32)}
    mk = helper.make_node
    nodes = [mk("MatMul", ["x", "win"], ["pm"]), mk("Add", ["pm", "bin"], ["pr"])]
    if parts == "slice":
        c.update({f"at{i}": np.array([i * d], np.int64) for i in range(4)})
        c["last"] = np.array([2], np.int64)
        nodes += [mk("Slice", ["pr", f"at{i}", f"at{i + 1}", "last"], [n])
                  for i, n in enumerate("qkv")]
    elif parts == "split13":
        c["sizes"] = np.array([d, d, d], np.int64)
        nodes.append(mk("Split", ["pr", "sizes"], ["q", "k", "v"], name="chunk", axis=-1))
    else:
        nodes.append(mk("Split", ["pr"], ["q", "k", "v"], name="chunk", axis=2, num_outputs=3))
    for n in "qkv":
        nodes.append(mk("Reshape", [n, "heads"], [f"{n}r"]))
    nodes += [mk("Transpose", ["qr"], ["qh"], perm=[0, 2, 1, 3]),
              mk("Transpose", ["kr"], ["kt"], perm=[0, 2, 3, 1]),
              mk("Transpose", ["vr"], ["vh"], perm=[0, 2, 1, 3]),
              mk("Mul", ["qh", "sc"], ["qs"]), mk("MatMul", ["qs", "kt"], ["s"]),
              mk("Softmax", ["s"], ["p"], axis=-1), mk("MatMul", ["p", "vh"], ["o"]),
              mk("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              mk("Reshape", ["ot", "merged"], ["om"]),
              mk("MatMul", ["om", "wo"], ["ym"]), mk("Add", ["ym", "bo"], ["y"])]
    g = helper.make_graph(nodes, "sdpa", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", t, d])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["n", t, d])],
        initializer=[numpy_helper.from_array(v, k) for k, v in c.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18 if parts == "split18"
                                                                else 17)])
    m.ir_version = 8
    return m


def test_packed_qkv_split_fuses_as_its_slices(tmp_path):
    """qkv.chunk(3, -1) as a Split (either form) is read as the same three per-token
    projections as TorchScript's Slices: one Attention, no part of the packed tensor left
    (no Gather), float32 golden == onnxruntime, and fixed<16,6> outputs equal to the Slice
    form's."""
    import onnxruntime as ort

    fixed = {}
    for parts in ("slice", "split13", "split18"):
        m = _packed_sdpa_model(parts)
        path = tmp_path / f"{parts}.onnx"
        onnx.save(m, str(path))
        g = mc.load_onnx(path)
        ops = [str(n.op) for n in g.nodes]
        assert ops.count("Attention") == 1 and "Gather" not in ops, (parts, ops)
        assert ops.count("Dense") == 4, (parts, ops)  # q, k, v and the out-projection
        x = _x(g, 6, 0)
        c = mc.compile(g, precision="float32")
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        want = s.run(None, {"x": x})[0].astype(np.float64)
        assert_float32_close(np.asarray(mc.run(c, x), dtype=np.float64).reshape(want.shape),
                             want, c, x, f"{parts}: golden - onnxruntime")
        fixed[parts] = mc.run(mc.compile(g, precision="fixed<16,6>"), x)
    assert np.array_equal(fixed["split13"], fixed["slice"])
    assert np.array_equal(fixed["split18"], fixed["slice"])
