"""Static memory plan: tensor lifetimes -> byte offsets in one arena, reusing dead buffers.

Pure data, computed at compile time. Offsets are per sample: at batch size B a tensor lives
at `offset * B` and takes `bytes * B`, so one plan serves every batch size (scaling all
intervals by B keeps disjoint intervals disjoint).

Reuse is safe under concurrent streams: two tensors may share bytes only when one is
completely dead before the other is written, in the happens-before order of the graph (every
reader of the first is a strict ancestor of the producer of the second). On a chain this is
the usual schedule-interval rule; on branches that may run on separate streams it is stricter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..ir import Graph, GraphError
from ..types import FixedType, NumType

ALIGN = 8  # bytes per sample; any offset * B is then aligned for int64/float32
START, END = -1, -2  # virtual nodes: the host writing the inputs, the host reading outputs


def storage_bits(t: NumType | None, lo: int | None = None, hi: int | None = None) -> int:
    """Bits of the integer (or float) a tensor is stored in: 8, 16, 32 or 64.

    Fixed-point tensors hold codes; the storage covers the type's range (or [lo, hi] when
    given, for constants whose values are known)."""
    if t is None:
        raise GraphError("a tensor has no number type; compile the graph first")
    if t.is_float:
        return 32
    assert isinstance(t, FixedType)
    lo = t.qmin if lo is None else min(lo, t.qmin)
    hi = t.qmax if hi is None else max(hi, t.qmax)
    lo, hi = min(lo, -1), max(hi, 1)  # Bipolar writes +-1 whatever the type
    for bits in (8, 16, 32, 64):
        if -(1 << (bits - 1)) <= lo and hi < (1 << (bits - 1)):
            return bits
    raise GraphError(f"type {t} does not fit in 64 bits")


def _align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def ancestors(preds: Sequence[Sequence[int]]) -> list[int]:
    """Strict ancestors of each node as a bitset (nodes given in topological order)."""
    anc: list[int] = []
    for i, ps in enumerate(preds):
        a = 0
        for p in ps:
            if not 0 <= p < i:
                raise GraphError(f"node {i}: predecessor {p} is not earlier in the schedule")
            a |= anc[p] | (1 << p)
        anc.append(a)
    return anc


def _before(readers: Sequence[int], producer: int, anc: Sequence[int]) -> bool:
    """Is every reader a strict ancestor of `producer`?"""
    if producer == START:
        return False
    for r in readers:
        if r == END:
            return False
        if r == START:
            continue
        if not (anc[producer] >> r) & 1:
            return False
    return True


def plan_arena(sizes: Sequence[int], producers: Sequence[int], readers: Sequence[Sequence[int]],
               preds: Sequence[Sequence[int]], align: int = ALIGN) -> tuple[list[int], int]:
    """First-fit offsets for tensors 0..n-1.

    sizes: bytes; producers[t]: node index or START; readers[t]: node indices (END for graph
    outputs); preds[i]: predecessor node indices of node i (topological order). Tensors are
    placed in order of (producer, index); each goes at the lowest aligned offset clear of every
    already placed tensor it may be alive with. Returns (offsets, arena size).
    """
    anc = ancestors(preds)
    rd = [list(r) if r else [producers[t]] for t, r in enumerate(readers)]
    order = sorted(range(len(sizes)), key=lambda t: (producers[t], t))
    offsets = [0] * len(sizes)
    placed: list[int] = []
    arena = 0
    for t in order:
        size = _align(int(sizes[t]), align)
        busy = sorted(
            (offsets[u], offsets[u] + _align(int(sizes[u]), align)) for u in placed
            if not (_before(rd[u], producers[t], anc) or _before(rd[t], producers[u], anc))
        )
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, hi)
        offsets[t] = off
        placed.append(t)
        arena = max(arena, off + size)
    return offsets, arena


def memory_plan(graph: Graph) -> dict[str, Any]:
    """The arena plan of a compiled graph, as JSON-able data (bytes per sample)."""
    acts = list(graph.inputs)
    for n in graph.nodes:
        acts += [o for o in n.outputs if o not in acts]
    prod = {name: START for name in graph.inputs}
    for i, n in enumerate(graph.nodes):
        for o in n.outputs:
            prod[o] = i
    readers: dict[str, list[int]] = {a: [] for a in acts}
    preds: list[list[int]] = []
    for i, n in enumerate(graph.nodes):
        ps = set()
        for x in graph.activations(n):
            readers[x].append(i)
            if prod[x] != START:
                ps.add(prod[x])
        preds.append(sorted(ps))
    for o in graph.outputs:
        readers[o].append(END)
    sizes, bits = [], {}
    for a in acts:
        t = graph.tensor(a)
        bits[a] = storage_bits(t.dtype)
        sizes.append(t.size * bits[a] // 8)
    offsets, arena = plan_arena(sizes, [prod[a] for a in acts], [readers[a] for a in acts], preds)
    return {
        "align": ALIGN,
        "arena_bytes_per_sample": arena,
        "naive_bytes_per_sample": sum(_align(s) for s in sizes),
        "tensors": {a: {"offset": offsets[i], "bytes": sizes[i], "bits": bits[a],
                        "float": bool(graph.tensor(a).dtype.is_float)}
                    for i, a in enumerate(acts)},
    }
