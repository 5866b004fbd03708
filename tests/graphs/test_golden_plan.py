"""The prepared golden model (graphs/golden_plan.py) gives reference.execute's arrays bit for
bit: on models (MLPs, CNNs with residual sums and pooling) at several precisions, on drawn
layer types across the float32/float64 bounds of its fast paths, on repeated calls and batch
sizes (reused work arrays), and every fast path's bound is shown to matter: forced on beyond
it, the same comparison fails."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.graphs import golden_fast, golden_plan, host, reference
from modelcircuit.graphs.ir import Graph, GraphError, Node, Tensor
from modelcircuit.graphs.passes.accumulators import accumulator_types
from modelcircuit.graphs.types import FixedType, Overflow, Rounding

from .test_arithmetic import _codes

DATA = Path(mc.__file__).resolve().parent / "data"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "models"


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


def _residual_cnn() -> onnx.ModelProto:
    """8x8x3 -> conv 3x3 (4) -> ReLU -> conv 3x3 (4) + the first conv's output (residual) ->
    ReLU -> MaxPool 2x2 -> Flatten -> Gemm (5): every fast path of the plan on one model."""
    rng = np.random.default_rng(3)
    inits = [_init("w1", rng.normal(0, 0.5, (4, 3, 3, 3))), _init("b1", rng.normal(0, 0.1, 4)),
             _init("w2", rng.normal(0, 0.5, (4, 4, 3, 3))), _init("b2", rng.normal(0, 0.1, 4)),
             _init("wf", rng.normal(0, 0.3, (64, 5))), _init("bf", rng.normal(0, 0.1, 5))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "c1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"])]
    g = helper.make_graph(nodes, "rescnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _models(tmp: Path) -> dict[str, Path]:
    p = tmp / "rescnn.onnx"
    onnx.save(_residual_cnn(), str(p))
    out = {"rescnn": p, "digits_cnn": DATA / "digits_cnn.onnx"}
    for name in ("three_layer_keras", "qkeras_jettagging"):
        if (SHARED / f"{name}.onnx").exists():
            out[name] = SHARED / f"{name}.onnx"
    return out


PRECISIONS = ["fixed<16,6>", "fixed<8,3>", "fixed<24,10>", "fixed<6,2,RND_CONV,SAT>",
              "fixed<10,4,RND,SAT>", "fixed<12,5,TRN,WRAP>", "float32"]


@pytest.mark.parametrize("prec", PRECISIONS)
def test_models_equal_the_reference(tmp_path, prec):
    for name, path in _models(tmp_path).items():
        c = mc.compile(mc.load_onnx(path), precision=prec)
        g = c.graph
        shp = host.input_shape(c)
        for n in (1, 7, 33):  # several batch sizes, each run twice: reused work arrays
            x = (3 * np.random.default_rng(n).standard_normal((n, *shp))).astype(np.float32)
            codes = host.encode(c, x)
            want = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
            for _ in range(2):
                got = golden_plan.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
                assert got.dtype == want.dtype and np.array_equal(got, want), (name, prec, n)
            if getattr(c, "head", None) is None:  # the plan's own quantization
                want_q = reference.execute(g, [x])[g.outputs[0]]
                got_q = golden_plan.execute(g, [x])[g.outputs[0]]
                assert np.array_equal(got_q, want_q), (name, prec, n)
            # mc.run (the plan, decoded in one pass) == the definition decoded as before
            want_v = host.decode(c, want)
            got_v = mc.run(c, x)
            assert got_v.dtype == want_v.dtype and np.array_equal(got_v, want_v), (name, prec)


def test_outputs_are_fresh_arrays():
    """The reused work arrays never reach the caller: a second call leaves the first's
    results as they were."""
    c = mc.compile(mc.load_onnx(DATA / "digits_cnn.onnx"), precision="fixed<8,3>")
    rng = np.random.default_rng(0)
    x1, x2 = (rng.standard_normal((5, *host.input_shape(c))).astype(np.float32)
              for _ in range(2))
    a = mc.run(c, x1)
    keep = a.copy()
    b = mc.run(c, x2)
    assert np.array_equal(a, keep) and not np.array_equal(a, b)


def test_threads_share_a_plan():
    """Serve's threads run one plan at once: each thread has its own work arrays."""
    c = mc.compile(mc.load_onnx(DATA / "digits_cnn.onnx"), precision="fixed<16,6>")
    g = c.graph
    xs = [host.encode(c, np.random.default_rng(i).standard_normal(
        (16, *host.input_shape(c))).astype(np.float32)) for i in range(4)]
    assert not wrong_in_threads(g, xs, 10)


