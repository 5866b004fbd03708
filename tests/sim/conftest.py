"""Fixtures of the simulation tests: one build cache for the whole session."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.api import compile as mc_compile
from modelcircuit.api import load_onnx
from modelcircuit.graphs import reference


@pytest.fixture(scope="session")
def sim_cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("simcache")


@pytest.fixture
def cli_cache(sim_cache, monkeypatch: pytest.MonkeyPatch):
    """The CLI finds the session's build cache through its environment variable."""
    monkeypatch.setenv("MODELCIRCUIT_SIM_CACHE", str(sim_cache))
    return sim_cache


@pytest.fixture(scope="session")
def digits_compiled(digits_model):
    return mc_compile(load_onnx(digits_model))


@pytest.fixture(scope="session")
def digits_codes(digits_compiled, digits_test) -> np.ndarray:
    x, _ = digits_test
    return reference.quantize_inputs(digits_compiled.graph, [x])[0]
