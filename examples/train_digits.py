"""Train the bundled example: a 64->32->32->10 ReLU MLP on scikit-learn's digits.

Fixed seed; exported to ONNX with modelcircuit's own exporter (frontend/onnx/export.py) and
saved, with its test split, as package data: src/modelcircuit/data/digits_mlp.onnx and
digits_test.npz. Run: .venv/bin/python examples/train_digits.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.frontend.onnx.export import to_onnx

DATA = Path(__file__).resolve().parents[1] / "src" / "modelcircuit" / "data"


def main() -> None:
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # pixels 0..16 -> [0, 1], exact in binary
    x_tr, x_te, y_tr, y_te = train_test_split(x, digits.target, test_size=0.25, random_state=0,
                                              stratify=digits.target)
    clf = MLPClassifier(hidden_layer_sizes=(32, 32), activation="relu", max_iter=600,
                        random_state=0, alpha=1e-4)
    clf.fit(x_tr, y_tr)
    acc = clf.score(x_te, y_te)
    print(f"float test accuracy: {acc:.4f}")
    assert acc >= 0.95, acc
    b = GraphBuilder("digits_mlp")
    h = b.input("pixels", 64)
    for i, (w, c) in enumerate(zip(clf.coefs_, clf.intercepts_, strict=True)):
        h = b.dense(h, w, c, name=f"fc{i + 1}")
        if i < len(clf.coefs_) - 1:
            h = b.relu(h, name=f"relu{i + 1}")
    b.output(h)
    DATA.mkdir(parents=True, exist_ok=True)
    onnx.save(to_onnx(b.build()), DATA / "digits_mlp.onnx")
    np.savez_compressed(DATA / "digits_test.npz", x=x_te, y=y_te.astype(np.int64))
    print(f"wrote {DATA / 'digits_mlp.onnx'} and digits_test.npz ({len(y_te)} test samples)")


if __name__ == "__main__":
    main()
