"""Exporters' float-model patterns: layout wrappers around per-feature ops, old-opset
attributes, a fixed batch other than 1, expanded BatchNorms. Each is built with
onnx.helper (small random weights, fixed seed) and its float golden is compared with
onnxruntime; each also compiles at fixed<16,6>. The same patterns, slightly wrong, are
refused through the CLI with one `error:` line."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.api import run
from tests.hostile import assert_refused, run_cli

F_IN, F_HID = 8, 6
N_SAMPLES = 200


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _init(name: str, v: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, dtype=np.float32), name)


def _model(nodes: list, inits: list, opset: int, batch: int | str = "N",
           in_shape: tuple[int, ...] = (F_IN,), out_shape: tuple[int, ...] | None = None,
           out_batch: int | str | None = None) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, *in_shape])
    ob = batch if out_batch is None else out_batch
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                      None if out_shape is None else [ob, *out_shape])
    g = helper.make_graph(nodes, "pattern", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7 if opset >= 7 else 3
    return m


def _gemm(rng: np.random.Generator, out: str = "g", n_in: int = F_IN, n_out: int = F_HID,
          **kw) -> tuple[list, list]:
    w, b = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in), rng.standard_normal(n_out)
    return ([helper.make_node("Gemm", ["x", "W", "B"], [out], name="fc", **kw)],
            [_init("W", w), _init("B", b)])


def _bn_params(rng: np.random.Generator, n: int, prefix: str = "bn") -> tuple[list[str], list]:
    vals = [rng.uniform(0.5, 1.5, n), rng.standard_normal(n) * 0.1,
            rng.standard_normal(n) * 0.1, rng.uniform(0.5, 2.0, n)]
    names = [f"{prefix}_{k}" for k in ("scale", "bias", "mean", "var")]
    return names, [_init(k, v) for k, v in zip(names, vals, strict=True)]


def _onnxruntime(model: onnx.ModelProto, x: np.ndarray, batch: int | None) -> np.ndarray:
    """onnxruntime on x, in chunks of the model's fixed batch (the last one padded)."""
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    if batch is None:
        return s.run(None, {"x": x})[0]
    outs = []
    for i in range(0, len(x), batch):
        chunk = x[i:i + batch]
        pad = np.concatenate([chunk, np.zeros((batch - len(chunk),) + x.shape[1:], x.dtype)])
        outs.append(s.run(None, {"x": pad})[0][:len(chunk)])
    return np.concatenate(outs)


