"""Shared helpers: hand-built compiled graphs and a sim-vs-golden check."""

from __future__ import annotations

import numpy as np

from modelcircuit.graphs import reference
from modelcircuit.graphs.compiled import CompiledGraph
from modelcircuit.graphs.ir import Graph, Node, Tensor
from modelcircuit.graphs.passes.accumulators import accumulator_types
from modelcircuit.graphs.passes.tables import build_tables
from modelcircuit.graphs.types import FixedType, parse_type
from modelcircuit.hdl import build_top
from modelcircuit.sim.amaranth_sim import simulate


def T(s: str) -> FixedType:
    t = parse_type(s)
    assert isinstance(t, FixedType)
    return t


def compiled_from(nodes: list[Node], tensors: dict[str, tuple[tuple[int, ...], str]],
                  consts: dict[str, np.ndarray], inputs: list[str], outputs: list[str],
                  name: str = "g") -> CompiledGraph:
    """A typed graph from hand-written nodes; accumulators and tables computed by the real
    passes."""
    g = Graph(name, tuple(inputs), tuple(outputs), tuple(nodes),
              {k: Tensor(k, shp, T(t)) for k, (shp, t) in tensors.items()},
              {k: np.asarray(v, dtype=np.int64) for k, v in consts.items()})
    g = build_tables(accumulator_types(g))
    return CompiledGraph(g, {"reuse": 1}, (), "test-" + name)


def extremes(t: FixedType, n: int, rng: np.random.Generator, k: int = 12) -> np.ndarray:
    """Random codes plus the extreme vectors (all min, all max, zero, alternating, ±1)."""
    rows = [np.full(n, t.qmin), np.full(n, t.qmax), np.zeros(n, dtype=np.int64),
            np.where(np.arange(n) % 2 == 0, t.qmin, t.qmax),
            np.where(np.arange(n) % 2 == 0, t.qmax, t.qmin),
            np.full(n, min(1, t.qmax)), np.full(n, max(-1, t.qmin))]
    rows += list(rng.integers(t.qmin, t.qmax + 1, size=(k, n)))
    return np.stack(rows).astype(np.int64)


def golden(c: CompiledGraph, x: np.ndarray) -> np.ndarray:
    g = c.graph
    y = reference.execute(g, [x], inputs_are_codes=True)[g.outputs[0]]
    return np.asarray(y, dtype=np.int64).reshape(len(x), -1)


def check(c: CompiledGraph, x: np.ndarray, reuse=None, gap: float = 0.0,
          backpressure: float = 0.0, seed: int = 0, adder_levels: int | None = None,
          pipeline: str | None = None):
    """Simulate and compare with the golden model; returns (info, SimResult)."""
    top, info = build_top(c, reuse, adder_levels=adder_levels, pipeline=pipeline)
    res = simulate(top, info, x, gap=gap, backpressure=backpressure, seed=seed)
    want = golden(c, x)
    assert res.outputs.shape == want.shape, (res.outputs.shape, want.shape)
    bad = np.argwhere(res.outputs != want)
    assert not len(bad), f"mismatch at {bad[:5].tolist()}: got {res.outputs[tuple(bad[0])]} " \
                         f"want {want[tuple(bad[0])]}"
    return info, res
