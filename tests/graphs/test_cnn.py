"""Convolutional networks through the importer, the reference and every graph pass (issue 12).

Float: the golden model == onnxruntime within the computed float32 bound (tests/conftest.py)
on hand-written ONNX models of every op and attribute the importer takes (Conv 1-D/2-D,
strides, asymmetric pads, depthwise, MaxPool/AveragePool with padding, GlobalAveragePool,
nearest Resize, channel Concat, Flatten of a channels-first frame into a Gemm) and on the keras
convs of ../shared/models. Fixed point: an independent integer model of a Conv (a loop over
windows) equals the golden codes; the Brevitas CNNs (tests/data/exporters, and the shared
ones in a slow test) equal QONNX's execution exactly, every activation quantizer included.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.cli import main as cli
from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs import host
from modelcircuit.graphs.ir import GraphError
from tests.conftest import assert_float32_close, shared_model, tail_error_bound

DATA = Path(__file__).resolve().parents[1] / "data" / "exporters"
CL = "qonnx.custom_op.channels_last"


# -- hand-written ONNX models ------------------------------------------------------------------
def _model(nodes, inp_shape, out_shape, inits, opset=13, domains=()) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *inp_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits.items()])
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=ops)


def _w(rng, *shape):
    return rng.normal(size=shape).astype(np.float32)


def _cases():
    rng = np.random.default_rng(1)
    n = helper.make_node
    yield "conv2d_stride_asym_pads", _model(
        [n("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 2], strides=[2, 1],
           pads=[0, 1, 2, 0]), n("Relu", ["c"], ["y"])],
        (3, 9, 7), None, {"W": _w(rng, 5, 3, 3, 2), "B": _w(rng, 5)})
    yield "conv1d_same_upper", _model(
        [n("Conv", ["x", "W"], ["y"], auto_pad="SAME_UPPER", strides=[2])],
        (2, 11), None, {"W": _w(rng, 4, 2, 4)})
    yield "depthwise_multiplier2_maxpool_pads", _model(
        [n("Conv", ["x", "W", "B"], ["c"], group=3, pads=[1, 1, 1, 1]),
         n("MaxPool", ["c"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
        (3, 8, 8), None, {"W": _w(rng, 6, 1, 3, 3), "B": _w(rng, 6)})
    yield "avgpool_pads_globalavg", _model(
        [n("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
           count_include_pad=1),
         n("AveragePool", ["a"], ["b"], kernel_shape=[2, 2], strides=[2, 2]),
         n("GlobalAveragePool", ["b"], ["y"])],
        (4, 8, 6), None, {})
    yield "resize_concat", _model(
        [n("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
         n("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         n("Resize", ["p", "", "S"], ["u"], mode="nearest"),  # half_pixel, round_prefer_floor
         n("Concat", ["u", "c"], ["y"], axis=1)],
        (2, 6, 6), None, {"W": _w(rng, 3, 2, 3, 3), "S": [1, 1, 2, 2]})
    yield "flatten_channels_first_into_gemm", _model(
        [n("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["r"]),
         n("Flatten", ["r"], ["f"]), n("Gemm", ["f", "G", "H"], ["y"], transB=1)],
        (2, 5, 4), None, {"W": _w(rng, 3, 2, 3, 3), "B": _w(rng, 3), "G": _w(rng, 7, 60),
                          "H": _w(rng, 7)})
    yield "conv_batchnorm_relu", _model(
        [n("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
         n("BatchNormalization", ["c", "S", "T", "M", "V"], ["b"], epsilon=1e-3),
         n("Relu", ["b"], ["r"]), n("GlobalMaxPool", ["r"], ["y"])],
        (2, 6, 5), None, {"W": _w(rng, 4, 2, 3, 3), "B": _w(rng, 4), "S": _w(rng, 4),
                          "T": _w(rng, 4), "M": _w(rng, 4), "V": np.abs(_w(rng, 4)) + 0.1})
    yield "keras_style_transpose_pair", _model(
        [n("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
         n("Conv", ["t", "W"], ["c"], pads=[0, 0, 1, 1]),
         n("Mul", ["c", "K"], ["m"]),
         n("Transpose", ["m"], ["y"], perm=[0, 2, 3, 1])],
        (6, 5, 2), None, {"W": _w(rng, 4, 2, 2, 2), "K": _w(rng, 4, 1, 1)})
    yield "channels_last_domain", _model(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], domain=CL, pads=[1, 1, 1, 1],
                          group=4, kernel_shape=[3, 3], strides=[1, 1], dilations=[1, 1]),
         helper.make_node("MaxPool", ["c"], ["p"], domain=CL, kernel_shape=[2, 2],
                          strides=[2, 2], pads=[0, 0, 0, 0]),
         n("Resize", ["p", "", "S"], ["y"], mode="nearest",
           coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
        (6, 6, 4), None, {"W": _w(rng, 4, 3, 3, 1), "B": _w(rng, 4), "S": [1, 2, 2, 1]},
        domains=(CL,))


CASES = dict(_cases())


def _standard(m: onnx.ModelProto) -> onnx.ModelProto:
    """A 2-D channels_last-domain model as qonnx executes it: each such node between two
    Transposes as the standard channels-first node (weights OHWI -> OIHW)."""
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    nodes = []
    for nd in m.graph.node:
        if nd.domain != CL:
            nodes.append(nd)
            continue
        x, y = nd.input[0], nd.output[0]
        nodes.append(helper.make_node("Transpose", [x], [x + "_in_nchw"], perm=[0, 3, 1, 2]))
        std = onnx.NodeProto()
        std.CopyFrom(nd)
        std.domain = ""
        std.input[0], std.output[0] = x + "_in_nchw", y + "_nchw"
        if nd.op_type == "Conv":
            inits[nd.input[1] + "_oihw"] = inits[nd.input[1]].transpose(0, 3, 1, 2)
            std.input[1] = nd.input[1] + "_oihw"
        nodes += [std, helper.make_node("Transpose", [y + "_nchw"], [y], perm=[0, 2, 3, 1])]
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    return _model(nodes, shape[1:], None, inits)


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime, one row at a time (the models fix the batch at 1)."""
    import onnxruntime as ort

    if any(nd.domain == CL for nd in m.graph.node):
        m = _standard(m)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.stack([s.run(None, {"x": r[None]})[0][0] for r in x])


