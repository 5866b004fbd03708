"""The convolutional kernels (conv.cu.j2, pool.cu.j2, resize.cu.j2, concat.cu.j2) on hand-built
channels-last graphs that cover 2-D and 1-D, strides, asymmetric pads, group 1, grouped and
depthwise Conv with and without bias and fused ReLU, MaxPool, AvgPool (count a power of two
and not, global), Resize, channel Concat of inputs of other types, per-channel constants
and thresholds on a frame: gpu-emu equals the golden model
bit for bit at fixed<16,6> and fixed<8,3> (output types with every rounding and overflow
mode), and float32 within a guaranteed rounding bound (Conv) or exactly (the rest, which
sum in the golden model's order)."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit import gpu_backend as gb
from modelcircuit.graphs import reference
from modelcircuit.graphs.compiled import CompiledGraph
from modelcircuit.graphs.ir import Graph, GraphError, Node, Tensor
from modelcircuit.graphs.ops import ConvAttrs
from modelcircuit.graphs.types import FLOAT32, FixedType, parse_type

# name: (op, inputs, output shape, attributes); _fixed_graph and _float_graph add the types
NODES = [
    ("c1", "Conv", ["x", "c1_w", "c1_b"], (7, 9, 6),
     {"kernel": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "relu": True}),
    ("c2", "Conv", ["c1", "c2_w"], (4, 4, 12),  # depthwise, multiplier 2, asymmetric pads
     {"kernel": [3, 3], "strides": [2, 2], "pads": [0, 1, 2, 0], "group": 6}),
    ("c3", "Conv", ["x", "c3_w", "c3_b"], (7, 4, 4),  # two groups
     {"kernel": [2, 2], "strides": [1, 2], "pads": [0, 0, 1, 0], "group": 2}),
    ("mp", "MaxPool", ["c1"], (4, 9, 6), {"kernel": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ("ap", "AvgPool", ["c1", "ap_r"], (4, 4, 6),  # count 9: an inexact reciprocal
     {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 0]}),
    ("gap", "AvgPool", ["c2", "gap_r"], (1, 1, 12), {"kernel": [4, 4], "strides": [1, 1], "pads": [0] * 4}),
    ("rs", "Resize", ["x"], (14, 27, 4), {"scales": [2, 3]}),
    ("cc", "Concat", ["c2", "ap"], (4, 4, 18), {"axis": 2}),
    ("d1", "Conv", ["v", "d1_w", "d1_b"], (6, 5),
     {"kernel": [3], "strides": [2], "pads": [1, 2], "relu": True}),
    ("dm", "MaxPool", ["d1"], (3, 5), {"kernel": [2], "strides": [2], "pads": [0, 0]}),
    ("da", "AvgPool", ["d1", "da_r"], (6, 5), {"kernel": [3], "strides": [1], "pads": [1, 1]}),
    ("dr", "Resize", ["d1"], (12, 5), {"scales": [2]}),
    ("dc", "Concat", ["d1", "da"], (6, 10), {"axis": 1}),
    ("mu", "Mul", ["c3", "mu_w"], (7, 4, 4), {}),  # per-channel constants on a frame
    ("ad", "Add", ["mp", "ad_b"], (4, 9, 6), {}),
    ("th", "Threshold", ["c3", "th_t", "th_s", "th_b"], (7, 4, 4), {}),  # a row per channel
]
INPUTS = {"x": (7, 9, 4), "v": (10, 3)}
OUTPUTS = ("mu", "ad", "th", "gap", "rs", "cc", "dm", "dr", "dc")
WEIGHTS = {"c1_w": (3, 3, 4, 6), "c1_b": (6,), "c2_w": (3, 3, 1, 12), "c3_w": (2, 2, 2, 4),
           "c3_b": (4,), "d1_w": (3, 3, 5), "d1_b": (5,), "mu_w": (4,), "ad_b": (6,)}
# output types per precision family: every rounding and overflow mode appears
OUT_MODS = {"c1": "RND_CONV,SAT", "c2": "TRN,WRAP", "c3": "RND,WRAP", "ap": "RND,SAT",
            "gap": "TRN,SAT", "cc": "RND_CONV,WRAP", "d1": "RND,SAT", "da": "TRN,WRAP",
            "dc": "RND_CONV,SAT", "mu": "RND,WRAP", "ad": "RND_CONV,SAT"}
# (extra width, extra integer bits) of an output type over the precision's; the default
# (0, 1): one integer bit more than the inputs, so overflows do happen. ap and da have more
# fractional bits than the Concat they feed: it rounds them.
OUT_BITS = {"ap": (3, 1), "da": (4, 1)}
RECIP = "ufixed<12,0>"


def _fixed_graph(precision: str, wrap: bool = True) -> Graph:
    """The graph at one precision family; wrap=False makes every WRAP output type SAT (to
    show that the test's inputs do overflow)."""
    p = parse_type(precision)
    assert isinstance(p, FixedType)
    w, i = p.width, p.int_bits
    rng = np.random.default_rng(w)
    types: dict[str, object] = {n: p for n in INPUTS}
    consts: dict[str, np.ndarray] = {}
    for name, shp in WEIGHTS.items():
        t = FixedType(w, i - 2) if name.endswith("_w") else FixedType(w + 2, i + 2)
        types[name] = t
        consts[name] = rng.integers(t.qmin, t.qmax + 1, size=shp)
    nodes = []
    for name, op, ins, _, at in NODES:
        mods = OUT_MODS.get(name)
        if op in ("MaxPool", "Resize"):
            types[name] = types[ins[0]]  # the output type is the input's
        elif op == "Threshold":  # 4 channels x 5 sorted thresholds over the input's codes
            t = types[ins[0]]
            thr = np.sort(rng.integers(t.qmin // 2, t.qmax // 2, size=(4, 5)), axis=1)
            for cn, v in zip(ins[1:], (thr, rng.integers(1, 3, size=(4, 5)),
                                       rng.integers(-3, 1, size=4)), strict=True):
                consts[cn], types[cn] = v, parse_type("fixed<8,8>")
            types[name] = parse_type("fixed<8,8>")
        else:
            dw, di = OUT_BITS.get(name, (0, 1))
            mods = mods if wrap else mods.replace("WRAP", "SAT")
            types[name] = parse_type(f"fixed<{w + dw},{i + di},{mods}>")
        if op == "Conv":
            tx, tw = types[ins[0]], types[ins[1]]
            k = int(np.prod(consts[ins[1]].shape[:-1]))
            bits = tx.width + tw.width + int(np.ceil(np.log2(k))) + 3
            at = {**at, "acc": f"fixed<{bits},{bits - tx.frac - tw.frac}>"}
        if op == "AvgPool":
            count = int(np.prod(at["kernel"]))
            rt = parse_type(RECIP)
            types[ins[1]] = rt
            consts[ins[1]] = np.array(int(np.floor(2.0 ** rt.frac / count + 0.5)))
            at = {**at, "recip_type": RECIP, "acc": f"fixed<{w + 8},{i + 8}>"}
        nodes.append(Node.make(name, op, ins, [name], **at))
    shapes = {**INPUTS, **{n: v.shape for n, v in consts.items()},
              **{n: s for n, _, _, s, _ in NODES}}
    tensors = {n: Tensor(n, tuple(shapes[n]), t) for n, t in types.items()}
    return Graph(f"cnn_{w}_{i}", tuple(INPUTS), OUTPUTS, tuple(nodes), tensors, consts)


def _compiled(g: Graph) -> CompiledGraph:
    return CompiledGraph(g, {}, (), f"test-{g.name}")


def _codes(g: Graph, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for name in g.inputs:
        t = g.tensor(name).dtype
        x = rng.integers(t.qmin, t.qmax + 1, size=(n,) + g.tensor(name).shape)
        x[0], x[1] = t.qmax, t.qmin  # every window at the extremes
        x[2] = 0
        out.append(x)
    return out


@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<8,3>"])
def test_cnn_ops_bit_exact(precision):
    g = _fixed_graph(precision)
    xs = _codes(g, 67, seed=1)
    want = reference.execute(g, xs, inputs_are_codes=True)
    got = gb.execute(_compiled(g), xs, emulate=True)
    for o in g.outputs:
        assert got[o].shape == want[o].shape, o
        bad = np.argwhere(got[o] != want[o])
        assert bad.size == 0, f"{o}: {len(bad)} codes differ, first at {bad[0].tolist()}: " \
            f"gpu-emu {got[o][tuple(bad[0])]} vs golden {want[o][tuple(bad[0])]}"
        assert len(np.unique(want[o])) > 2, f"degenerate test: {o} nearly constant"
    sat = reference.execute(_fixed_graph(precision, wrap=False), xs, inputs_are_codes=True)
    assert any((sat[o] != want[o]).any() for o in g.outputs), "no output type wrapped"


def _float_graph() -> tuple[Graph, dict[str, str]]:
    """Every node reads graph inputs (no node reads another node's float32 result), so each
    output's error is that of its own op; returns the graph and, per added input, the
    tensor it stands for."""
    rng = np.random.default_rng(3)
    consts = {n: rng.normal(0, 1, size=s).astype(np.float32) for n, s in WEIGHTS.items()}
    shapes = {**INPUTS, **WEIGHTS, **{n: s for n, _, _, s, _ in NODES}}
    inputs, stand_in, nodes = list(INPUTS), {}, []
    for name, op, ins, _, at in NODES:
        if op == "Threshold":  # fixed point only
            continue
        act = ins[:1] if op != "Concat" else ins
        new = []
        for a in act:
            if a not in INPUTS:
                new.append(f"in_{name}_{a}")
                stand_in[new[-1]] = a
                inputs.append(new[-1])
            else:
                new.append(a)
        rest = [] if op in ("Concat", "AvgPool") else ins[1:]
        nodes.append(Node.make(name, op, new + rest, [name], **at))
    shapes.update({n: shapes[a] for n, a in stand_in.items()})
    tensors = {n: Tensor(n, tuple(s), FLOAT32) for n, s in shapes.items()}
    outs = tuple(n.name for n in nodes)
    return Graph("cnn_float", tuple(inputs), outs, tuple(nodes), tensors, consts), stand_in


def test_cnn_ops_float32():
    g, _ = _float_graph()
    rng = np.random.default_rng(4)
    xs = [rng.normal(0, 2, size=(41,) + g.tensor(n).shape).astype(np.float32) for n in g.inputs]
    want = reference.execute(g, xs, inputs_are_codes=True)
    got = gb.execute(_compiled(g), xs, emulate=True)
    env = dict(zip(g.inputs, xs, strict=True))
    u = 2.0 ** -24
    for node in g.nodes:
        o = node.outputs[0]
        assert got[o].dtype == np.float32 and got[o].shape == want[o].shape, o
        if node.op != "Conv":  # the same float32 operations in the same order
            np.testing.assert_array_equal(got[o], want[o], err_msg=o)
            continue
        # any summation order of K products and a bias: each side within (K + 1) u of
        # sum |x w| + |b| (Higham, Accuracy and Stability, 2nd ed., eq. 3.5), ReLU 1-Lipschitz
        a = ConvAttrs.of(node)
        w = np.abs(np.asarray(g.constants[node.inputs[1]], dtype=np.float64))
        mag = reference.conv_sum(np.abs(env[node.inputs[0]].astype(np.float64)), w, a,
                                 want[o].shape[1:-1])
        if len(node.inputs) > 2:
            mag = mag + np.abs(np.asarray(g.constants[node.inputs[2]], dtype=np.float64))
        k = int(np.prod(w.shape[:-1]))
        bound = 2 * (k + 1) * u * mag / (1 - (k + 1) * u) + 1e-30
        diff = np.abs(got[o].astype(np.float64) - want[o])
        assert (diff <= bound).all(), f"{o}: worst {np.max(diff / bound):.2f} x the bound"
        assert np.abs(want[o]).max() > 1.0


def test_geometry_is_checked():
    g = _fixed_graph("fixed<8,3>")
    bad = tuple(n.with_attrs(strides=(1, 1)) if n.name == "c2" else n for n in g.nodes)
    with pytest.raises(GraphError, match=r"node c2 \(Conv\): output \[4, 4, 12\] does not match"):
        gb.generate(g.replace(nodes=bad))
    bad = tuple(n.with_attrs(scales=(2, 2)) if n.name == "rs" else n for n in g.nodes)
    with pytest.raises(GraphError, match=r"node rs \(Resize\): scales \[2, 2\] do not take"):
        gb.generate(g.replace(nodes=bad))
    bad = tuple(n.with_attrs(group=3) if n.name == "c1" else n for n in g.nodes)
    with pytest.raises(GraphError, match=r"node c1 \(Conv\): weights \[3, 3, 4, 6\], group 3"):
        gb.generate(g.replace(nodes=bad))


@pytest.mark.parametrize("kind", ["fixed", "float32"])
def test_cnn_kernels_compile_for_sm90(kind):
    """Every CNN kernel compiles for sm_90 with each CUDA compiler found here (NVRTC has no
    math.h: INFINITY must come from common.cuh)."""
    import re

    from modelcircuit.gpu_backend import nvrtc

    g = _fixed_graph("fixed<16,6>") if kind == "fixed" else _float_graph()[0]
    prog = gb.lower(_compiled(g))
    assert "__syncthreads" not in prog.source and "__shared__" not in prog.source
    assert nvrtc.available(), "no CUDA compiler: the kernels cannot be checked"
    for backend in nvrtc.available():
        ptx = gb.compile_ptx(prog.source, arch="sm_90", backend=backend).decode()
        assert set(re.findall(r"\.entry\s+(\w+)", ptx)) == {k.kname for k in prog.kernels}


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<8,3>"])
def test_cnn_device_bit_exact(precision):
    """On a CUDA device: the same kernels, replayed from a CUDA graph or launched one by one,
    equal the golden model for batch sizes across the buckets."""
    g = _fixed_graph(precision)
    m = gb.load(_compiled(g))
    for n in (1, 3, 64, 1000):
        xs = _codes(g, n, seed=n)
        want = reference.execute(g, xs, inputs_are_codes=True)
        for graph in (True, False):
            got = m.run_all(xs, graph=graph)
            for o in g.outputs:
                np.testing.assert_array_equal(got[o], want[o], err_msg=o)


def _models_exact(c, n: int, seed: int = 0) -> None:
    from .conftest import sample_inputs

    g = c.graph
    codes = reference.quantize_inputs(g, sample_inputs(g, n, seed))
    want = reference.execute(g, codes, inputs_are_codes=True)
    got = gb.execute(c, codes, emulate=True)
    for o in g.outputs:
        bad = np.argwhere(got[o] != want[o])
        assert bad.size == 0, f"{o}: {len(bad)} codes differ, first at {bad[0].tolist()}"
        assert len(np.unique(want[o])) > 1, "degenerate test: constant output"


@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<8,3>"])
def test_digits_cnn_bit_exact(precision):
    from .conftest import compiled, model_path

    model_path("digits_cnn")
    _models_exact(compiled("digits_cnn", precision), 257)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["separable_conv_model_ch_last", "branched_model_ch_last",
                                  "tiny_unet_ch_last"])
def test_brevitas_cnn_frames_bit_exact(name):
    """The Brevitas QONNX CNNs with their own types, two full frames (512x512x3 or
    256x256x3): gpu-emu equals the golden model."""
    from .conftest import compiled

    _models_exact(compiled(name, None), 2)


def test_batch_buckets_fit_the_device():
    """A frame of megabytes per sample keeps only the batch buckets whose arena fits in a
    quarter of the device memory; an MLP keeps them all; batch 1 when none fits."""
    from modelcircuit.gpu_backend.runtime import DEFAULT_BUCKETS, fit_buckets

    h200 = 141 * 2**30
    assert fit_buckets(DEFAULT_BUCKETS, 2048, h200) == DEFAULT_BUCKETS
    assert fit_buckets(DEFAULT_BUCKETS, 10 * 2**20, h200) == (1, 64)
    assert fit_buckets(DEFAULT_BUCKETS, 2**40, h200) == (1,)
    assert fit_buckets((4096, 64), 2**40, h200) == (1,)
    assert fit_buckets((4096, 64), 2**20, h200) == (64, 4096)
    per_sample = gb.lower(_compiled(_fixed_graph("fixed<16,6>"))).plan["arena_bytes_per_sample"]
    assert fit_buckets(DEFAULT_BUCKETS, per_sample, 2**30)[-1] * per_sample <= 2**28


@pytest.mark.gpu
@pytest.mark.slow
def test_brevitas_cnn_device_bit_exact():
    """On a CUDA device: a 256x256x3 Brevitas CNN with Resize and Concat, two frames."""
    from .conftest import compiled, sample_inputs

    c = compiled("branched_model_ch_last", None)
    g = c.graph
    codes = reference.quantize_inputs(g, sample_inputs(g, 2))
    want = reference.execute(g, codes, inputs_are_codes=True)
    got = gb.load(c).run_all(codes)
    for o in g.outputs:
        np.testing.assert_array_equal(got[o], want[o], err_msg=o)


def _cnn_onnx(seed: int = 0):
    """A channels-first ONNX CNN with every CNN op the importer knows: Conv (+ bias, ReLU),
    depthwise strided Conv with asymmetric pads, MaxPool, AveragePool with pads
    (count_include_pad), Resize nearest, channel Concat, 1x1 Conv, GlobalAveragePool,
    Flatten, Concat of vectors, Gemm."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)
    inits = [init("w1", rng.normal(0, 0.4, (6, 2, 3, 3))), init("b1", rng.normal(0, 0.1, 6)),
             init("w2", rng.normal(0, 0.4, (12, 1, 3, 3))), init("b2", rng.normal(0, 0.1, 12)),
             init("w3", rng.normal(0, 0.3, (4, 18, 1, 1))),
             init("sc", [1, 1, 2, 2]),
             init("wf", rng.normal(0, 0.3, (4 * 2 * 2 + 18, 5))), init("bf", rng.normal(0, 0.1, 5))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["m1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[0, 1, 1, 0], group=6),
        helper.make_node("AveragePool", ["c2"], ["a2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=1),
        helper.make_node("Resize", ["m1", "", "sc"], ["u1"], mode="nearest"),
        helper.make_node("MaxPool", ["u1"], ["m2"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Concat", ["a2", "m2"], ["cc"], axis=1),
        helper.make_node("Conv", ["cc", "w3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("GlobalAveragePool", ["cc"], ["g"]),
        helper.make_node("Flatten", ["c3"], ["f3"], axis=1),
        helper.make_node("Flatten", ["g"], ["fg"], axis=1),
        helper.make_node("Concat", ["f3", "fg"], ["ff"], axis=1),
        helper.make_node("Gemm", ["ff", "wf", "bf"], ["y"]),
    ]
    g = helper.make_graph(nodes, "cnn_ops",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.fixture(scope="module")
def cnn_onnx_path(tmp_path_factory):
    import onnx

    p = tmp_path_factory.mktemp("cnn") / "cnn_ops.onnx"
    onnx.save(_cnn_onnx(), str(p))
    return p


@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<8,3>"])
def test_onnx_cnn_bit_exact(cnn_onnx_path, precision):
    """Import, compile and run: the CNN ops as the importer and passes write them (host
    Transpose, recip constants, a Gather that reorders the flattened frame)."""
    import modelcircuit as mc

    c = mc.compile(mc.load_onnx(str(cnn_onnx_path)), precision=precision)
    ops = {n.op for n in c.graph.nodes}
    assert {"Conv", "MaxPool", "AvgPool", "Resize", "Concat"} <= ops, ops
    _models_exact(c, 257)


def test_onnx_cnn_float32(cnn_onnx_path):
    """float32: gpu-emu within the float32 rounding bound (tests/conftest.py) of the golden
    model and of onnxruntime."""
    import onnxruntime as ort

    import modelcircuit as mc
    from tests.conftest import assert_float32_close

    from .conftest import sample_inputs

    c = mc.compile(mc.load_onnx(str(cnn_onnx_path)), precision="float32")
    g = c.graph
    x = (sample_inputs(g, 100, seed=5)[0] / 4).astype(np.float32)
    got = gb.execute(c, [x], emulate=True)[g.outputs[0]]
    golden = reference.execute(g, [x])[g.outputs[0]]
    assert_float32_close(got, golden, c, x, "gpu-emu - golden")
    s = ort.InferenceSession(str(cnn_onnx_path), providers=["CPUExecutionProvider"])
    ref = np.concatenate([s.run(None, {"x": r[None]})[0] for r in x])  # batch 1 as written
    assert_float32_close(got, ref, c, x, "gpu-emu - onnxruntime")


@pytest.mark.parametrize("name", ["conv1d_small_keras", "conv2d_small_keras"])
def test_verify_cli_golden_gpu_emu(name, capsys):
    """`modelcircuit verify --backends golden,gpu-emu` on the keras CNNs: exit 0, bit-exact."""
    from modelcircuit import cli
    from tests.conftest import shared_model

    rc = cli.main(["verify", str(shared_model(name)), "--precision", "fixed<8,3>",
                   "--backends", "golden,gpu-emu", "--vectors", "64"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "64/64" in out and "bit-exact: yes" in out
