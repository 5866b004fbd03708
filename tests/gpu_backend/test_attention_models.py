"""Whole transformer encoders (built with the graph API: tests/graphs/test_attention_types.py's
`encoder`) in gpu-emu: bit-exact with the golden model in fixed point (through `verify`, as
`modelcircuit verify --backends golden,gpu-emu` runs it), float32 within the computed
rounding bound (tests/conftest.py's float32_error_bound with tests/attention_bounds.py);
a corrupted table is seen. The exported encoders of tests/data/exporters (both torch exporters,
float and brevitas QAT) through `modelcircuit verify` and against onnxruntime."""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit import gpu_backend
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.gpu_backend import emulator
from modelcircuit.graphs import reference
from modelcircuit.sim.verify import verify
from tests.conftest import assert_float32_close
from tests.graphs.test_attention_types import encoder


def unfused(tokens: int = 8, d: int = 16, heads: int = 2):
    """Attention written out op by op, as an exporter may leave it: heads split by Reshape
    and Transpose, q @ k^T and p @ v as MatMuls of two activations, a Mul by the scale, a
    Softmax over the last axis of the (H, T, T) scores."""
    rng = np.random.default_rng(4)
    dk = d // heads
    b = GraphBuilder("unfused_attention")
    x = b.input("x", (tokens, d))
    q, k, v = (b.dense(x, rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 0.1, d),
                       name=n) for n in "qkv")
    qh = b.transpose(b.reshape(q, (tokens, heads, dk)), (1, 0, 2))
    kt = b.transpose(b.reshape(k, (tokens, heads, dk)), (1, 2, 0))
    vh = b.transpose(b.reshape(v, (tokens, heads, dk)), (1, 0, 2))
    s = b.mul(b.matmul(qh, kt, name="qk"), 1 / np.sqrt(dk), name="scale")
    o = b.matmul(b.softmax(s, name="softmax"), vh, name="pv")
    o = b.reshape(b.transpose(o, (1, 0, 2)), (tokens, d))
    b.output(b.dense(b.mean_tokens(o), rng.normal(0, 0.3, (d, 4)), name="classifier"))
    return b.build()

ENCODERS = {
    "t8_d16_h2": {},
    "gelu_causal": {"act": "gelu", "causal": True},
    "gelu_tanh_embed": {"act": "gelu_tanh", "features": 6, "tokens": 12},
    "t16_d32_h4_2layers": {"heads": 4, "d": 32, "tokens": 16, "layers": 2},
}


@cache
def compiled(case: str, precision: str):
    g = unfused() if case == "unfused" else encoder(**ENCODERS[case])
    return mc.compile(g, precision=precision)


def inputs(c, n: int, seed: int = 1) -> np.ndarray:
    """Normal inputs, a few wide ones (saturating the input type) and a zero sequence."""
    shp = c.graph.tensor(c.graph.inputs[0]).shape
    x = np.random.default_rng(seed).normal(0.0, 1.5, (n,) + shp)
    x[:2] *= 20.0
    x[2] = 0.0
    return x.astype(np.float32)


@pytest.mark.parametrize("case", [*sorted(ENCODERS), "unfused"])
@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<8,3>", "fixed<12,4,RND_CONV>"])
def test_encoder_is_bit_exact_in_gpu_emu(case, precision) -> None:
    c = compiled(case, precision)
    x = inputs(c, 40)
    rc, rep = verify(c, x, ["golden", "gpu-emu"], out=io.StringIO())
    assert rc == 0, rep["pairs"]
    [pair] = rep["pairs"]
    assert (pair["a"], pair["b"], pair["bit_exact"], pair["agree"]) == (
        "golden", "gpu-emu", True, len(x))
    # and the outputs are the model's, not a constant: samples differ
    codes = reference.quantize_inputs(c.graph, [x])[0]
    y = reference.execute(c.graph, [codes], inputs_are_codes=True)[c.graph.outputs[0]]
    assert len(np.unique(y.reshape(len(x), -1), axis=0)) > len(x) // 2


@pytest.mark.parametrize("case", [*sorted(ENCODERS), "unfused"])
def test_encoder_float32_within_the_rounding_bound(case) -> None:
    c = compiled(case, "float32")
    x = inputs(c, 24, seed=2)
    x[:2] /= 20.0  # float32 has no saturation to exercise
    got = gpu_backend.execute(c, [x], emulate=True)[c.graph.outputs[0]]
    assert_float32_close(np.asarray(got), np.asarray(mc.run(c, x)), c, x, "gpu-emu - golden")


def test_a_corrupted_softmax_table_is_seen() -> None:
    """One LSB added to every entry of an Attention's exp table in the shipped weights (the
    golden model keeps its own): gpu-emu must then disagree with golden."""
    c = compiled("t8_d16_h2", "fixed<16,6>")
    prog = gpu_backend.lower(c)
    node = next(n for n in c.graph.nodes if n.op == "Attention")
    w = prog.weights[node.inputs[-2]]
    blob = bytearray(prog.weights_blob)
    tab = np.frombuffer(blob, dtype=w["dtype"], count=int(np.prod(w["shape"])),
                        offset=w["offset"]).copy()
    blob[w["offset"]: w["offset"] + w["bytes"]] = (tab + 1).astype(w["dtype"]).tobytes()
    bad = type(prog)(**{**prog.__dict__, "weights_blob": bytes(blob)})
    x = inputs(c, 16)
    codes = reference.quantize_inputs(c.graph, [x])[0]
    shapes = {o: c.graph.tensor(o).shape for o in c.graph.outputs}
    out = c.graph.outputs[0]
    want = reference.execute(c.graph, [codes], inputs_are_codes=True)[out]
    good = emulator.run(prog, c.graph.name, [codes], shapes)[out]
    worse = emulator.run(bad, c.graph.name, [codes], shapes)[out]
    assert np.array_equal(good, want)
    assert not np.array_equal(worse, want)


