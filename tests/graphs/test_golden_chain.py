"""Native chains of the golden plan (golden_chain.chain_steps, loops.c's mc_program): runs of
Dense/Softmax steps in one C call give the steps' arrays bit for bit, and
reference.execute's, on drawn MLPs whose layers change between float32, float64 and int64
arithmetic; the chain really runs; a tensor that another node or the caller reads ends a
chain; batch sizes, strided inputs and threads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.frontend.onnx.importer import import_model
from modelcircuit.graphs import golden_chain, golden_plan, host, native, reference

from .test_golden_plan import wrong_in_threads

pytestmark = pytest.mark.skipif(native.loops() is None or native.loops().program is None,
                                reason=f"no native chains here: {native.status()}")


def _mlp(sizes: list[int], relu: list[bool], softmax: bool, seed: int,
         extra_out: int | None = None) -> onnx.ModelProto:
    """Gemm layers of `sizes`; ReLU after layer i where relu[i]; Softmax last if asked;
    extra_out: a hidden layer's output also a graph output."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    outs = []
    for i, (k, n) in enumerate(zip(sizes, sizes[1:], strict=False)):
        inits += [numpy_helper.from_array(rng.normal(0, 1.5 / np.sqrt(k), (k, n))
                                          .astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.normal(0, 0.3, n).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"fc{i}"], name=f"fc{i}"))
        x = f"fc{i}"
        if relu[i]:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
        if extra_out == i:
            outs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", n]))
    if softmax:
        nodes.append(helper.make_node("Softmax", [x], ["sm"], name="sm", axis=-1))
        x = "sm"
    outs.insert(0, helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", sizes[-1]]))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", sizes[0]])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _unchained(g, monkeypatch):
    """The same graph's plan with the loops one by one (no chain)."""
    with monkeypatch.context() as m:
        m.setattr(native.loops(), "program", None)
        p = golden_plan.Plan(g)
    assert p.chained == 0
    return p


TYPES = ["fixed<6,2>", "fixed<8,3>", "fixed<12,4>", "fixed<16,6>", "fixed<20,8>",
         "fixed<24,10>", "fixed<8,3,RND_CONV,SAT>", "fixed<10,4,RND,SAT>"]


@st.composite
def mlps(draw):
    n_layers = draw(st.integers(2, 4))
    sizes = [draw(st.integers(1, 40)) for _ in range(n_layers + 1)]
    relu = [draw(st.booleans()) for _ in range(n_layers)]
    softmax = draw(st.booleans()) and sizes[-1] > 1
    layer_types = [draw(st.sampled_from(TYPES)) for _ in range(n_layers)]
    rows = draw(st.sampled_from([1, 2, 5, 64, 70]))
    return sizes, relu, softmax, layer_types, rows, draw(st.integers(0, 1 << 16))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mlps())
def test_drawn_chains_equal_the_steps_and_the_reference(monkeypatch, case):
    sizes, relu, softmax, types, rows, seed = case
    g0 = import_model(_mlp(sizes, relu, softmax, seed))
    per_layer = {f"fc{i}": {"result": t, "weight": t} for i, t in enumerate(types)}
    c = mc.compile(g0, precision=types[0], per_layer=per_layer)
    g = c.graph
    x = (2 * np.random.default_rng(seed).standard_normal((rows, sizes[0]))).astype(np.float32)
    codes = host.encode(c, x)
    p = golden_plan.Plan(g)
    event(f"chained steps: {p.chained}")
    want = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
    steps = _unchained(g, monkeypatch).execute([codes], inputs_are_codes=True)[g.outputs[0]]
    want_q = reference.execute(g, [x])[g.outputs[0]]  # floats quantized in the chain's call
    for _ in range(2):  # the second call reuses the chain's ops and arrays
        got = p.execute([codes], inputs_are_codes=True)[g.outputs[0]]
        assert got.dtype == want.dtype and np.array_equal(got, want), case
        assert got.tobytes() == steps.tobytes(), case
        got_q = p.execute([x])[g.outputs[0]]
        assert np.array_equal(got_q, want_q), case
        for xx in (x, x.astype(np.float64)):
            assert p.values(xx, True).tobytes() == \
                _unchained(g, monkeypatch).values(xx, True).tobytes(), case