def wrong_in_threads(g: Graph, xs: list[np.ndarray], calls: int) -> list[int]:
    """Each of len(xs) threads runs the graph's plan `calls` times on its input: the threads
    whose result ever differed from reference.execute's."""
    want = [reference.execute(g, [x], inputs_are_codes=True)[g.outputs[0]] for x in xs]
    bad: list[int] = []

    def work(i: int) -> None:
        for _ in range(calls):
            got = golden_plan.execute(g, [xs[i]], inputs_are_codes=True)[g.outputs[0]]
            if not np.array_equal(got, want[i]):
                bad.append(i)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return bad


# -- drawn layer types ---------------------------------------------------------------------
def _sum_graph(xt: FixedType, ta: FixedType, tb: FixedType, ts: FixedType, tr: FixedType,
               wa: np.ndarray, wb: np.ndarray, sub: bool) -> Graph:
    """x -> Dense a, x -> Dense b; Add (or Sub) of the two activations -> s; ReLU -> r."""
    k, n = wa.shape
    wt = FixedType(12, 4)
    tensors = {"x": Tensor("x", (k,), xt), "wa": Tensor("wa", wa.shape, wt),
               "wb": Tensor("wb", wb.shape, wt), "a": Tensor("a", (n,), ta),
               "b": Tensor("b", (n,), tb), "s": Tensor("s", (n,), ts), "r": Tensor("r", (n,), tr)}
    nodes = (Node.make("da", "Dense", ["x", "wa"], ["a"], relu=False),
             Node.make("db", "Dense", ["x", "wb"], ["b"], relu=False),
             Node.make("s", "Sub" if sub else "Add", ["a", "b"], ["s"]),
             Node.make("r", "Relu", ["s"], ["r"]))
    g = Graph("g", ("x",), ("r",), nodes, tensors, {"wa": wa, "wb": wb})
    return accumulator_types(g)


def _type(draw, width: int) -> FixedType:
    return FixedType(width, draw(st.integers(-3, width + 3)), draw(st.booleans()),
                     draw(st.sampled_from(list(Rounding))),
                     draw(st.sampled_from([Overflow.SAT, Overflow.SAT, Overflow.WRAP])))


@st.composite
def sum_cases(draw):
    """Types of the two summed activations and of the sum whose bound lands near 2**24 and
    2**53 (the float32 and float64 limits), ReLU outputs that hold the sum's codes or not."""
    target = draw(st.sampled_from([22, 24, 25, 50, 52, 53, 54]))
    wa = draw(st.integers(2, min(target, 53)))
    wb = max(2, min(53, target - draw(st.integers(0, 3))))
    ta, tb = _type(draw, wa), _type(draw, wb)
    ts = _type(draw, draw(st.integers(2, 53)))
    tr = ts if draw(st.booleans()) else _type(draw, draw(st.integers(2, 53)))
    xt = FixedType(draw(st.integers(2, 12)), draw(st.integers(0, 6)))
    return xt, ta, tb, ts, tr, draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sum_cases())
