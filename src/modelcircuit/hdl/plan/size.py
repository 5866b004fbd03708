"""The HDL backend's size limits, checked before anything is elaborated.

Every reuse plan is checked against them (`check_circuit_size`): products instantiated,
coefficient ROM and lookup-table bits, weights per Dense layer (graphs/limits.py MAX_HDL_*,
or their environment variables, HDL_LIMIT_ENV); an oversized circuit is an HdlError naming
the layer, the figure, the limit and the smallest --reuse that would do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ops import LAYOUT, LINEAR, RECURRENT, TABLE_OPS, Op
from ..errors import HdlError
from ..streamed.threshold import fold_thresholds, search_levels
from .fold import coef_width, layer_size, size_bound


def _fmt_shape(w: np.ndarray) -> str:
    return "x".join(str(d) for d in w.shape)


# limit name -> (attribute of graphs/limits.py, environment variable that overrides it)
HDL_LIMIT_ENV = {"products": ("MAX_HDL_PRODUCTS", "MODELCIRCUIT_MAX_PRODUCTS"),
                 "rom_bits": ("MAX_HDL_ROM_BITS", "MODELCIRCUIT_MAX_ROM_BITS"),
                 "dense_weights": ("MAX_HDL_DENSE_WEIGHTS", "MODELCIRCUIT_MAX_DENSE_WEIGHTS")}


def hdl_limit(name: str) -> int:
    """The HDL size limit `name` (products, rom_bits, dense_weights): its environment
    variable when set (a positive integer), else graphs/limits.py's value."""
    import os

    from ...graphs import limits

    attr, var = HDL_LIMIT_ENV[name]
    text = os.environ.get(var)
    if text is None or not text.strip():
        return int(getattr(limits, attr))
    try:
        v = int(text.strip().replace("_", ""))
    except ValueError:
        v = 0
    if v < 1:
        raise HdlError(f"{var} must be a positive integer, got {text!r}")
    return v


def limit_note(name: str) -> str:
    """How to change a limit, for messages."""
    return f"set {HDL_LIMIT_ENV[name][1]} to change it"


def dense_weights(g: Any) -> dict[str, np.ndarray]:
    """Dense node name -> integer weight matrix (N_in, N_out), constant weights only. A
    Conv's is the Dense its streaming circuit runs per window (hdl/streamed/units.py
    `conv_weights`: (kh*kw*Cin, Cout), block-diagonal for groups). An LSTM / GRU's is
    [W; R] (F + H, G*H): its gate sums per step (hdl/streamed/recurrent.py)."""
    out = {}
    for n in g.nodes:
        if n.op in RECURRENT and n.inputs[1] in g.constants:
            out[n.name] = np.concatenate([np.asarray(g.constants[n.inputs[1]], dtype=np.int64),
                                          np.asarray(g.constants[n.inputs[2]], dtype=np.int64)])
            continue
        if n.op in LINEAR and n.inputs[1] in g.constants:
            w = np.asarray(g.constants[n.inputs[1]], dtype=np.int64)
            if n.op == Op.CONV:
                from ..streamed.dense import conv_weights

                w = conv_weights(w.reshape((1,) + w.shape) if w.ndim == 3 else w,
                                 int(n.get("group", 1) or 1))
            out[n.name] = w
    return out


def _streamed(g: Any) -> bool:
    from ...graphs.ops import SPATIAL

    return any(n.op in SPATIAL or n.op in RECURRENT for n in g.nodes)


def other_size(g: Any) -> tuple[int, int]:
    """(element-wise operations, lookup-table bits) of the ops other than Dense. In a
    streamed model (hdl/streamed/lower.py) an op on a frame runs per pixel: C operations."""
    ops = bits = 0
    streamed = _streamed(g)
    for n in g.nodes:
        if n.op in LINEAR | LAYOUT:
            continue
        shp = g.tensor(n.outputs[0]).shape
        size = int(shp[-1]) if streamed and len(shp) >= 2 else int(g.tensor(n.outputs[0]).size)
        if n.op == Op.THRESHOLD and n.inputs[1] in g.constants:
            thr = np.asarray(g.constants[n.inputs[1]])
            k = max(1, int(thr.shape[-1]) if thr.ndim else 1)
            if fold_thresholds(k):  # L compares: the search (hdl/streamed/threshold.py;
                k = search_levels(k)  # hdl/units/threshold.py a table or an unrolled one)
            size *= k
        ops += size
        if n.op in TABLE_OPS or n.op in RECURRENT:
            first = 1 if n.op in TABLE_OPS else (6 if n.op == Op.LSTM else 5)  # gate tables
            for t in n.inputs[first:]:
                if t in g.constants:
                    width = int(getattr(g.tensor(t).dtype, "width", 32) or 32)
                    bits += int(np.asarray(g.constants[t]).size) * width
    return ops, bits


def _layer(name: str, w: np.ndarray, r: int) -> str:
    return f"layer {name} (Dense {_fmt_shape(w)}, reuse {r})"


