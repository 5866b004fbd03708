from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

import modelcircuit as mc
from tests.conftest import DATA, gpu_available, shared_model

DIGITS = DATA / "digits_mlp.onnx"
DIGITS_CNN = DATA / "digits_cnn.onnx"

# (model file, precision) pairs that gpu-emu must match bit for bit
FIXED_CASES = [
    ("three_layer_keras", "fixed<16,6>"), ("three_layer_keras", "fixed<8,3>"),
    ("three_layer_pytorch", "fixed<16,6>"), ("three_layer_pytorch", "fixed<8,3>"),
    ("two_layer_keras", "fixed<16,6>"), ("two_layer_keras", "fixed<8,3>"),
    ("qkeras_jettagging", None), ("TFC_2W2A", None),
    ("conv1d_small_keras", "fixed<16,6>"), ("conv1d_small_keras", "fixed<8,3>"),
    ("conv2d_small_keras", "fixed<16,6>"), ("conv2d_small_keras", "fixed<8,3>"),
]
FLOAT_CASES = ["three_layer_keras", "three_layer_pytorch", "two_layer_keras",
               "conv1d_small_keras", "conv2d_small_keras"]


def model_path(name: str) -> Path:
    if name in ("digits_mlp", "digits_cnn"):
        p = DIGITS if name == "digits_mlp" else DIGITS_CNN
        if not p.exists():
            pytest.skip(f"digits model not built yet ({p})")
        return p
    return shared_model(name)


@cache
def compiled(name: str, precision: str | None):
    return mc.compile(mc.load_onnx(str(model_path(name))), precision=precision)


def sample_inputs(g, n: int, seed: int = 0) -> list[np.ndarray]:
    """Float inputs: normal values, wide values that saturate, and exact zeros."""
    rng = np.random.default_rng(seed)
    out = []
    for name in g.inputs:
        shp = g.tensor(name).shape
        x = rng.normal(0.0, 1.5, size=(n,) + shp)
        x[: n // 8] *= 40.0  # saturate the input type
        x[n // 8: n // 8 + 2] = 0.0
        out.append(x)
    return out


have_gpu = gpu_available  # the root conftest skips `gpu` tests without a device