def test_drawn_sums_and_relus_equal_the_reference(case):
    xt, ta, tb, ts, tr, sub, seed = case
    rng = np.random.default_rng(seed)
    wt = FixedType(12, 4)
    wa, wb = _codes(rng, wt, (6, 4)), _codes(rng, wt, (6, 4))
    try:
        g = _sum_graph(xt, ta, tb, ts, tr, wa, wb, sub)
    except GraphError:  # a sum over 64 bits: a compile error, not a golden run
        event("sum over 64 bits")
        return
    xq = _codes(rng, xt, (40, 6))
    p = golden_plan.plan(g)
    kinds = [s[0].__qualname__.split(".<locals>")[0] for s in p.steps]
    event(f"add {'fast' if kinds[2] == 'add' else 'reference'}, "
          f"relu {'fused' if 'r' in p.fused else 'fast' if kinds[3] == 'relu' else 'reference'}")
    want = reference.execute(g, [xq], inputs_are_codes=True, trace=True)
    got = p.execute([xq], inputs_are_codes=True)["r"]
    assert got.dtype == np.int64 and np.array_equal(got, want["r"]), kinds
    # the sum alone, from codes at the types' ends (the largest sums the bound allows)
    a, b = _codes(rng, ta, (64, 4)), _codes(rng, tb, (64, 4))
    node = g.nodes[2]
    want_s = (reference.sub if sub else reference.add)(g, node, [a, b])
    if "r" in p.fused:  # the ReLU done by the sum's clamp (its type holds the sum's codes)
        assert kinds[3] == "relu" and tr.qmin <= 0 <= tr.qmax
        want_s = np.maximum(want_s, 0)
    step = p.steps[2][0]
    helds = [(a, b), (a.astype(np.float64), b.astype(np.float64))]
    if max(ta.width, tb.width) <= 24:  # held as float32 between float32 GEMMs
        helds.append((a.astype(np.float32), b.astype(np.float32)))
    for held in helds:
        got_s = np.asarray(step(g, list(held), p._work(64))).astype(np.int64)
        assert np.array_equal(got_s, want_s), kinds


@st.composite
def input_types(draw):
    w = draw(st.sampled_from([4, 8, 16, 23, 24, 25, 32, 52, 53]))
    return FixedType(w, draw(st.integers(-6, w + 6)), draw(st.booleans()),
                     draw(st.sampled_from(list(Rounding))), Overflow.SAT), \
        draw(st.sampled_from(["float32", "float64"])), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(input_types())
def test_drawn_input_quantization_equals_fx_quantize(case):
    """The plan's quantization (float32 or float64, in reused arrays) == fx.quantize, at
    values around the type's grid, its ends and beyond, tiny and subnormal values."""
    t, dt, seed = case
    rng = np.random.default_rng(seed)
    g = Graph("g", ("x",), ("y",), (Node.make("r", "Relu", ["x"], ["y"]),),
              {"x": Tensor("x", (8,), t), "y": Tensor("y", (8,), t)}, {})
    scale = 2.0 ** -t.frac
    v = np.concatenate([rng.integers(t.qmin, t.qmax, 24, endpoint=True) * scale,
                        (rng.integers(t.qmin, t.qmax, 24, endpoint=True) + 0.5) * scale,
                        rng.standard_normal(24) * scale * 2.0 ** rng.integers(0, t.width, 24),
                        [t.qmin * scale * 3, t.qmax * scale * 3, 1e-45, -1e-45, 1e-300,
                         -1e-300, 0.0, -0.0]]).astype(dt)
    x = v.reshape(-1, 8)
    p = golden_plan.plan(g)
    want = reference.quantize_inputs(g, [x])[0]
    got = p.quantize([x])[0]
    assert np.array_equal(got.astype(np.int64), want)
    assert np.array_equal(p.execute([x])["y"], reference.execute(g, [x])["y"])


def test_quantization_refuses_nan_and_inf():
    t = FixedType(8, 3)
    g = Graph("g", ("x",), ("y",), (Node.make("r", "Relu", ["x"], ["y"]),),
              {"x": Tensor("x", (2,), t), "y": Tensor("y", (2,), t)}, {})
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="NaN or Inf"):
            golden_plan.plan(g).execute([np.array([[0.5, bad]], dtype=np.float32)])
    big = np.array([[1e308, 1e308]])  # a float64 sum that overflows: checked one by one
    assert golden_plan.plan(g).execute([big])["y"].tolist() == [[t.qmax, t.qmax]]


# -- each fast path's bound matters: forced on beyond it, the comparison fails -------------
class _Force:
    """Forces a fast path on (golden_fast.FORCE) for the plans built from then on."""

    def add(self, name: str) -> None:
        golden_fast.FORCE.add(name)
        golden_plan._PLANS.clear()