def _qonnx_rows(m: onnx.ModelProto, x: np.ndarray, context: bool = False):
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx

    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    for nd in m2.graph.node:  # qonnx runs channels-last ops at opset 1: no ceil_mode there
        keep = [a for a in nd.attribute if not (a.name == "ceil_mode" and a.i == 0)]
        del nd.attribute[:]
        nd.attribute.extend(keep)
    iname, oname = m2.graph.input[0].name, m2.graph.output[0].name
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = ModelWrapper(m2)
        if not w.check_all_tensor_shapes_specified():
            from qonnx.transformation.infer_shapes import InferShapes

            w = w.transform(InferShapes())
        for r in x:
            ctx = execute_onnx(w, {iname: r[None]}, return_full_exec_context=context)
            rows.append(ctx if context else ctx[oname][0])
    return rows if context else np.stack(rows)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float_golden_equals_onnxruntime(name):
    m = CASES[name]
    c = mc.compile(_imp(m, name), precision="float32")
    shp = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)[1:]
    x = np.random.default_rng(0).normal(size=(16, *shp)).astype(np.float32)
    want = _ort(m, x).reshape(len(x), -1)
    got = np.asarray(mc.run(c, x)).reshape(len(x), -1)
    assert got.shape == want.shape
    assert_float32_close(got, want.astype(np.float64), c, x, f"{name}: ours - onnxruntime")


def _imp(m: onnx.ModelProto, name: str):
    from modelcircuit.frontend.onnx.importer import import_model

    return import_model(m, name)


