"""Dense and Conv as one GEMM each, in the cheapest exact arithmetic (graphs/arithmetic.py):
the definition, and the prepared weights (`Linear`), the per-graph cache and the BLAS thread
control that golden_plan.py and golden_chain.py run on too, so that the fast golden model
and the definition are one piece of code. A module of its own because the arithmetic choice,
the cache and the threads are a concern apart from what the other ops compute.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import arithmetic
from . import fixed as fx
from .arithmetic import Arithmetic
from .ir import Graph, GraphError, Node
from .ops import ConvAttrs, attrs
from .reference_common import PER_THREAD as _local
from .reference_common import Array
from .reference_common import const as _const
from .reference_common import f32 as _f32
from .reference_common import finish as _finish
from .reference_common import is_fixed as _is_fixed
from .reference_common import out_type as _out
from .reference_common import tensor_type as _t
from .types import FixedType, Rounding


def _add_bias(g: Graph, acc: np.ndarray, frac: int, bn: str | None
              ) -> tuple[np.ndarray, int]:
    """An exact sum of products (codes at `frac` fraction bits) plus the bias codes, aligned
    to the finer of the two: Dense and Conv add their bias the same way."""
    if not bn:
        return acc, frac
    tb = _t(g, bn)
    b = _const(g, bn).astype(np.int64)
    if tb.frac > frac:
        acc = fx.align(acc, frac, tb.frac)
        frac = tb.frac
    return acc + fx.align(b, tb.frac, frac), frac


# -- Dense and Conv: one GEMM each, in the cheapest exact arithmetic (graphs/arithmetic.py) --
# Everything below that depends only on the graph (the arithmetic, weights converted and
# scaled, biases aligned, clip bounds) is prepared once per graph and node and kept while the
# graph lives: the graph is immutable, so this is a cache of a pure function of it.
_PREPARED: dict[int, dict[str, Any]] = {}


def _prepared(g: Graph) -> dict[str, Any]:
    key = id(g)
    p = _PREPARED.get(key)
    if p is None:
        p = _PREPARED[key] = {}
        weakref.finalize(g, _PREPARED.pop, key, None)
    return p


def _blas_threads(macs: int) -> None:
    t = getattr(_local, "threads", None)
    if t is not None:
        t.use(macs)


@dataclass(frozen=True)
class Linear:
    """A Dense/Conv prepared for the golden model. w: (K, N), or (groups, K, N/groups) for a
    grouped conv, in the GEMM's dtype (times 2**-s when fused). Fused: y = x @ w + b, then
    floor (TRN, RND: b holds the 1/2) or rint (RND_CONV), clip to [lo, hi] (ReLU in lo).
    Not fused (a float GEMM of the products, or int64): the integer bias and requantization
    of the definition (`_add_bias`, `_finish`)."""

    arith: Arithmetic | None  # None: a float32 model
    w: np.ndarray
    b: np.ndarray | None
    lo: Any = 0  # the clip bounds as scalars of w's dtype
    hi: Any = 0
    rounding: str = ""  # "floor", "rint" or "" (no bits dropped)
    relu: bool = False
    macs: int = 0  # multiply-adds per row

    def __post_init__(self) -> None:
        object.__setattr__(self, "macs", int(np.prod(self.w.shape)))

    @property
    def dtype(self) -> np.dtype:
        return self.w.dtype

    @property
    def out_dtype(self) -> np.dtype:
        """Fused and float32 models keep the GEMM's float type; the others give int64."""
        return self.dtype if self.arith is None or self.arith.fused else np.dtype(np.int64)

    def finish(self, y: Array) -> Array:
        """A fused GEMM result's bias, rounding and clamp, in place (the definition of what
        golden_plan's C epilogue does in one pass)."""
        if self.b is not None:
            y += self.b
        if self.rounding == "floor":
            np.floor(y, out=y)
        elif self.rounding == "rint":
            np.rint(y, out=y)
        return np.clip(y, self.lo, self.hi, out=y)

    def gemm(self, x: Array, out: Array | None = None) -> Array:
        """x (P, K), or (P, groups, K) for a grouped conv, times w: (P, N) (into `out`)."""
        _blas_threads(x.shape[0] * self.macs)
        if self.w.ndim == 2:
            return np.matmul(x, self.w, out=out if out is not None and out.dtype == self.dtype
                             and out.ndim == x.ndim else None)
        y = np.matmul(x.transpose(1, 0, 2), self.w)  # (groups, P, N/groups)
        return y.transpose(1, 0, 2).reshape(x.shape[0], -1)


