"""Recurrent ops (LSTM, GRU): the numeric contract, and what the reference, the passes and
the backends share (activation functions, gate layout, the exact ranges of every sum).

A recurrent node runs over a per-sample sequence x of shape (T, F), one time step after the
other, from a constant initial state, and outputs the (T, H) sequence of its states (an
LSTM can output its cell states instead: `emit="c"`, ONNX's Y_c is the last of them). Only
the forward direction exists; bidirectional, peepholes and sequence lengths are refused at
import. Gate columns are in ONNX order: LSTM i, o, f, c; GRU z, r, h. W is (F, G*H), R is
(H, G*H), B is (2, G*H) (row 0: W's bias, row 1: R's bias).

Float32 (compared with onnxruntime): the ONNX equations in float32, step by step.

Fixed point (bit-exact in every backend; codes are int64; align = exact left shift):
  1. Gate sums, exact. x (type tx) and h (state type th) are aligned to the finer of their
     two binary points, fxh = max(fx, fh); W and R share the weight type tw; with the bias
     type tb, each gate column k is
         a_k = align(x . W_k + h . R_k, fxh + fw -> fa) + align(Wb_k + Rb_k, fb -> fa),
     fa = max(fxh + fw, fb), in an accumulator `acc` whose width comes from the exact
     ranges of the weights and of the tx / th codes (passes/recurrent.py; over 62 bits is a
     compile error). GRU's candidate is special (3.).
  2. One requantization per gate: p_k = requantize(a_k, fa, pre_type); with `clip`, p is
     then clamped to [-cc, cc], cc = floor(clip * 2**f_pre) (at most pre_type's qmax).
  3. Activations are tables (built once by passes/recurrent.py, indexed as
     reference.table_index): gates f (sigmoid by default) -> f_type, candidate g (tanh)
     -> g_type; LSTM's h (tanh) of the cell state -> h_type.
  LSTM:
     C = requantize(align(f * C_prev) + align(i * g), max(ff + fc, ff + fg), cell_type)
     H = requantize(o * Th[C], ff + fhT, state_type)    (clip acts on gates only, as in
                                                         onnxruntime: not on C)
  GRU (z, r as gates):
     linear_before_reset = 0: rh = requantize(r * h, ff + fh, state_type) (r * h is within
        h's range), then the candidate's sum is step 1 with rh in place of h over Rh.
     linear_before_reset = 1: hn = requantize(h . Rh + Rbh (exact, at fa), fa, hn_type);
        s = align(x . Wh + Wbh (exact, at fa)) + align(r * hn), at max(fa, ff + f_hn); the
        candidate's one requantization is p = requantize(s, .., pre_type).
     H = requantize(align((1 - z) * n) + align(z * h), max(ff + fg, ff + fh), state_type),
        1 - z computed exactly as (1 << ff) - z.
  The state types (state_type, cell_type, hn_type, pre_type) come from the precision, the
  per-layer map (the node's result type is its state type) or calibration (ranges of the
  float model's internal values, recorded by the reference in a traced run as
  "<node>::h", "::c", "::pre", "::hn"), like any activation's; the table output types take
  the precision's width and the integer bits their function needs over its domain.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Array = np.ndarray

GATES = {"LSTM": 4, "GRU": 3}
# ONNX activation name -> (our name, default alpha, default beta)
ONNX_ACTIVATIONS: dict[str, tuple[str, float, float]] = {
    "Sigmoid": ("sigmoid", 0.0, 0.0), "Tanh": ("tanh", 0.0, 0.0), "Relu": ("relu", 0.0, 0.0),
    "HardSigmoid": ("hardsigmoid", 0.2, 0.5), "LeakyRelu": ("leakyrelu", 0.01, 0.0),
    "ThresholdedRelu": ("thresholdedrelu", 1.0, 0.0), "ScaledTanh": ("scaledtanh", 1.0, 1.0),
    "Affine": ("affine", 1.0, 0.0), "Elu": ("elu", 1.0, 0.0), "Softsign": ("softsign", 0.0, 0.0),
    "Softplus": ("softplus", 0.0, 0.0),
}
# the ONNX activations that take alpha / beta (ONNX consumes activation_alpha in that order)
TAKES_ALPHA = frozenset({"hardsigmoid", "leakyrelu", "thresholdedrelu", "scaledtanh", "affine",
                         "elu"})
TAKES_BETA = frozenset({"hardsigmoid", "scaledtanh", "affine"})


def _sigmoid(x: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-x))


# name -> f(x, alpha, beta), in the dtype of x (float32 for the float model, float64 for
# tables); as the ONNX RNN activation functions define them
RNN_FUNCS: dict[str, Callable[[Array, float, float], Array]] = {
    "sigmoid": lambda x, a, b: _sigmoid(x),
    "tanh": lambda x, a, b: np.tanh(x),
    "relu": lambda x, a, b: np.maximum(x, 0),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "affine": lambda x, a, b: a * x + b,
    "elu": lambda x, a, b: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1)),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0),
}
# where each function is flat enough that the table's index may saturate (its domain)
SATURATES: dict[str, tuple[float | None, float | None]] = {
    "sigmoid": (-16.0, 16.0), "tanh": (-8.0, 8.0), "softsign": (None, None),
}


def act(node_attrs: object, k: int, x: Array) -> Array:
    """Activation k of a node (RecurrentAttrs) on x, in x's dtype."""
    a = node_attrs
    name = a.acts[k]  # type: ignore[attr-defined]
    alpha = a.alphas[k] if k < len(a.alphas) else 0.0  # type: ignore[attr-defined]
    beta = a.betas[k] if k < len(a.betas) else 0.0  # type: ignore[attr-defined]
    dt = x.dtype
    return np.asarray(RNN_FUNCS[name](x, dt.type(alpha), dt.type(beta)), dtype=dt)


def clip_code(clip: float | None, frac: int, qmax: int) -> int | None:
    """The clip threshold as a code of the pre-activation type: floor(clip * 2**frac)."""
    if clip is None:
        return None
    return int(min(qmax, np.floor(float(clip) * 2.0 ** frac)))


def row_ranges(lo_x: int, hi_x: int, n_x: int, lo_h: int, hi_h: int, n_h: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per row of [x; h] (already aligned codes): the lowest and highest value."""
    lo = np.array([lo_x] * n_x + [lo_h] * n_h, dtype=object)
    hi = np.array([hi_x] * n_x + [hi_h] * n_h, dtype=object)
    return lo, hi


def sum_range(w: np.ndarray, lo: np.ndarray, hi: np.ndarray, bias: np.ndarray | None
              ) -> tuple[int, int]:
    """Exact (lowest, highest) of sum_i v_i * w_ij (+ bias_j) over v_i in [lo_i, hi_i], over
    every column j; Python ints."""
    w = np.asarray(w, dtype=object)
    a, b = w * lo[:, None], w * hi[:, None]
    mn = np.minimum(a, b).sum(axis=0)
    mx = np.maximum(a, b).sum(axis=0)
    if bias is not None:
        mn = mn + np.asarray(bias, dtype=object)
        mx = mx + np.asarray(bias, dtype=object)
    return int(min(mn.min(), 0)), int(max(mx.max(), 0))