def _check(tmp_path, model: onnx.ModelProto, batch: int | None, ort_model=None,
           in_shape: tuple[int, ...] = (F_IN,)) -> mc.Graph:
    """Float golden == onnxruntime within a tolerance scaled to each output's magnitude;
    fixed<16,6> compiles and runs. Returns the imported graph."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    g = mc.load_onnx(path)
    x = _rng(99).standard_normal((N_SAMPLES, *in_shape)).astype(np.float32)
    got = np.asarray(run(mc.compile(g, precision="float32"), x), dtype=np.float64)
    want = _onnxruntime(ort_model or model, x, batch).astype(np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = np.abs(want).max(axis=0, keepdims=True) + 1.0  # per output element
    assert np.all(np.abs(got - want) <= 1e-5 * scale), np.abs(got - want).max()
    fx = run(mc.compile(g, precision="fixed<16,6>"), x)
    assert np.asarray(fx).shape == want.shape
    return g


def _refused(tmp_path, model: onnx.ModelProto, match: str) -> str:
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    res = run_cli(["compile", str(path), "--target", "golden", "--out", str(tmp_path / "o")])
    return assert_refused(res, match)


# -- 1. layout wrappers around per-feature ops ------------------------------------------------

def _transposed(middle: list, inits: list, opset: int = 13, relu: bool = True,
                perm2: list[int] | None = None) -> onnx.ModelProto:
    """x -> Gemm -> Transpose [1, 0] -> middle ('t' -> 'm') -> Transpose back -> Relu."""
    nodes, gi = _gemm(_rng(1))
    nodes += [helper.make_node("Transpose", ["g"], ["t"], name="t_in", perm=[1, 0])]
    nodes += middle
    nodes += [helper.make_node("Transpose", ["m"], ["u" if relu else "y"], name="t_out",
                               perm=perm2 or [1, 0])]
    if relu:
        nodes += [helper.make_node("Relu", ["u"], ["y"], name="relu")]
    return _model(nodes, gi + inits, opset, batch=1, out_shape=(F_HID,))


def test_keras_transposed_batchnorm_opset7(tmp_path):
    """BN in the transposed frame: its channel is the batch (1), so its parameters have one
    element and apply to every feature alike (onnxruntime refuses F of them)."""
    names, inits = _bn_params(_rng(2), 1)
    bn = helper.make_node("BatchNormalization", ["t", *names], ["m"], name="bn", spatial=1,
                          momentum=0.99, epsilon=1e-3)
    g = _check(tmp_path, _transposed([bn], inits, opset=7), batch=1)
    assert [n.op for n in g.nodes] == ["Dense", "BatchNorm", "Relu"]


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div"])
def test_transposed_elementwise_per_feature(tmp_path, op):
    c = _rng(3).uniform(0.5, 1.5, (F_HID, 1))
    node = helper.make_node(op, ["t", "c"], ["m"], name="ew")
    g = _check(tmp_path, _transposed([node], [_init("c", c)]), batch=1)
    assert "Transpose" not in [n.op for n in g.nodes]


def test_transposed_relu_and_constant_first(tmp_path):
    c = _rng(4).standard_normal((F_HID, 1))
    nodes = [helper.make_node("Mul", ["c", "t"], ["a"], name="mul"),
             helper.make_node("Relu", ["a"], ["m"], name="inner_relu")]
    _check(tmp_path, _transposed(nodes, [_init("c", c)]), batch=1)


def test_transpose_pair_alone_is_the_identity(tmp_path):
    nodes, gi = _gemm(_rng(1))
    nodes += [helper.make_node("Transpose", ["g"], ["t"], perm=[1, 0]),
              helper.make_node("Transpose", ["t"], ["y"], perm=[1, 0])]
    g = _check(tmp_path, _model(nodes, gi, 13, batch=1, out_shape=(F_HID,)), batch=1)
    assert [n.op for n in g.nodes] == ["Dense"]


@pytest.mark.parametrize("opset", [6, 7, 9])
def test_torch_unsqueeze_batchnorm_squeeze(tmp_path, opset):
    """torch.onnx's BatchNorm1d on (N, F): Unsqueeze(2) -> BN -> Squeeze(2)."""
    nodes, gi = _gemm(_rng(5))
    names, inits = _bn_params(_rng(6), F_HID)
    kw = {"is_test": 1} if opset < 7 else {}
    if opset < 9:
        kw.update(spatial=1)
    nodes += [helper.make_node("Unsqueeze", ["g"], ["u"], name="unsq", axes=[2]),
              helper.make_node("BatchNormalization", ["u", *names], ["b"], name="bn",
                               momentum=0.9, epsilon=1e-5, **kw),
              helper.make_node("Squeeze", ["b"], ["y"], name="sq", axes=[2])]
    model = _model(nodes, gi + inits, opset, out_shape=(F_HID,))
    ref = model if opset >= 7 else _model(
        nodes[:2] + [helper.make_node("BatchNormalization", ["u", *names], ["b"],
                                      momentum=0.9, epsilon=1e-5, spatial=1)] + nodes[3:],
        gi + inits, 7, out_shape=(F_HID,))
    g = _check(tmp_path, model, batch=None, ort_model=ref)
    # the Squeeze undoes the Unsqueeze: the BatchNorm meets its Dense (and folds into it)
    assert [n.op for n in g.nodes] == ["Dense", "BatchNorm"]


def test_unsqueeze_elementwise_squeeze(tmp_path):
    nodes, gi = _gemm(_rng(7))
    c, d = _rng(8).standard_normal((F_HID, 1)), _rng(9).uniform(0.5, 2, (F_HID, 1))
    nodes += [helper.make_node("Unsqueeze", ["g"], ["u"], axes=[2]),
              helper.make_node("Mul", ["u", "c"], ["a"]),
              helper.make_node("Add", ["a", "d"], ["b"]),
              helper.make_node("Squeeze", ["b"], ["y"], axes=[2])]
    _check(tmp_path, _model(nodes, gi + [_init("c", c), _init("d", d)], 11,
                            out_shape=(F_HID,)), batch=None)


# -- 2. old-opset attributes ------------------------------------------------------------------

