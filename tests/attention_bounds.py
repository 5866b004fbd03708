"""float32 rounding models of the attention ops (graphs/attention.py), in the style of
tests/conftest.py's float32_error_bound (which calls `matmul_bound` for a MatMul of two
activations; its own _attention_bound serves whole graphs with Attention and LayerNorm, these
two serve the kernel unit tests): per output element, the typical size of |ours - theirs|
between two float32 evaluations, from float64 values and the error E already on each input. EPS = 2u (two sides each round), sums of n
independent roundings grow as sqrt(n + 1) (Higham & Mary 2019), as there."""

from __future__ import annotations

from math import sqrt

import numpy as np

from modelcircuit.graphs import attention as attn

EPS = float(np.finfo(np.float32).eps)
TINY = float(np.finfo(np.float32).tiny)


def matmul_bound(a, b, ea, eb):
    """a @ b (fan-in K): the inputs' errors through the other factor (in quadrature, as a
    Dense's), plus sqrt(K + 1) EPS |a| @ |b|."""
    k = a.shape[-1]
    return (np.sqrt(np.matmul(ea**2, b**2) + np.matmul(a**2, eb**2))
            + sqrt(k + 1) * EPS * np.matmul(np.abs(a), np.abs(b)) + TINY)


def attention_bound(q, k, v, eq, ek, ev, heads, scale, mask):
    """attention_float: the scores as a MatMul of fan-in dk, then the scale's and the mask's
    roundings; through the Softmax and p @ v, a change dz of the scores moves o_j by
    sum_i p_i dz_i (v_ij - o_j) (dp_i = p_i (dz_i - sum p dz)), independent per key as the
    Dense model's inputs; the Softmax's own (S + 4 + d) u p per entry (conftest's) carried
    through v; p @ v (fan-in S) rounds, and the error on v goes through p."""
    qh, kh, vh, eqh, ekh, evh = (attn.split_heads(np.asarray(x, np.float64), heads)
                                 for x in (q, k, v, eq, ek, ev))
    kt, ekt = np.swapaxes(kh, -1, -2), np.swapaxes(ekh, -1, -2)
    removed = np.zeros((1, 1), bool) if mask is None else np.isneginf(mask)
    add = 0.0 if mask is None else np.where(removed, 0.0, mask)
    s = np.matmul(qh, kt) * scale + add
    es = matmul_bound(qh, kt, eqh, ekt) * scale + 2 * EPS * np.abs(s)
    s = np.where(removed, -np.inf, s)
    es = np.where(removed, 0.0, es)
    d = s.max(axis=-1, keepdims=True) - s
    p = np.exp(-d)
    p = p / p.sum(axis=-1, keepdims=True)
    d = np.where(np.isinf(d), 0.0, d)
    n_s = kh.shape[-2]
    # o_j = sum_i p_i v_ij: a change dz of the scores moves it by sum_i p_i dz_i (v_ij - o_j)
    o = np.matmul(p, vh)
    vo2 = (vh[..., None, :, :] - o[..., :, None, :]) ** 2  # (.., T, S, dv)
    eo_z = np.sqrt(np.einsum("...ts,...tsj->...tj", (p * es) ** 2, vo2))
    ep_own = (n_s + 4 + d) * EPS * p + 2 * TINY
    eo = (eo_z + np.sqrt(np.matmul(ep_own**2, vh**2)) + np.sqrt(np.matmul(p**2, evh**2))
          + sqrt(n_s + 1) * EPS * np.matmul(p, np.abs(vh)) + TINY)
    return attn.merge_heads(eo)


def layernorm_bound(x, ex, gamma, beta, eps):
    """layernorm_float: the mean (a sum of D, a division), d = x - mean, the variance (D
    products and sums, a division), sqrt(var + eps) and the division by it, the affine tail;
    each error carried forward by its derivative, the D errors of a sum in quadrature (as the
    Dense model's)."""
    x, ex = np.asarray(x, np.float64), np.asarray(ex, np.float64)
    gamma, beta = np.asarray(gamma, np.float64), np.asarray(beta, np.float64)
    dn = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True)
    d = x - mean
    e_mean = (np.sqrt((ex**2).sum(axis=-1, keepdims=True)) / dn
              + (sqrt(dn + 1) + 1) * EPS * np.abs(x).mean(axis=-1, keepdims=True))
    e_d = ex + e_mean + EPS * np.abs(d)
    var = (d * d).mean(axis=-1, keepdims=True)
    e_var = (2 * np.sqrt((d**2 * e_d**2).sum(axis=-1, keepdims=True)) / dn
             + (sqrt(dn + 1) + 1) * EPS * var)
    den = np.sqrt(var + eps)
    rel = e_var / (2 * (var + eps)) + 2 * EPS  # the sum with eps and the square root
    yn = d / den
    e_yn = e_d / den + np.abs(yn) * (rel + EPS)
    y = yn * gamma + beta
    return np.abs(gamma) * e_yn + EPS * (np.abs(yn * gamma) + np.abs(y)) + TINY
