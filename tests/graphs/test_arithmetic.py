"""The golden model's cheapest exact arithmetic (graphs/arithmetic.py): float32 GEMMs under
2**24, float64 under 2**53, int64 beyond, with the bias, scale and rounding fused where the
bound allows. Whatever it picks, the codes must equal a plain integer evaluation (Python
ints: no float anywhere), drawn across the three boundaries; and forcing float32 beyond its
bound must be caught by the same comparison."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from modelcircuit.graphs import arithmetic, reference, reference_linear
from modelcircuit.graphs.ir import Graph, GraphError, Node, Tensor
from modelcircuit.graphs.passes.accumulators import accumulator_types
from modelcircuit.graphs.types import FixedType, Overflow, Rounding

from .test_cnn import _naive_conv_codes


def _graph(xt: FixedType, wt: FixedType, out: FixedType, w: np.ndarray, b: np.ndarray | None,
           bt: FixedType | None, relu: bool, conv: dict | None, in_shape: tuple[int, ...],
           out_shape: tuple[int, ...]) -> Graph:
    """One Dense (or Conv) with integer constants, its accumulator computed by the pass."""
    op = "Conv" if conv else "Dense"
    inputs = ["x", "w"] + (["b"] if b is not None else [])
    tensors = {"x": Tensor("x", in_shape, xt), "w": Tensor("w", w.shape, wt),
               "y": Tensor("y", out_shape, out)}
    consts = {"w": w}
    if b is not None:
        tensors["b"] = Tensor("b", b.shape, bt)
        consts["b"] = b
    node = Node.make("n", op, inputs, ["y"], relu=relu, **(conv or {}))
    g = Graph("g", ("x",), ("y",), (node,), tensors, consts)
    return accumulator_types(g)


def _codes(rng: np.random.Generator, t: FixedType, shape: tuple[int, ...]) -> np.ndarray:
    """Random codes of t, a third of them at the type's two ends (the largest sums)."""
    q = rng.integers(t.qmin, t.qmax, size=shape, endpoint=True, dtype=np.int64)
    ends = rng.random(shape)
    q[ends < 1 / 6] = t.qmin
    q[(ends >= 1 / 6) & (ends < 1 / 3)] = t.qmax
    return q


def _plain(xq, w, b, xt, wt, bt, out, relu, conv) -> np.ndarray:
    """The definition with Python integers: exact sum, bias aligned, one requantization."""
    frac = xt.frac + wt.frac
    bb = [0] * w.shape[-1]
    if b is not None:
        f = max(frac, bt.frac)
        bb = [int(v) << (f - bt.frac) for v in b]
        shift, frac = f - frac, f
    else:
        shift = 0
    if conv:
        acc = _naive_conv_codes(xq, w, [0] * w.shape[-1], conv["pads"], conv["strides"],
                                conv["group"])
    else:
        acc = xq.astype(object) @ w.astype(object)
    acc = acc * (1 << shift) + np.asarray(bb, dtype=object)
    # Python integers to the end: a shifted bias can carry the sum past int64 (CI drew
    # fixed<33,20> bias codes aligned by 31 bits onto 2-bit x 40-bit products)
    y = np.vectorize(lambda v: _requantize_int(int(v), frac - out.frac, out), otypes=[object])(acc)
    y = np.asarray(y, dtype=np.int64)
    return np.maximum(y, 0) if relu else y


def _requantize_int(v: int, s: int, t: FixedType) -> int:
    """The numeric contract's rounding and overflow, written again with Python integers."""
    if s <= 0:
        r = v << -s
    else:
        fl, rem, half = v >> s, v & ((1 << s) - 1), 1 << (s - 1)
        up = {Rounding.TRN: False, Rounding.RND: rem >= half,
              Rounding.RND_CONV: rem > half or (rem == half and fl & 1 == 1)}[t.rounding]
        r = fl + int(up)
    if t.overflow == Overflow.SAT:
        return min(max(r, t.qmin), t.qmax)
    low = r & ((1 << t.width) - 1)
    if t.signed and low >= 1 << (t.width - 1):
        low -= 1 << t.width
    return min(max(low, t.qmin), t.qmax) if t.narrow else low


