"""AveragePool with count_include_pad=0 (issue 29): each window divides by the number of its
positions inside the input, not the kernel size.

Float: the golden model equals onnxruntime within the computed float32 bound. Fixed point:
the golden codes are within the computed rounding bound of the exact mean of the same input
codes (an integer loop over windows written here, no reference code), and exactly the exact
mean where every count is a power of two; gpu-emu equals the golden codes bit for bit; the
streamed circuit refuses in one line naming the node.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import modelcircuit as mc
from modelcircuit.cli import main as cli
from modelcircuit.frontend.onnx.importer import import_model
from modelcircuit.graphs import reference
from modelcircuit.graphs.ops import AvgPoolAttrs, window_counts
from tests.conftest import assert_float32_close

# (input C, H, W), kernel, strides, pads (ONNX: begins, then ends)
GEOMETRIES = {
    "3x3_s1_p1": ((3, 7, 6), [3, 3], [1, 1], [1, 1, 1, 1]),
    "3x2_s2_asym": ((2, 9, 7), [3, 2], [2, 1], [0, 1, 2, 0]),
    "2x2_s2_p1_pow2": ((4, 6, 6), [2, 2], [2, 2], [1, 1, 1, 1]),  # counts 1, 2, 4
    "1d_k5_p2": ((3, 11), [5], [2], [2, 2]),
}


def _model(shape, kernel, strides, pads, include: int = 0) -> onnx.ModelProto:
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["r"]),
             n("AveragePool", ["r"], ["y"], kernel_shape=kernel, strides=strides, pads=pads,
               count_include_pad=include, name="pool_ex")]
    g = helper.make_graph(
        nodes, "avg_ex", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return m


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])


def _x(shape, n: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, (n, *shape)).astype(np.float32)


def test_window_counts_by_hand():
    # 1-D, 4 inputs, kernel 3, stride 1, pads 1/1: windows [-1..1], [0..2], [1..3], [2..4]
    assert window_counts((4,), (3,), (1,), (1, 1)).tolist() == [2, 3, 3, 2]
    # 2-D: the product of the axes' counts
    # axis 0: 5 inputs, windows [-1..1], [1..3], [3..5]; axis 1: 3 inputs, [0..1], [2..3]
    c = window_counts((5, 3), (3, 2), (2, 2), (1, 0, 1, 1))
    assert c.tolist() == [[4, 2], [6, 3], [4, 2]]


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_float_golden_equals_onnxruntime(name):
    shape, k, s, p = GEOMETRIES[name]
    m = _model(shape, k, s, p)
    c = mc.compile(import_model(m, "avg_ex"), precision="float32")
    node = next(nd for nd in c.graph.nodes if str(nd.op) == "AvgPool")
    assert node.get("exclude_pad") is True
    x = _x(shape)
    want = _ort(m, x)
    got = np.asarray(mc.run(c, x))
    assert_float32_close(got, want, c, x)
    # the divisor matters: the count_include_pad=1 mean differs at the border
    assert np.abs(_ort(_model(shape, k, s, p, include=1), x) - want).max() > 1e-3


def _exact_mean_codes(xq: np.ndarray, shape, kernel, strides, pads) -> list:
    """The exact mean of each window's codes inside the input, as Fractions of input codes
    (an independent loop over windows; channels-last codes (N, *S, C))."""
    r = len(kernel)
    sp = xq.shape[1:-1]
    out_sp = [(sp[i] + pads[i] + pads[i + r] - kernel[i]) // strides[i] + 1 for i in range(r)]
    res = np.empty((xq.shape[0], *out_sp, xq.shape[-1]), dtype=object)
    for o in np.ndindex(*out_sp):
        lo = [o[i] * strides[i] - pads[i] for i in range(r)]
        idx = tuple(slice(max(lo[i], 0), min(lo[i] + kernel[i], sp[i])) for i in range(r))
        win = xq[(slice(None),) + idx + (slice(None),)].astype(object)
        cnt = int(np.prod([sl.stop - sl.start for sl in idx]))
        tot = win.reshape(xq.shape[0], -1, xq.shape[-1]).sum(axis=1)
        for b in range(xq.shape[0]):
            for ch in range(xq.shape[-1]):
                res[(b, *o, ch)] = Fraction(int(tot[b, ch]), cnt)
    return res


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
@pytest.mark.parametrize("precision", ["fixed<16,6>", "fixed<8,3>"])
def test_fixed_golden_is_the_mean_over_the_window_inside_and_gpu_emu_is_exact(name, precision):
    shape, k, s, p = GEOMETRIES[name]
    m = _model(shape, k, s, p)
    c = mc.compile(import_model(m, "avg_ex"), precision=precision)
    g = c.graph
    pool = next(nd for nd in g.nodes if str(nd.op) == "AvgPool")
    x = _x(shape, 4)
    tr = mc.run(c, x, trace=True, codes=True)
    xin, yq = np.asarray(tr[pool.inputs[0]]), np.asarray(tr[pool.outputs[0]]).astype(np.int64)
    ti, to = g.tensor(pool.inputs[0]).dtype, g.tensor(pool.outputs[0]).dtype
    exact = _exact_mean_codes(xin.astype(np.int64), shape, k, s, p)
    scale = Fraction(2) ** (to.frac - ti.frac)  # input codes -> output codes
    counts = window_counts(tuple(shape[1:]), tuple(k), tuple(s), tuple(p)).reshape(-1)
    pow2 = all(int(cn) & (int(cn) - 1) == 0 for cn in counts)
    # bound in output LSBs: one rounding to the output type (1), plus the reciprocal's
    # rounding (|sum| * 2**-(F+1) input codes, F its fractional bits; 0 where exact)
    f = AvgPoolAttrs.of(pool).recip_type.frac
    worst = Fraction(0)
    sat = 0
    for idx in np.ndindex(*yq.shape):
        e = exact[idx] * scale
        if e > to.qmax or e < to.qmin:
            sat += 1
            continue
        err = abs(Fraction(int(yq[idx])) - e)
        cnt = int(counts.reshape(yq.shape[1:-1])[idx[1:-1]])
        rec_err = 0 if pow2 else abs(exact[idx]) * cnt * Fraction(1, 2 ** (f + 1)) * scale
        worst = max(worst, err - rec_err)
    assert worst <= 1, float(worst)
    assert sat < yq.size // 4
    if pow2:  # every reciprocal exact: within one output rounding of the exact mean
        assert all(abs(Fraction(int(yq[i])) - exact[i] * scale) < 1 for i in np.ndindex(*yq.shape)
                   if to.qmin <= exact[i] * scale <= to.qmax)
    # the count matters: a divisor of the kernel size would be off at the border
    assert len(np.unique(counts)) > 1
    # gpu-emu: the shipped CUDA kernel (g++), the same codes
    np.testing.assert_array_equal(mc.run(c, x, backend="gpu-emu", codes=True),
                                  mc.run(c, x, codes=True))
    want = reference.execute(g, reference.quantize_inputs(g, [x]), inputs_are_codes=True)
    assert len(np.unique(want[g.outputs[0]])) > 1


@pytest.mark.parametrize("name", ["3x3_s1_p1", "1d_k5_p2"])
def test_float_gpu_emu_equals_golden(name):
    shape, k, s, p = GEOMETRIES[name]
    c = mc.compile(import_model(_model(shape, k, s, p), "avg_ex"), precision="float32")
    x = _x(shape)
    assert_float32_close(np.asarray(mc.run(c, x, backend="gpu-emu")), np.asarray(mc.run(c, x)),
                         c, x)


def test_streamed_circuit_refuses_naming_the_node(tmp_path, capsys):
    shape, k, s, p = GEOMETRIES["3x3_s1_p1"]
    path = tmp_path / "m.onnx"
    onnx.save(_model(shape, k, s, p), str(path))
    out = tmp_path / "o"
    assert cli(["compile", str(path), "--precision", "fixed<8,3>", "--target", "verilog",
                "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert "pool_ex" in err and "count_include_pad=0" in err, err
    assert not out.exists()
