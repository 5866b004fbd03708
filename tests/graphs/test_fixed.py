"""Fixed-point golden tests: fixed.py, types.py and the fixed-point ops of reference.py.

Every expected value comes from an independent model written here from DESIGN.md ("Numbers")
with Python integers and `fractions.Fraction` -- never from the implementation:

    fixed<W,I>: signed two's complement, W bits, F = W - I fractional bits, value = q * 2**-F
    ufixed<W,I>: unsigned twin.  TRN: floor.  RND: floor(x + 1/2).  RND_CONV: half to even.
    SAT clamps into [qmin, qmax]; WRAP keeps the low W bits (two's complement).
    narrow (QONNX): the most negative signed code is dropped; an unsigned narrow type drops
    its largest code (QONNX `max_int(signed=False, narrow_range=True, w) = 2**w - 2`).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelcircuit.graphs import fixed as fx
from modelcircuit.graphs import reference
from modelcircuit.graphs.ir import Graph, Node, Tensor
from modelcircuit.graphs.types import (
    FLOAT32,
    FixedType,
    Overflow,
    Rounding,
    TypeError_,
    parse_type,
)

# -- the independent model ------------------------------------------------------------------


def m_range(w: int, signed: bool, narrow: bool = False) -> tuple[int, int]:
    if signed:
        return -(2 ** (w - 1)) + (1 if narrow else 0), 2 ** (w - 1) - 1
    return 0, 2**w - 1 - (1 if narrow else 0)


def m_round(v: Fraction, mode: str) -> int:
    fl = math.floor(v)
    d = v - fl
    if mode == "TRN":
        return fl
    if mode == "RND":
        return fl + (1 if d >= Fraction(1, 2) else 0)
    assert mode == "RND_CONV"
    if d > Fraction(1, 2):
        return fl + 1
    if d == Fraction(1, 2):
        return fl + (fl % 2)
    return fl


def m_overflow(q: int, w: int, signed: bool, mode: str, narrow: bool = False) -> int:
    lo, hi = m_range(w, signed, narrow)
    if mode == "SAT":
        return min(max(q, lo), hi)
    r = q % (2**w)
    if signed and r >= 2 ** (w - 1):
        r -= 2**w
    # narrow + WRAP: the one dropped code is clamped back into the range
    return min(max(r, lo), hi)


def m_quantize(v: Fraction, w: int, i: int, signed: bool = True, rnd: str = "TRN",
               ovf: str = "SAT", narrow: bool = False) -> int:
    return m_overflow(m_round(Fraction(v) * Fraction(2) ** (w - i), rnd), w, signed, ovf, narrow)


def m_of(t: FixedType) -> dict:
    return dict(w=t.width, i=t.int_bits, signed=t.signed, rnd=t.rounding.value,
                ovf=t.overflow.value, narrow=t.narrow)


def val(q: int, frac: int) -> Fraction:
    return Fraction(q) * Fraction(2) ** (-frac)


def q1(x: float, t: FixedType) -> int:
    return int(fx.quantize(np.array([x]), t)[0])


# -- hand-worked golden values --------------------------------------------------------------
# fixed<8,3>: F = 5, lsb = 1/32, codes [-128, 127] = values [-4, 3.96875]
F83 = FixedType(8, 3)

ROUNDING_CASES = [
    # x (in lsb of fixed<8,3>)    TRN  RND  RND_CONV
    (Fraction(45, 32), 45, 45, 45),        # exact
    (Fraction(1, 64), 0, 1, 0),            # +0.5 lsb: half up vs half to even (0 is even)
    (Fraction(3, 64), 1, 2, 2),            # +1.5 lsb: 2 is even
    (Fraction(5, 64), 2, 3, 2),            # +2.5 lsb
    (Fraction(-1, 64), -1, 0, 0),          # -0.5 lsb
    (Fraction(-3, 64), -2, -1, -2),        # -1.5 lsb
    (Fraction(-5, 64), -3, -2, -2),        # -2.5 lsb
    (Fraction(1, 96), 0, 0, 0),            # +1/3 lsb
    (Fraction(-1, 96), -1, 0, 0),          # -1/3 lsb: floor goes down
    (Fraction(2, 96), 0, 1, 1),            # +2/3 lsb
]


@pytest.mark.parametrize("x,trn,rnd,conv", ROUNDING_CASES)
def test_three_roundings_golden(x, trn, rnd, conv):
    for mode, want in (("TRN", trn), ("RND", rnd), ("RND_CONV", conv)):
        assert m_quantize(x, 8, 3, rnd=mode) == want  # the model agrees with the hand values
        t = F83.with_(rounding=Rounding(mode))
        assert q1(float(x), t) == want, (x, mode)


SAT_WRAP_CASES = [
    # x, SAT code, WRAP code  for fixed<8,3>
    (3.96875, 127, 127),          # qmax exactly
    (-4.0, -128, -128),           # qmin exactly
    (4.0, 127, -128),             # qmax + 1 lsb: wrap flips the sign
    (-4.03125, -128, 127),        # qmin - 1 lsb
    (100.0, 127, -128),           # code 3200 = 12*256 + 128
    (-100.0, -128, -128),         # code -3200 = -13*256 + 128 -> 128 -> -128
    (5.5, 127, -80),              # code 176 -> 176 - 256
    (-5.5, -128, 80),
]


@pytest.mark.parametrize("x,sat,wrap", SAT_WRAP_CASES)
def test_saturation_and_wrap_golden(x, sat, wrap):
    assert m_quantize(Fraction(x), 8, 3, ovf="SAT") == sat
    assert m_quantize(Fraction(x), 8, 3, ovf="WRAP") == wrap
    assert q1(x, F83) == sat
    assert q1(x, F83.with_(overflow=Overflow.WRAP)) == wrap


def test_negative_int_bits():
    # fixed<4,-2>: F = 6, lsb 1/64, values [-8/64, 7/64]
    t = FixedType(4, -2)
    assert (t.frac, t.qmin, t.qmax) == (6, -8, 7)
    assert q1(0.1, t) == 6              # 6.4 lsb -> 6
    assert q1(0.1, t.with_(rounding=Rounding.RND)) == 6
    assert q1(0.2, t) == 7              # 12.8 lsb saturates
    assert q1(0.2, t.with_(overflow=Overflow.WRAP)) == -4  # 12 -> 12 - 16
    assert q1(-0.125, t) == -8
    assert q1(-0.13, t) == -8           # -8.32 -> floor -9 -> SAT -8
    assert fx.to_float(np.array([7]), t)[0] == 7 / 64


def test_int_bits_larger_than_width():
    # fixed<4,6>: F = -2, lsb = 4, values [-32, 28] in steps of 4
    t = FixedType(4, 6)
    assert (t.frac, t.lsb) == (-2, 4.0)
    assert q1(13.0, t) == 3                                   # 3.25 -> 3 (value 12)
    assert q1(10.0, t) == 2                                   # 2.5 TRN
    assert q1(10.0, t.with_(rounding=Rounding.RND)) == 3      # 2.5 half up
    assert q1(10.0, t.with_(rounding=Rounding.RND_CONV)) == 2  # 2.5 half to even
    assert q1(14.0, t.with_(rounding=Rounding.RND_CONV)) == 4  # 3.5 -> 4
    assert q1(30.0, t.with_(rounding=Rounding.RND)) == 7      # 7.5 -> 8 -> SAT 7
    assert q1(30.0, t.with_(rounding=Rounding.RND, overflow=Overflow.WRAP)) == -8
    assert q1(-1.0, t) == -1                                  # -0.25 -> floor -1
    assert fx.to_float(np.array([-8, 7]), t).tolist() == [-32.0, 28.0]


def test_unsigned_types():
    t = FixedType(8, 0, signed=False)  # ufixed<8,0>: [0, 255/256]
    assert (t.qmin, t.qmax, t.frac) == (0, 255, 8)
    assert q1(-0.1, t) == 0
    assert q1(-0.1, t.with_(overflow=Overflow.WRAP)) == 230   # floor(-25.6) = -26 -> 230
    assert q1(1.0, t) == 255
    assert q1(1.0, t.with_(overflow=Overflow.WRAP)) == 0
    assert q1(0.5, t) == 128
    u1 = FixedType(1, 1, signed=False)  # one bit: {0, 1}
    assert (u1.qmin, u1.qmax) == (0, 1)
    assert q1(0.75, u1.with_(rounding=Rounding.RND)) == 1
    assert q1(2.0, u1.with_(overflow=Overflow.WRAP)) == 0


def test_one_bit_signed_and_narrow():
    s1 = FixedType(1, 1)  # one signed bit: {-1, 0}
    assert (s1.qmin, s1.qmax) == (-1, 0)
    assert q1(0.9, s1) == 0 and q1(-0.1, s1) == -1
    assert q1(1.0, s1.with_(overflow=Overflow.WRAP)) == -1
    n = FixedType(8, 8, narrow=True)  # QONNX narrow int8: [-127, 127]
    assert (n.qmin, n.qmax) == (-127, 127)
    assert q1(-200.0, n) == -127
    assert q1(-128.0, n.with_(overflow=Overflow.WRAP)) == -127
    n2 = FixedType(2, 2, narrow=True)  # bipolar-like {-1, 0, 1}
    assert (n2.qmin, n2.qmax) == (-1, 1)
    with pytest.raises(TypeError_):
        FixedType(1, 1, narrow=True)


def test_unsigned_narrow_drops_top_code_as_qonnx():
    """QONNX: max_int(signed=False, narrow_range=True, bit_width=8) == 254.

    BUG: FixedType ignores `narrow` for unsigned types (qmax stays 255)."""
    t = FixedType(8, 8, signed=False, narrow=True)
    assert m_range(8, False, True) == (0, 254)
    assert (t.qmin, t.qmax) == (0, 254)


def test_extreme_codes_64_bits():
    t = FixedType(64, 64)
    assert (t.qmin, t.qmax) == (-(2**63), 2**63 - 1)
    q = np.array([t.qmin, -1, 0, 1, t.qmax], dtype=np.int64)
    assert fx.requantize(q, 0, t).tolist() == q.tolist()
    assert fx.requantize(q, 0, t.with_(overflow=Overflow.WRAP)).tolist() == q.tolist()
    # narrowing to fixed<8,8>: SAT clamps, WRAP keeps the low byte
    t8 = FixedType(8, 8)
    assert fx.requantize(q, 0, t8).tolist() == [-128, -1, 0, 1, 127]
    assert fx.requantize(q, 0, t8.with_(overflow=Overflow.WRAP)).tolist() == [0, -1, 0, 1, -1]
    # dropping 62 of 64 bits: floor of the extremes
    assert fx.requantize(q, 62, t8).tolist() == [-2, -1, 0, 0, 1]
    u = FixedType(64, 64, signed=False)
    assert (u.qmin, u.qmax) == (0, 2**64 - 1)


@pytest.mark.parametrize("mode", ["RND", "RND_CONV"])
def test_shift_by_63_rounds_large_codes(mode):
    """q / 2**63 with |q| >= 2**62 is >= 1/2 in magnitude: RND must give 1 or -1 there.

    BUG: fixed.shift_round returns 0 for every code when s >= 63 (and rounding != TRN)."""
    qs = [2**62, 2**62 + 1, 2**63 - 1, -(2**62), -(2**62) - 1, -(2**63), 2**61]
    t = FixedType(8, 8, rounding=Rounding(mode))
    want = [m_quantize(val(q, 63), **m_of(t)) for q in qs]
    assert want == ([1, 1, 1, 0, -1, -1, 0] if mode == "RND" else [0, 1, 1, 0, -1, -1, 0])
    assert fx.requantize(np.array(qs, dtype=np.int64), 63, t).tolist() == want


def test_rnd_does_not_overflow_near_int64_max():
    """BUG: RND adds half before shifting; q + 2**(s-1) wraps for q near 2**63."""
    t = FixedType(64, 64, rounding=Rounding.RND)
    q = np.array([2**63 - 1, 2**63 - 2], dtype=np.int64)
    want = [m_quantize(val(int(v), 1), **m_of(t)) for v in q]
    assert want == [2**62, 2**62 - 1]
    assert fx.requantize(q, 1, t).tolist() == want


def test_quantize_rnd_is_exact_for_float64_edges():
    """floor(x + 0.5) in float64 is not floor of the exact x + 1/2.

    BUG: fixed.quantize(RND) computes np.floor(y + 0.5): 0.49999999999999994 + 0.5 rounds to
    1.0, and 2**52 + 1 + 0.5 rounds to 2**52 + 2."""
    t = FixedType(8, 8, rounding=Rounding.RND)
    x = 0.49999999999999994  # the float just below 1/2
    assert m_quantize(Fraction(x), 8, 8, rnd="RND") == 0
    assert q1(x, t) == 0
    big = FixedType(64, 64, rounding=Rounding.RND)
    y = float(2**52 + 1)
    assert q1(y, big) == 2**52 + 1


def test_quantize_saturates_and_wraps_beyond_2_62():
    """Values over 2**62 codes: SAT must give qmax of a 64-bit type, WRAP the true low bits.

    BUG: fixed.quantize clips to +-2**62 in float before overflow handling."""
    t64 = FixedType(64, 64)
    assert q1(2.0**70, t64) == 2**63 - 1
    tw = FixedType(16, 16, overflow=Overflow.WRAP)
    x = 2.0**63 + 2.0**12  # exactly representable; low 16 bits = 4096
    assert m_quantize(Fraction(x), 16, 16, ovf="WRAP") == 4096
    assert q1(x, tw) == 4096


def test_quantize_refuses_nan_and_inf():
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError):
            fx.quantize(np.array([0.0, bad]), F83)


def test_requantize_golden():
    # codes at F=5 (fixed<8,3>) -> fixed<6,2> (F=4): drop one bit
    q = np.array([45, 46, 47, -45, -46, -47, 127, -128])
    cases = {
        "TRN": [22, 23, 23, -23, -23, -24, 31, -32],
        "RND": [23, 23, 24, -22, -23, -23, 31, -32],  # 63.5 -> 64 saturates
        "RND_CONV": [22, 23, 24, -22, -23, -24, 31, -32],
    }
    for mode, want in cases.items():
        t = FixedType(6, 2, rounding=Rounding(mode))
        assert [m_quantize(val(int(v), 5), **m_of(t)) for v in q] == want
        assert fx.requantize(q, 5, t).tolist() == want
    # more fractional bits: an exact left shift
    assert fx.requantize(np.array([3, -3]), 2, FixedType(16, 6)).tolist() == [3 << 8, -3 << 8]
    assert fx.align(np.array([5, -5]), 1, 4).tolist() == [40, -40]


def test_to_float_golden():
    assert fx.to_float(np.array([-128, 45, 127]), F83).tolist() == [-4.0, 1.40625, 3.96875]


# -- types and parse_type ----------------------------------------------------------------------


def test_type_properties():
    t = FixedType(16, 6)
    assert (t.frac, t.qmin, t.qmax, t.lsb) == (10, -32768, 32767, 2.0**-10)
    assert t.rounding == Rounding.TRN and t.overflow == Overflow.SAT  # the defaults
    assert not t.is_float and FLOAT32.is_float


ROUND_TRIP = [
    FixedType(16, 6), FixedType(8, 0, signed=False), FixedType(4, -2), FixedType(4, 6),
    FixedType(1, 1), FixedType(64, 32), FixedType(8, 3, rounding=Rounding.RND),
    FixedType(8, 3, rounding=Rounding.RND_CONV, overflow=Overflow.WRAP),
    FixedType(8, 8, narrow=True), FixedType(12, 4, signed=False, overflow=Overflow.WRAP),
    FixedType(2, 2, rounding=Rounding.RND_CONV, narrow=True),
]


@pytest.mark.parametrize("t", ROUND_TRIP, ids=str)
def test_parse_type_round_trip(t):
    assert parse_type(str(t)) == t
    assert parse_type(t.to_json()) == t


@pytest.mark.parametrize("text,want", [
    ("fixed<16,6>", FixedType(16, 6)),
    ("ufixed<8,0>", FixedType(8, 0, signed=False)),
    ("ap_fixed<16,6>", FixedType(16, 6)),
    ("ap_ufixed<8,2>", FixedType(8, 2, signed=False)),
    (" fixed< 16 , -3 > ", FixedType(16, -3)),
    ("fixed<8,3,RND,WRAP>", FixedType(8, 3, rounding=Rounding.RND, overflow=Overflow.WRAP)),
    ("fixed<8,3,WRAP>", FixedType(8, 3, overflow=Overflow.WRAP)),
    ("fixed<8,3,rnd_conv>", FixedType(8, 3, rounding=Rounding.RND_CONV)),
    ("float32", FLOAT32),
])
def test_parse_type_accepts(text, want):
    assert parse_type(text) == want


@pytest.mark.parametrize("text", [
    "", "fixed", "fixed<>", "fixed<16>", "fixed<16,6", "fixed16,6>", "fixed<a,6>",
    "fixed<16,6,FOO>", "fixed<0,0>", "fixed<65,10>", "fixed<-4,2>", "int8", "float64",
    "fixed<16.5,6>", "sfixed<16,6>", "fixed<16,6>>",
])
def test_parse_type_refuses_malformed(text):
    with pytest.raises(TypeError_) as e:
        parse_type(text)
    assert "\n" not in str(e.value)


# -- property tests against the model -------------------------------------------------------

types_st = st.builds(
    lambda w, i, s, r, o, n: FixedType(w, i, s, r, o, n and s and w >= 2),
    st.integers(1, 40), st.integers(-12, 48), st.booleans(),
    st.sampled_from(list(Rounding)), st.sampled_from(list(Overflow)), st.booleans(),
)
PROPS = settings(max_examples=400, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(t=types_st, frac_in=st.integers(-40, 50),
       codes=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=8))
def test_requantize_matches_model(t, frac_in, codes):
    # shifts up past int64 included: saturation is exact there, a wrap keeps the low bits
    got = fx.requantize(np.array(codes, dtype=np.int64), frac_in, t).tolist()
    assert got == [m_quantize(val(c, frac_in), **m_of(t)) for c in codes]


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@PROPS
@given(t=types_st, xs=st.lists(finite, min_size=1, max_size=8))
def test_quantize_matches_model(t, xs):
    if any(abs(x) * 2.0**t.frac >= 2.0**52 for x in xs):
        return  # float64 edges far out are covered by the golden tests above
    got = fx.quantize(np.array(xs), t).tolist()
    assert got == [m_quantize(Fraction(x), **m_of(t)) for x in xs]


@PROPS
@given(t=types_st, codes=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=8))
def test_codes_always_in_range(t, codes):
    out = fx.overflow(np.array(codes, dtype=np.int64), t)
    assert all(t.qmin <= int(v) <= t.qmax for v in out)


# -- reference ops in fixed point on hand-built graphs ---------------------------------------


def graph(nodes, tensors, consts, inputs, outputs) -> Graph:
    ts = {n: Tensor(n, shp, t) for n, (shp, t) in tensors.items()}
    return Graph("g", tuple(inputs), tuple(outputs), tuple(nodes), ts,
                 {k: np.asarray(v, dtype=np.int64) for k, v in consts.items()})


def run(g: Graph, *codes) -> np.ndarray:
    out = reference.execute(g, [np.asarray(c, dtype=np.int64) for c in codes],
                            inputs_are_codes=True)
    return out[g.outputs[0]]


RNG = np.random.default_rng(1234)


def rand_codes(t: FixedType, shape) -> np.ndarray:
    return RNG.integers(t.qmin, t.qmax + 1, size=shape, dtype=np.int64)


@pytest.mark.parametrize("acc", ["fixed<40,20>", "fixed<60,30>"])  # BLAS path, int64 path
@pytest.mark.parametrize("relu", [False, True])
def test_dense_fixed(acc, relu):
    tx, tw, tb = FixedType(8, 3), FixedType(6, 2), FixedType(10, 2)  # x*w: F=9, bias F=8
    to = FixedType(8, 4, rounding=Rounding.RND)
    x, w, b = rand_codes(tx, (50, 7)), rand_codes(tw, (7, 5)), rand_codes(tb, (5,))
    n = Node.make("d", "Dense", ["x", "w", "b"], ["y"], acc=acc, relu=relu)
    g = graph([n], {"x": ((7,), tx), "w": ((7, 5), tw), "b": ((5,), tb), "y": ((5,), to)},
              {"w": w, "b": b}, ["x"], ["y"])
    got = run(g, x)
    for s in range(x.shape[0]):
        for j in range(5):
            v = sum(val(int(x[s, i]), tx.frac) * val(int(w[i, j]), tw.frac) for i in range(7))
            want = m_quantize(v + val(int(b[j]), tb.frac), **m_of(to))
            assert got[s, j] == (max(want, 0) if relu else want)


def test_dense_bias_with_more_fraction_bits_than_products():
    tx, tw, tb = FixedType(4, 2), FixedType(4, 2), FixedType(12, 0)  # x*w: F=4; bias F=12
    to = FixedType(16, 4, rounding=Rounding.RND_CONV, overflow=Overflow.WRAP)
    x, w, b = rand_codes(tx, (40, 3)), rand_codes(tw, (3, 2)), rand_codes(tb, (2,))
    n = Node.make("d", "Dense", ["x", "w", "b"], ["y"], acc="fixed<30,10>")
    g = graph([n], {"x": ((3,), tx), "w": ((3, 2), tw), "b": ((2,), tb), "y": ((2,), to)},
              {"w": w, "b": b}, ["x"], ["y"])
    got = run(g, x)
    for s in range(x.shape[0]):
        for j in range(2):
            v = sum(val(int(x[s, i]), 2) * val(int(w[i, j]), 2) for i in range(3))
            assert got[s, j] == m_quantize(v + val(int(b[j]), 12), **m_of(to))


def test_add_sub_two_activations_and_constant():
    ta, tb, tc = FixedType(8, 3), FixedType(6, 1), FixedType(5, 5)
    to = FixedType(6, 2, rounding=Rounding.RND_CONV, overflow=Overflow.WRAP)
    a, b, c = rand_codes(ta, (60, 4)), rand_codes(tb, (60, 4)), rand_codes(tc, (4,))
    for op, sign in (("Add", 1), ("Sub", -1)):
        g = graph([Node.make("n", op, ["a", "b"], ["y"])],
                  {"a": ((4,), ta), "b": ((4,), tb), "y": ((4,), to)}, {}, ["a", "b"], ["y"])
        got = run(g, a, b)
        want = [[m_quantize(val(int(a[s, k]), 5) + sign * val(int(b[s, k]), 5), **m_of(to))
                 for k in range(4)] for s in range(60)]
        assert got.tolist() == want
    g = graph([Node.make("n", "Add", ["a", "c"], ["y"])],
              {"a": ((4,), ta), "c": ((4,), tc), "y": ((4,), to)}, {"c": c}, ["a"], ["y"])
    want = [[m_quantize(val(int(a[s, k]), 5) + val(int(c[k]), 0), **m_of(to)) for k in range(4)]
            for s in range(60)]
    assert run(g, a).tolist() == want


def test_mul_by_constant():
    tx, tc, to = FixedType(8, 3), FixedType(5, 1), FixedType(10, 3, rounding=Rounding.RND)
    x, c = rand_codes(tx, (60, 3)), np.array([-16, 7, 15])
    g = graph([Node.make("m", "Mul", ["x", "c"], ["y"])],
              {"x": ((3,), tx), "c": ((3,), tc), "y": ((3,), to)}, {"c": c}, ["x"], ["y"])
    want = [[m_quantize(val(int(x[s, k]), 5) * val(int(c[k]), 4), **m_of(to)) for k in range(3)]
            for s in range(60)]
    assert run(g, x).tolist() == want


def test_relu_and_leaky_relu():
    tx, to = FixedType(8, 3), FixedType(6, 2, rounding=Rounding.RND)
    x = np.arange(tx.qmin, tx.qmax + 1).reshape(-1, 1)
    g = graph([Node.make("r", "Relu", ["x"], ["y"])], {"x": ((1,), tx), "y": ((1,), to)}, {},
              ["x"], ["y"])
    want = [[m_quantize(max(val(int(v), 5), Fraction(0)), **m_of(to))] for v in x[:, 0]]
    assert run(g, x).tolist() == want
    ta = FixedType(8, 0)  # alpha 0.1 -> code floor(25.6) = 25 -> 25/256
    g = graph([Node.make("l", "LeakyRelu", ["x", "a"], ["y"], alpha=0.1)],
              {"x": ((1,), tx), "a": ((), ta), "y": ((1,), to)}, {"a": np.array(25)},
              ["x"], ["y"])
    want = []
    for v in x[:, 0]:
        xv = val(int(v), 5)
        want.append([m_quantize(xv if xv >= 0 else xv * Fraction(25, 256), **m_of(to))])
    assert run(g, x).tolist() == want


def m_index(q: int, lo: int, shift: int, size: int) -> int:
    """DESIGN/tables.py contract: clip into [lo, lo + size*2**shift - 1], minus lo, >> shift."""
    q = min(max(q, lo), lo + size * 2**shift - 1)
    return (q - lo) // 2**shift


def test_lut_indexing():
    tx, to = FixedType(6, 3), FixedType(8, 1)
    table = np.array([-100, -50, -7, 0, 3, 60, 99, 127])
    lo, shift = -24, 2  # covers codes [-24, 7]: below saturates to entry 0
    g = graph([Node.make("t", "Lut", ["x", "tab"], ["y"], func="tanh", lo=lo, shift=shift,
                         size=8)],
              {"x": ((1,), tx), "tab": ((8,), to), "y": ((1,), to)}, {"tab": table},
              ["x"], ["y"])
    x = np.arange(tx.qmin, tx.qmax + 1).reshape(-1, 1)
    want = [[int(table[m_index(int(v), lo, shift, 8)])] for v in x[:, 0]]
    assert run(g, x).tolist() == want
    assert want[0] == [-100] and want[-1] == [127]


def test_softmax_fixed_tables():
    tx, te, tr = FixedType(8, 4), FixedType(10, 1, signed=False), FixedType(10, 1, signed=False)
    to = FixedType(8, 1, rounding=Rounding.RND)
    exp_t = RNG.integers(0, 513, size=16)
    exp_t[-1] = 512  # exp(0) = 1.0 in ufixed<10,1>
    rec_t = RNG.integers(1, 513, size=32)
    attrs = dict(exp_lo=-64, exp_shift=2, recip_lo=512, recip_shift=6,
                 exp_type=str(te), recip_type=str(tr))
    g = graph([Node.make("s", "Softmax", ["x", "e", "r"], ["y"], **attrs)],
              {"x": ((4,), tx), "e": ((16,), te), "r": ((32,), tr), "y": ((4,), to)},
              {"e": exp_t, "r": rec_t}, ["x"], ["y"])
    x = rand_codes(tx, (80, 4))
    got = run(g, x)
    for s in range(80):
        row = [int(v) for v in x[s]]
        e = [int(exp_t[m_index(v - max(row), -64, 2, 16)]) for v in row]
        r = int(rec_t[m_index(sum(e), 512, 6, 32)])
        want = [m_quantize(val(ei, 9) * val(r, 9), **m_of(to)) for ei in e]
        assert got[s].tolist() == want


def test_threshold():
    tx, to = FixedType(6, 6), FixedType(4, 4)
    thr = np.array([[-3, 0, 5], [1, 1, 2]])        # [channels, steps]
    steps = np.array([[1, 1, 1], [2, -1, 1]])
    base = np.array([-1, 0])
    g = graph([Node.make("t", "Threshold", ["x", "thr", "st", "b"], ["y"])],
              {"x": ((2,), tx), "thr": ((2, 3), tx), "st": ((2, 3), to), "b": ((2,), to),
               "y": ((2,), to)}, {"thr": thr, "st": steps, "b": base}, ["x"], ["y"])
    x = np.array([[v, v] for v in range(-8, 9)])
    want = [[int(base[c]) + sum(int(steps[c, k]) for k in range(3) if v >= thr[c, k])
             for c in range(2)] for v in range(-8, 9)]
    assert run(g, x).tolist() == want
    assert want[0] == [-1, 0] and want[-1] == [2, 2]


def test_requant_node_float_to_fixed_and_fixed_to_fixed():
    t = FixedType(6, 2, rounding=Rounding.RND_CONV)
    g = graph([Node.make("q", "Requant", ["x"], ["y"], quant_type=str(t))],
              {"x": ((3,), FLOAT32), "y": ((3,), t)}, {}, ["x"], ["y"])
    x = np.array([[0.03125, -0.09375, 9.0]], dtype=np.float32)  # 0.5, -1.5 lsb; saturates
    assert reference.execute(g, [x])["y"].tolist() == [[0, -2, 31]]
    tin = FixedType(8, 3)
    g = graph([Node.make("q", "Requant", ["x"], ["y"], quant_type=str(t))],
              {"x": ((1,), tin), "y": ((1,), t)}, {}, ["x"], ["y"])
    x = np.arange(tin.qmin, tin.qmax + 1).reshape(-1, 1)
    assert run(g, x)[:, 0].tolist() == [m_quantize(val(int(v), 5), **m_of(t)) for v in x[:, 0]]
