"""`modelcircuit verify --backends golden,rtl` on the third-party Keras CNNs (streamed
circuits, hdl/streamed/units.py): bit-exact, latency per frame and II per pixel as compiled.
Each is a Verilator build of a few thousand lines: `slow`."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelcircuit.cli import main
from modelcircuit.sim import rtl

MODELS = Path("/work/shared/models")
if not MODELS.exists():
    MODELS = Path(__file__).resolve().parents[3] / "shared" / "models"

pytestmark = [pytest.mark.xdist_group("sim"),
              pytest.mark.skipif(not rtl.available("verilator"), reason="no verilator")]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["conv1d_small_keras", "conv2d_small_keras"])
@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<8,3>"])
def test_keras_cnn_verify_bit_exact(model, precision, cli_cache, capsys) -> None:
    path = MODELS / f"{model}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    rc = main(["verify", str(path), "--precision", precision, "--backends", "golden,rtl",
               "--vectors", "12"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "bit-exact: yes" in out and "golden vs rtl                   12/12" in out
    # the RTL line reports the measured latency and II next to the compile-time figures
    line = [s for s in out.splitlines() if s.strip().startswith("rtl ")][0]
    lat = line.split("latency ")[1].split(" ")[0]
    assert f"(compile-time {lat})" in line


DIGITS_CNN = Path(__file__).resolve().parents[2] / "src/modelcircuit/data/digits_cnn.onnx"


@pytest.mark.slow
@pytest.mark.skipif(not DIGITS_CNN.exists(), reason="no bundled digits CNN")
def test_digits_cnn_rtl_bit_exact(digits_test, sim_cache) -> None:
    """The bundled digits CNN on real test images: bit-exact, timing as compiled."""
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.api import load_onnx
    from modelcircuit.graphs import reference

    c = mc_compile(load_onnx(str(DIGITS_CNN)))
    xf, labels = digits_test
    x = reference.quantize_inputs(c.graph, [xf[:40]])[0]
    r = rtl.execute(c, x, reuse={"conv2": 72, "fc": 40}, cache_dir=sim_cache, seed=4)
    ch = r["checks"]
    assert r["ok"] and ch["bit_exact"] and ch["latency_ok"] and ch["ii_ok"], ch
    assert (r["outputs"].argmax(axis=1) == labels[:40]).mean() > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("model", ["separable_conv_model_ch_last", "branched_model_ch_last"])
def test_brevitas_cnn_full_frame_rtl(model, sim_cache) -> None:
    """One full frame (512x512x3 / 256x256x3) of the Brevitas CNNs with their own QONNX
    types: depthwise and pointwise Convs, LeakyRelu, MaxPool, Resize, a Concat branch."""
    import numpy as np

    from modelcircuit.api import compile as mc_compile
    from modelcircuit.api import load_onnx

    path = MODELS / f"{model}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    c = mc_compile(load_onnx(str(path)))
    t = c.graph.tensor(c.graph.inputs[0])
    x = np.random.default_rng(0).integers(t.dtype.qmin, t.dtype.qmax + 1, (1, *t.shape))
    r = rtl.execute(c, x, cache_dir=sim_cache, gaps=0.05, backpressure=0.05)
    ch = r["checks"]
    assert r["ok"] and ch["bit_exact"] and ch["latency_ok"] and ch["ii_ok"], ch
    assert r["latency_frames"] == r["latency_frames_expected"][:1]