@pytest.mark.parametrize("precision", ["fixed<16,6>", "float32"])
def test_encoder_kernels_compile_for_sm90(precision) -> None:
    import re

    from modelcircuit.gpu_backend import nvrtc

    if not nvrtc.available():
        pytest.skip("no CUDA compiler (nvcc or NVRTC) here")
    prog = gpu_backend.lower(compiled("t16_d32_h4_2layers", precision))
    ptx = gpu_backend.compile_ptx(prog.source, arch="sm_90").decode()
    assert set(re.findall(r"\.entry\s+(\w+)", ptx)) == {k.kname for k in prog.kernels}
    assert {"Attention", "LayerNorm"} <= {k.op for k in prog.kernels}



# -- the exported encoders of tests/data/exporters (tests/exporters/generate.py --attn) -------
EXPORTERS = Path(__file__).resolve().parents[1] / "data" / "exporters"


def exported_encoders() -> list[tuple[str, bool]]:
    """(file, quantized by the model) of every attention model in models.json: a Softmax
    between two MatMuls (both torch exporters write attention so), refused models aside."""
    meta = json.loads((EXPORTERS / "models.json").read_text())["models"]
    return sorted((m["file"], m["kind"].startswith("qonnx")) for m in meta
                  if m.get("kind") != "refused" and "Softmax" in m["ops"]
                  and m["ops"].count("MatMul") >= 2)


ENCODER_FILES = exported_encoders()
FIXED_RUNS = ([(f, None) for f, qat in ENCODER_FILES if qat]
              + [(f, p) for f, qat in ENCODER_FILES if not qat
                 for p in ("fixed<16,6>", "fixed<10,4,RND>")])


@pytest.mark.skipif(not ENCODER_FILES, reason="no exported attention models in models.json")
@pytest.mark.parametrize(("name", "precision"), FIXED_RUNS or [("-", None)])
def test_exported_encoder_verify_golden_gpu_emu(name, precision, capsys) -> None:
    """`modelcircuit verify --backends golden,gpu-emu`: exit 0, every vector bit-exact (QAT
    models at their own types, float models at fixed precisions)."""
    from modelcircuit import cli

    args = ["verify", str(EXPORTERS / name), "--backends", "golden,gpu-emu", "--vectors", "48"]
    rc = cli.main(args + (["--precision", precision] if precision else []))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "48/48" in out and "bit-exact: yes" in out


@pytest.mark.skipif(not ENCODER_FILES, reason="no exported attention models in models.json")
@pytest.mark.parametrize("name", [f for f, qat in ENCODER_FILES if not qat] or ["-"])
def test_exported_encoder_float32_gpu_emu_within_the_bound(name) -> None:
    """float32 gpu-emu against golden and against onnxruntime, within the computed bound."""
    import onnxruntime as ort

    c = mc.compile(mc.load_onnx(str(EXPORTERS / name)), precision="float32")
    x = inputs(c, 24, seed=3)
    x[:2] /= 20.0
    got = np.asarray(gpu_backend.execute(c, [x], emulate=True)[c.graph.outputs[0]])
    assert_float32_close(got, np.asarray(mc.run(c, x)), c, x, "gpu-emu - golden")
    s = ort.InferenceSession(str(EXPORTERS / name), providers=["CPUExecutionProvider"])
    feed = {s.get_inputs()[0].name: x.reshape((len(x),) + tuple(s.get_inputs()[0].shape[1:]))}
    assert_float32_close(got, s.run(None, feed)[0], c, x, "gpu-emu - onnxruntime")


# -- on a CUDA device (marker `gpu`: skipped without one) ---------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("case", ["t8_d16_h2", "gelu_causal", "t16_d32_h4_2layers", "unfused"])
def test_encoder_on_the_device(case) -> None:
    """The same kernels on a GPU (CUDA graph replay and plain launches): fixed point bit-exact
    with golden, float32 within the rounding bound."""
    c = compiled(case, "fixed<16,6>")
    m = gpu_backend.load(c)
    for n in (1, 7, 300):
        codes = reference.quantize_inputs(c.graph, [inputs(c, n, seed=n)])
        want = reference.execute(c.graph, codes, inputs_are_codes=True)[c.graph.outputs[0]]
        for graph in (True, False):
            got = m.run_all(codes, graph=graph)[c.graph.outputs[0]]
            np.testing.assert_array_equal(np.asarray(got).reshape(want.shape), want)
    cf = compiled(case, "float32")
    x = inputs(cf, 256, seed=5)
    x[:2] /= 20.0
    got = gpu_backend.execute(cf, [x], emulate=False)[cf.graph.outputs[0]]
    assert_float32_close(np.asarray(got), np.asarray(mc.run(cf, x)), cf, x, "cuda - golden")
