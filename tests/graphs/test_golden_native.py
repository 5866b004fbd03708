"""The golden model's C loops (graphs/native.py, templates/golden/loops.c) give the numpy
steps' bits: each loop against its numpy steps on values chosen to break a careless loop
(halves on both sides of zero, signed zeros, the clamp bounds and beyond, infinities in the
input quantization, every rounding mode and every held dtype), whole models with the loops
against the plan without them and against reference.execute, and the fallback where no
compiler can build them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs import golden_fast, golden_plan, host, native, reference
from modelcircuit.graphs.types import FixedType, Overflow, Rounding
from modelcircuit.util import native as unative

from .test_golden_plan import _models

HAVE_CC = bool(unative.compiler("CC", "gcc", "cc"))
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler (gcc/cc) on PATH: the golden "
                              "model runs its numpy steps, tested elsewhere")


@pytest.fixture
def loops() -> native.Loops:
    lp = native.loops()
    assert lp is not None, native.status()  # a compiler is here: the loops must build
    return lp


def _hard_values(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """Integers and halves around zero, signed zeros, large values and random ones."""
    k = rng.integers(-40, 40, n)
    v = np.concatenate([k.astype(np.float64), k + 0.5, k - 0.5, [0.0, -0.0, 0.5, -0.5, 1.5, -1.5,
                                                                 2.5, -2.5],
                        rng.standard_normal(n) * scale, rng.standard_normal(n) * scale * 1e3])
    return rng.permutation(v)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@needs_cc
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("mode,rnd", [(native.EPI_NONE, None), (native.EPI_FLOOR, np.floor),
                                      (native.EPI_RINT, np.rint)])
@pytest.mark.parametrize("bias", [True, False])
def test_epilogue_equals_numpy(loops, dt, mode, rnd, bias):
    rng = np.random.default_rng(1)
    for lo, hi in ((0.0, 31.0), (-128.0, 127.0), (-3.0, -1.0)):
        y = _hard_values(rng, 300, 20.0).astype(dt)
        y = y[: (y.size // 12) * 12].reshape(-1, 12)
        b = (rng.integers(-8, 8, 12) * 0.25).astype(dt) if bias else None
        want = y.copy()
        if b is not None:
            np.add(want, b, out=want)
        if rnd is not None:
            rnd(want, out=want)
        golden_fast.clip(want, dt(lo), dt(hi), out=want)
        got = y.copy()
        assert loops.epilogue(got, b, mode, dt(lo), dt(hi))
        assert _same_bits(got, want), (lo, hi)


@needs_cc
@pytest.mark.parametrize("ti,to", [(np.float32, np.float32), (np.float32, np.float64),
                                   (np.float64, np.float64)])
@pytest.mark.parametrize("rounding", list(Rounding))
def test_quantize_equals_fx_quantize(loops, ti, to, rounding):
    """The plan's quantization with the loop == fx.quantize (the definition), including
    values that overflow float32 to inf after scaling (they saturate)."""
    rng = np.random.default_rng(2)
    for width, frac in ((8, 3), (16, 6), (24, 10), (6, 8), (10, -2)):
        if to == np.float32 and (width > 24 or frac < 0):
            continue  # the plan holds those in float64
        t = FixedType(width, width - frac, True, rounding, Overflow.SAT)
        scale = 2.0 ** -t.frac
        x = (_hard_values(rng, 200, 4.0) * scale * 2).astype(ti)
        if ti == np.float32:
            x = np.concatenate([x, np.array([3e38, -3e38], dtype=np.float32)])
        out = np.empty(x.shape, to)
        mode = (native.Q_RINT if rounding == Rounding.RND_CONV else
                native.Q_HALF_UP if rounding == Rounding.RND else native.Q_FLOOR)
        with np.errstate(over="ignore"):
            assert loops.quantize(x, out, to(2.0 ** t.frac), mode, to(t.qmin), to(t.qmax))
        assert np.array_equal(out.astype(np.int64), fx.quantize(x.astype(np.float64), t)), t


@needs_cc
@pytest.mark.parametrize("ta", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("tb", [np.float64, np.float32, np.int64])
def test_add_equals_numpy(loops, ta, tb):
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, 480).astype(ta)
    b = rng.integers(-1000, 1000, 480).astype(tb)
    for ka, kb in ((0.5, -0.25), (1.0, 1.0), (0.125, 2.0)):
        for mode, lo, hi in ((native.A_NONE, -600.0, 600.0), (native.A_FLOOR, -100.0, 100.0),
                             (native.A_HALF_UP, 0.0, 255.0), (native.A_RINT, -50.0, 50.0)):
            want = np.multiply(a, ka, dtype=np.float64)
            np.add(want, np.multiply(b, kb, dtype=np.float64), out=want)
            if mode == native.A_HALF_UP:
                want = np.floor(want + 0.5)
            elif mode == native.A_FLOOR:
                want = np.floor(want)
            elif mode == native.A_RINT:
                want = np.rint(want)
            golden_fast.clip(want, lo, hi, out=want)
            got = np.empty(a.shape, np.float64)
            assert loops.add(a, b, got, ka, kb, mode, lo, hi)
            assert _same_bits(got, want), (ka, kb, mode)


@needs_cc
@pytest.mark.parametrize("rounding", list(Rounding))
def test_requantize_equals_fx(loops, rounding):
    rng = np.random.default_rng(4)
    q = np.concatenate([rng.integers(-2**40, 2**40, 500), rng.integers(-64, 64, 200),
                        [2**62, -2**62, 2**63 - 1, -2**63]]).astype(np.int64)
    mode = {Rounding.TRN: native.R_TRN, Rounding.RND: native.R_RND,
            Rounding.RND_CONV: native.R_RND_CONV}[rounding]
    for s in (1, 2, 5, 17, 40, 62):
        t = FixedType(16, 8, True, rounding, Overflow.SAT)
        got = q.copy()
        assert loops.requantize_sat(got, s, mode, t.qmin, t.qmax)
        assert np.array_equal(got, fx.requantize(q, t.frac + s, t)), s


def _odd_convs(tmp: Path) -> dict[str, Path]:
    """Convolutions the C im2col must get right: a 2-D one with a rectangular kernel,
    unequal strides and asymmetric padding on a 2-channel input, and a 1-D one with stride 2
    and more padding at the start than the kernel's half."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(8)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)

    out = {}
    for name, xs, ws, kw in (
            ("conv2d_odd", [2, 7, 9], (3, 2, 3, 2),
             {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]}),
            ("conv1d_odd", [4, 11], (5, 4, 3), {"kernel_shape": [3], "strides": [2],
                                                "pads": [2, 1]})):
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **kw),
                 helper.make_node("Relu", ["c"], ["y"])]
        g = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *xs])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [init("w", rng.normal(0, 0.5, ws)),
                               init("b", rng.normal(0, 0.1, ws[0]))])
        p = tmp / f"{name}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(p))
        out[name] = p
    return out


