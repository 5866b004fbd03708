"""The CuPy runtime: a clear one-line error without a GPU; on a device, bit-exact replay."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit import gpu_backend as gb
from modelcircuit.graphs import reference
from tests.conftest import assert_float32_close

from .conftest import FIXED_CASES, compiled, have_gpu, sample_inputs


@pytest.mark.skipif(have_gpu(), reason="this machine has a GPU")
def test_load_without_gpu_is_one_clear_line():
    c = compiled("two_layer_keras", "fixed<8,3>")
    with pytest.raises(gb.GpuError) as e:
        gb.load(c)
    msg = str(e.value)
    assert "\n" not in msg and ("CuPy" in msg or "CUDA device" in msg)
    assert isinstance(e.value, ValueError)
    with pytest.raises(gb.GpuError):
        gb.execute(c, [np.zeros((1, 10), np.int64)], emulate=False)


@pytest.mark.gpu
@pytest.mark.parametrize("name,precision", FIXED_CASES + [("digits_mlp", "fixed<16,6>")])
def test_device_bit_exact(name, precision):
    c = compiled(name, precision)
    g = c.graph
    m = gb.load(c)
    for n in (1, 3, 64, 1000):
        codes = reference.quantize_inputs(g, sample_inputs(g, n, seed=n))
        want = reference.execute(g, codes, inputs_are_codes=True)
        for graph in (True, False):
            got = m.run_all(codes, graph=graph)
            for o in g.outputs:
                np.testing.assert_array_equal(got[o], want[o])


@pytest.mark.gpu
def test_device_float_close_to_reference():
    c = compiled("three_layer_keras", "float32")
    g = c.graph
    x = sample_inputs(g, 4096)[0].astype(np.float32) / 4
    want = reference.execute(g, [x])[g.outputs[0]]
    got = gb.execute(c, [x], emulate=False)[g.outputs[0]]
    # CUDA sums with fmaf in its own order: within float32 rounding of the golden model
    assert_float32_close(got, want, c, x, "cuda - golden")


@pytest.mark.gpu
def test_other_profile_is_refused_unless_forced():
    import dataclasses

    c = compiled("two_layer_keras", "fixed<8,3>")
    other = dataclasses.replace(c, profile="l4")
    if gb.load(c).profile == "l4":
        pytest.skip("running on an L4")
    with pytest.raises(gb.GpuError, match="compiled for profile 'l4'"):
        gb.load(other)
    assert gb.load(other, force=True).profile != "l4"


@pytest.mark.gpu
def test_big_batch_is_chunked():
    c = compiled("qkeras_jettagging", None)
    g = c.graph
    m = gb.load(c, buckets=(1, 64))
    codes = reference.quantize_inputs(g, sample_inputs(g, 200))
    want = reference.execute(g, codes, inputs_are_codes=True)[g.outputs[0]]
    np.testing.assert_array_equal(m.run(codes[0]), want)