@pytest.mark.parametrize("opset", [1, 6, 7, 9, 14])
def test_batchnorm_old_attributes(tmp_path, opset):
    nodes, gi = _gemm(_rng(10))
    names, inits = _bn_params(_rng(11), F_HID)
    kw: dict = {}
    if opset == 1:
        kw = {"consumed_inputs": [0, 0, 0, 1, 1], "is_test": 1, "spatial": 1}
    elif opset == 6:
        kw = {"is_test": 1, "spatial": 1}
    elif opset == 7:
        kw = {"spatial": 1}
    nodes += [helper.make_node("BatchNormalization", ["g", *names], ["y"], name="bn",
                               momentum=0.9, **kw)]
    model = _model(nodes, gi + inits, opset, out_shape=(F_HID,))
    ref = _model(nodes[:1] + [helper.make_node("BatchNormalization", ["g", *names], ["y"])],
                 gi + inits, 9, out_shape=(F_HID,))
    _check(tmp_path, model, batch=None, ort_model=ref)


@pytest.mark.parametrize("opset", [6, 7, 10, 12, 13])
def test_dropout_and_identity_are_removed(tmp_path, opset):
    nodes, gi = _gemm(_rng(12))
    inits = []
    if opset < 7:
        drop = helper.make_node("Dropout", ["g"], ["d"], name="drop", is_test=1, ratio=0.3)
    elif opset < 12:
        drop = helper.make_node("Dropout", ["g"], ["d"], name="drop", ratio=0.3)
    else:
        drop = helper.make_node("Dropout", ["g", "ratio", "train"], ["d"], name="drop")
        inits = [_init("ratio", np.array(0.3)),
                 numpy_helper.from_array(np.array(False), "train")]
    nodes += [drop, helper.make_node("Identity", ["d"], ["i"]),
              helper.make_node("Relu", ["i"], ["y"])]
    model = _model(nodes, gi + inits, opset, out_shape=(F_HID,))
    ref = _model(nodes[:1] + [helper.make_node("Relu", ["g"], ["y"])], gi, 13,
                 out_shape=(F_HID,))
    g = _check(tmp_path, model, batch=None, ort_model=ref)
    assert [n.op for n in g.nodes] == ["Dense", "Relu"]


@pytest.mark.parametrize("c_shape", [(1, F_HID), (F_HID,), (), (1,)])
@pytest.mark.parametrize("opset", [6, 13])
def test_gemm_alpha_beta_broadcast_bias(tmp_path, c_shape, opset):
    rng = _rng(13)
    w, c = rng.standard_normal((F_HID, F_IN)), rng.standard_normal(c_shape)
    kw = {"broadcast": 1} if opset < 7 else {}
    node = helper.make_node("Gemm", ["x", "W", "C"], ["y"], name="fc", alpha=0.5, beta=2.0,
                            transB=1, **kw)
    model = _model([node], [_init("W", w), _init("C", c)], opset, out_shape=(F_HID,))
    ref = _model([helper.make_node("Gemm", ["x", "W", "C"], ["y"], alpha=0.5, beta=2.0,
                                   transB=1)], [_init("W", w), _init("C", c)], 13,
                 out_shape=(F_HID,))
    _check(tmp_path, model, batch=None, ort_model=ref)


def test_opset6_add_with_legacy_broadcast_axis(tmp_path):
    """opset < 7 Add/Mul: `broadcast=1, axis=1` aligns the constant at dimension 1."""
    nodes, gi = _gemm(_rng(14))
    c = _rng(15).standard_normal(F_HID)
    nodes += [helper.make_node("Add", ["g", "c"], ["y"], broadcast=1, axis=1)]
    model = _model(nodes, gi + [_init("c", c)], 6, out_shape=(F_HID,))
    ref = _model(nodes[:1] + [helper.make_node("Add", ["g", "c"], ["y"])],
                 gi + [_init("c", c)], 13, out_shape=(F_HID,))
    _check(tmp_path, model, batch=None, ort_model=ref)


# -- 3. a fixed batch other than 1 ------------------------------------------------------------

@pytest.mark.parametrize("batch", [7, 1])
def test_fixed_batch_flatten_and_reshape(tmp_path, batch):
    nodes, gi = _gemm(_rng(16))
    nodes += [helper.make_node("Flatten", ["g"], ["f"], axis=1),
              helper.make_node("Reshape", ["f", "shape"], ["y"])]
    shape = numpy_helper.from_array(np.array([batch, -1], dtype=np.int64), "shape")
    model = _model(nodes, gi + [shape], 13, batch=batch, out_shape=(F_HID,))
    _check(tmp_path, model, batch=batch)


