"""Float constants -> int64 codes of their fixed-point type, once, at compile time."""

from __future__ import annotations

import numpy as np

from .. import fixed as fx
from ..ir import Graph, GraphError
from ..types import FixedType


def quantize_constants(g: Graph) -> Graph:
    consts = {}
    for name, v in g.constants.items():
        t = g.tensor(name).dtype
        arr = np.asarray(v)
        if isinstance(t, FixedType) and arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)):
                raise GraphError(f"weight {name!r} contains NaN or Inf")
            consts[name] = fx.quantize(arr, t)
        else:
            consts[name] = arr
    return g.replace(constants=consts)
