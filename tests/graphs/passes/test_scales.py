"""passes/scales.py: weights factored into integer codes x per-column scales, exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelcircuit.graphs.passes.scales import factor_columns


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 9), st.integers(1, 16), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_factor_columns_recovers_codes_and_scales(k, n, bits, per_channel, seed):
    rng = np.random.default_rng(seed)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    codes = rng.integers(lo, hi + 1, (k, n)) if bits > 1 else rng.choice([-1, 1], (k, n))
    scales = rng.uniform(1e-3, 2.0, n if per_channel else 1).astype(np.float32).astype(np.float64)
    col = np.broadcast_to(scales, (n,))
    w = codes * col[None, :]  # as the importer computes a quantizer's values (float64)
    got = factor_columns(w, tuple(sorted(set(scales.tolist()), reverse=True)))
    assert got is not None
    c, s = got
    assert np.array_equal(c * s[None, :], w)  # exact: the product the model computes
    assert np.all(c == np.round(c)) and np.abs(c).max(initial=0) <= max(abs(lo), hi)


def test_factor_columns_refuses_weights_off_every_grid():
    w = np.array([[0.3, 0.1], [0.2, 0.7]])
    assert factor_columns(w, (0.25, 0.125)) is None
    assert factor_columns(np.zeros((3, 2)), (0.3,))[0].sum() == 0  # zero columns: any scale


@pytest.mark.parametrize("zero_point", [0.0, 3.0])
def test_scaled_dense_equals_its_float_definition(zero_point):
    """Dense(s * (q - z), codes * w) + b == (s * w) * Dense(q, codes) + b' with
    b' = b - s z w colsum(codes): the rewrite the pass makes, checked numerically."""
    rng = np.random.default_rng(1)
    s, w = 0.0173, rng.uniform(0.01, 0.1, 5)
    q = rng.integers(0, 16, (20, 8)).astype(np.float64)
    codes = rng.integers(-7, 8, (8, 5)).astype(np.float64)
    b = rng.standard_normal(5)
    direct = (s * (q - zero_point)) @ (codes * w) + b
    rewritten = (s * w) * (q @ codes) + (b - s * zero_point * w * codes.sum(axis=0))
    assert np.allclose(direct, rewritten, rtol=1e-12, atol=1e-12)


def test_per_feature_activation_scale_into_dense_is_refused(tmp_path):
    """A per-feature (non-uniform) activation scale feeding a MatMul: one clear line."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.hostile import assert_refused, run_cli

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("s", rng.uniform(0.01, 0.1, (1, 8))), ("z", np.zeros(())), ("b", np.array(4.0)),
        ("w", rng.standard_normal((8, 3)))]]
    nodes = [helper.make_node("Quant", ["x", "s", "z", "b"], ["q"], domain="qonnx.custom_op.general",
                              signed=1, narrow=0, rounding_mode="ROUND"),
             helper.make_node("MatMul", ["q", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                            helper.make_opsetid("qonnx.custom_op.general", 1)])
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    err = assert_refused(run_cli(["compile", str(p), "--target", "golden", "--out",
                                  str(tmp_path / "o")]), "per-feature activation scales")
    assert "Mul" in err and not (tmp_path / "o").exists()
