"""Channels-first (NCHW) inputs read by more than a Conv (issue 29): a residual block, a ReLU,
two Convs directly on the model's input. The importer moves such an input to channels-last
once for all its readers, so the host reorders it once (passes/host.py layout_ends) and the
circuit has no Transpose; `inspect`, the manifest and top.json state the wire order. Each
against its definition outside this project (qonnx, onnxruntime), gpu-emu bit-exact."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.cli import main as cli
from tests.graphs.test_cnn_ops import _residual_qonnx_model


def _save(m: onnx.ModelProto, tmp_path, name: str = "m.onnx"):
    p = tmp_path / name
    onnx.save(m, str(p))
    return p


def _ops(g) -> list[str]:
    return [str(n.op) for n in g.nodes]


def _float_model(kind: str) -> onnx.ModelProto:
    """An NCHW (3, 6, 5) input read directly by: a ReLU then a Conv ("relu"); two Convs whose
    outputs are concatenated ("two_convs"); a Conv and the skip of a residual Add ("skip")."""
    rng = np.random.default_rng(11)
    w1 = rng.normal(0, 0.5, (3, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.5, (2, 3, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    n = helper.make_node
    if kind == "relu":
        nodes = [n("Relu", ["x"], ["r"]), n("Conv", ["r", "w1"], ["y"], pads=[1, 1, 1, 1])]
        out = (3, 6, 5)
    elif kind == "two_convs":
        nodes = [n("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), n("Conv", ["x", "w2"], ["b"]),
                 n("Concat", ["a", "b"], ["c"], axis=1), n("Relu", ["c"], ["y"])]
        out = (5, 6, 5)
    else:
        nodes = [n("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), n("Add", ["a", "x"], ["s"]),
                 n("Relu", ["s"], ["y"])]
        out = (3, 6, 5)
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 6, 5])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, *out])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ort(path, x):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])


def _one_host_reorder(c, frame=(6, 5, 3)) -> None:
    """The head reorders the NCHW input once; no Transpose is left in the circuit."""
    head = _ops(c.head) if c.head is not None else []
    assert head.count("Transpose") == 1, head
    assert "Transpose" not in _ops(c.graph), _ops(c.graph)
    assert c.graph.tensor(c.graph.inputs[0]).shape == frame


@pytest.mark.parametrize("kind", ["relu", "two_convs", "skip"])
def test_nchw_input_read_by_several_ops_is_reordered_once_by_the_host(kind, tmp_path):
    p = _save(_float_model(kind), tmp_path)
    c = mc.compile(mc.load_onnx(p), precision="fixed<16,6>")
    _one_host_reorder(c)
    x = np.random.default_rng(4).normal(size=(3, 3, 6, 5)).astype(np.float32)
    got = np.asarray(mc.run(c, x), dtype=np.float64)
    want = _ort(p, x)
    assert got.shape == want.shape
    # fixed<16,6>: input and weights rounded to 2**-10 (|x| < 4, |w| < 2), 28 products,
    # one output rounding; far below the 0.05 that a misplaced channel would exceed
    assert np.abs(got - want).max() < 0.05
    assert np.abs(want).max() > 1.0  # not a degenerate test
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))
    # float32 keeps the model's layout in every op: the same numbers
    cf = mc.compile(mc.load_onnx(p), precision="float32")
    np.testing.assert_allclose(np.asarray(mc.run(cf, x)), want, rtol=1e-5, atol=1e-5)


def test_residual_block_directly_on_the_nchw_input_equals_qonnx_exactly(tmp_path):
    """brevitas' residual block whose input quantizer's output is read by the first Conv and
    the skip: one host reorder, the join in channels-last, golden == qonnx exactly."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    m = _residual_qonnx_model()
    p = _save(m, tmp_path)
    c = mc.compile(mc.load_onnx(p))
    _one_host_reorder(c, (6, 5, 4))
    assert "Add" in _ops(c.graph)
    x = np.random.default_rng(5).normal(0, 1.2, size=(4, 4, 6, 5)).astype(np.float32)
    w = ModelWrapper(m).transform(InferShapes())
    want = np.stack([execute_onnx(w, {"x": x[i:i + 1]})["y"][0] for i in range(len(x))])
    got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(want.shape)
    np.testing.assert_array_equal(np.round(got / 0.0461), np.round(want / np.float32(0.0461)))
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))


