"""Train the bundled CNN example: a small Conv2D net on scikit-learn's 8x8 digits, in numpy.

    pixels (8, 8, 1) -> Conv 3x3 (8, pad 1) -> ReLU -> MaxPool 2 -> Conv 3x3 (16, pad 1) -> ReLU
    -> MaxPool 2 -> Flatten (2 x 2 x 16) -> Dense 10

Same data and test split as the MLP (examples/train_digits.py: pixels / 16, test_size=0.25,
random_state=0, stratified; its test rows are src/modelcircuit/data/digits_test.npz, which
this model reads as 8x8x1 frames). Trained with plain numpy (im2col convolutions, Adam,
float64, one thread), so the result is the same on every machine; written with onnx.helper as
keras writes a CNN (channels-last input, a Transpose pair around the channels-first Conv
layers), so the file is byte-deterministic. Run: .venv/bin/python examples/train_digits_cnn.py
[OUT_DIR] (default: the package data folder).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread: the same sums every run
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "src" / "modelcircuit" / "data"
C1, C2, EPOCHS, BATCH, LR = 8, 16, 40, 32, 3e-3


def im2col(x: np.ndarray) -> np.ndarray:
    """(N, H, W, C) -> (N, H, W, 9 C): each pixel's 3x3 neighbourhood (zero padding 1), in
    (dy, dx, c) order."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    return np.concatenate([xp[:, dy:dy + h, dx:dx + w, :] for dy in range(3) for dx in range(3)],
                          axis=-1)


def col2im(d: np.ndarray, c: int) -> np.ndarray:
    """The adjoint of im2col: (N, H, W, 9 C) -> (N, H, W, C)."""
    n, h, w, _ = d.shape
    out = np.zeros((n, h + 2, w + 2, c))
    for k, (dy, dx) in enumerate((dy, dx) for dy in range(3) for dx in range(3)):
        out[:, dy:dy + h, dx:dx + w, :] += d[..., k * c:(k + 1) * c]
    return out[:, 1:-1, 1:-1, :]


def pool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, h, w, c = x.shape
    v = x.reshape(n, h // 2, 2, w // 2, 2, c)
    y = v.max(axis=(2, 4))
    mask = v == y[:, :, None, :, None, :]
    mask = mask & (np.cumsum(np.cumsum(mask, axis=2), axis=4) == 1)  # first maximum only
    return y, mask


def unpool(d: np.ndarray, mask: np.ndarray) -> np.ndarray:
    n, h, _, w, _, c = mask.shape
    return (mask * d[:, :, None, :, None, :]).reshape(n, 2 * h, 2 * w, c)


def forward(p: dict, x: np.ndarray):
    c1 = im2col(x)
    a1 = c1 @ p["w1"] + p["b1"]
    r1 = np.maximum(a1, 0)
    p1, m1 = pool(r1)
    c2 = im2col(p1)
    a2 = c2 @ p["w2"] + p["b2"]
    r2 = np.maximum(a2, 0)
    p2, m2 = pool(r2)
    f = p2.reshape(len(x), -1)  # channels-last flatten (h, w, c)
    return f @ p["w3"] + p["b3"], (c1, a1, m1, c2, a2, m2, f)


def grads(p: dict, x: np.ndarray, y: np.ndarray) -> dict:
    z, (c1, a1, m1, c2, a2, m2, f) = forward(p, x)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    dz = e / e.sum(axis=1, keepdims=True)
    dz[np.arange(len(y)), y] -= 1
    dz /= len(y)
    g = {"w3": f.T @ dz, "b3": dz.sum(0)}
    dp2 = (dz @ p["w3"].T).reshape(len(x), 2, 2, C2)
    da2 = unpool(dp2, m2) * (a2 > 0)
    g["w2"] = c2.reshape(-1, c2.shape[-1]).T @ da2.reshape(-1, C2)
    g["b2"] = da2.sum(axis=(0, 1, 2))
    dp1 = col2im(da2 @ p["w2"].T, C1)
    da1 = unpool(dp1, m1) * (a1 > 0)
    g["w1"] = c1.reshape(-1, c1.shape[-1]).T @ da1.reshape(-1, C1)
    g["b1"] = da1.sum(axis=(0, 1, 2))
    return g


def train(x: np.ndarray, y: np.ndarray) -> dict:
    rng = np.random.default_rng(0)
    p = {"w1": rng.normal(0, np.sqrt(2 / 9), (9, C1)), "b1": np.zeros(C1),
         "w2": rng.normal(0, np.sqrt(2 / (9 * C1)), (9 * C1, C2)), "b2": np.zeros(C2),
         "w3": rng.normal(0, np.sqrt(1 / (4 * C2)), (4 * C2, 10)), "b3": np.zeros(10)}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    t = 0
    for _ in range(EPOCHS):
        order = rng.permutation(len(x))
        for i in range(0, len(x), BATCH):
            idx = order[i:i + BATCH]
            g = grads(p, x[idx], y[idx])
            t += 1
            for k in p:  # Adam
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
                p[k] -= LR * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
    return p


def to_onnx(p: dict) -> onnx.ModelProto:
    """keras' layout: NHWC input, Transpose to NCHW, channels-first Conv/MaxPool, Transpose
    back, Flatten(axis=1) of the channels-last frame, Gemm."""
    def conv_w(w: np.ndarray, cin: int) -> np.ndarray:  # (9 cin, cout) -> (cout, cin, 3, 3)
        return w.reshape(3, 3, cin, -1).transpose(3, 2, 0, 1)

    n = helper.make_node
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    pl = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        n("Transpose", ["pixels"], ["nchw"], name="to_nchw", perm=[0, 3, 1, 2]),
        n("Conv", ["nchw", "conv1_w", "conv1_b"], ["c1"], name="conv1", **conv),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], name="pool1", **pl),
        n("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], name="conv2", **conv),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("MaxPool", ["r2"], ["p2"], name="pool2", **pl),
        n("Transpose", ["p2"], ["nhwc"], name="to_nhwc", perm=[0, 2, 3, 1]),
        n("Flatten", ["nhwc"], ["flat"], name="flatten", axis=1),
        n("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc"),
    ]
    inits = {"conv1_w": conv_w(p["w1"], 1), "conv1_b": p["b1"], "conv2_w": conv_w(p["w2"], C1),
             "conv2_b": p["b2"], "fc_w": p["w3"], "fc_b": p["b3"]}
    g = helper.make_graph(
        nodes, "digits_cnn", [helper.make_tensor_value_info("pixels", TensorProto.FLOAT,
                                                            ["N", 8, 8, 1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="modelcircuit examples/train_digits_cnn.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main(out: Path = DATA) -> None:
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, digits.target, test_size=0.25, random_state=0,
                                              stratify=digits.target)
    frames = lambda a: a.reshape(-1, 8, 8, 1).astype(np.float64)  # noqa: E731
    p = train(frames(x_tr), y_tr)
    # the accuracy of what is exported: float32 weights
    p32 = {k: v.astype(np.float32).astype(np.float64) for k, v in p.items()}
    acc = float((forward(p32, frames(x_te))[0].argmax(1) == y_te).mean())
    print(f"float test accuracy: {acc:.4f} ({len(y_te)} test samples)")
    assert acc >= 0.97, acc
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(to_onnx(p), out / "digits_cnn.onnx")
    test = np.load(DATA / "digits_test.npz")
    assert np.array_equal(test["x"], x_te), "digits_test.npz is not this test split"
    print(f"wrote {out / 'digits_cnn.onnx'} (test rows: digits_test.npz, as 8x8x1 frames)")


if __name__ == "__main__":
    import sys

    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