def test_transpose_pairs_cancel_and_flatten_permutes_the_dense_weights():
    """keras' Transpose pair around a Conv leaves no IR Transpose; a Flatten of a
    channels-first frame is a Reshape of the channels-last frame, the Gemm's rows permuted."""
    g = _imp(CASES["keras_style_transpose_pair"], "k")
    assert [str(n.op) for n in g.nodes] == ["Conv", "Mul"]
    g = _imp(CASES["flatten_channels_first_into_gemm"], "f")
    assert [str(n.op) for n in g.nodes] == ["Transpose", "Conv", "Relu", "Reshape", "Dense"]
    g = _imp(CASES["channels_last_domain"], "c")
    assert [str(n.op) for n in g.nodes] == ["Conv", "MaxPool", "Resize"]
    # a BatchNormalization of a frame folds into the Conv before it
    c = mc.compile(_imp(CASES["conv_batchnorm_relu"], "bn"), precision="fixed<16,6>")
    assert [str(n.op) for n in c.graph.nodes] == ["Conv", "MaxPool", "Reshape"]
    # the NCHW input's Transpose is the host's reordering (passes/host.py layout_ends)
    assert c.head is not None and [str(n.op) for n in c.head.nodes] == ["Transpose"]


def test_a_wrong_weight_fails_the_float_comparison():
    """The comparison can fail: one Conv weight changed by 1e-3 of itself is caught."""
    m = onnx.ModelProto()
    m.CopyFrom(CASES["flatten_channels_first_into_gemm"])
    w = numpy_helper.to_array(m.graph.initializer[0]).copy()
    w.flat[5] *= 1.001
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "W"))
    c = mc.compile(_imp(m, "bad"), precision="float32")
    x = np.random.default_rng(0).normal(size=(16, 2, 5, 4)).astype(np.float32)
    want = _ort(CASES["flatten_channels_first_into_gemm"], x)
    with pytest.raises(AssertionError):
        assert_float32_close(np.asarray(mc.run(c, x)).reshape(16, -1), want.astype(np.float64),
                             c, x)


# -- fixed point: an independent integer Conv --------------------------------------------------
def _naive_conv_codes(xq, wq, b, pads, strides, group):
    """Integer conv by explicit loops over output pixels (channels-last codes)."""
    n, h, w_, cin = xq.shape
    kh, kw, cg, cout = wq.shape
    xp = np.zeros((n, h + pads[0] + pads[2], w_ + pads[1] + pads[3], cin), dtype=object)
    xp[:, pads[0]:pads[0] + h, pads[1]:pads[1] + w_, :] = xq.astype(object)
    oh = (xp.shape[1] - kh) // strides[0] + 1
    ow = (xp.shape[2] - kw) // strides[1] + 1
    out = np.zeros((n, oh, ow, cout), dtype=object)
    per = cout // group
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw, :]
            for o in range(cout):
                gi = o // per
                out[:, i, j, o] = (win[..., gi * cg:(gi + 1) * cg] * wq[..., o].astype(object)
                                   ).sum(axis=(1, 2, 3)) + b[o]
    return out


@pytest.mark.parametrize("name,group", [("conv2d_stride_asym_pads", 1),
                                        ("depthwise_multiplier2_maxpool_pads", 3)])
def test_fixed_conv_equals_an_integer_model(name, group):
    m = CASES[name]
    c = mc.compile(_imp(m, name), precision="fixed<8,3,RND>")
    conv = next(n for n in c.graph.nodes if n.op == "Conv")
    g = c.graph
    tx, tw = g.tensor(conv.inputs[0]).dtype, g.tensor(conv.inputs[1]).dtype
    tb = g.tensor(conv.inputs[2]).dtype
    shp = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)[1:]
    x = np.random.default_rng(3).normal(size=(4, *shp)).astype(np.float32)
    env = host.trace(c, x)
    xq = env[conv.inputs[0]]
    wq, bq = g.constants[conv.inputs[1]], g.constants[conv.inputs[2]]
    frac = tx.frac + tw.frac
    assert tb.frac <= frac  # the bias is aligned up to the products' binary point
    b = [int(v) << (frac - tb.frac) for v in bq]
    a = conv.attr
    acc = _naive_conv_codes(xq, wq, b, a["pads"], a["strides"], group)
    out_t = g.tensor(conv.outputs[0]).dtype
    want = fx.requantize(acc.astype(np.int64), frac, out_t)
    if a.get("relu"):
        want = np.maximum(want, 0)
    assert np.array_equal(env[conv.outputs[0]], want)


