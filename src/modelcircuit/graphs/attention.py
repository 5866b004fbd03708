"""Attention ops (MatMul of two activations, Attention, LayerNorm): the numeric contract, and
the integer functions the reference, the passes and every backend's tests share.

Shapes are per sample. A token sequence is a (T, D) tensor, token-major: in the streamed
circuit it is a 1-D frame of T "pixels" of D channels, so token-wise Dense (MatMul by a
constant on the last axis), residual Add and LayerNorm are the per-pixel units of a 1-D CNN.

MatMul (two activations, `a @ b` over the last two axes, batched over leading axes):
  float32: numpy's matmul in float32.
  fixed point: the exact integer sum of code products (frac fa + fb) in `acc`, then one
  requantization to the output type. It exists for the golden model and the GPU; the
  streamed circuit builds the products of attention only as the Attention node below, and
  refuses a MatMul of two activations elsewhere.

Attention (multi-head scaled dot-product attention over token sequences; what torch.onnx
writes for nn.MultiheadAttention and scaled_dot_product_attention, fused by the importer /
a pass): inputs q (T, H*dk), k (S, H*dk), v (S, H*dv) [, mask (T, S) constant], then in
fixed point the two Softmax tables [, exp_table, recip_table]. Head h reads columns
h*dk:(h+1)*dk of q and k, h*dv:(h+1)*dv of v; the output is (T, H*dv), heads side by side.
  float32: s = (q_h @ k_h^T) * scale + mask; p = softmax(s, last axis); o_h = p @ v_h.
  fixed point, per head (codes int64; q, k, v types tq, tk, tv):
    1. a[t, s] = sum_j q[t, j] * k[s, j], exact (frac fq + fk), in `acc`.
    2. scores: sc = requantize(a * c, fq + fk + fc, score_type), where the scale is the
       constant code c = `scale_code` at fc = `scale_frac` fractional bits (the pass picks
       them: a power-of-two scale is c = 1).
    3. mask (optional constant): an entry of -inf removes that key from its row (probability
       exactly 0; a row with every key removed is a compile error); a finite entry is
       quantized to score_type (its rounding) and added to sc with saturation to score_type.
    4. row softmax over the keys that are not removed, exactly Softmax's contract
       (reference.softmax): d = sc - max(sc); e = exp_table[table_index(d, exp_lo,
       exp_shift)]; r = recip_table[table_index(sum(e), recip_lo, recip_shift)];
       p = requantize(e * r, f_exp + f_recip, prob_type).
    5. o[t, j] = requantize(sum_s p[t, s] * v[s, j] (exact, frac fp + fv), fp + fv, out).
  Cross-attention (k, v from another sequence than q is allowed by the op; the importer
  refuses what the circuit cannot stream), data-dependent masks and KV caches are refused at
  import in one line naming the node.

LayerNorm (over the last axis, D values; inputs x, gamma, beta, then in fixed point the
constants g, b, rsqrt_table appended by the types pass):
  float32: (x - mean) / sqrt(var + epsilon) * gamma + beta, numpy float32, var biased.
  fixed point (codes q at fx fractional bits, all integer, exact until step 5):
    1. S = sum_j q_j;  d_i = D * q_i - S            (= D * 2**fx * (x_i - mean), exact)
    2. V = sum_i d_i**2 + E,  E = round(epsilon * D**3 * 4**fx)   (= D**3 4**fx (var + eps))
    3. normalisation of V: e = max(0, ceil((bitlen(V) - M) / 2)),  m = V >> 2e  (< 2**M),
       M = `rsqrt_bits`; R = rsqrt_table[m], rsqrt_table[m] = round(2**fr / sqrt(m)) for
       m >= 1 and 2**fr for m = 0 (then every d_i is 0), fr = `rsqrt_frac`.
    4. t_i = (d_i * R) >> e     (arithmetic shift, floor; t_i ~ (x_i - mean) /
                                 sqrt(var + eps) / sqrt(D) at fr fractional bits)
    5. y_i = requantize(t_i * g_i + align(b_i, fb, fr + fg), fr + fg, out), where g_i is
       gamma_i * sqrt(D) quantized (frac fg) and b_i is beta_i quantized (frac fb <= fr + fg).
  Why this shape: every sum is exact, the only approximations are the table (M bits of V's
  mantissa; relative error about 2**-(M-1) in the normalisation) and the floor in 4; the
  data-dependent shift e is a barrel shifter in hardware, the table a ROM of 2**M entries.
"""