@needs_cc
def test_models_with_and_without_the_loops(tmp_path, monkeypatch):
    """Whole models: the plan with the loops == the plan without them == the definition."""
    shared = Path(__file__).resolve().parents[3] / "shared" / "models"
    models = {**_models(tmp_path), **_odd_convs(tmp_path)}
    for name in ("conv1d_small_keras", "conv2d_small_keras"):
        if (shared / f"{name}.onnx").exists():
            models[name] = shared / f"{name}.onnx"
    for name, path in models.items():
        for prec in ("fixed<16,6>", "fixed<8,3>", "fixed<10,4,RND>", "fixed<7,2,RND_CONV>"):
            c = mc.compile(mc.load_onnx(path), precision=prec)
            g = c.graph
            x = (3 * np.random.default_rng(5).standard_normal(
                (17, *host.input_shape(c)))).astype(np.float32)
            codes = host.encode(c, x)
            want = reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]]
            with_c = golden_plan.Plan(g)
            assert with_c.loops is not None
            monkeypatch.setenv(native.ENV, "0")
            without = golden_plan.Plan(g)
            monkeypatch.delenv(native.ENV)
            assert without.loops is None
            for p in (with_c, without):
                got = p.execute([codes], inputs_are_codes=True)[g.outputs[0]]
                assert np.array_equal(got, want), (name, prec, p.loops)
            if getattr(c, "head", None) is None:
                assert np.array_equal(with_c.execute([x])[g.outputs[0]],
                                      without.execute([x])[g.outputs[0]]), (name, prec)


