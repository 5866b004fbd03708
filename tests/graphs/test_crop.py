"""ONNX Slice of a feature map (was refused at import: `unsupported op Slice`): TCN's Chomp1d
(`x[:, :, :-(k-1)*d]` after a Conv1d padded on both ends), U-Net's crop of a skip before a
Concat, strided picks, channel parts, negative indices, INT64_MAX ends, opset < 10 attributes.

The importer writes one IR Gather per sliced axis (frontend/onnx/crop.py); a crop of a Conv's
padded border or of its channels folds into the Conv (graphs/passes/crop.py); any other runs
as a Gather: golden, the GPU kernels and, on a pixel stream, `PickUnit`
(hdl/streamed/pick.py). Float32 golden == onnxruntime within the float32 rounding bound,
fixed point gpu-emu == golden bit for bit, and golden == RTL (Verilator) == gpu-emu on a
TCN block and a 2-D crop. Bad Slice parameters are one line naming node and input (exit 2)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.frontend.onnx.importer import import_model
from modelcircuit.graphs.ir import GraphError
from modelcircuit.hdl.errors import HdlError
from modelcircuit.sim import rtl
from tests.graphs.helpers import float_matches_reference, verify_onnx_rtl
from tests.hostile import run_cli

I64_MAX = int(np.iinfo(np.int64).max)
n = helper.make_node


def _model(nodes, in_shape, inits, opset=13) -> onnx.ModelProto:
    """Float weights; the Slice parameters (names starting with "s_") int64."""
    g = helper.make_graph(
        nodes, "crop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *in_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.int64 if k.startswith("s_") else np.float32), k)
         for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _slice(x, y, starts, ends, axes=None, steps=None, tag="s"):
    """A Slice node and its constant inputs (as initializers)."""
    ins, inits = [x, f"s_{tag}_st", f"s_{tag}_en"], {f"s_{tag}_st": starts, f"s_{tag}_en": ends}
    if axes is not None:
        ins.append(f"s_{tag}_ax")
        inits[f"s_{tag}_ax"] = axes
    if steps is not None:
        ins.append(f"s_{tag}_sp")
        inits[f"s_{tag}_sp"] = steps
    return n("Slice", ins, [y], name=f"crop_{tag}"), inits


def tcn_block(rng) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """locuslab's TemporalBlock, one Conv: Conv1d(k 3, dilation 2, padding 4 on both ends),
    Chomp1d(4), ReLU, the residual Add."""
    sl, si = _slice("c1", "k1", [0], [-4], [2])
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], dilations=[2], pads=[4, 4]), sl,
             n("Relu", ["k1"], ["r1"]), n("Add", ["r1", "x"], ["y"])]
    return _model(nodes, (3, 12), {"w1": rng.normal(0, .5, (3, 3, 3)),
                                   "b1": rng.normal(0, .3, 3), **si}), (3, 12)


def crop_2d(rng) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """Conv 3x3 padded, ReLU, then a Slice of three axes: rows 1:-1, columns -7::2 (to
    INT64_MAX), channels 0:3; a 1x1 Conv after it (the crop runs in the circuit)."""
    sl, si = _slice("r1", "k1", [1, -7, 0], [-1, I64_MAX, 3], [2, 3, 1], [1, 2, 1])
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             sl, n("Conv", ["k1", "w2", "b2"], ["y"])]
    return _model(nodes, (2, 9, 8), {"w1": rng.normal(0, .5, (4, 2, 3, 3)),
                                     "b1": rng.normal(0, .3, 4),
                                     "w2": rng.normal(0, .5, (3, 3, 1, 1)),
                                     "b2": rng.normal(0, .3, 3), **si}), (2, 9, 8)


def unet_skip(rng) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """U-Net: the skip (12x10) cropped [1:-1, 1:-1] to the unpadded Conv's 10x8, Concat."""
    sl, si = _slice("s", "sc", [1, 1], [-1, -1], [-2, -1])
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["s"]),
             n("Conv", ["s", "w2", "b2"], ["c2"]), sl, n("Concat", ["sc", "c2"], ["y"], axis=1)]
    return _model(nodes, (3, 12, 10), {"w1": rng.normal(0, .5, (4, 3, 3, 3)),
                                       "b1": rng.normal(0, .3, 4),
                                       "w2": rng.normal(0, .5, (4, 4, 3, 3)),
                                       "b2": rng.normal(0, .3, 4), **si}), (3, 12, 10)


