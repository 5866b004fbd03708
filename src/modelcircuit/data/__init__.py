"""The bundled example: the digits MLP (trained by examples/train_digits.py) and its test split.
MODEL defaults to it on the command line."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT_MODEL = "digits_mlp.onnx"


def bundled(name: str) -> Path:
    """Path of a file shipped in this folder."""
    return Path(str(resources.files(__package__).joinpath(name)))
