"""The bundled examples: the digits MLP and CNN (trained by examples/train_digits.py and
train_digits_cnn.py) and their test split.
MODEL defaults to it on the command line."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "digits_mlp.onnx"
# the bundled models trained on scikit-learn's digits: `verify` uses their test split
DIGITS_MODELS = ("digits_mlp.onnx", "digits_cnn.onnx")


def bundled(name: str) -> Path:
    """Path of a file shipped in this folder."""
    return Path(str(resources.files(__package__).joinpath(name)))


def load_model(path: str | None) -> Any:
    """The ONNX model at `path`, else the bundled digits MLP (the CLI's and the sweep's
    MODEL argument)."""
    from ..frontend.onnx.importer import load_onnx

    return load_onnx(path if path is not None else bundled(DEFAULT_MODEL))
