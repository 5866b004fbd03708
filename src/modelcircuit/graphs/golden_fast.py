"""What every fast step of the golden plan shares: the view it has of the plan being built,
and when a step is exact (the type tests, the float64 bound, the test hook that turns a
fast path on beyond its bound).

Why a module of its own: the plan (graphs/golden_plan.py: the ReLU it fuses into an Add, the
float32 it quantizes into) and both families of fast steps (graphs/golden_linear.py,
graphs/golden_steps.py) decide exactness from the same few facts. Kept in one place, a bound
has one definition and FORCE, which a test fills (tests/graphs/test_golden_plan.py), is one
set that reaches every path. `Building` lets the steps take the plan without importing the
module that imports them (no cycle, type-only ones included: tests/test_layering.py).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from . import native
from .golden_chain import Spec
from .ir import Graph, GraphError, Node
from .types import FixedType, NumType

# float64 holds every integer, and every multiple of 1/2, under this exactly
EXACT64 = 1 << 53

# clip as one ufunc call (np.clip is a Python wrapper around it: 3 us against 1.5 us on a
# 64x64 array); np.clip where a numpy lacks it
clip = getattr(getattr(getattr(np, "_core", None), "umath", None), "clip", None) or np.clip

# a test hook: names of fast paths whose exactness bound is ignored (forced on), to show that
# the tests catch a wrong bound (tests/graphs/test_golden_plan.py)
FORCE: set[str] = set()


class Building(Protocol):
    """What a fast step reads of the plan being built (golden_plan.Plan), and adds to it:
    the native chain spec of its step, the ReLU its Add's clamp does."""

    loops: native.Loops | None
    specs: dict[int, Spec]
    relu_of: dict[str, str]
    fused: set[str]

    @property
    def g(self) -> Graph: ...


def dtype_of(g: Graph, name: str) -> NumType:
    t = g.tensor(name).dtype
    if t is None:
        raise GraphError(f"tensor {name!r} has no type; compile the graph first")
    return t


def mag(t: FixedType) -> int:
    return max(-t.qmin, t.qmax)


def holds(out: NumType, t: NumType) -> bool:
    """Output type `out` holds every code of input type `t` unchanged (requantization is the
    identity)."""
    return (isinstance(out, FixedType) and isinstance(t, FixedType) and out.frac == t.frac
            and out.qmin <= t.qmin and out.qmax >= t.qmax)


def fixed_out(g: Graph, node: Node) -> FixedType | None:
    t = dtype_of(g, node.outputs[0])
    return t if isinstance(t, FixedType) else None
