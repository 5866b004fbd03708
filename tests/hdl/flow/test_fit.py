"""Fitting a model to a device (hdl/flow/fit.py: `--reuse auto`), without the tools."""

from __future__ import annotations

import pytest

from modelcircuit.api import compile
from modelcircuit.frontend.onnx.importer import load_onnx
from modelcircuit.hdl.flow import FitError, fit_reuse, fpga_profile
from tests.hdl.test_fpga import DIGITS, tiny_compiled, wide_graph


def test_fit_tiny_on_up5k_is_parallel_and_digits_on_ecp5_folds():
    tiny = fit_reuse(tiny_compiled(), fpga_profile("ice40-up5k"))
    assert tiny.ii == 1 and set(tiny.reuse) == {"fc1", "fc2"}
    d = compile(load_onnx(DIGITS), precision="fixed<6,3>")
    for dev in ("ecp5-25k", "ecp5-85k"):
        plan = fit_reuse(d, fpga_profile(dev))
        assert plan.estimate["lut"] <= fpga_profile(dev)["lut"]
        assert plan.ii == max(plan.reuse.values())
    p25 = fit_reuse(d, fpga_profile("ecp5-25k"))
    p85 = fit_reuse(d, fpga_profile("ecp5-85k"))
    assert p85.ii <= p25.ii  # a bigger device never needs more folding


def test_fit_error_names_the_budget():
    """256 -> 256 at 16 bits: the input rotation and output registers alone (8192 FF) are
    more than an UP5K has, at any reuse."""
    d = compile(wide_graph(), precision="fixed<16,6>")
    with pytest.raises(FitError, match=r"does not fit ice40-up5k even at the largest reuse.*5280"):
        fit_reuse(d, fpga_profile("ice40-up5k"))



def _autoencoder(tmp_path):
    """MLPerf Tiny's anomaly-detection autoencoder shape (640-128x4-8-128x4-640), random
    weights, at fixed<16,6>: it does not fit the default device at any reuse (issue 29)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    dims = [640, 128, 128, 128, 128, 8, 128, 128, 128, 128, 640]
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for k, (i, o) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        inits.append(numpy_helper.from_array(
            rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{k}"], [f"m{k}"]))
        cur = f"m{k}"
        if k < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [cur], [f"r{k}"]))
            cur = f"r{k}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "autoencoder",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 640])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 640])],
                          initializer=inits)
    p = tmp_path / "ae.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    return p


def test_reuse_auto_for_a_simulation_sizes_without_a_device(tmp_path):
    """verify --reuse auto without an FPGA --profile (sim/rtl.py: plan_circuit(...,
    simulation=True)) plans within SIMULATION_SCALE x the default device's logic, DSPs and
    BRAM free: the autoencoder at fixed<16,6> becomes simulable; with --profile the device
    still decides (and refuses)."""
    from modelcircuit.hdl.flow.fit import (
        DEFAULT_FIT_DEVICE,
        SIMULATION_FIT,
        SIMULATION_SCALE,
        plan_circuit,
    )

    p = _autoencoder(tmp_path)
    c = compile(load_onnx(p), precision="fixed<16,6>", reuse="auto")
    with pytest.raises(FitError, match=f"does not fit {DEFAULT_FIT_DEVICE}"):
        plan_circuit(c, "auto")
    plan = plan_circuit(c, "auto", simulation=True)
    prof = fpga_profile(DEFAULT_FIT_DEVICE)
    assert plan.fit["device"] == SIMULATION_FIT
    assert plan.fit["estimate"]["lut"] <= SIMULATION_SCALE * prof["lut"]
    assert plan.fit["estimate"]["ff"] <= SIMULATION_SCALE * prof["ff"]
    assert plan.fit["ii"] > 1  # folded: the model's 268,000 products would be too many
    c2 = compile(load_onnx(p), precision="fixed<16,6>", reuse="auto", profile=DEFAULT_FIT_DEVICE)
    with pytest.raises(FitError):
        plan_circuit(c2, "auto", simulation=True)


@pytest.mark.parametrize("pipeline", ["latency", "fmax"])
def test_da_estimate_counts_the_graphs_the_circuit_builds(pipeline: str) -> None:
    """`--strategy da` layers: the estimate's adder graph is the circuit's (one per cluster
    of 8 output columns under "fmax", hdl/units/dense_r1.DenseGraph: 12-19 % more carry-chain
    bits on the qkeras jet tagger than the one shared graph the estimate had counted) within
    the few constant adders of the bias and rounding the estimate leaves out, and the input
    copies of the clusters are registers."""
    from modelcircuit.hdl.export import convert
    from modelcircuit.hdl.flow.fit import _context
    from modelcircuit.hdl.flow.layer_cost import layer_cost

    d = compile(load_onnx(DIGITS), precision="fixed<8,3>", strategy="da")
    prof = fpga_profile("ecp5-85k")
    fx = _context(d, prof, None, None, pipeline)
    _, _, info = convert(d, pipeline=pipeline)
    built = {li["node"]: li for li in info["layers"] if "adder_graph" in li}
    assert built and set(built) == {lay["node"] for lay in fx.layers}
    for lay in fx.layers:
        lc = layer_cost(lay, 1, fx.lean, "da")
        g, ag = lay["graph"], built[lay["node"]]["adder_graph"]
        bits = sum(g.chain_bits(i) for i in g.adders())
        assert 0.95 * ag["chain_bits"] <= bits <= ag["chain_bits"], (lay["node"], bits, ag)
        assert g.stats.get("clusters", 0) == ag.get("clusters", 0)
        n_in, n_out = lay["w"].shape
        assert lc.ff >= n_out * lay["wo"] + ag.get("clusters", 0) * n_in * lay["wx"]