def test_the_chain_runs_the_whole_mlp(monkeypatch):
    """A 4-layer MLP with a Softmax at 16 bits: every step in one chain, one C call a run."""
    c = mc.compile(import_model(_mlp([16, 64, 32, 32, 5], [True] * 3 + [False], True, 1)),
                   precision="fixed<16,6>")
    p = golden_plan.Plan(c.graph)
    assert p.chained == len(c.graph.nodes) and len(p.steps) == 1
    calls = []
    lp = native.loops()
    run = lp.run
    monkeypatch.setattr(lp, "run", lambda ops, k, n, one=False: (calls.append(k),
                                                                   run(ops, k, n, one)))
    x = np.random.default_rng(2).standard_normal((64, 16)).astype(np.float32)
    p.values(x, True)
    p.values(x, True)
    assert calls == [6, 6]  # the quantization, four GEMMs with their epilogues, the Softmax
    want = reference.execute(c.graph, [x])[c.graph.outputs[0]]
    assert np.array_equal(p.execute([x])[c.graph.outputs[0]], want)


def test_a_tensor_read_elsewhere_ends_the_chain():
    """A hidden layer's output that is also a graph output is written where the caller
    reads it: the chain stops there (two chains), and both outputs are the reference's."""
    c = mc.compile(import_model(_mlp([8, 16, 16, 16, 4], [True] * 4, False, 3, extra_out=1)),
                   precision="fixed<8,3>")
    g = c.graph
    p = golden_plan.Plan(g)
    assert len(g.outputs) == 2 and p.chained == 4 and len(p.steps) == 2  # fc0-fc1, fc2-fc3
    x = np.random.default_rng(4).standard_normal((9, 8)).astype(np.float32)
    codes = host.encode(c, x)
    want = reference.execute(g, [codes], inputs_are_codes=True)
    got = p.execute([codes], inputs_are_codes=True)
    for name in g.outputs:
        assert np.array_equal(got[name], want[name]), name


def test_batch_sizes_strided_inputs_and_threads():
    """Batch sizes change call to call (ops rebuilt per batch), a strided input is copied,
    and threads running one plan each use their own arrays."""
    c = mc.compile(import_model(_mlp([12, 24, 24, 6], [True, True, False], True, 5)),
                   precision="fixed<16,6>")
    g = c.graph
    p = golden_plan.plan(g)
    assert p.chained == len(g.nodes)
    rng = np.random.default_rng(6)
    for n in (3, 64, 0, 1, 64, 3):
        codes = host.encode(c, rng.standard_normal((n, 24)).astype(np.float32)[:, ::2])
        want = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
        got = golden_plan.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
        assert np.array_equal(got, want), n
        strided = np.empty((n, 24), codes.dtype)[:, ::2]
        strided[...] = codes
        got = golden_plan.execute(g, [strided], inputs_are_codes=True)[g.outputs[0]]
        assert np.array_equal(got, want), n
    xs = [host.encode(c, rng.standard_normal((40 + i, 12)).astype(np.float32))
          for i in range(4)]
    assert not wrong_in_threads(g, xs, 20)


def test_a_nan_in_the_chain_s_quantization_is_refused():
    """The quantization inside the chain refuses NaN and Inf as the numpy steps do."""
    c = mc.compile(import_model(_mlp([6, 8, 3], [True, False], False, 7)),
                   precision="fixed<8,3>")
    p = golden_plan.Plan(c.graph)
    assert p.whole is not None
    for bad in (np.nan, np.inf, -np.inf):
        for dt in (np.float32, np.float64):
            x = np.zeros((5, 6), dt)
            x[3, 2] = bad
            with pytest.raises(ValueError, match="NaN or Inf"):
                p.values(x, True)
            with pytest.raises(ValueError, match="NaN or Inf"):
                p.execute([x])


