"""The cheapest exact arithmetic for each fixed-point Dense/Conv sum of products.

The golden model's result is defined on integers (reference.py): exact products, an exact
sum, one requantization. A float GEMM gives the same integers whenever every value it forms
is an integer of magnitude under 2**m (m = 24 for float32, 53 for float64): each product and
each partial sum, in whatever order and grouping BLAS uses (FMA included), is then exactly
representable, so no rounding ever happens. The accumulator ranges computed at compile time
(passes/accumulators.dense_range, the same range that gives the accumulator type) bound
every partial sum: each term's range [min(w*qmin, w*qmax), max(...)] holds 0 (every fixed type
holds code 0), so a sum over any subset of the terms lies in the column's full range.

Two levels, both pure functions of the compiled graph (graph ids and generated files do not
change; the golden model computes this once per graph and caches it):
- `gemm` bound: the products alone (the float GEMM, then int64 bias and requantization);
- `fused` bound: products shifted to the accumulator's binary point, plus the aligned bias,
  plus the rounding offset of the requantization. When that is under 2**m too, the bias, the
  scale 2**-s (folded into the weights: a power of two is exact) and the rounding all happen
  in the same float type: y = x @ (W 2**-s) + (b 2**-s + offset), floor or rint, clip.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir import Graph, Node
from .ops import Op, attrs
from .passes.accumulators import dense_range, linear_weights
from .types import FixedType, Overflow, Rounding

# float type -> mantissa bits m: every integer of magnitude <= 2**m is exact
MANTISSA = {"float32": 24, "float64": 53}
INT64 = "int64"
# a power-of-two scale 2**-s stays a normal number of each float type (no subnormals)
_MAX_SHIFT = {"float32": 100, "float64": 1000}


@dataclass(frozen=True)
class Arithmetic:
    """How the golden model computes one Dense/Conv: `dtype` of the GEMM (float32, float64 or
    int64), whether the bias and requantization run fused in that float type, and the bounds
    (bits) that decided it."""

    dtype: str
    fused: bool
    gemm_bits: int   # bit length of the largest |partial sum| of the products alone
    fused_bits: int  # ... with the bias and the rounding offset, at the accumulator's point
    # a fused float sum whose input and weight codes fit int16 and whose partial sums stay
    # under 2**31: int16 x int16 products summed in int32 are exact too (the golden model's
    # native chain and convolutions run it so where the CPU has the vector kernel and the
    # layer is large enough: golden_chain.i16_weights)
    int16: bool = False

    def __str__(self) -> str:
        return self.dtype + ("" if self.fused or self.dtype == INT64 else " (int64 bias)") + (
            " (int16 products)" if self.int16 else "")


def product_bound(xt: FixedType, w: np.ndarray) -> int:
    """max |partial sum| of x_i * w_ij over every input code, column and subset of terms:
    the larger end of the column ranges of dense_range without the bias (exact integers)."""
    w = np.asarray(w)
    xmax = max(-xt.qmin, xt.qmax)
    wmax = int(np.abs(w).max(initial=0))
    if wmax * xmax * max(w.shape[0], 1) < (1 << 62):  # int64 is exact: no object arrays
        wi = w.astype(np.int64)
        lo = np.minimum(wi * xt.qmin, wi * xt.qmax).sum(axis=0)
        hi = np.maximum(wi * xt.qmin, wi * xt.qmax).sum(axis=0)
        return int(max(-int(lo.min(initial=0)), int(hi.max(initial=0))))
    lo, hi, _ = dense_range(xt, w, None, None, xt)
    return max(-lo, hi)


def choose(g: Graph, node: Node, force: str | None = None) -> Arithmetic:
    """The cheapest exact arithmetic of a fixed-point Dense or Conv of a compiled graph.
    `force` names a dtype to use whatever the bounds say: only tests use it, to show that
    a float type beyond its bound does give wrong sums."""
    assert node.op in (Op.DENSE, Op.CONV), node.op
    xt = g.tensor(node.inputs[0]).dtype
    wt = g.tensor(node.inputs[1]).dtype
    out = g.tensor(node.outputs[0]).dtype
    assert isinstance(xt, FixedType) and isinstance(wt, FixedType) and isinstance(out, FixedType)
    w = linear_weights(g, node)
    p = product_bound(xt, w)
    frac = xt.frac + wt.frac
    total = p
    bn = node.inputs[2] if len(node.inputs) > 2 else None
    if bn:
        bt = g.tensor(bn).dtype
        assert isinstance(bt, FixedType)
        f = max(frac, bt.frac)
        b = np.asarray(g.constants[bn])
        total = (p << (f - frac)) + (int(np.abs(b).max(initial=0)) << (f - bt.frac))
        frac = f
    s = frac - out.frac
    if out.rounding == Rounding.RND and s > 0:
        total += 1 << (s - 1)
    fusable = s >= 0 and out.overflow == Overflow.SAT
    if force is not None:
        return Arithmetic(force, fusable and force != INT64 and s <= _MAX_SHIFT.get(force, 0),
                          p.bit_length(), total.bit_length())
    for dt, m in MANTISSA.items():
        if total < (1 << m) and fusable and s <= _MAX_SHIFT[dt]:
            i16 = (p < (1 << 31) and xt.qmin >= -(1 << 15) and xt.qmax < (1 << 15)
                   and int(np.abs(w).max(initial=0)) < (1 << 15))
            return Arithmetic(dt, True, p.bit_length(), total.bit_length(), i16)
        if p < (1 << m):
            return Arithmetic(dt, False, p.bit_length(), total.bit_length())
    return Arithmetic(INT64, False, p.bit_length(), total.bit_length())


def plan(g: Graph) -> dict[str, Arithmetic]:
    """The arithmetic of every fixed-point Dense/Conv of a compiled graph, by node name
    (what `inspect` shows)."""
    res = {}
    for n in g.nodes:
        if n.op in (Op.DENSE, Op.CONV) and getattr(attrs(n), "acc", None) is not None:
            out = g.tensor(n.outputs[0]).dtype
            if isinstance(out, FixedType):
                res[n.name] = choose(g, n)
    return res