@pytest.mark.parametrize("name", ["conv1d_small_keras", "conv2d_small_keras"])
def test_keras_convs_float_equal_onnxruntime_and_compile_at_user_precisions(name, tmp_path):
    path = shared_model(name)
    m = onnx.load(str(path))
    c = mc.compile(mc.load_onnx(path), precision="float32")
    shp = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)[1:]
    x = np.random.default_rng(0).normal(size=(64, *shp)).astype(np.float32)
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = np.stack([s.run(None, {s.get_inputs()[0].name: r[None]})[0][0] for r in x])
    got = np.asarray(mc.run(c, x)).reshape(len(x), -1)
    assert_float32_close(got, want.astype(np.float64), c, x, f"{name}: ours - onnxruntime")
    # fixed point tracks the float model: within a few lsb of the output type at 16 bits
    # (2**-10) and the same class; at 8 bits (2**-5) within a quarter (random inputs give
    # flat softmax outputs, whose argmax 8 bits do not keep)
    for prec, tol, agree in (("fixed<16,6>", 8 * 2.0 ** -10, 0.95), ("fixed<8,3>", 0.25, 0.0)):
        cf = mc.compile(mc.load_onnx(path), precision=prec)
        yf = np.asarray(mc.run(cf, x)).reshape(len(x), -1)
        assert np.max(np.abs(yf - want)) < tol, (prec, np.max(np.abs(yf - want)))
        assert np.mean(yf.argmax(1) == want.argmax(1)) >= agree, prec
        out = tmp_path / prec.replace("<", "").replace(">", "").replace(",", "_")
        assert cli(["compile", str(path), "--precision", prec, "--target", "golden",
                    "--out", str(out)]) == 0
        assert (out / "graph.json").exists()


# -- Brevitas CNNs == QONNX ---------------------------------------------------------------------
def _grid_inputs(info: dict, shp: tuple[int, ...], n: int, seed: int = 0) -> np.ndarray:
    g = info["input_grid"]
    b = g["bits"]
    lo, hi = (-(2 ** (b - 1)), 2 ** (b - 1) - 1) if g["signed"] else (0, 2 ** b - 1)
    k = np.random.default_rng(seed).integers(lo, hi + 1, (n, *shp))
    return (np.float32(g["scale"]) * (k - g["zero_point"])).astype(np.float32)


