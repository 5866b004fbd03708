"""The bundled examples: the digits MLP and CNN (trained by examples/train_digits.py and
train_digits_cnn.py) and their test split.
MODEL defaults to it on the command line."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT_MODEL = "digits_mlp.onnx"
# the bundled models trained on scikit-learn's digits: `verify` uses their test split
DIGITS_MODELS = ("digits_mlp.onnx", "digits_cnn.onnx")


def bundled(name: str) -> Path:
    """Path of a file shipped in this folder."""
    return Path(str(resources.files(__package__).joinpath(name)))
