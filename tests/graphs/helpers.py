"""Shared helpers of the graph tests: small hand-built graphs."""

from __future__ import annotations

import numpy as np

import modelcircuit as mc
from modelcircuit.frontend.builder import GraphBuilder


def mlp(seed: int = 0) -> mc.Graph:
    """6 -> Dense(5) -> ReLU -> Dense(3), normal random weights from `seed`."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("mlp")
    x = b.input("x", 6)
    h = b.relu(b.dense(x, rng.normal(size=(6, 5)), rng.normal(size=5), name="fc1"), name="r1")
    b.output(b.dense(h, rng.normal(size=(5, 3)), None, name="fc2"))
    return b.build()



def verify_onnx_rtl(m, shape, tmp_path, precision, reference, tol=0.25):
    """`verify --backends golden,rtl,gpu-emu` of an ONNX model on 6 random frames (Verilator +
    cocotb, about 30 s: the build): bit-exact, simulated latency and II == the compile-time
    report; and the float model it quantizes (reference(m, x)) within `tol` of its values."""
    import io

    import onnx

    from modelcircuit.sim.verify import verify

    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    c = mc.compile(mc.load_onnx(p), precision=precision)
    x = np.random.default_rng(5).normal(size=(6, *shape)).astype(np.float32)
    out = io.StringIO()
    code, rep = verify(c, x, ["golden", "rtl", "gpu-emu"], out=out)
    assert code == 0 and rep["bit_exact"] and rep["timing_ok"], out.getvalue()
    assert all(pr["agree"] == len(x) for pr in rep["pairs"]), out.getvalue()
    want = reference(m, x).reshape(len(x), -1)
    got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(len(x), -1)
    assert np.abs(got - want).max() < tol, np.abs(got - want).max()


def float_matches_reference(m, shape, tmp_path, reference, what):
    """The float32 golden model of an ONNX model == reference(m, x) (onnxruntime) on 4
    random frames, within the float32 rounding bound; returns (saved path, x, reference)."""
    import onnx

    from tests.conftest import assert_float32_close

    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    x = np.random.default_rng(7).normal(size=(4, *shape)).astype(np.float32)
    want = reference(m, x)
    c = mc.compile(mc.load_onnx(p), precision="float32")
    got = np.asarray(mc.run(c, x))
    assert got.shape == want.shape
    assert_float32_close(got, want, c, x, f"{what}: ours - onnxruntime")
    return p, x, want
