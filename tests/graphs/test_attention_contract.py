"""The integer contracts of graphs/attention.py against their float definitions: the error
of each is bounded by what the contract rounds (computed here, not tuned)."""

from __future__ import annotations

from math import sqrt

import numpy as np
import pytest

from modelcircuit.graphs import attention as attn
from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs.types import parse_type


def test_rsqrt_table_is_the_rounded_reciprocal_square_root():
    t = attn.rsqrt_table(8, 14)
    m = np.arange(1, 256)
    exact = 2.0**14 / np.sqrt(m)
    assert np.all(np.abs(t[1:] - exact) <= 0.5 + 1e-9)
    assert t[0] == 2**14


def test_normal_shift_keeps_the_mantissa_under_m_bits():
    rng = np.random.default_rng(0)
    v = np.concatenate([np.arange(0, 5000), rng.integers(0, 2**62, 5000)]).astype(np.int64)
    for bits in (6, 10, 12):
        e = attn.normal_shift(v, bits)
        m = v >> (2 * e)
        assert np.all(m < 2**bits)
        # the shift is the smallest that does it
        assert np.all((e == 0) | ((v >> (2 * (e - 1))) >= 2**bits))


@pytest.mark.parametrize("d", [16, 24, 32])
def test_layernorm_codes_follow_the_float_definition(d):
    rng = np.random.default_rng(d)
    tx, tout = parse_type("fixed<16,6>"), parse_type("fixed<16,6>")
    x = rng.normal(0, 2, (64, d))
    gamma, beta = rng.uniform(0.5, 1.5, d), rng.uniform(-0.5, 0.5, d)
    q = fx.quantize(x, tx)
    fg, fb, bits, fr = 12, 12, 10, 16
    g = np.round(gamma * sqrt(d) * 2**fg).astype(np.int64)
    b = np.round(beta * 2**fb).astype(np.int64)
    eps = 1e-5
    y = attn.layernorm_codes(q, g, fg, b, fb, attn.layernorm_eps_code(eps, d, tx.frac), bits,
                             fr, attn.rsqrt_table(bits, fr), tout)
    ref = attn.layernorm_float(fx.to_float(q, tx), gamma, beta, eps).astype(np.float64)
    got = fx.to_float(y, tout)
    # the bound: the table's relative error (half an LSB of the smallest normal entry, and
    # the truncated mantissa: 2**-(bits-2)), the floor of step 4 and gamma's / beta's
    # rounding, scaled by |normalised x| <= sqrt(d), plus the output's LSB
    n = np.abs((ref - beta) / gamma)
    rel = 2.0 ** -(bits - 2) + 0.5 * 2.0 ** (bits / 2 - fr) * 2
    bound = (n * gamma * rel + sqrt(d) * 2.0**-fg * n / sqrt(d) + 2.0**-fr * gamma * sqrt(d)
             + 2.0**-fb + 2.0**-tout.frac)
    assert np.all(np.abs(got - ref) <= bound)
    assert np.abs(got - ref).max() < 0.05  # and it is a layer norm, not noise


def test_attention_codes_follow_the_float_definition_and_the_mask():
    rng = np.random.default_rng(1)
    t, heads, dk = 8, 2, 4
    tq = parse_type("fixed<16,6>")
    q, k, v = (fx.quantize(rng.normal(0, 1, (3, t, heads * dk)), tq) for _ in range(3))
    mask = np.where(np.triu(np.ones((t, t)), 1) > 0, -np.inf, 0.0)
    score_t, prob_t, out_t = (parse_type(s) for s in ("fixed<16,6>", "ufixed<16,1>",
                                                       "fixed<16,6>"))
    exp_t = parse_type("ufixed<18,1>")
    lo, shift, size = -(2**14), 4, 1024  # table over [-16, 0) at the scores' grid / 16
    idx = np.arange(size)
    exp_tab = fx.quantize(np.exp(((idx << shift) + lo) * 2.0**-score_t.frac), exp_t)
    rec_t = parse_type("ufixed<18,1>")
    rlo, rshift, rsize = 0, 10, 2048
    sums = (np.arange(rsize) << rshift) + rlo + (1 << (rshift - 1))
    rec_tab = fx.quantize(1.0 / np.maximum(sums * 2.0**-exp_t.frac, 1.0), rec_t)
    keep = attn.mask_keep(mask)
    y = attn.attention_codes(q, k, v, heads, fq=tq.frac, fk=tq.frac, fv=tq.frac, scale_code=1,
                             scale_frac=1, score_type=score_t, mask_codes=None, keep=keep,
                             exp_t=exp_tab, exp_lo=lo, exp_shift=shift, f_exp=exp_t.frac,
                             rec_t=rec_tab, recip_lo=rlo, recip_shift=rshift,
                             f_recip=rec_t.frac, prob_type=prob_t, out_type=out_t)
    ref = attn.attention_float(*(fx.to_float(a, tq) for a in (q, k, v)), heads, 0.5, mask)
    got = fx.to_float(y, out_t)
    assert np.abs(got - ref).max() < 0.05
    # the causal mask: changing later keys and values never changes earlier outputs
    k2, v2 = k.copy(), v.copy()
    k2[:, 4:], v2[:, 4:] = -k2[:, 4:], v2[:, 4:] // 2 + 7
    y2 = attn.attention_codes(q, k2, v2, heads, fq=tq.frac, fk=tq.frac, fv=tq.frac,
                              scale_code=1, scale_frac=1, score_type=score_t, mask_codes=None,
                              keep=keep, exp_t=exp_tab, exp_lo=lo, exp_shift=shift,
                              f_exp=exp_t.frac, rec_t=rec_tab, recip_lo=rlo,
                              recip_shift=rshift, f_recip=rec_t.frac, prob_type=prob_t,
                              out_type=out_t)
    assert np.array_equal(y2[:, :4], y[:, :4])
    assert not np.array_equal(y2[:, 4:], y[:, 4:])