def suggest_reuse(dense: Mapping[str, np.ndarray], other: tuple[int, int], lim_p: int,
             lim_rom: int) -> int | None:
    """The smallest single --reuse that brings every layer within the limits (by the
    closed-form bounds, so the exact check passes too), or None."""
    if not dense:
        return None
    info = [(w.shape[0], w.shape[1], int(np.count_nonzero(w)), coef_width(w))
            for w in dense.values()]
    ops, tbits = other

    def ok(r: int) -> tuple[bool, bool]:
        b = [size_bound(a, o, r, nz, cw) for a, o, nz, cw in info]
        return (sum(p for p, _ in b) + ops <= lim_p, sum(x for _, x in b) + tbits <= lim_rom)

    if all(ok(1)):
        return 1
    top = min(int(w.size) for w in dense.values())
    if top < 2 or not ok(top)[0]:
        return None
    lo, hi = 2, top  # products bound: non-increasing in r
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid)[0]:
            hi = mid
        else:
            lo = mid + 1
    for r in range(lo, min(top, lo + 64) + 1):  # ROM padding varies with r: look a little
        if all(ok(r)):
            return r
    return None


def beyond_any_reuse(dense: Mapping[str, np.ndarray], other: tuple[int, int], lim_p: int,
                     lim_rom: int) -> str | None:
    """Why no reuse at all brings the model within the limits (products at R=1, coefficient
    ROM at the largest R, about the least it can be), or None."""
    p1 = sum(int(np.count_nonzero(w)) for w in dense.values()) + other[0]
    rom_min = sum(layer_size(w, int(w.size))[1] for w in dense.values()) + other[1]
    if p1 <= lim_p or rom_min <= lim_rom:
        return None
    return (f"at reuse 1 it would instantiate {p1:,} products (limit {lim_p:,}), at a larger "
            f"reuse hold about {rom_min:,} bits of coefficient ROM (limit {lim_rom:,}; "
            f"{limit_note('rom_bits')})")


def check_circuit_size(compiled: CompiledGraph, plan: Mapping[str, int],
                       dense: Mapping[str, np.ndarray] | None = None) -> None:
    """Refuse (HdlError) a circuit over the HDL backend's limits (graphs/limits.py,
    hdl_limit) before it is elaborated: weights per Dense layer, products and element-wise
    operations per model, coefficient ROM and lookup-table bits per model."""
    g = compiled.graph
    if dense is None:
        dense = dense_weights(g)
    lim_w, lim_p, lim_rom = (hdl_limit(k) for k in ("dense_weights", "products", "rom_bits"))
    for name, w in dense.items():
        if w.size > lim_w:
            raise HdlError(_too_many_weights(name, w, plan.get(name), lim_w, lim_p))
    sizes = {name: layer_size(w, int(plan.get(name, 1))) for name, w in dense.items()}
    other = other_size(g)
    total_p = sum(p for p, _ in sizes.values()) + other[0]
    total_rom = sum(b for _, b in sizes.values()) + other[1]
    if total_p <= lim_p and total_rom <= lim_rom:
        return
    if total_p > lim_p:
        head = _over_limit(g.name, dense, plan, sizes, 0, total_p, lim_p)
        what = "products"
    else:
        head = _over_limit(g.name, dense, plan, sizes, 1, total_rom, lim_rom)
        what = "rom_bits"
    raise HdlError(head + _remedy(dense, other, lim_p, lim_rom, what))


def _too_many_weights(name: str, w: np.ndarray, r: int | None, lim_w: int, lim_p: int
                      ) -> str:
    """A layer over the weights limit (r None: any reuse, --reuse auto)."""
    nnz = int(np.count_nonzero(w)) if r == 1 else 0
    head = (f"the circuit for {_layer(name, w, 1)} would instantiate {nnz:,} products, over "
            f"the limit of {lim_p:,}; no reuse brings it within the HDL backend's limits: "
            if nnz > lim_p else
            f"the circuit for layer {name} (Dense {_fmt_shape(w)}"
            f"{'' if r is None else f', reuse {r}'}): ")
    return (f"{head}its {w.size:,} weights are over the limit of {lim_w:,} per "
            f"layer at any reuse ({limit_note('dense_weights')})")


def _over_limit(model: str, dense: Mapping[str, np.ndarray], plan: Mapping[str, int],
                sizes: Mapping[str, tuple[int, int]], key: int, total: int, lim: int) -> str:
    """What is over: key 0 products, 1 ROM bits; the largest layer when it alone is over."""
    if key == 0:
        verb, unit, model_what = "instantiate", "products", "products and element-wise operations"
    else:
        verb, unit = "hold", "bits of coefficient ROM"
        model_what = "bits of coefficient ROM and lookup tables"
    big = max(sizes, key=lambda n: sizes[n][key]) if sizes else None
    if big is not None and sizes[big][key] > lim:
        w = dense[big]
        return (f"the circuit for {_layer(big, w, int(plan.get(big, 1)))} would {verb} "
                f"{sizes[big][key]:,} {unit}, over the limit of {lim:,}")
    most = (f" (the most, {sizes[big][key]:,}, in {_layer(big, dense[big], int(plan.get(big, 1)))})"
            if big is not None and sizes[big][key] else "")
    return (f"the circuit for model {model} would {verb} {total:,} {model_what}{most}, "
            f"over the limit of {lim:,}")


def _remedy(dense: Mapping[str, np.ndarray], other: tuple[int, int], lim_p: int, lim_rom: int,
            what: str) -> str:
    """The reuse that would do, or why none does."""
    r = suggest_reuse(dense, other, lim_p, lim_rom)
    if r is not None:
        return f"; use --reuse {r} or --reuse auto" if r == 1 else \
            f"; use --reuse {r} (or larger) or --reuse auto"
    why = beyond_any_reuse(dense, other, lim_p, lim_rom)
    if why:
        return f"; no reuse brings it within the HDL backend's limits: {why}"
    return ("; no single --reuse value brings it within the HDL backend's limits (try "
            f"--reuse auto or a smaller model; {limit_note(what)})")