def _same_either_layout(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Equal as stored, or once QONNX's channels-first frame is put channels-last."""
    ours = np.asarray(ours, dtype=np.float64)
    theirs = np.asarray(theirs, dtype=np.float64)
    if ours.size != theirs.size:
        return False
    if np.array_equal(ours.reshape(-1), theirs.reshape(-1)):
        return True
    if theirs.ndim >= 2:  # one sample: (C, *S) -> (*S, C)
        cl = np.moveaxis(theirs, 0, -1)
        return np.array_equal(ours.reshape(-1), cl.reshape(-1))
    return False


def _check_against_qonnx(path: Path, x: np.ndarray) -> int:
    """Every activation quantizer and the output of the golden model == QONNX (run on each
    row); returns how many tensors were compared."""
    m = onnx.load(str(path))
    c = mc.compile(mc.load_onnx(path))
    ctxs = _qonnx_rows(m, x, context=True)
    env = host.trace(c, x)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    quants = [nd for nd in m.graph.node if nd.op_type == "Quant" and nd.input[0] not in inits]
    checked = 0
    for nd in quants:
        name = nd.output[0]
        if name + "__codes" in env:  # a scaled integer: its codes are a tensor
            ours = env[name + "__codes"]
            s_, z_ = (float(inits[nd.input[k]].reshape(-1)[0]) for k in (1, 2))
            theirs = [np.round(ctx[name][0].astype(np.float64) / s_ + z_) for ctx in ctxs]
        elif name in env:  # a power-of-two quantizer: exact values
            ours = host.values(c, name, env[name])
            theirs = [ctx[name][0] for ctx in ctxs]
        else:
            continue  # folded into a node whose output has another name
        for k in range(len(x)):
            assert _same_either_layout(ours[k], theirs[k]), f"{path.name}: {name} row {k}"
        checked += 1
    out = np.asarray(mc.run(c, x), dtype=np.float64).reshape(len(x), -1)
    want = np.stack([ctx[m.graph.output[0].name][0] for ctx in ctxs]).reshape(len(x), -1)
    if c.tail is None:
        assert np.array_equal(out, want)
    else:  # the float tail on the host (scales of the last Conv): against QONNX's semantics
        # in float64 (its float32 execution rounds the Conv's sums of scaled values itself),
        # within the tail's own float32 rounding
        from tests.frontend.test_exporter_models import _qonnx64

        want = _qonnx64(m, x)[m.graph.output[0].name].reshape(len(x), -1)
        assert np.all(np.abs(out - want) <= tail_error_bound(c, x).reshape(len(x), -1) + 1e-300)
    return checked


@pytest.mark.parametrize("name,quantizers", [("brevitas_cnn.onnx", 5),
                                             ("brevitas_cnn_ch_last.onnx", 5),
                                             ("brevitas_cnn_scaled.onnx", 2)])
def test_brevitas_cnn_equals_qonnx_exactly(name, quantizers):
    pytest.importorskip("qonnx")
    info = {m["file"]: m for m in json.loads((DATA / "models.json").read_text())["models"]}[name]
    shp = tuple(info["input_shape"][1:])
    x = _grid_inputs(info, shp, 24)
    assert _check_against_qonnx(DATA / name, x) >= quantizers


def test_scaled_cnn_circuit_is_integer():
    """Per-channel float weight scales and a float activation scale: the circuit holds integer
    Convs, per-channel thresholds on the frame and a MaxPool of codes (the scale moved past
    it); the last scales and bias are the host tail."""
    c = mc.compile(mc.load_onnx(DATA / "brevitas_cnn_scaled.onnx"))
    assert {str(n.op) for n in c.graph.nodes} <= {"Requant", "Reshape", "Conv", "Threshold",
                                                  "MaxPool"}
    assert c.tail is not None


def test_brevitas_cnn_layouts_compile_to_the_same_circuit():
    """The channels-first export and its qonnx channels-last conversion: the same circuit
    (the same ops, the same integer constants); the first's input frame is put channels-last
    by the host."""
    ca_, cb_ = (mc.compile(mc.load_onnx(DATA / n)) for n in ("brevitas_cnn.onnx",
                                                            "brevitas_cnn_ch_last.onnx"))
    a, b = ca_.graph, cb_.graph
    ops_a, ops_b = [str(n.op) for n in a.nodes], [str(n.op) for n in b.nodes]
    assert ops_a == ops_b and ops_a[0] == "Requant"  # the input quantizer stays in the circuit
    # (1, 8, 8) -> (8, 8, 1): one channel, a Reshape, on the host
    assert [str(n.op) for n in ca_.head.nodes] == ["Reshape"] and cb_.head is None
    assert a.tensor(a.inputs[0]).shape == b.tensor(b.inputs[0]).shape == (8, 8, 1)
    ca = [a.constants[i] for n in a.nodes if n.op == "Conv" for i in n.inputs[1:]]
    cb = [b.constants[i] for n in b.nodes if n.op == "Conv" for i in n.inputs[1:]]
    assert len(ca) == len(cb) and all(np.array_equal(u, v) for u, v in zip(ca, cb, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["separable_conv_model_ch_last", "branched_model_ch_last",
                                  "tiny_unet_ch_last"])
def test_shared_brevitas_cnns_equal_qonnx_exactly(name):
    """One full frame (values on a 2**-8 grid: the fixed<16,6> input holds them exactly, so
    the input quantizer rounds once, as QONNX's does)."""
    pytest.importorskip("qonnx")
    path = shared_model(name)
    m = onnx.load(str(path))
    shp = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)[1:]
    x = (np.round(np.random.default_rng(0).normal(size=(1, *shp)) * 256) / 256).astype(
        np.float32)
    assert _check_against_qonnx(path, x) >= 5


# -- refusals ------------------------------------------------------------------------------------
def _refusal(nodes, inp, inits, what: str, tmp_path, capsys, opset=13):
    m = _model(nodes, inp, None, inits, opset=opset)
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    assert cli(["compile", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and what in err, err
    assert "node c1" in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("case,what", [
    ("maxpool_dilation", "MaxPool dilations [2, 2] are not supported"),
    ("avgpool_dilation", "AveragePool dilations [1, 2] are not supported"),
    ("dilation_zero", "dilations [0, 1] must be 2 positive integers"),
    ("dilation_negative", "dilations [2, -1] must be 2 positive integers"),
    ("dilation_length", "dilations [2] must be 2 positive integers"),
    ("linear", "mode 'linear'"),
    ("fraction", "not an integer nearest-neighbour upsampling"),
    ("ceil", "ceil_mode"),
    ("half_pixel_floor", "not an integer nearest-neighbour upsampling"),
])
def test_unsupported_attributes_are_refused_naming_the_node(case, what, tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = helper.make_node
    opset = 13
    if case == "maxpool_dilation":  # a max/mean over spaced taps: no IR window (a dilated
        # Conv is taken: tests/graphs/test_conv_dilated.py)
        node = n("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2], name="c1")
        nodes, inits = [node], {}
    elif case == "avgpool_dilation":  # AveragePool has dilations since opset 19
        node = n("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[1, 2], name="c1")
        nodes, inits, opset = [node], {}, 19
    elif case.startswith("dilation"):
        dil = {"zero": [0, 1], "negative": [2, -1], "length": [2]}[case.split("_")[1]]
        nodes = [n("Conv", ["x", "W"], ["y"], dilations=dil, name="c1")]
        inits = {"W": _w(rng, 2, 4, 3, 3)}
    elif case == "linear":
        nodes, inits = [n("Resize", ["x", "", "S"], ["y"], mode="linear", name="c1")], \
            {"S": [1, 1, 2, 2]}
    elif case == "fraction":
        nodes, inits = [n("Resize", ["x", "", "S"], ["y"], name="c1")], {"S": [1, 1, 1.5, 2]}
    elif case == "half_pixel_floor":  # reads pixels 0, 0, 0, 1, 2, ...: not a repeat
        nodes, inits = [n("Resize", ["x", "", "S"], ["y"], nearest_mode="floor", name="c1")], \
            {"S": [1, 1, 2, 2]}
    else:  # a partial last window with counted padding (a MaxPool's ceil_mode is taken)
        nodes, inits = [n("AveragePool", ["x"], ["y"], kernel_shape=[4, 4], strides=[2, 2],
                          pads=[1, 1, 1, 1], count_include_pad=1, ceil_mode=1, name="c1")], {}
    _refusal(nodes, (4, 7, 7), inits, what, tmp_path, capsys, opset=opset)


def test_zero_point_with_padding_is_refused(tmp_path, capsys):
    """A scaled-integer input with a zero point: the padding's value 0 is not the code 0, so
    the integer Conv would pad wrongly; refused naming the Conv."""
    q = "qonnx.custom_op.general"
    n = helper.make_node
    nodes = [n("Quant", ["x", "s", "z", "b"], ["xq"], domain=q, signed=0, narrow=0,
               rounding_mode="ROUND"),
             n("Quant", ["W", "ws", "wz", "b"], ["Wq"], domain=q, signed=1, narrow=1,
               rounding_mode="ROUND"),
             n("Conv", ["xq", "Wq"], ["c"], pads=[1, 1, 1, 1], name="conv_zp"),
             n("Quant", ["c", "s", "wz", "b"], ["y"], domain=q, signed=1, narrow=0,
               rounding_mode="ROUND")]
    inits = {"s": 0.1, "z": 3.0, "b": 8.0, "ws": 0.05, "wz": 0.0,
             "W": np.random.default_rng(0).normal(size=(2, 1, 3, 3)) * 0.2}
    m = _model(nodes, (1, 5, 5), None, inits, domains=(q,))
    p = tmp_path / "zp.onnx"
    onnx.save(m, str(p))
    assert cli(["compile", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: node conv_zp (Conv)") and "zero point" in err, err
    # without padding the same model compiles
    nodes[2] = n("Conv", ["xq", "Wq"], ["c"], name="conv_zp")
    onnx.save(_model(nodes, (1, 5, 5), None, inits, domains=(q,)), str(p))
    assert cli(["compile", str(p), "--out", str(tmp_path / "o")]) == 0


def test_graph_ids_are_deterministic():
    a = mc.compile(mc.load_onnx(DATA / "brevitas_cnn_ch_last.onnx"))
    b = mc.compile(mc.load_onnx(DATA / "brevitas_cnn_ch_last.onnx"))
    assert a.graph_id == b.graph_id
    m = CASES["resize_concat"]
    assert mc.compile(_imp(m, "r"), precision="fixed<8,3>").graph_id == \
        mc.compile(_imp(m, "r"), precision="fixed<8,3>").graph_id


def test_uncompiled_conv_is_an_error():
    g = _imp(CASES["conv1d_same_upper"], "u")
    from modelcircuit.graphs import reference

    with pytest.raises(GraphError):
        reference.execute(g, [np.zeros((1, 2, 11), np.float32)])


# -- the bundled digits CNN ------------------------------------------------------------------------
DIGITS_CNN = Path(mc.__file__).parent / "data" / "digits_cnn.onnx"


def test_digits_cnn_float_equals_onnxruntime_and_is_accurate(digits_test):
    import onnxruntime as ort

    x, y = digits_test
    x = x.reshape(-1, 8, 8, 1)
    c = mc.compile(mc.load_onnx(DIGITS_CNN), precision="float32")
    # keras' Transposes cancel; the ReLUs fuse into the Convs
    assert [str(n.op) for n in c.graph.nodes] == ["Conv", "MaxPool", "Conv", "MaxPool",
                                                  "Reshape", "Dense"]
    s = ort.InferenceSession(str(DIGITS_CNN), providers=["CPUExecutionProvider"])
    want = s.run(None, {"pixels": x})[0]
    got = np.asarray(mc.run(c, x))
    assert_float32_close(got, want.astype(np.float64), c, x, "digits CNN: ours - onnxruntime")
    assert np.mean(got.argmax(1) == y) >= 0.97
    # fixed point: the default precision keeps the accuracy; 8 bits with calibration too
    for prec, cal, floor in (("fixed<16,6>", None, 0.97), ("fixed<8,3>", x[:100], 0.97)):
        cq = mc.compile(mc.load_onnx(DIGITS_CNN), precision=prec, calibrate=cal)
        assert np.mean(np.asarray(mc.run(cq, x)).argmax(1) == y) >= floor, prec


def test_digits_cnn_cli_compile_is_deterministic(tmp_path):
    for k in (1, 2):
        assert cli(["compile", str(DIGITS_CNN), "--precision", "fixed<8,3>", "--target",
                    "golden", "--out", str(tmp_path / f"o{k}")]) == 0
    for f in ("graph.json", "weights.npz"):
        assert (tmp_path / "o1" / f).read_bytes() == (tmp_path / "o2" / f).read_bytes()


@pytest.mark.slow
def test_digits_cnn_training_is_byte_deterministic(tmp_path):
    """examples/train_digits_cnn.py writes the packaged file again, byte for byte."""
    import runpy

    root = Path(__file__).resolve().parents[2]
    mod = runpy.run_path(str(root / "examples" / "train_digits_cnn.py"))
    mod["main"](tmp_path)
    assert (tmp_path / "digits_cnn.onnx").read_bytes() == DIGITS_CNN.read_bytes()


def test_concat_negative_axis_counts_from_the_last_per_sample_axis():
    """axis -1 of an (H, W, C) frame is the channel axis, never the batch: the reference
    normalises it like ONNX (a bug once concatenated along the batch)."""
    from modelcircuit.graphs import reference
    from modelcircuit.graphs.ir import Graph, Node, Tensor
    from modelcircuit.graphs.types import FLOAT32

    def graph(axis: int) -> Graph:
        ts = {"a": Tensor("a", (2, 3, 2), FLOAT32), "b": Tensor("b", (2, 3, 2), FLOAT32),
              "y": Tensor("y", (2, 3, 4), FLOAT32)}
        return Graph("cat", ("a", "b"), ("y",),
                     (Node.make("cat", "Concat", ["a", "b"], ["y"], axis=axis),), ts)

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 2, 3, 2)), rng.normal(size=(5, 2, 3, 2))
    want = np.concatenate([a, b], axis=3).astype(np.float32)
    for axis in (2, -1):
        got = reference.execute(graph(axis), [a, b])["y"]
        np.testing.assert_array_equal(got, want)
    with pytest.raises(GraphError, match="axis 3 is out of range"):
        reference.execute(graph(3), [a, b])