# -- the int16 GEMM ------------------------------------------------------------------------
def _i16_everywhere(monkeypatch):
    """Every float64 layer whose codes and sums allow it runs the int16 GEMM (the size rule
    off), so that the drawn models exercise it."""
    monkeypatch.setattr(golden_chain, "I16_MIN", {1: 1, 2: 1})
    monkeypatch.setattr(golden_chain, "I16_MIN_KN", {1: 1, 2: 1})


def _kinds(p: golden_plan.Plan, work_n: int) -> list[int]:
    return [op.kind for c in p._work(work_n).chains.values() for op in c[0]]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mlps(), st.booleans())
def test_drawn_int16_gemms_equal_the_reference(monkeypatch, case, extremes):
    """The int16 x int16 -> int32 GEMM (where the plan proves every partial sum under 2**31)
    gives the float64 GEMM's codes; inputs at the type's ends when `extremes`."""
    if native.loops().i16 == 0:
        pytest.skip("no vector int16 kernel here")
    sizes, relu, softmax, types, rows, seed = case
    types = [t.replace("fixed<8,3", "fixed<16,6").replace("fixed<6,2", "fixed<14,5")
             for t in types]  # mostly float64 layers
    _i16_everywhere(monkeypatch)
    c = mc.compile(import_model(_mlp(sizes, relu, softmax, seed)), precision=types[0],
                   per_layer={f"fc{i}": {"result": t, "weight": t} for i, t in enumerate(types)})
    g = c.graph
    x = (2 * np.random.default_rng(seed).standard_normal((rows, sizes[0]))).astype(np.float32)
    if extremes:
        x[::2] = np.where(x[::2] > 0, 1e6, -1e6)  # saturated: qmax / qmin codes
    codes = host.encode(c, x)
    p = golden_plan.Plan(g)
    want = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
    got = p.execute([codes], inputs_are_codes=True)[g.outputs[0]]
    event(f"int16 GEMMs: {_kinds(p, rows).count(native.OP_GEMM_I16)}")
    assert np.array_equal(got, want), case
    assert np.array_equal(p.execute([x])[g.outputs[0]], reference.execute(g, [x])[g.outputs[0]])


def test_the_int16_gemm_runs_where_it_pays():
    """The 16-bit 640-128-128-640 MLP: the int16 GEMM on its large layers (at the default
    size rule), the float64 one on none of them; the reference's codes at its bound's ends."""
    if native.loops().i16 == 0:
        pytest.skip("no vector int16 kernel here")
    c = mc.compile(import_model(_mlp([640, 128, 128, 640], [True, True, False], False, 8)),
                   precision="fixed<16,6>")
    p = golden_plan.Plan(c.graph)
    x = np.random.default_rng(9).standard_normal((37, 640)).astype(np.float32) * 300
    want = reference.execute(c.graph, [x])[c.graph.outputs[0]]
    assert np.array_equal(p.execute([x])[c.graph.outputs[0]], want)
    kinds = _kinds(p, 37)
    assert kinds.count(native.OP_GEMM_I16) == 3 and native.OP_GEMM not in kinds, kinds


@pytest.mark.parametrize("extra", [[], ["-mno-avx512f"], ["-mno-avx2"]],
                         ids=["native", "avx2", "plain"])
