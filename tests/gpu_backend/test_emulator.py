"""gpu-emu runs the shipped kernel source on the CPU: bit-exact with the golden model."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit import gpu_backend as gb
from modelcircuit.graphs import reference
from tests.conftest import assert_float32_close

from .conftest import FIXED_CASES, FLOAT_CASES, compiled, model_path, sample_inputs


def _check_exact(c, n: int = 257, seed: int = 0) -> None:
    g = c.graph
    codes = reference.quantize_inputs(g, sample_inputs(g, n, seed))
    want = reference.execute(g, codes, inputs_are_codes=True)
    got = gb.execute(c, codes, emulate=True)
    assert set(got) == set(g.outputs)
    for o in g.outputs:
        assert got[o].dtype == np.int64 and got[o].shape == want[o].shape
        bad = np.argwhere(got[o] != want[o])
        assert bad.size == 0, f"{o}: {len(bad)} codes differ, first at {bad[0].tolist()}: " \
            f"gpu-emu {got[o][tuple(bad[0])]} vs golden {want[o][tuple(bad[0])]}"
        assert len(np.unique(want[o])) > 1, "degenerate test: constant output"


@pytest.mark.parametrize("name,precision", FIXED_CASES,
                         ids=[f"{n}-{p or 'model'}" for n, p in FIXED_CASES])
def test_fixed_bit_exact(name, precision):
    _check_exact(compiled(name, precision))


@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<8,3>"])
def test_digits_bit_exact(precision):
    model_path("digits_mlp")
    _check_exact(compiled("digits_mlp", precision))


def test_odd_batch_sizes():
    c = compiled("qkeras_jettagging", None)
    for n in (1, 3, 129):
        _check_exact(c, n, seed=n)


def _onnx_float(name: str, x: np.ndarray) -> np.ndarray:
    """onnxruntime on the original model, its batch dimension made dynamic; one sample at a
    time on the model as written when it fixes its batch inside (keras' Flatten(axis=0))."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(model_path(name)))
    orig = m.SerializeToString()
    for v in list(m.graph.input) + list(m.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "N"
    so = ort.SessionOptions()
    so.log_severity_level = 3  # the batched try below may fail; say nothing
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    x = x.astype(np.float32)
    try:
        return s.run(None, {inp.name: x.reshape([x.shape[0], *inp.shape[1:]])})[0]
    except Exception:  # noqa: BLE001 - a batch fixed inside the model: run row by row
        s = ort.InferenceSession(orig, providers=["CPUExecutionProvider"])
        return np.concatenate([s.run(None, {inp.name: r.reshape([1, *inp.shape[1:]])})[0]
                               for r in x])


@pytest.mark.parametrize("name", FLOAT_CASES + ["digits_mlp", "digits_cnn"])
def test_float32_matches_onnxruntime(name):
    c = compiled(name, "float32")
    g = c.graph
    x = sample_inputs(g, 200, seed=1)[0].astype(np.float32) / 4.0
    got = gb.execute(c, [x], emulate=True)[g.outputs[0]]
    want = _onnx_float(name, x).reshape(got.shape)
    assert got.dtype == np.float32
    # both sum in float32 (onnxruntime in a CPU-dependent order): within rounding, not equal
    assert_float32_close(got, want, c, x, "gpu-emu - onnxruntime")


def test_input_shape_is_checked():
    c = compiled("two_layer_keras", "fixed<8,3>")
    with pytest.raises(gb.GpuError, match="per-sample shape"):
        gb.execute(c, [np.zeros((4, 3), dtype=np.int64)], emulate=True)


def test_emulator_build_is_cached(tmp_path, monkeypatch):
    from modelcircuit.gpu_backend import emulator

    monkeypatch.setenv("MODELCIRCUIT_CACHE", str(tmp_path))
    c = compiled("two_layer_keras", "fixed<8,3>")
    src = emulator.emulator_source(gb.lower(c), c.graph.name)
    p1 = emulator.build(src)
    mtime = p1.stat().st_mtime_ns
    assert emulator.build(src) == p1 and p1.stat().st_mtime_ns == mtime
    assert p1.parent == tmp_path / "emu"


def test_requantization_up_past_int64_saturates_like_the_circuit():
    """A Dense whose output type has 45 more fractional bits than its accumulator: a code
    times 2**45 leaves int64. The golden model and the kernels once wrapped there (the sign
    flipped before saturation); the circuits widen exactly. Both must saturate to the end the
    exact value points at."""
    from modelcircuit.graphs.ir import Graph, Node, Tensor
    from modelcircuit.graphs.pipeline import compile_graph
    from modelcircuit.graphs.types import FixedType

    xt, wt, out = FixedType(10, 10, False), FixedType(20, 23), FixedType(40, -2)
    rng = np.random.default_rng(0)
    w = rng.integers(-(2**19), 2**19, (4, 6)).astype(np.float64) * 8  # values on wt's grid
    tensors = {"x": Tensor("x", (4,), xt), "w": Tensor("w", w.shape, wt),
               "y": Tensor("y", (6,), out)}
    node = Node.make("n", "Dense", ["x", "w"], ["y"], relu=False)
    c = compile_graph(Graph("g", ("x",), ("y",), (node,), tensors, {"w": w}))
    x = rng.integers(0, 1024, (64, 4))
    acc = x.astype(object) @ c.graph.constants["w"].astype(object)  # exact value / 2**frac
    assert max(abs(int(v)) for v in acc.ravel()) << 45 >= 2**63, "no case past int64"
    want = np.where(acc > 0, out.qmax, np.where(acc < 0, out.qmin, 0)).astype(np.int64)
    golden = reference.execute(c.graph, [x], inputs_are_codes=True)["y"]
    assert np.array_equal(golden, want)
    assert np.array_equal(gb.execute(c, [x], emulate=True)["y"], want)