def _linear(g: Graph, node: Node, w: Array) -> Linear:
    """The prepared weights `w` (already in GEMM layout, codes or floats) of node."""
    key = node.name
    prep = _prepared(g)
    lp = prep.get(key)
    if lp is not None:
        return lp
    bn = node.inputs[2] if len(node.inputs) > 2 else None
    relu = bool(attrs(node).relu)  # type: ignore[attr-defined]
    if not _is_fixed(g, node):
        lp = Linear(None, _f32(w), _f32(_const(g, bn)) if bn else None, relu=relu)
    else:
        if getattr(attrs(node), "acc", None) is None:
            raise GraphError(f"node {node.name}: accumulator type not computed; compile first")
        ar = arithmetic.choose(g, node, force=_FORCE.get("dtype"))
        dt = np.dtype(ar.dtype)
        if not ar.fused:
            lp = Linear(ar, np.asarray(w).astype(dt), None, relu=relu)
        else:
            tx, tw, out = _t(g, node.inputs[0]), _t(g, node.inputs[1]), _out(g, node)
            assert isinstance(out, FixedType)
            frac = tx.frac + tw.frac
            f = max(frac, _t(g, bn).frac) if bn else frac  # the accumulator's binary point
            s = f - out.frac  # bits the requantization drops (>= 0 when fused)
            n_out = w.shape[-1] * (w.shape[0] if w.ndim == 3 else 1)
            b = np.zeros(n_out)
            if bn:  # exact: integers under 2**m times powers of two
                b = np.ldexp(_const(g, bn).astype(np.float64), f - _t(g, bn).frac - s)
            rnd = out.rounding == Rounding.RND and s > 0
            if rnd:
                b = b + 0.5  # floor(v + 1/2): half up
            lp = Linear(ar, np.ldexp(np.asarray(w).astype(np.float64), f - frac - s).astype(dt),
                        b.astype(dt) if (bn or rnd) else None,
                        lo=dt.type(max(out.qmin, 0) if relu else out.qmin), hi=dt.type(out.qmax),
                        rounding="" if s == 0 else
                        ("rint" if out.rounding == Rounding.RND_CONV else "floor"), relu=relu)
    prep[key] = lp
    return lp


def _linear_out(g: Graph, node: Node, lp: Linear, x: Array, out: Array | None = None
                ) -> Array:
    """One Dense/Conv GEMM on rows x (P, K) [or (P, groups, K)] and what follows it: the
    node's output codes (or float32 values), (P, N) of lp.out_dtype (written into `out`
    where given)."""
    if lp.arith is None:  # float32 model
        y = lp.gemm(_f32(x), out)
        if lp.b is not None:
            y += lp.b
        y = np.maximum(y, 0, out=y) if lp.relu else y
        return _into(y, out)
    xd = x if x.dtype == lp.dtype else x.astype(lp.dtype)
    y = lp.gemm(xd, out)
    if lp.arith.fused:
        return _into(lp.finish(y), out)
    tx, tw = _t(g, node.inputs[0]), _t(g, node.inputs[1])
    bn = node.inputs[2] if len(node.inputs) > 2 else None
    acc, frac = _add_bias(g, y.astype(np.int64), tx.frac + tw.frac, bn)
    y = _finish(g, node, acc, frac)
    return _into(np.maximum(y, 0) if lp.relu else y, out)


def _into(y: Array, out: Array | None) -> Array:
    if out is None or y is out:
        return y
    out[...] = y
    return out


# a test hook: {"dtype": "float32"} forces that arithmetic on every fixed-point Dense/Conv
# prepared afterwards, to show that an inexact choice is caught (tests/graphs/test_arithmetic)
_FORCE: dict[str, str] = {}


def exact_matmul(x: Array, w: Array, bound_bits: int) -> Array:
    """Integer x @ w, exact. BLAS in float64 is exact while every partial sum stays under
    2**53, which the accumulator width (computed at compile time) guarantees."""
    if bound_bits <= 53:
        return (x.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
    return np.einsum("bk,kn->bn", x.astype(np.int64), w.astype(np.int64))


def dense_linear(g: Graph, node: Node) -> Linear:
    """The prepared `Linear` of a Dense node."""
    lp = _prepared(g).get(node.name)
    if lp is None:
        lp = _linear(g, node, _const(g, node.inputs[1]))
    return lp


def linear_out(g: Graph, node: Node, lp: Linear, x: Array, out: Array | None = None) -> Array:
    """What a Dense/Conv computes from its GEMM rows x (see `_linear_out`)."""
    return _linear_out(g, node, lp, x, out)


def set_threads(t: Any) -> None:
    """The thread control (threads.Threads) of the golden run now starting on this thread
    (None when it ends): `blas_threads` uses it."""
    _local.threads = t


def has_threads() -> bool:
    """A golden run's thread control is set on this thread (set_threads)."""
    return getattr(_local, "threads", None) is not None


def blas_threads(macs: int) -> None:
    """Before a product of `macs` multiply-adds inside `execute` or a golden plan's run: the
    BLAS threads it may use (graphs/threads.py)."""
    _blas_threads(macs)


def dense(g: Graph, node: Node, ins: list[Array]) -> Array:
    """y = x @ W + b (ReLU if fused): float32, or for fixed point the exact sum of the
    products of the codes plus the aligned bias, requantized once to the output type
    (`_add_bias`, `_finish`: the definition; `Linear` computes the same integers faster)."""
    lp = _prepared(g).get(node.name)
    if lp is None:
        lp = _linear(g, node, _const(g, node.inputs[1]))
    return _linear_out(g, node, lp, ins[0])


def gemm_weights(w: Array, group: int) -> Array:
    """Conv weights (*kernel, Cin/group, Cout) in the layout of `conv_rows`' window rows:
    (K * Cin, Cout), or (group, Cin/group * K, Cout/group) for a grouped conv."""
    if group == 1:
        return w.reshape(-1, w.shape[-1])
    r = w.ndim - 2
    wt = np.moveaxis(w, r, 0)  # (Cin/group, *kernel, Cout): the rows' (channel, offset) order
    return np.moveaxis(wt.reshape(-1, group, w.shape[-1] // group), 1, 0)


def conv_linear(g: Graph, node: Node) -> Linear:
    """The prepared `Linear` of a Conv node (weights in the window rows' GEMM layout)."""
    lp = _prepared(g).get(node.name)
    if lp is None:
        lp = _linear(g, node, gemm_weights(_const(g, node.inputs[1]), ConvAttrs.of(node).group))
    return lp
