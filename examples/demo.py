"""`make demo`: the main job on the bundled example model (scikit-learn digits MLP).

1. compile it to an artifact directory (out/digits-golden);
2. print float vs fixed-point accuracy on its test split at a few precisions;
3. verify golden against the RTL simulation (and the GPU kernels' CPU emulator) bit for bit
   on the whole test split: `modelcircuit verify`.
"""

from __future__ import annotations

import sys

import numpy as np

import modelcircuit as mc
from modelcircuit.cli import main as cli
from modelcircuit.data import DEFAULT_MODEL, bundled


def main() -> int:
    rc = cli(["compile", "--precision", "fixed<16,6>", "--out", "out/digits-golden"])
    if rc:
        return rc
    d = np.load(bundled("digits_test.npz"))
    x, y = d["x"], d["y"]
    g = mc.load_onnx(bundled(DEFAULT_MODEL))
    print(f"\ndigits MLP 64->32->32->10, test split of {len(y)} images")
    print(f"{'precision':28s} accuracy")
    for label, kw in [("float32", {"precision": "float32"}),
                      ("fixed<16,6>", {"precision": "fixed<16,6>"}),
                      ("fixed<8,3>", {"precision": "fixed<8,3>"}),
                      ("fixed<8,3> --calibrate", {"precision": "fixed<8,3>", "calibrate": x[:200]}),
                      ("fixed<6,3> --calibrate", {"precision": "fixed<6,3>", "calibrate": x[:200]})]:
        acc = float(np.mean(mc.run(mc.compile(g, **kw), x).argmax(-1) == y))
        print(f"{label:28s} {acc:.4f}")
    print()
    backends = "golden,rtl,gpu-emu"
    return cli(["verify", "--precision", "fixed<16,6>", "--backends", backends])


if __name__ == "__main__":
    sys.exit(main())
