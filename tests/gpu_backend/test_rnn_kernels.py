"""LSTM / GRU kernels (templates/cuda/rnn.cu.j2) in the CPU emulator: bit-exact with the
golden model in fixed point, within the float32 rounding bound in float; the token-wise
Dense over a sequence too."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import modelcircuit as mc
from modelcircuit import gpu_backend
from modelcircuit.graphs import reference
from tests.conftest import assert_float32_close
from tests.graphs.rnn_models import rnn_model

CASES = {
    "lstm": dict(op="LSTM", h0=True, c0=True),
    "lstm_clip_seqhead": dict(op="LSTM", clip=0.6, head="seq", scale=1.4),
    "lstm_yc": dict(op="LSTM", output="Y_c"),
    "gru_lbr0": dict(op="GRU", lbr=0, h0=True),
    "gru_lbr1_clip": dict(op="GRU", lbr=1, clip=0.8, wrap="seq", t=11, f=5, h=9),
    "lstm_hardsigmoid": dict(op="LSTM", activations=["HardSigmoid", "Tanh", "Softsign"],
                             alphas=[0.25], betas=[0.4]),
}


def _graph(tmp_path, kw):
    p = tmp_path / "m.onnx"
    onnx.save(rnn_model(**kw), p)
    return mc.load_onnx(p)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<12,4,RND>"])
def test_fixed_kernels_are_bit_exact_in_the_emulator(case, precision, tmp_path) -> None:
    kw = CASES[case]
    c = mc.compile(_graph(tmp_path, kw), precision=precision)
    x = np.random.default_rng(5).normal(size=(9, kw.get("t", 7), kw.get("f", 3))) * 1.5
    codes = reference.quantize_inputs(c.graph, [x])[0]
    want = reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]
    got = gpu_backend.execute(c, [codes], emulate=True)[c.graph.outputs[0]]
    assert np.array_equal(np.asarray(got).reshape(want.shape), want)


@pytest.mark.parametrize("case", ["lstm", "gru_lbr0", "gru_lbr1_clip", "lstm_clip_seqhead"])
def test_float_kernels_within_the_rounding_bound(case, tmp_path) -> None:
    kw = CASES[case]
    c = mc.compile(_graph(tmp_path, kw), precision="float32")
    x = np.random.default_rng(6).normal(size=(7, kw.get("t", 7), kw.get("f", 3))).astype(np.float32)
    got = gpu_backend.execute(c, [x], emulate=True)[c.graph.outputs[0]]
    assert_float32_close(np.asarray(got), np.asarray(mc.run(c, x)), c, x, "gpu-emu - golden")


@pytest.mark.parametrize("case", ["lstm", "gru_lbr0", "gru_lbr1_clip"])
@pytest.mark.parametrize("precision", ["fixed<16,6>", "float32"])
def test_rnn_kernels_compile_for_sm90(case, precision, tmp_path) -> None:
    import re

    from modelcircuit.gpu_backend import nvrtc

    if not nvrtc.available():
        pytest.skip("no CUDA compiler (nvcc or NVRTC) here")
    prog = gpu_backend.lower(mc.compile(_graph(tmp_path, CASES[case]), precision=precision))
    ptx = gpu_backend.compile_ptx(prog.source, arch="sm_90").decode()
    assert set(re.findall(r"\.entry\s+(\w+)", ptx)) == {k.kname for k in prog.kernels}
    assert "__syncthreads" not in prog.source and "__shared__" not in prog.source