def test_each_int16_kernel_is_exact(tmp_path, monkeypatch, extra):
    """Each of the three kernels (AVX-512 VNNI, AVX2, plain loops: whichever this CPU
    builds) on odd shapes, row counts around its blocks, and codes at int16's ends whose
    sums stay under 2**31 == an int64 product."""
    import ctypes

    from modelcircuit.util import native as build

    monkeypatch.setenv("MODELCIRCUIT_CACHE", str(tmp_path))
    from importlib import resources
    src = resources.files("modelcircuit").joinpath("templates/golden/loops.c").read_text()
    try:
        path = build.shared_library(src, cc=build.compiler("CC", "gcc", "cc"),
                                    flags=native.FLAGS + extra, kind="golden-test")
    except build.BuildError as e:
        pytest.skip(f"cannot build with {extra}: {e}")
    L = native.Loops(ctypes.CDLL(str(path)))
    if L.program is None:
        pytest.skip(native.status())
    rng = np.random.default_rng(len(extra))
    for rows, k, n in [(1, 1, 1), (3, 33, 37), (4, 64, 64), (5, 7, 129), (9, 640, 17),
                       (2, 2, 80), (6, 31, 15), (8, 128, 130), (19, 64, 32), (17, 30, 7)]:
        x = rng.integers(-(1 << 15), 1 << 15, (rows, k))
        x[0, :] = -(1 << 15)
        wmax = max(1, min((1 << 15) - 1, ((1 << 31) - 1) // ((1 << 15) * k)))
        w = rng.integers(-wmax, wmax + 1, (k, n))
        w[:, 0] = -wmax  # the bound's end: |sum| = k * 2**15 * wmax < 2**31
        kp = k + (k & 1)
        pad = np.zeros((kp, n), np.int16)
        pad[:k] = w
        wp = np.ascontiguousarray(pad.reshape(kp // 2, 2, n).transpose(0, 2, 1))
        xd = x.astype(np.float64)
        z = np.empty((rows, kp), np.int16)
        acc = np.empty((rows, n), np.int32)
        y = np.empty((rows, n))
        ops = (native.Op * 1)(native.Op(
            kind=native.OP_GEMM_I16, dtype=native.DTYPES[np.dtype(np.float64)], k=k, n=n,
            mode=native.EPI_NONE, x=xd.ctypes.data, y=y.ctypes.data, w=wp.ctypes.data,
            b=None, lo=-np.inf, hi=np.inf, scale=0.25, z=z.ctypes.data, acc=acc.ctypes.data))
        L.run(ops, 1, rows)
        assert np.array_equal(y, (x @ w) * 0.25), (extra, rows, k, n)


def test_the_arithmetic_says_where_int16_products_are_exact():
    """arithmetic.choose marks a float64 sum int16-exact only where the input and weight
    codes fit int16 and every partial sum is under 2**31 (what inspect's golden_gemm shows)."""
    from modelcircuit.graphs import arithmetic

    model = import_model(_mlp([64, 32, 16], [True, False], False, 10))
    for prec, want in (("fixed<16,6>", True), ("fixed<20,8>", False), ("fixed<8,3>", True)):
        c = mc.compile(model, precision=prec)
        a = arithmetic.plan(c.graph)
        assert a and all(x.int16 == want for x in a.values()), (prec, a)
        assert all(("int16" in str(x)) == want for x in a.values())
        for x in a.values():  # the bound that decided it
            assert not x.int16 or x.gemm_bits <= 31


def _cnn(cin: int, cout: int, k: int, stride: int, pad: int, seed: int) -> onnx.ModelProto:
    """(cin, 9, 7) -> Conv k x k (cout) -> ReLU -> Conv 3x3 (cout) -> Flatten -> Gemm (5)."""
    rng = np.random.default_rng(seed)
    h, w = 9, 7
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w1", rng.normal(0, 1 / np.sqrt(cin * k * k), (cout, cin, k, k))),
        ("b1", rng.normal(0, 0.1, cout)),
        ("w2", rng.normal(0, 1 / np.sqrt(cout * 9), (cout, cout, 3, 3))),
        ("b2", rng.normal(0, 0.1, cout)),
        ("wf", rng.normal(0, 0.1, (cout * oh * ow, 5))), ("bf", rng.normal(0, 0.1, 5))]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[k, k],
                              strides=[stride, stride], pads=[pad] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c2"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", cin, h, w])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("cin,cout,k,stride,pad", [(4, 16, 3, 1, 1), (8, 32, 3, 2, 0),
                                                   (3, 17, 5, 1, 2), (16, 16, 1, 1, 0)])
@pytest.mark.parametrize("forced", [False, True])
def test_int16_convolutions_equal_the_reference(monkeypatch, cin, cout, k, stride, pad, forced):
    """The convolutions' window rows through the int16 GEMM (the default size rule, and
    forced on every layer) == the reference, saturated inputs included."""
    lp = native.loops()
    if lp.i16 == 0:
        pytest.skip("no vector int16 kernel here")
    if forced:
        _i16_everywhere(monkeypatch)
    c = mc.compile(import_model(_cnn(cin, cout, k, stride, pad, cin + cout)),
                   precision="fixed<16,6>")
    g = c.graph
    x = (3 * np.random.default_rng(k).standard_normal((6, cin, 9, 7))).astype(np.float32)
    x[1] = 1e6
    x[2] = -1e6
    kinds: list[int] = []
    run = lp.run
    monkeypatch.setattr(lp, "run", lambda ops, n, rows, one=False: (
        kinds.extend(o.kind for o in (ops if not isinstance(ops, int) else [])),
        run(ops, n, rows, one)))
    codes = host.encode(c, x)
    want = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
    got = golden_plan.Plan(g).execute([codes], inputs_are_codes=True)[g.outputs[0]]
    assert np.array_equal(got, want)
    if forced or cin * k * k >= 16:
        assert native.OP_GEMM_I16 in kinds, kinds


def _depthwise(c: int, m: int, k: int, stride: int, pad: int, one_d: bool, seed: int
               ) -> onnx.ModelProto:
    """A depthwise Conv (group = c, c*m outputs) -> ReLU -> a 1x1 Conv (4)."""
    rng = np.random.default_rng(seed)
    ks = [k] if one_d else [k, k]
    shp = ["N", c, 11] if one_d else ["N", c, 9, 7]
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w1", rng.normal(0, 0.5, (c * m, 1, *ks))), ("b1", rng.normal(0, 0.2, c * m)),
        ("w2", rng.normal(0, 0.3, (4, c * m) + (1,) * len(ks)))]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["d"], kernel_shape=ks, group=c,
                              strides=[stride] * len(ks), pads=[pad] * 2 * len(ks)),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], kernel_shape=[1] * len(ks))]
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      shp)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("c,m,k,stride,pad,one_d", [(8, 1, 3, 1, 1, False),
                                                    (5, 2, 3, 2, 0, False),
                                                    (16, 1, 5, 1, 2, True),
                                                    (3, 3, 1, 1, 0, False)])
