"""`make demo`: the main job on the bundled example models (scikit-learn digits: an MLP and a
small CNN).

1. compile the MLP to an artifact directory (out/digits-golden);
2. per model, print float vs fixed-point accuracy on the test split at a few precisions;
3. per model, verify golden against the RTL simulation (the CNN's circuit streams one pixel
   per handshake) and the GPU kernels' CPU emulator, bit for bit on the whole test split:
   `modelcircuit verify`.
"""

from __future__ import annotations

import sys

import numpy as np

import modelcircuit as mc
from modelcircuit.cli import main as cli
from modelcircuit.data import DEFAULT_MODEL, bundled

MODELS = [(DEFAULT_MODEL, "digits MLP 64->32->32->10"),
          ("digits_cnn.onnx", "digits CNN 8x8x1 -> Conv3x3(8)+ReLU -> MaxPool -> "
                              "Conv3x3(16)+ReLU -> MaxPool -> Dense 10")]


def accuracy_table(model: str, title: str, x: np.ndarray, y: np.ndarray) -> None:
    g = mc.load_onnx(bundled(model))
    print(f"\n{title}, test split of {len(y)} images")
    print(f"{'precision':28s} accuracy")
    for label, kw in [("float32", {"precision": "float32"}),
                      ("fixed<16,6>", {"precision": "fixed<16,6>"}),
                      ("fixed<8,3>", {"precision": "fixed<8,3>"}),
                      ("fixed<8,3> --calibrate", {"precision": "fixed<8,3>", "calibrate": x[:200]}),
                      ("fixed<6,3> --calibrate", {"precision": "fixed<6,3>", "calibrate": x[:200]})]:
        acc = float(np.mean(mc.run(mc.compile(g, **kw), x).argmax(-1) == y))
        print(f"{label:28s} {acc:.4f}")
    print()


def main() -> int:
    rc = cli(["compile", "--precision", "fixed<16,6>", "--out", "out/digits-golden"])
    if rc:
        return rc
    d = np.load(bundled("digits_test.npz"))
    x, y = d["x"], d["y"]
    for model, title in MODELS:
        accuracy_table(model, title, x, y)
        rc = cli(["verify", str(bundled(model)), "--precision", "fixed<16,6>",
                  "--backends", "golden,rtl,gpu-emu"])
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
