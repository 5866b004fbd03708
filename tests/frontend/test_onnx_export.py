"""Exporting a Graph to ONNX (onnx_export.py)."""

from __future__ import annotations

import numpy as np
import onnx

import modelcircuit as mc
from modelcircuit.frontend.onnx.export import to_onnx
from modelcircuit.frontend.onnx.importer import import_model
from tests.graphs.helpers import mlp


def test_builder_onnx_roundtrip_float():
    g = mlp(4)
    g2 = import_model(to_onnx(g))
    x = np.random.default_rng(5).normal(size=(20, 6)).astype(np.float32)
    a = mc.run(mc.compile(g, precision="float32"), x)
    b = mc.run(mc.compile(g2, precision="float32"), x)
    assert np.array_equal(a, b)


def test_onnx_model_keeps_checker_happy(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(to_onnx(mlp()), p)
    onnx.checker.check_model(str(p))

