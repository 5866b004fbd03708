"""The attention circuits alone (hdl/units/layernorm.py, hdl/streamed/attention.py), in a
hand-built stream design: bit-exact against graphs/attention.py's integer functions (the
contract every backend matches) in Amaranth's simulator with input gaps and output
backpressure, and the simulated latency / II equal to the compile-time schedule."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.graphs import attention as attn
from modelcircuit.graphs.types import FixedType, Rounding
from modelcircuit.hdl.streamed.top import StreamDesign, StreamTop, design_info, schedule
from modelcircuit.hdl.streamed.units import MapUnit, Tok
from modelcircuit.hdl.units.layernorm import LayerNormUnit
from modelcircuit.sim.amaranth_sim import simulate

pytestmark = pytest.mark.xdist_group("sim")


def _run(d: StreamDesign, codes: np.ndarray, gap: float, bp: float, seed: int = 0):
    tm = schedule(d)
    info = design_info(d, tm, [codes.shape[1], d.input.elements],
                       [d.output.per_frame, d.output.elements], "x", "y")
    n_out = codes.shape[0] * d.output.per_frame
    res = simulate(StreamTop(d, tm), info, codes.reshape(-1, codes.shape[-1]), gap=gap,
                   backpressure=bp, seed=seed, n_out=n_out)
    return res, tm


def _ln_case(seed: int, d: int, tx: FixedType, tout: FixedType, bits: int, frac: int):
    rng = np.random.default_rng(seed)
    gamma = rng.normal(1.0, 0.3, d)
    beta = rng.normal(0.0, 0.3, d)
    fg, fb = 8, 8
    g = np.round(gamma * np.sqrt(d) * 2**fg).astype(np.int64)
    b = np.round(beta * 2**fb).astype(np.int64)
    eps = attn.layernorm_eps_code(1e-5, d, tx.frac)
    table = attn.rsqrt_table(bits, frac)
    return g, fg, b, fb, eps, table


@pytest.mark.parametrize("d,tin,tout,bits,gap,bp", [
    (8, FixedType(16, 6), FixedType(16, 6), 10, 0.3, 0.4),
    (5, FixedType(8, 3, rounding=Rounding.RND), FixedType(12, 4, rounding=Rounding.RND),
     8, 0.0, 0.0),
])
def test_layernorm_unit_bit_exact(d, tin, tout, bits, gap, bp) -> None:
    g, fg, b, fb, eps, table = _ln_case(1, d, tin, tout, bits, 14)
    rng = np.random.default_rng(2)
    n, t = 3, 4
    x = rng.integers(tin.qmin, tin.qmax + 1, size=(n, t, d))
    x[0, 0] = 7  # every d_i = 0: V = E
    x[0, 1] = tin.qmax
    x[1, 2, ::2] = tin.qmin
    want = attn.layernorm_codes(x, g, fg, b, fb, eps, bits, 14, table, tout)
    unit = LayerNormUnit(tin, d, tout, g, fg, b, fb, eps, bits, 14, table)
    des = StreamDesign("ln", Tok(tin, d, t))
    des.add("ln", MapUnit(unit, [Tok(tin, d, t)], Tok(tout, d, t)), [-1])
    res, tm = _run(des, x, gap, bp)
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)
    if gap == 0 and bp == 0:
        assert res.delivered[t - 1] - res.accepted[0] == tm.latency[0]


def _att_tables(st: FixedType, s: int):
    """Softmax tables in the style of the types pass: exp over (score - max) <= 0, the
    reciprocal over the sum of S exps."""
    et, rt = FixedType(10, 1, signed=False), FixedType(12, 2, signed=False)
    shift = 3
    size = 1 << 8
    lo = -(size << shift) + 1
    xs = (lo + (np.arange(size) << shift)) * 2.0**-st.frac
    exp_t = np.minimum(np.round(np.exp(xs) * 2**et.frac), et.qmax).astype(np.int64)
    rshift = 4
    rsize = (s * int(exp_t.max()) >> rshift) + 1
    sums = (np.arange(rsize) << rshift) * 2.0**-et.frac
    rec_t = np.minimum(np.round(2**rt.frac / np.maximum(sums, 2.0**-et.frac)),
                       rt.qmax).astype(np.int64)
    return (exp_t, et, lo, shift), (rec_t, rt, 0, rshift)


def _att_design(t: int, heads: int, dk: int, dv: int, tq: FixedType, tv: FixedType,
                st: FixedType, pt: FixedType, ot: FixedType, mask_codes, keep, scale):
    from modelcircuit.hdl.streamed.attention import AttentionUnit
    from modelcircuit.hdl.units.elementwise import Elementwise

    dq, dvv = heads * dk, heads * dv
    w = 2 * dq + dvv
    des = StreamDesign("att", Tok(tq, w, t))
    srcs = []
    for lo_, n_ in ((0, dq), (dq, dq), (2 * dq, dvv)):
        sel = Elementwise([(tq, w)], (tq, n_), lambda ins, lo_=lo_, n_=n_: ins[0][lo_:lo_ + n_])
        srcs.append(des.add(f"sel{lo_}", MapUnit(sel, [Tok(tq, w, t)], Tok(tq, n_, t)), [-1]))
    ex, rc = _att_tables(st, t)
    unit = AttentionUnit(Tok(tq, dq, t), Tok(tq, dq, t), Tok(tq, dvv, t), heads, scale[0],
                         scale[1], st, mask_codes, keep, ex, rc, pt, ot)
    des.add("att", unit, srcs)
    return des, ex, rc, unit


ATT_CASES = {
    "h2": dict(t=6, heads=2, dk=3, dv=3, mask=None, scale=(37, 6), gap=0.3, bp=0.4),
    "h1_mask": dict(t=5, heads=1, dk=4, dv=2, mask="causal", scale=(1, 1), gap=0.2, bp=0.3),
    "h3_bias_nostall": dict(t=4, heads=3, dk=2, dv=2, mask="bias", scale=(45, 7), gap=0.0,
                            bp=0.0),
}


@pytest.mark.parametrize("case", sorted(ATT_CASES))
def test_attention_unit_bit_exact(case: str) -> None:
    kw = ATT_CASES[case]
    t, heads, dk, dv = kw["t"], kw["heads"], kw["dk"], kw["dv"]
    tq = FixedType(8, 3)
    st, pt = FixedType(12, 5), FixedType(10, 1, signed=False)
    ot = FixedType(12, 4, rounding=Rounding.RND)
    rng = np.random.default_rng(len(case))
    mask_codes = keep = None
    if kw["mask"] == "causal":
        keep = np.tril(np.ones((t, t), bool))
    elif kw["mask"] == "bias":
        keep = np.ones((t, t), bool)
        keep[:, 0] = False
        keep[0, 0] = True
        mask_codes = rng.integers(-300, 100, size=(t, t))
        mask_codes[~keep] = 0
    des, ex, rc, unit = _att_design(t, heads, dk, dv, tq, tq, st, pt, ot, mask_codes, keep,
                                    kw["scale"])
    n = 3
    x = rng.integers(tq.qmin, tq.qmax + 1, size=(n, t, 2 * heads * dk + heads * dv))
    x[1] = tq.qmax  # every score equal and saturated
    q, k, v = x[..., :heads * dk], x[..., heads * dk:2 * heads * dk], x[..., 2 * heads * dk:]
    want = attn.attention_codes(
        q, k, v, heads, fq=tq.frac, fk=tq.frac, fv=tq.frac, scale_code=kw["scale"][0],
        scale_frac=kw["scale"][1], score_type=st, mask_codes=mask_codes, keep=keep,
        exp_t=ex[0], exp_lo=ex[2], exp_shift=ex[3], f_exp=ex[1].frac, rec_t=rc[0],
        recip_lo=rc[2], recip_shift=rc[3], f_recip=rc[1].frac, prob_type=pt, out_type=ot)
    assert len(np.unique(want)) > 4, "a degenerate case"
    res, tm = _run(des, x, kw["gap"], kw["bp"], seed=3)
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)
    if kw["gap"] == 0 and kw["bp"] == 0:
        # the compile-time schedule: latency per sequence, the input accepted at its II
        assert res.delivered[t - 1] - res.accepted[0] == tm.latency[0]
        from modelcircuit.hdl.streamed.attention import sequence_cycles

        seq = sequence_cycles(t, t)
        assert unit.busy() == seq == t + (t - 1) * (2 * t + 5) + 3 * t + 8
        assert tm.ii == -(-seq // t) and tm.frame_cycles == tm.ii * t
        starts = res.accepted[::t]
        assert all(b - a == tm.frame_cycles for a, b in zip(starts, starts[1:], strict=False))


@pytest.mark.parametrize("d,passes,gap,bp", [(8, 3, 0.3, 0.4), (7, 7, 0.0, 0.0),
                                             (6, 2, 0.2, 0.0)])
def test_layernorm_fold_bit_exact(d, passes, gap, bp) -> None:
    """The folded LayerNorm (lanes = ceil(D / passes) elements per cycle, II 2P + 9)."""
    from modelcircuit.hdl.units.layernorm import LayerNormFold, fold_ii

    tin, tout = FixedType(16, 6), FixedType(14, 5, rounding=Rounding.RND)
    g, fg, b, fb, eps, table = _ln_case(3, d, tin, tout, 9, 13)
    rng = np.random.default_rng(4)
    n, t = 3, 4
    x = rng.integers(tin.qmin, tin.qmax + 1, size=(n, t, d))
    x[0, 0] = -5
    x[2, 3, 1:] = tin.qmax
    want = attn.layernorm_codes(x, g, fg, b, fb, eps, 9, 13, table, tout)
    unit = LayerNormFold(tin, d, tout, g, fg, b, fb, eps, 9, 13, table, passes=passes)
    assert unit.ii == fold_ii(d, unit.passes) and unit.multipliers == 3 * -(-d // passes)
    des = StreamDesign("lnf", Tok(tin, d, t))
    des.add("ln", MapUnit(unit, [Tok(tin, d, t)], Tok(tout, d, t)), [-1])
    res, tm = _run(des, x, gap, bp)
    np.testing.assert_array_equal(res.outputs.reshape(want.shape), want)
    if gap == 0 and bp == 0:
        assert tm.ii == unit.ii
        assert set(np.diff(res.accepted).tolist()) == {unit.ii}
        assert res.delivered[t - 1] - res.accepted[0] == tm.latency[0]