@st.composite
def cases(draw):
    """A Dense or Conv whose largest partial sum lands near 2**24, 2**53 or 2**62."""
    target = draw(st.sampled_from([20, 23, 24, 25, 26, 50, 52, 53, 54, 56, 61]))
    kind = draw(st.sampled_from(["dense", "dense", "conv"]))
    k_bits = draw(st.integers(0, 9 if kind == "dense" else 5))
    wx = draw(st.integers(2, 40))
    ww = max(2, min(40, target - k_bits - wx + 2 + draw(st.integers(-1, 1))))
    xt = FixedType(wx, draw(st.integers(-4, wx + 4)), draw(st.booleans()))
    wt = FixedType(ww, draw(st.integers(-4, ww + 4)))
    rounding = draw(st.sampled_from(list(Rounding)))
    overflow = draw(st.sampled_from([Overflow.SAT, Overflow.SAT, Overflow.WRAP]))
    ow = draw(st.integers(2, 40))
    out = FixedType(ow, draw(st.integers(-2, ow + 8)), True, rounding, overflow)
    has_b = draw(st.booleans())
    bt = FixedType(draw(st.integers(2, 40)), draw(st.integers(-4, 20))) if has_b else None
    seed = draw(st.integers(0, 2**32 - 1))
    return kind, k_bits, xt, wt, out, bt, draw(st.booleans()), seed


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_arithmetic_equals_plain_integers(case):
    kind, k_bits, xt, wt, out, bt, relu, seed = case
    rng = np.random.default_rng(seed)
    conv = None
    if kind == "dense":
        k = 1 << k_bits
        n_out = int(rng.integers(1, 9))
        w = _codes(rng, wt, (k, n_out))
        in_shape, out_shape = (k,), (n_out,)
        xq = _codes(rng, xt, (12, k))
    else:
        group = int(rng.choice([1, 2]))
        cg = max(1, (1 << k_bits) // 9)
        cin, cout = cg * group, 2 * group
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pads = tuple(int(v) for v in rng.integers(0, 2, 4))
        strides = tuple(int(v) for v in rng.integers(1, 3, 2))
        h, wd = 5, 4
        oh = (h + pads[0] + pads[2] - kh) // strides[0] + 1
        ow = (wd + pads[1] + pads[3] - kw) // strides[1] + 1
        conv = {"kernel": (kh, kw), "strides": strides, "pads": pads, "group": group}
        w = _codes(rng, wt, (kh, kw, cg, cout))
        in_shape, out_shape = (h, wd, cin), (oh, ow, cout)
        xq = _codes(rng, xt, (3, h, wd, cin))
    b = _codes(rng, bt, (w.shape[-1],)) if bt is not None else None
    try:
        g = _graph(xt, wt, out, w, b, bt, relu, conv, in_shape, out_shape)
    except GraphError:  # an accumulator over 64 bits: a compile error, not a golden run
        event("accumulator over 64 bits")
        return
    want = _plain(xq, w, b, xt, wt, bt, out, relu, conv)
    got = reference.execute(g, [xq], inputs_are_codes=True)["y"]
    assert got.dtype == np.int64
    ar = arithmetic.choose(g, g.nodes[0])
    event(f"{kind} {ar.dtype}{' fused' if ar.fused else ''}")
    assert np.array_equal(got, want), f"{ar} ({ar.gemm_bits}/{ar.fused_bits} bits)"
    # soundness of the choice, from the weights alone (Python ints)
    col = np.abs(np.asarray(g.constants["w"], dtype=object).reshape(-1, w.shape[-1])).sum(axis=0)
    bound = int(col.max()) * max(-xt.qmin, xt.qmax)
    if ar.dtype == "float32":
        assert ar.gemm_bits <= 24 and bound < (1 << 24) * 2  # |lo|, |hi| <= sum |w| * max|x|
    if ar.dtype == "float64":
        assert ar.gemm_bits <= 53


def _wide_case(dtype: str | None) -> tuple[np.ndarray, np.ndarray]:
    """16-bit codes summed over 64 terms: partial sums up to 2**36, beyond float32."""
    xt, wt = FixedType(16, 6), FixedType(16, 6)
    out = FixedType(32, 12)
    rng = np.random.default_rng(7)
    w = _codes(rng, wt, (64, 4)) | 1  # odd weights: the low bits of the sums matter
    g = _graph(xt, wt, out, w, None, None, False, None, (64,), (4,))
    xq = _codes(rng, xt, (50, 64)) | 1
    want = _plain(xq, w, None, xt, wt, None, out, False, None)
    reference_linear._FORCE.clear()
    if dtype:
        reference_linear._FORCE["dtype"] = dtype
    try:
        got = reference.execute(g, [xq], inputs_are_codes=True)["y"]
    finally:
        reference_linear._FORCE.clear()
    return got, want


def test_the_comparison_catches_float32_beyond_its_bound():
    got, want = _wide_case(None)
    assert np.array_equal(got, want)  # the chosen arithmetic (float64) is exact
    got, want = _wide_case("float32")
    assert not np.array_equal(got, want)  # forced float32 rounds the sums: caught


@pytest.mark.parametrize("wx,c,dtype", [
    (12, 4097, "float32"),             # 4097 * 4095 = 2**24 - 1
    (12, 4098, "float64"),             # 4098 * 4095 = 2**24 + 4094
    (26, 2**27 + 2, "float64"),        # (2**27 + 2)(2**26 - 1) = 2**53 - 2
    (26, 2**27 + 3, "int64"),          # (2**27 + 3)(2**26 - 1) = 2**53 + 2**26 - 3
])
def test_the_boundaries(wx, c, dtype):
    """One product of an unsigned wx-bit code by the weight c: the largest sum is
    c * (2**wx - 1); float32 below 2**24, float64 below 2**53, int64 from there; and the
    result at the largest input equals the integer product."""
    xt, wt, out = FixedType(wx, wx, False), FixedType(29, 29), FixedType(64, 64)
    w = np.array([[c]], dtype=np.int64)
    g = _graph(xt, wt, out, w, None, None, False, None, (1,), (1,))
    assert arithmetic.choose(g, g.nodes[0]).dtype == dtype
    xq = np.array([[xt.qmax], [xt.qmax - 1], [1]], dtype=np.int64)
    got = reference.execute(g, [xq], inputs_are_codes=True)["y"]
    assert got.reshape(-1).tolist() == [c * int(v) for v in xq[:, 0]]