@pytest.mark.parametrize("prec", ["fixed<8,3>", "fixed<16,6>", "fixed<24,10>"])
def test_depthwise_loop_equals_the_reference(monkeypatch, c, m, k, stride, pad, one_d, prec):
    """The depthwise C loop (loops.c mc_dwconv): multipliers, strides, padding, 1-D, float32
    and float64 sums (int64 ones run the reference), saturated inputs == the reference."""
    lp = native.loops()
    calls: list[int] = []
    def counted(f):
        return lambda *a: (calls.append(1), f(*a))

    table = {key: counted(f) for key, f in lp.dwconv.items()}
    monkeypatch.setattr(lp, "dwconv", table)
    model = import_model(_depthwise(c, m, k, stride, pad, one_d, c * m + k))
    cc = mc.compile(model, precision=prec)
    g = cc.graph
    x = (2 * np.random.default_rng(c).standard_normal((5, *host.input_shape(cc)))
         ).astype(np.float32)
    x[1] = 1e6
    x[2] = -1e6
    codes = host.encode(cc, x)
    want = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
    got = golden_plan.Plan(g).execute([codes], inputs_are_codes=True)[g.outputs[0]]
    assert np.array_equal(got, want)
    from modelcircuit.graphs import arithmetic

    dw = next(n for n in g.nodes if n.op == "Conv")  # the depthwise one comes first
    assert bool(calls) == arithmetic.plan(g)[dw.name].fused, (prec, calls)
