"""Shared fixtures: where the third-party models are, the bundled digits model."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_MODELS = ROOT.parent / "shared" / "models"
DATA = ROOT / "src" / "modelcircuit" / "data"


def shared_model(name: str) -> Path:
    p = SHARED_MODELS / f"{name}.onnx"
    if not p.exists():
        pytest.skip(f"third-party model {p} is absent (../shared/models not beside the project)")
    return p


@pytest.fixture(scope="session")
def digits_model() -> Path:
    return DATA / "digits_mlp.onnx"


@pytest.fixture(scope="session")
def digits_test() -> tuple[np.ndarray, np.ndarray]:
    d = np.load(DATA / "digits_test.npz")
    return d["x"], d["y"]


@cache
def gpu_available() -> bool:
    try:
        import cupy  # noqa: F401

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):  # noqa: ANN001
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