def conv_then(slice_args, shape=(3, 10), opset=13, attrs=None, pads=None, strides=None):
    """A Conv (kernel 3, pads 1 on every side unless given) read by one Slice."""
    def build(rng):
        cin, *frame = shape
        k = (3,) * len(frame)
        if attrs is not None:  # opset < 10: starts/ends/axes are attributes
            sl, si = n("Slice", ["c"], ["y"], name="crop_s", **attrs), {}
        else:
            sl, si = _slice("c", "y", *slice_args)
        extra = {"strides": strides} if strides else {}
        nodes = [n("Conv", ["x", "w", "b"], ["c"], pads=pads or [1] * (2 * len(frame)),
                   **extra), sl]
        return _model(nodes, shape, {"w": rng.normal(0, .5, (5, cin, *k)),
                                     "b": rng.normal(0, .3, 5), **si}, opset), shape
    return build


CASES = {
    "tcn_block": tcn_block,
    "crop_2d": crop_2d,
    "unet_skip": unet_skip,
    "chomp_stride": conv_then(([0], [-1], [2], [1]), shape=(3, 11), pads=[2, 2], strides=[2]),
    "negative_starts_int64max": conv_then(([-6], [I64_MAX], [-1])),
    "step_3": conv_then(([1], [100], [2], [3])),
    "negative_step": conv_then(([-2], [-I64_MAX], [2], [-2])),
    "channels": conv_then(([1], [4], [1])),
    "default_axes_batch_kept": conv_then(([0, 1, 2], [I64_MAX, 3, -2])),
    "2d_rows_only": conv_then(([2], [-1], [2]), shape=(2, 7, 6)),
    "opset9_attributes": conv_then(None, opset=9,
                                   attrs=dict(starts=[1, 2], ends=[-1, 9], axes=[1, 2])),
}


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])


@pytest.mark.parametrize("name", sorted(CASES))
def test_slice_equals_onnxruntime_and_gpu_emu_equals_golden(name, tmp_path):
    m, shp = CASES[name](np.random.default_rng(sum(map(ord, name))))
    p, x, want = float_matches_reference(m, shp, tmp_path, _ort, name)
    c = mc.compile(mc.load_onnx(p), precision="fixed<16,6>")
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))
    y = np.asarray(mc.run(c, x), dtype=np.float64).reshape(want.shape)
    assert np.abs(y - want).max() < 0.05 * max(1.0, np.abs(want).max())


def _ops(name: str, precision: str = "fixed<16,6>"):
    m, _ = CASES[name](np.random.default_rng(sum(map(ord, name))))
    c = mc.compile(import_model(m), precision=precision)
    return c, [n for n in c.graph.nodes if str(n.op) in ("Conv", "Gather")]


def test_chomp_folds_into_the_conv_pads():
    """Chomp1d after a Conv padded (4, 4): the Conv padded (4, 0), no Gather left; with
    stride 2 and pads (2, 2) over 11 steps, cutting the last of 7 outputs: end pad 0."""
    _, nodes = _ops("tcn_block")
    assert [(str(n.op), n.get("pads")) for n in nodes] == [("Conv", (4, 0))]
    _, nodes = _ops("chomp_stride")
    assert [str(n.op) for n in nodes] == ["Conv"]
    conv = nodes[0]
    assert conv.get("pads") == (2, 0)  # (11 + 2 + 0 - 3) // 2 + 1 = 6 outputs