def test_wire_order_in_inspect_manifest_and_top_json(tmp_path, capsys):
    """A Conv and a residual skip on the NCHW input, compiled to Verilog (before: refused, a
    Transpose of a pixel stream in the circuit): top.json and the manifest say the model's
    input is channels-first, the host's Transpose reorders it, and the circuit reads
    raster-order pixels of 3 channels; `inspect` prints it."""
    p = _save(_float_model("skip"), tmp_path)
    out = tmp_path / "c"
    assert cli(["compile", str(p), "--precision", "fixed<8,3>", "--target", "verilog",
                "--out", str(out)]) == 0
    top = json.loads((out / "hdl" / "top.json").read_text())
    man = json.loads((out / "manifest.json").read_text())
    for w in (top["wire"], man["wire"]):
        i = w["input"]
        assert i["model_shape"] == [3, 6, 5] and i["circuit_shape"] == [6, 5, 3]
        assert i["model_layout"] == "channels-first"
        assert [(m["op"], m["perm"]) for m in i["host_moves"]] == [("Transpose", [1, 2, 0])]
        assert "30 pixels in raster order" in i["order"] and "3 channels" in i["order"]
        assert w["output"]["model_layout"] == "channels-first"
        assert [m["op"] for m in w["output"]["host_moves"]] == ["Transpose"]
    assert top["input"]["frame"]["shape"] == [6, 5, 3]  # the circuit's port says the same
    capsys.readouterr()
    assert cli(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert ("wire order, input: model [3, 6, 5] (channels-first); the host reorders it "
            "(Transpose(") in text
    assert "circuit [6, 5, 3]: 30 pixels in raster order" in text


def test_nhwc_input_is_not_reordered(tmp_path):
    """An input already channels-last (a keras-style Transpose to NCHW before the Conv): the
    importer leaves it alone and the circuit reads it as it is (no host reorder)."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32)
    n = helper.make_node
    nodes = [n("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             n("Conv", ["t", "w"], ["c"], pads=[1, 1, 1, 1]),
             n("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    g = helper.make_graph(nodes, "keras", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 6, 5, 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 6, 5, 4])], initializer=[numpy_helper.from_array(w, "w")])
    p = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    c = mc.compile(mc.load_onnx(p), precision="fixed<16,6>")
    assert c.head is None and c.tail is None
    assert _ops(c.graph) == ["Conv"]


@pytest.mark.slow
def test_residual_block_on_the_nchw_input_verify_golden_rtl_gpu_emu(tmp_path):
    """`verify --backends golden,rtl,gpu-emu` (Verilator + cocotb) on the residual block read
    directly from the NCHW input: the host reorders, the circuit streams raster-order pixels;
    bit-exact, simulated II and frame latency == the compile-time report."""
    import subprocess
    import sys

    p = _save(_residual_qonnx_model(), tmp_path)
    js = tmp_path / "v.json"
    r = subprocess.run([sys.executable, "-m", "modelcircuit.cli", "verify", str(p),
                        "--backends", "golden,rtl,gpu-emu", "--vectors", "2", "--json",
                        str(js)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(js.read_text())
    assert rep["bit_exact"] and rep["timing_ok"]


def _per_channel_act_model() -> onnx.ModelProto:
    """brevitas_examples MobileNet's pattern: Conv -> ReLU -> an activation quantizer with a
    per-channel scale (1, C, 1, 1) on the NCHW frame -> depthwise Conv -> Quant."""
    q = "qonnx.custom_op.general"
    rng = np.random.default_rng(8)
    c = 4
    w1 = rng.normal(0, 0.4, (c, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.4, (c, 1, 3, 3)).astype(np.float32)
    sa = (0.02 + 0.03 * rng.random((1, c, 1, 1))).astype(np.float32)
    ws = [(np.abs(w).max(axis=(1, 2, 3), keepdims=True) / 7).astype(np.float32) for w in (w1, w2)]
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("w1", w1), ("w2", w2), ("ws1", ws[0]), ("ws2", ws[1]), ("sa", sa),
        ("si", np.array(0.0157, np.float32)), ("so", np.array(0.0533, np.float32)),
        ("z", np.array(0.0, np.float32)), ("b4", np.array(4.0, np.float32)),
        ("b8", np.array(8.0, np.float32)))]
    n = helper.make_node
    nodes = [n("Quant", ["x", "si", "z", "b8"], ["xi"], domain=q, signed=1, narrow=0,
               rounding_mode="ROUND"),
             n("Quant", ["w1", "ws1", "z", "b4"], ["wq1"], domain=q, signed=1, narrow=1,
               rounding_mode="ROUND"),
             n("Conv", ["xi", "wq1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Quant", ["r1", "sa", "z", "b4"], ["a1"], domain=q, signed=0, narrow=0,
               rounding_mode="ROUND"),
             n("Quant", ["w2", "ws2", "z", "b4"], ["wq2"], domain=q, signed=1, narrow=1,
               rounding_mode="ROUND"),
             n("Conv", ["a1", "wq2"], ["c2"], pads=[1, 1, 1, 1], group=c),
             n("Quant", ["c2", "so", "z", "b8"], ["y"], domain=q, signed=1, narrow=0,
               rounding_mode="ROUND")]
    g = helper.make_graph(nodes, "pc_act", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 6, 5])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, c, 6, 5])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                               helper.make_opsetid(q, 2)])


def test_per_channel_activation_scale_on_an_nchw_frame_equals_qonnx_exactly(tmp_path):
    """The per-channel scale (1, C, 1, 1) is moved into the channels-last layout with the
    frame (a per-channel threshold per channel, no Transpose in the circuit: before, the
    frame went back to NCHW and the scale was a full (C, H, W) constant, refused by the
    threshold pass); golden == qonnx exactly; gpu-emu bit-exact."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    m = _per_channel_act_model()
    p = _save(m, tmp_path)
    c = mc.compile(mc.load_onnx(p))
    assert "Transpose" not in _ops(c.graph), _ops(c.graph)
    assert "Mul" not in _ops(c.graph)
    x = np.random.default_rng(6).normal(0, 1.0, size=(4, 3, 6, 5)).astype(np.float32)
    w = ModelWrapper(m).transform(InferShapes())
    want = np.stack([execute_onnx(w, {"x": x[i:i + 1]})["y"][0] for i in range(len(x))])
    got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(want.shape)
    np.testing.assert_array_equal(np.round(got / 0.0533), np.round(want / np.float32(0.0533)))
    assert np.unique(np.round(want / np.float32(0.0533))).size > 8
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))