from __future__ import annotations

import numpy as np

from . import fixed as fx
from .types import FixedType

Array = np.ndarray


def table_index(q: Array, lo: int, shift: int, size: int) -> Array:
    """The index of codes q into a table of `size` entries covering [lo, lo + size << shift):
    the same function as reference.table_index (kept there for the other table ops)."""
    return np.clip((q.astype(np.int64) - lo) >> shift, 0, size - 1)


def exact_matmul(a: Array, b: Array) -> Array:
    """a @ b over the last two axes on int64 codes, exact (int64 products and sums: the
    passes bound the accumulator to 62 bits)."""
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


def softmax_codes(sc: Array, keep: Array | None, exp_t: Array, exp_lo: int, exp_shift: int,
                  rec_t: Array, recip_lo: int, recip_shift: int) -> Array:
    """Softmax's integer contract over the last axis (e * r at f_exp + f_recip fractional
    bits), with the entries where `keep` is False removed (their e is 0)."""
    q = sc.astype(np.int64)
    if keep is None:
        mx = q.max(axis=-1, keepdims=True)
    else:
        lowest = np.iinfo(np.int64).min
        mx = np.where(keep, q, lowest).max(axis=-1, keepdims=True)
    e = exp_t[table_index(q - mx, exp_lo, exp_shift, exp_t.shape[0])]
    if keep is not None:
        e = np.where(keep, e, 0)
    s = e.sum(axis=-1, keepdims=True)
    r = rec_t[table_index(s, recip_lo, recip_shift, rec_t.shape[0])]
    return e * r


def split_heads(x: Array, heads: int) -> Array:
    """(..., T, H*d) -> (..., H, T, d)."""
    *lead, t, hd = x.shape
    return np.moveaxis(x.reshape(*lead, t, heads, hd // heads), -2, -3)


def merge_heads(x: Array) -> Array:
    """(..., H, T, d) -> (..., T, H*d)."""
    x = np.moveaxis(x, -3, -2)
    return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])


def mask_keep(mask: Array | None) -> Array | None:
    """Where a constant additive mask keeps a key (False where it is -inf)."""
    if mask is None:
        return None
    return ~np.isneginf(np.asarray(mask, dtype=np.float64))


def attention_float(q: Array, k: Array, v: Array, heads: int, scale: float,
                    mask: Array | None) -> Array:
    q32, k32, v32 = (np.asarray(t, dtype=np.float32) for t in (q, k, v))
    qh, kh, vh = split_heads(q32, heads), split_heads(k32, heads), split_heads(v32, heads)
    s = np.matmul(qh, np.swapaxes(kh, -1, -2)) * np.float32(scale)
    if mask is not None:
        s = s + np.asarray(mask, dtype=np.float32)
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    p = e / e.sum(axis=-1, keepdims=True)
    return merge_heads(np.matmul(p, vh)).astype(np.float32)