def test_channel_slice_folds_into_the_conv_weights():
    c, nodes = _ops("channels")
    assert [str(n.op) for n in nodes] == ["Conv"]
    assert c.graph.tensor(nodes[0].inputs[1]).shape[-1] == 3


def test_crops_the_conv_cannot_absorb_stay_gathers():
    """Beyond the padding, strided, reversed, after a ReLU: a Gather per sliced axis."""
    for name, axes in (("step_3", [0]), ("negative_step", [0]), ("crop_2d", [0, 1, 2]),
                       ("negative_starts_int64max", [0])):
        _, nodes = _ops(name)
        assert sorted(n.get("axis") for n in nodes if str(n.op) == "Gather") == axes, name


def test_a_crop_at_the_output_stays_in_the_circuit():
    """layout_ends gives the host only reorderings: a crop before the output is circuit work."""
    c, nodes = _ops("2d_rows_only")
    assert [str(n.op) for n in nodes] == ["Conv", "Gather"]
    assert c.tail is None or all(str(n.op) != "Gather" for n in c.tail.nodes)


BAD = {
    "axis_out_of_range": (([0], [5], [3]), "Slice axes [3]: axis 3 is out of range"),
    "zero_size": (([5], [2], [2]), "keep nothing of axis 2 (size 10): a crop to zero size"),
    "zero_step": (([0], [5], [2], [0]), "Slice steps [0]: a step of 0"),
    "repeated_axis": (([0, 1], [5, 6], [2, -1]), "Slice axes [2, -1] repeat axis 2"),
    "lengths": (([0, 1], [5], [2]), "must have one entry per sliced axis"),
    "batch": (([0], [1], [0]), "Slice of axis 0 (the batch) with starts 0, ends 1"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_slice_parameters_are_one_line(name, tmp_path):
    args, msg = BAD[name]
    m, _ = conv_then(args)(np.random.default_rng(0))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"  # a symbolic batch
    with pytest.raises(GraphError) as e:
        import_model(m)
    assert str(e.value).startswith("node crop_s (Slice): ") and msg in str(e.value), str(e.value)
    if name == "zero_size":  # the command: exit 2, one `error:` line, no traceback
        p = tmp_path / "m.onnx"
        onnx.save(m, str(p))
        r = run_cli(["compile", str(p), "--target", "golden", "--out", str(tmp_path / "o")])
        assert r.rc == 2 and r.err.count("\n") == 1 and r.err.startswith("error: node crop_s")
        assert not (tmp_path / "o").exists()


def test_run_time_starts_are_refused():
    """starts computed by the model (here an activation) rather than constants."""
    m, _ = conv_then(([0], [5], [2]))(np.random.default_rng(0))
    sl = next(nd for nd in m.graph.node if nd.op_type == "Slice")
    sl.input[1] = "c"
    with pytest.raises(GraphError, match=r"node crop_s \(Slice\): Slice starts 'c' is computed "
                                         "at run time"):
        import_model(m)


def test_reversed_crop_is_refused_by_the_circuit_in_one_line():
    """A negative step runs in golden and the GPU kernels; a pixel stream cannot reverse."""
    from modelcircuit.hdl.export import convert

    c, _ = _ops("negative_step")
    with pytest.raises(HdlError, match=r"node crop_s \(Gather\): indices \[8, 6, 4, 2, 0\] of "
                                       "axis 0 repeat or reverse positions of a pixel stream"):
        convert(c)


@pytest.mark.integration
@pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")
@pytest.mark.parametrize("name", ["tcn_block", "crop_2d"])
def test_crop_verify_golden_rtl_gpu_emu(name, tmp_path):
    """`verify --backends golden,rtl,gpu-emu`: bit-exact, latency and II as compiled."""
    m, shp = CASES[name](np.random.default_rng(3))
    verify_onnx_rtl(m, shp, tmp_path, "fixed<12,5>", _ort)
