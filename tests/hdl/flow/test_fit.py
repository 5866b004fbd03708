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