def attention_codes(q: Array, k: Array, v: Array, heads: int, *, fq: int, fk: int, fv: int,
                    scale_code: int, scale_frac: int, score_type: FixedType,
                    mask_codes: Array | None, keep: Array | None,
                    exp_t: Array, exp_lo: int, exp_shift: int, f_exp: int,
                    rec_t: Array, recip_lo: int, recip_shift: int, f_recip: int,
                    prob_type: FixedType, out_type: FixedType) -> Array:
    """The fixed-point contract of Attention (module docstring, steps 1-5) on int64 codes."""
    qh, kh, vh = split_heads(q, heads), split_heads(k, heads), split_heads(v, heads)
    a = exact_matmul(qh, np.swapaxes(kh, -1, -2))
    sc = fx.requantize(a * np.int64(scale_code), fq + fk + scale_frac, score_type)
    if mask_codes is not None:
        sc = fx.overflow(sc + mask_codes.astype(np.int64), score_type)
    er = softmax_codes(sc, keep, exp_t, exp_lo, exp_shift, rec_t, recip_lo, recip_shift)
    p = fx.requantize(er, f_exp + f_recip, prob_type)
    o = exact_matmul(p, vh)
    return merge_heads(fx.requantize(o, prob_type.frac + fv, out_type))


def layernorm_float(x: Array, gamma: Array, beta: Array, epsilon: float) -> Array:
    x32 = np.asarray(x, dtype=np.float32)
    mean = x32.mean(axis=-1, keepdims=True)
    d = x32 - mean
    var = (d * d).mean(axis=-1, keepdims=True)
    y = d / np.sqrt(var + np.float32(epsilon))
    return (y * np.asarray(gamma, np.float32) + np.asarray(beta, np.float32)).astype(np.float32)


def layernorm_eps_code(epsilon: float, d: int, fx_in: int) -> int:
    """E = round(epsilon * D**3 * 4**fx) (step 2), exactly (Python integers)."""
    from fractions import Fraction
    return round(Fraction(epsilon) * d**3 * 4**fx_in)


def rsqrt_table(bits: int, frac: int) -> Array:
    """rsqrt_table[m] = round(2**frac / sqrt(m)) (m = 0: 2**frac), 2**bits entries, exact:
    the integer square root decides the rounding, never a float."""
    from math import isqrt
    out = np.empty(1 << bits, dtype=np.int64)
    out[0] = 1 << frac
    for m in range(1, 1 << bits):
        # round(2**f / sqrt(m)) = round(sqrt(4**f / m)); y = floor(sqrt(N)) of N = 4**(f+1)/m
        # (scaled by 2 for the half), the round is floor((y + 1) / 2)
        y = isqrt((1 << (2 * frac + 2)) // m)
        out[m] = (y + 1) >> 1
    return out


def layernorm_codes(q: Array, g: Array, fg: int, b: Array, fb: int, eps_code: int,
                    rsqrt_bits: int, rsqrt_frac: int, table: Array,
                    out_type: FixedType) -> Array:
    """The fixed-point contract of LayerNorm (module docstring, steps 1-5) on int64 codes
    over the last axis."""
    q = q.astype(np.int64)
    dn = q.shape[-1]
    s = q.sum(axis=-1, keepdims=True)
    d = dn * q - s
    v = (d * d).sum(axis=-1, keepdims=True) + np.int64(eps_code)
    e = normal_shift(v, rsqrt_bits)
    r = table[np.right_shift(v, 2 * e)]
    t = np.right_shift(d * r, e)
    acc = t * g.astype(np.int64) + fx.align(b.astype(np.int64), fb, rsqrt_frac + fg)
    return fx.requantize(acc, rsqrt_frac + fg, out_type)


def normal_shift(v: Array, bits: int) -> Array:
    """e = max(0, ceil((bitlen(v) - bits) / 2)) for non-negative int64 v (step 3)."""
    v = np.asarray(v, dtype=np.int64)
    # bitlen via frexp is exact for v < 2**53 only; use an integer loop-free form instead
    bl = np.zeros(v.shape, dtype=np.int64)
    w = v.copy()
    for sh in (32, 16, 8, 4, 2, 1):
        big = w >= (np.int64(1) << np.int64(sh))
        bl += np.where(big, sh, 0)
        w = np.where(big, w >> sh, w)
    bl += (w > 0)
    return np.maximum(0, (bl - bits + 1) // 2)