def test_fixed_batch_reshape_names_the_whole_shape(tmp_path):
    nodes, gi = _gemm(_rng(17))
    nodes += [helper.make_node("Reshape", ["g", "shape"], ["r"]),
              helper.make_node("Relu", ["r"], ["y"])]
    shape = numpy_helper.from_array(np.array([789, 2, 3], dtype=np.int64), "shape")
    model = _model(nodes, gi + [shape], 13, batch=789, out_shape=(2, 3))
    _check(tmp_path, model, batch=789)


def test_keras_flatten_axis0_at_batch_1(tmp_path):
    nodes, gi = _gemm(_rng(18))
    nodes += [helper.make_node("Flatten", ["g"], ["y"], axis=0)]
    model = _model(nodes, gi, 13, batch=1, out_shape=(F_HID,))
    _check(tmp_path, model, batch=1)


def test_shape_of_a_fixed_batch_is_that_batch(tmp_path):
    """Shape -> Gather(0) -> Concat([., -1]) -> Reshape: the batch 7 is read from the model."""
    nodes, gi = _gemm(_rng(19))
    nodes += [helper.make_node("Shape", ["g"], ["s"]),
              helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
              helper.make_node("Concat", ["n", "minus1"], ["t"], axis=0),
              helper.make_node("Reshape", ["g", "t"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1")]
    _check(tmp_path, _model(nodes, gi + inits, 13, batch=7, out_shape=(F_HID,)), batch=7)


def test_three_layer_pytorch_fixed_batch_still_imports():
    from pathlib import Path

    p = Path(__file__).resolve().parents[2].parent / "shared" / "models" / \
        "three_layer_pytorch.onnx"
    if not p.exists():
        pytest.skip("shared models not present")
    g = mc.load_onnx(p)
    x = _rng(20).standard_normal((20, *g.tensor(g.inputs[0]).shape)).astype(np.float32)
    run(mc.compile(g, precision="float32"), x)


# -- 4. expanded BatchNorm --------------------------------------------------------------------

@pytest.mark.parametrize("root", ["Sqrt", "Pow"])
def test_expanded_batchnorm(tmp_path, root):
    nodes, gi = _gemm(_rng(21))
    rng = _rng(22)
    mean, var = rng.standard_normal(F_HID) * 0.1, rng.uniform(0.5, 2, F_HID)
    gamma, beta = rng.uniform(0.5, 1.5, F_HID), rng.standard_normal(F_HID) * 0.1
    inits = [_init(k, v) for k, v in (("mean", mean), ("var", var), ("gamma", gamma),
                                        ("beta", beta), ("eps", np.array(1e-3)),
                                        ("half", np.array(0.5)))]
    root_node = (helper.make_node("Sqrt", ["ve"], ["sd"]) if root == "Sqrt" else
                 helper.make_node("Pow", ["ve", "half"], ["sd"]))
    nodes += [helper.make_node("Sub", ["g", "mean"], ["c"], name="sub"),
              helper.make_node("Add", ["var", "eps"], ["ve"]), root_node,
              helper.make_node("Div", ["c", "sd"], ["n"], name="div"),
              helper.make_node("Mul", ["n", "gamma"], ["s"], name="mul"),
              helper.make_node("Add", ["s", "beta"], ["y"], name="add")]
    g = _check(tmp_path, _model(nodes, gi + inits, 13, out_shape=(F_HID,)), batch=None)
    assert "Div" not in [n.op for n in g.nodes]  # Div by a constant: Mul by its reciprocal


# -- refusals through the CLI: one `error:` line, exit code 2 ---------------------------------

def test_refuses_batchnorm_spatial_0(tmp_path):
    nodes, gi = _gemm(_rng(30))
    names, inits = _bn_params(_rng(31), F_HID)
    nodes += [helper.make_node("BatchNormalization", ["g", *names], ["y"], name="bn",
                               spatial=0)]
    _refused(tmp_path, _model(nodes, gi + inits, 7, out_shape=(F_HID,)), "spatial=0")


def test_refuses_squeeze_of_the_wrong_axis(tmp_path):
    nodes, gi = _gemm(_rng(32))
    names, inits = _bn_params(_rng(33), F_HID)
    nodes += [helper.make_node("Unsqueeze", ["g"], ["u"], axes=[2]),
              helper.make_node("BatchNormalization", ["u", *names], ["b"], name="bn"),
              helper.make_node("Squeeze", ["b"], ["y"], name="sq", axes=[1])]
    _refused(tmp_path, _model(nodes, gi + inits, 11, out_shape=(F_HID,)), "sq")


def test_refuses_transposed_batchnorm_with_per_feature_parameters(tmp_path):
    names, inits = _bn_params(_rng(34), F_HID)
    bn = helper.make_node("BatchNormalization", ["t", *names], ["m"], name="bn")
    line = _refused(tmp_path, _transposed([bn], inits, opset=9), "bn")
    assert "Transpose" in line and "batch" in line


def test_refuses_transpose_perm_that_moves_features(tmp_path):
    """Transpose [1, 0] then Softmax over the transposed axis mixes samples."""
    sm = helper.make_node("Softmax", ["t"], ["m"], name="sm", axis=1)
    line = _refused(tmp_path, _transposed([sm], []), "sm")
    assert "Transpose" in line


def test_refuses_transposed_output(tmp_path):
    nodes, gi = _gemm(_rng(35))
    nodes += [helper.make_node("Transpose", ["g"], ["y"], name="t_in", perm=[1, 0])]
    _refused(tmp_path, _model(nodes, gi, 13, batch=1), "batch")


def test_refuses_transposed_constant_varying_along_the_batch(tmp_path):
    c = _rng(36).standard_normal((F_HID, 2))
    node = helper.make_node("Add", ["t", "c"], ["m"], name="ew")
    _refused(tmp_path, _transposed([node], [_init("c", c)]), "ew")


def test_refuses_dropout_training_mode(tmp_path):
    nodes, gi = _gemm(_rng(37))
    nodes += [helper.make_node("Dropout", ["g", "ratio", "train"], ["y"], name="drop")]
    inits = [_init("ratio", np.array(0.3)), numpy_helper.from_array(np.array(True), "train")]
    _refused(tmp_path, _model(nodes, gi + inits, 13, out_shape=(F_HID,)), "training mode")


def test_refuses_gemm_trans_a(tmp_path):
    nodes, gi = _gemm(_rng(38), transA=1)
    _refused(tmp_path, _model(nodes, gi, 13, out_shape=(F_HID,)), "transA")


@pytest.mark.parametrize("shape", [[1, -1], [14, -1], [-1, 3]])
def test_refuses_batch_mixing_reshape_at_batch_7(tmp_path, shape):
    nodes, gi = _gemm(_rng(39))
    nodes += [helper.make_node("Reshape", ["g", "shape"], ["y"], name="rs")]
    inits = [numpy_helper.from_array(np.array(shape, dtype=np.int64), "shape")]
    line = _refused(tmp_path, _model(nodes, gi + inits, 13, batch=7), "rs")
    assert "batch" in line


def test_refuses_flatten_axis0_at_batch_7(tmp_path):
    nodes, gi = _gemm(_rng(40))
    nodes += [helper.make_node("Flatten", ["g"], ["y"], name="fl", axis=0)]
    _refused(tmp_path, _model(nodes, gi, 13, batch=7), "batch")


def test_refuses_legacy_broadcast_of_the_activation(tmp_path):
    nodes, gi = _gemm(_rng(41))
    c = _rng(42).standard_normal((3, F_HID))
    nodes += [helper.make_node("Mul", ["g", "c"], ["y"], name="mul", broadcast=0)]
    _refused(tmp_path, _model(nodes, gi + [_init("c", c)], 6), "mul")


def test_opset1_layout_ops_and_cast(tmp_path):
    """Opset 1: Reshape's shape attribute, Concat's default axis 1, Cast's string `to`,
    Relu's consumed_inputs."""
    nodes = [helper.make_node("Reshape", ["x"], ["r"], shape=[1, 2, 4]),
             helper.make_node("Reshape", ["r"], ["f"], shape=[1, 8]),
             helper.make_node("Cast", ["f"], ["c"], to="FLOAT"),
             helper.make_node("Concat", ["c", "c"], ["k"]),
             helper.make_node("Relu", ["k"], ["y"], consumed_inputs=[0])]
    path = tmp_path / "m.onnx"
    onnx.save(_model(nodes, [], 1, batch=1, out_shape=(2 * F_IN,)), path)
    g = mc.load_onnx(path)
    x = _rng(50).standard_normal((10, F_IN)).astype(np.float32)
    got = run(mc.compile(g, precision="float32"), x)
    np.testing.assert_array_equal(got, np.maximum(np.concatenate([x, x], axis=1), 0))


def test_refuses_opset_0(tmp_path):
    nodes, gi = _gemm(_rng(43))
    _refused(tmp_path, _model(nodes, gi, 0, out_shape=(F_HID,)), "older")


def test_refuses_opset6_batchnorm_training_outputs(tmp_path):
    nodes, gi = _gemm(_rng(44))
    names, inits = _bn_params(_rng(45), F_HID)
    nodes += [helper.make_node("BatchNormalization", ["g", *names], ["y", "m1", "v1"],
                               name="bn", is_test=0)]
    _refused(tmp_path, _model(nodes, gi + inits, 6, out_shape=(F_HID,)), "is_test=0")


def test_refuses_legacy_cast_to_another_type(tmp_path):
    nodes = [helper.make_node("Cast", ["x"], ["y"], name="cast", to="INT32")]
    _refused(tmp_path, _model(nodes, [], 1, out_shape=(F_IN,)), "INT32")


# -- Split: torch's chunk (LSTMCell/GRUCell gates, packed projections) ------------------------

def _split_model(opset: int, n_out: int, parts: int, sizes: list[int] | None = None,
                 axis: int = 1, **kw) -> onnx.ModelProto:
    """x -> Gemm (n_out) -> Split into `parts` -> Sigmoid / Tanh by turns -> Concat. `sizes`
    go in the `split` input (opset >= 13) or attribute (before), `kw` to the node."""
    nodes, gi = _gemm(_rng(60), n_out=n_out)
    ins = ["g"]
    if sizes is not None and opset >= 13:
        gi.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        ins.append("sizes")
    elif sizes is not None:
        kw["split"] = sizes
    outs = [f"s{k}" for k in range(parts)]
    nodes.append(helper.make_node("Split", ins, outs, name="chunk", axis=axis, **kw))
    nodes += [helper.make_node("Sigmoid" if k % 2 == 0 else "Tanh", [o], [f"a{k}"])
              for k, o in enumerate(outs)]
    nodes.append(helper.make_node("Concat", [f"a{k}" for k in range(parts)], ["y"], axis=1))
    m = _model(nodes, gi, opset, out_shape=(n_out,))
    m.ir_version = 8 if opset >= 18 else m.ir_version
    return m


@pytest.mark.parametrize("opset,n_out,parts,sizes,kw", [
    (11, 12, 3, [3, 3, 6], {}),          # the `split` attribute
    (13, 12, 3, [5, 4, 3], {}),          # the `split` input
    (13, 12, 4, None, {}),               # equal parts (LSTMCell's four gates)
    (18, 12, 3, None, {"num_outputs": 3}),
    (18, 11, 3, None, {"num_outputs": 3}),  # opset 18: the last part smaller (4, 4, 3)
], ids=["attr11", "input13", "equal13", "num_outputs18", "uneven18"])
def test_split_parts_are_gathers(tmp_path, opset, n_out, parts, sizes, kw):
    """Each part of a Split on a per-sample axis is a Gather of its contiguous indices;
    float golden == onnxruntime, fixed<16,6> runs."""
    g = _check(tmp_path, _split_model(opset, n_out, parts, sizes, **kw), batch=None)
    ops = [str(n.op) for n in g.nodes]
    assert ops.count("Gather") == parts and "Split" not in ops


@pytest.mark.parametrize("opset,sizes,kw,match", [
    (13, [3, 3, 3], {}, "do not divide an axis of size 12"),
    (18, None, {"num_outputs": 5}, "into 5 non-empty parts"),
    (13, None, {"axis": 0}, "batch dimension"),
], ids=["sum", "num_outputs", "batch_axis"])
def test_refuses_bad_splits_naming_the_node(tmp_path, opset, sizes, kw, match):
    parts = kw.get("num_outputs", 3)
    line = _refused(tmp_path, _split_model(opset, 12, parts, sizes, **kw), match)
    assert "node chunk (Split)" in line


def test_refuses_split_sizes_computed_at_run_time(tmp_path):
    """Split sizes read from an activation (an int64 graph input is refused before: inputs
    are float32)."""
    m = _split_model(13, 12, 2)
    m.graph.node[1].input.append("g")
    line = _refused(tmp_path, m, "computed at run time")
    assert "node chunk (Split)" in line