@needs_cc
def test_the_loops_run(tmp_path, monkeypatch):
    """The C loops are what runs (not a silent fallback): the epilogue, the sum, the
    quantization and the Softmax loops are each called on the models of _models."""
    calls: dict[str, int] = {}
    lp = native.loops()

    def counting(table: str, f):
        def call(*a):
            calls[table] = calls.get(table, 0) + 1
            return f(*a)
        return call

    for table in ("epi", "quant", "smax", "adds"):
        monkeypatch.setattr(lp, table, {k: counting(table, f)
                                        for k, f in getattr(lp, table).items()})
    monkeypatch.setattr(lp, "program", None)  # no chains: the loops one by one (see below)
    softmax = False
    for path in _models(tmp_path).values():
        c = mc.compile(mc.load_onnx(path), precision="fixed<8,3>")
        softmax |= any(n.op == "Softmax" for n in c.graph.nodes)
        golden_plan.Plan(c.graph).values(np.zeros((3, *host.input_shape(c)), np.float32), True)
    assert calls.get("epi", 0) > 0 and calls.get("adds", 0) > 0, calls
    assert calls.get("quant", 0) > 0, calls
    if softmax:
        assert calls.get("smax", 0) > 0, calls


def test_no_compiler_falls_back_to_numpy(tmp_path, monkeypatch):
    """A compiler that fails: no loops, status says why, the golden model is still right."""
    monkeypatch.setenv("MODELCIRCUIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", shutil.which("false") or "/bin/false")
    monkeypatch.setattr(native, "_state", {})
    assert native.loops() is None
    assert native.status().startswith("numpy steps only")
    c = mc.compile(mc.load_onnx(Path(mc.__file__).parent / "data" / "digits_cnn.onnx"),
                   precision="fixed<8,3>")
    g = c.graph
    x = np.random.default_rng(6).standard_normal((4, *host.input_shape(c))).astype(np.float32)
    codes = host.encode(c, x)
    p = golden_plan.Plan(g)
    assert p.loops is None
    assert np.array_equal(p.execute([codes], inputs_are_codes=True)[g.outputs[0]],
                          reference.execute(g, [codes], inputs_are_codes=True)[g.outputs[0]])


@needs_cc
def test_library_is_cached_per_source(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELCIRCUIT_CACHE", str(tmp_path))
    cc = unative.compiler("CC", "gcc", "cc")
    src = "int mc_one(void) { return 1; }\n"
    p1 = unative.shared_library(src, cc=cc, flags=native.FLAGS, kind="golden")
    mtime = p1.stat().st_mtime_ns
    assert unative.shared_library(src, cc=cc, flags=native.FLAGS, kind="golden") == p1
    assert p1.stat().st_mtime_ns == mtime and p1.parent == tmp_path / "golden"
    p2 = unative.shared_library(src + "\n", cc=cc, flags=native.FLAGS, kind="golden")
    assert p2 != p1


@needs_cc
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_threshold_loop_counts_like_searchsorted(dtype):
    """mc_threshold: per element, base + the steps of the thresholds <= x (r = i mod rows),
    as reference.threshold computes it: evenly spaced thresholds (the guess), uneven and
    duplicated ones (the binary search), K = 1, one row, values on, between and beyond the
    thresholds."""
    from modelcircuit.graphs import golden_steps

    lp = native.loops()
    rng = np.random.default_rng(11)
    for rows, k, kind in [(16, 255, "even"), (3, 7, "uneven"), (1, 1, "even"), (5, 31, "dup"),
                          (1, 255, "uneven"), (4, 2, "dup")]:
        if kind == "even":
            thr = (rng.integers(-500, 500, (rows, 1)) + np.arange(k) * rng.integers(1, 900)
                   + rng.integers(0, 2, (rows, k)))
        elif kind == "dup":
            thr = np.sort(rng.integers(-20, 20, (rows, k)), axis=1)
        else:
            thr = np.cumsum(rng.integers(0, 1000, (rows, k)) ** 2 // 1000, axis=1) - 3000
        thr = rng.permuted(thr, axis=1)  # unsorted, as a model gives them
        steps = rng.integers(-2, 3, (rows, k))
        base = rng.integers(-5, 5, rows)
        lo, hi = int(thr.min()) - 3, int(thr.max()) + 3
        x = np.concatenate([rng.integers(lo, hi + 1, 4000), thr.ravel(), thr.ravel() - 1])
        x = x[: (x.size // rows) * rows].astype(dtype)
        ts, tab, inv = golden_steps.threshold_tables(thr, steps, base)
        out = np.empty(x.shape, np.int64)
        lp.thresh[np.dtype(dtype)](x.ctypes.data, out.ctypes.data, x.size, rows,
                                   ts.ctypes.data, k, tab.ctypes.data, inv.ctypes.data)
        xi = x.astype(np.int64).reshape(-1, rows)
        want = np.empty_like(xi)
        for r in range(rows):
            want[:, r] = base[r] + np.array([steps[r][thr[r] <= v].sum() for v in xi[:, r]])
        assert np.array_equal(out.reshape(-1, rows), want), (rows, k, kind)