@pytest.fixture
def force():
    golden_fast.FORCE.clear()
    golden_plan._PLANS.clear()
    yield _Force()
    golden_fast.FORCE.clear()
    golden_plan._PLANS.clear()


def _one(op: str, tin: FixedType, tout: FixedType, shape: tuple[int, ...] = (4,), **kw) -> Graph:
    ins = ["x", "x2"] if op in ("Add", "Sub") else ["x"]
    tensors = {"x": Tensor("x", shape, tin), "y": Tensor("y", kw.pop("out_shape", shape), tout)}
    if len(ins) == 2:
        tensors["x2"] = Tensor("x2", shape, kw.pop("t2"))
    return Graph("g", tuple(ins), ("y",), (Node.make("n", op, ins, ["y"], **kw),), tensors, {})


def test_forced_float64_sum_beyond_2_53_is_caught(force):
    """a (42-bit, frac 0) + b (53-bit, frac 20) to frac 0 truncated: on the finer grid the
    sum needs 62 bits. 2**40 + (1 - 2**-20) floors to 2**40; in float64 it rounds to
    2**40 + 1 first."""
    ta, tb = FixedType(42, 42), FixedType(53, 33)  # fraction bits 0 and 20
    out = FixedType(53, 53, True, Rounding.TRN)
    g = _one("Add", ta, out, t2=tb)
    a, b = np.array([[2**40, 3, -7, 0]]), np.array([[2**20 - 1, 5, 2**20, 1]])
    want = reference.execute(g, [a, b], inputs_are_codes=True)["y"]
    assert want[0].tolist() == [2**40, 3, -6, 0]
    assert np.array_equal(golden_plan.execute(g, [a, b], inputs_are_codes=True)["y"], want)
    force.add("add")
    got = golden_plan.execute(g, [a, b], inputs_are_codes=True)["y"]
    assert got[0, 0] == 2**40 + 1 and not np.array_equal(got, want)


@pytest.mark.parametrize("op,kw", [("Relu", {}),
                                   ("MaxPool", {"kernel": (2,), "strides": (2,), "pads": (0, 0)})])
def test_forced_identity_requantization_is_caught(force, op, kw):
    """ReLU / MaxPool into an output type that does not hold the input's codes: the fast
    path (a maximum on the codes) forced on misses the saturation."""
    tin, tout = FixedType(8, 8), FixedType(4, 4)  # integers: only the range differs
    shape = (4, 1)
    g = _one(op, tin, tout, shape, out_shape=(2, 1) if op == "MaxPool" else shape, **kw)
    x = np.array([[[100], [3], [-5], [7]]])
    want = reference.execute(g, [x], inputs_are_codes=True)["y"]
    assert int(want.max()) == tout.qmax
    assert np.array_equal(golden_plan.execute(g, [x], inputs_are_codes=True)["y"], want)
    assert golden_plan.plan(g).steps[0][0].__qualname__.startswith("Plan._step")
    force.add(op.lower())
    assert not golden_plan.plan(g).steps[0][0].__qualname__.startswith("Plan._step")
    got = golden_plan.execute(g, [x], inputs_are_codes=True)["y"]
    assert not np.array_equal(got, want)


@pytest.mark.parametrize("t,v", [
    (FixedType(8, 9), -1e-45),            # frac -1: x * 2**-1 is subnormal, float32 rounds to -0
    (FixedType(32, 32), 1e10),            # frac 0: qmax = 2**31 - 1 is not a float32
])
def test_forced_float32_quantization_is_caught(force, t, v):
    g = Graph("g", ("x",), ("y",), (Node.make("r", "Relu", ["x"], ["y"]),),
              {"x": Tensor("x", (1,), t), "y": Tensor("y", (1,), t)}, {})
    x = np.array([[v]], dtype=np.float32)
    want = reference.quantize_inputs(g, [x])[0]
    assert np.array_equal(golden_plan.plan(g).quantize([x])[0].astype(np.int64), want)
    force.add("quantize32")
    got = golden_plan.plan(g).quantize([x])[0]
    assert not np.array_equal(got.astype(np.int64), want)
