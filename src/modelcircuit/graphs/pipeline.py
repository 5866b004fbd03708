"""The compiler, readable in one screen: the ordered list of passes.

Each pass is a pure function Graph -> Graph. `compile_graph` runs them, times them, checks
the graph after each (check.verify_graph: a pass that breaks the IR is named), and returns a
CompiledGraph: data (graph + options + pass log + id), no behaviour.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from . import reference
from .analysis.memory_plan import memory_plan
from .analysis.streams import assign_streams
from .check import verify_graph
from .compiled import CompiledGraph
from .host import carve
from .identity import graph_id
from .ir import Graph, GraphError
from .passes.accumulators import accumulator_types
from .passes.attention import attention_types
from .passes.canonicalize import fold_batchnorm, fold_requant, fuse_bias
from .passes.concat_parts import forward_concat_parts
from .passes.constants import quantize_constants
from .passes.crop import fold_crops
from .passes.fuse import fuse_dense_relu
from .passes.host import host_parts, layout_ends
from .passes.precision import assign_types, check_per_layer
from .passes.recurrent import recurrent_tables, recurrent_types
from .passes.scales import factor_scales
from .passes.schedule import schedule
from .passes.tables import DEFAULT_TABLE_BITS, build_tables, check_table_bits
from .passes.thresholds import float_chains_to_thresholds
from .types import FLOAT32, FixedType, NumType, Rounding, parse_type

Pass = Callable[[Graph], Graph]


def passes(precision: NumType | None, per_layer: Mapping[str, Any] | None,
           ranges: Mapping[str, tuple[float, float]] | None, table_bits: int) -> list[tuple[str, Pass]]:
    fixed = precision is None or not precision.is_float
    scaled = [("factor_scales", factor_scales), ("host_parts", host_parts)] if fixed else []
    return [("forward_concat_parts", forward_concat_parts),
            ("fold_crops", fold_crops)] + scaled + [
        ("fuse_bias", fuse_bias),
        ("fold_batchnorm", partial(fold_batchnorm, expand=fixed)),
        ("fold_requant", fold_requant),
        ("assign_types", partial(assign_types, precision=precision, per_layer=per_layer,
                                 ranges=ranges)),
        ("recurrent_types", partial(recurrent_types, precision=precision, per_layer=per_layer,
                                    ranges=ranges)),
        ("attention_types", partial(attention_types, precision=precision, ranges=ranges,
                                    table_bits=table_bits)),
        ("quantize_constants", quantize_constants),
        ("accumulator_types", accumulator_types),
        ("float_chains_to_thresholds", float_chains_to_thresholds),
        ("fuse_dense_relu", fuse_dense_relu),
        ("build_tables", partial(build_tables, table_bits=table_bits)),
        *([("layout_ends", layout_ends)] if fixed else []),
        ("recurrent_tables", partial(recurrent_tables, table_bits=table_bits)),
        ("schedule", schedule),
    ]


# Analyses of the final graph: data for the backends (the GPU arena and streams), computed
# once at compile time and kept in CompiledGraph.extra.
PLANS: list[tuple[str, Callable[[Graph], dict[str, Any]]]] = [
    ("memory_plan", memory_plan),
    ("streams", assign_streams),
]


_SOURCES = {"onnx": "the importer", "builder": "the graph builder"}


def _checked(graph: Graph, who: str) -> Graph:
    try:
        return verify_graph(graph)
    except GraphError as e:
        raise GraphError(f"{who} produced a malformed graph: {e}") from None


def _run_passes(graph: Graph, plist: list[tuple[str, Pass]]) -> tuple[Graph, list]:
    _checked(graph, _SOURCES.get(graph.get_meta("source"), "the input"))
    log = []
    for name, fn in plist:
        t0 = time.perf_counter()
        before, graph = graph, fn(graph)
        log.append((name, round((time.perf_counter() - t0) * 1e3, 3), len(graph.nodes)))
        if graph is not before:  # a pass that changed nothing returns its input, checked
            _checked(graph, f"pass {name}")
    return graph, log


def calibration_ranges(graph: Graph, samples: np.ndarray) -> dict[str, tuple[float, float]]:
    """(min, max) of every tensor of the float model on sample inputs. Fusions are left out so
    that every tensor the fixed-point pipeline types has a range."""
    plist = [p for p in passes(FLOAT32, None, None, DEFAULT_TABLE_BITS) if p[0] != "fuse_dense_relu"]
    fg, _ = _run_passes(graph, plist)
    try:
        x = np.asarray(samples, dtype=np.float32)
        env = reference.execute(fg, [x], trace=True)
    except (ValueError, TypeError) as e:
        raise GraphError(f"--calibrate: samples of shape {list(np.shape(samples))} do not fit the "
                         f"model: {e}") from None
    return {k: (float(v.min()), float(v.max())) for k, v in env.items() if v.size}


def compile_graph(graph: Graph, precision: str | NumType | None = None,
                  per_layer: Mapping[str, Any] | None = None,
                  calibrate: np.ndarray | None = None, reuse: int | str = 1,
                  profile: str | None = None, table_bits: int = DEFAULT_TABLE_BITS,
                  strategy: str = "mult") -> CompiledGraph:
    """Compile a graph ahead of time. Every failure is a GraphError (one line for the user).
    `strategy` (HDL, per Dense layer at R = 1): "mult" (products), "da" (shared adder graphs,
    hdl/plan/cmvm.py) or "auto" (the FPGA flow picks per layer); kept in the options, and so in
    the graph id, only when it is not "mult" (ids of earlier compiles stay as they were)."""
    if strategy not in ("mult", "da", "auto"):
        raise GraphError(f"strategy must be one of mult, da, auto, got {strategy!r}")
    p = parse_type(precision) if isinstance(precision, str) else precision
    if (calibrate is not None and isinstance(p, FixedType) and isinstance(precision, str)
            and not any(m in precision.upper() for m in ("TRN", "RND"))):
        # Calibration picks the types, rounding included, unless the user named one: TRN's
        # -1/2 lsb bias per layer costs ~11 points of argmax agreement at 8 bits on the jet
        # tagger; RND (one adder per requantization) does not.
        p = p.with_(rounding=Rounding.RND)
    if profile is not None:
        from .profiles import get_profile

        get_profile(profile)
    table_bits = check_table_bits(int(table_bits))
    check_per_layer(graph, per_layer)
    ranges = None
    if calibrate is not None:
        if p is not None and p.is_float:
            raise GraphError("--calibrate needs a fixed-point --precision (for its width)")
        from ..util.userio import check_array

        ranges = calibration_ranges(graph, check_array(np.asarray(calibrate), "--calibrate"))
    g, log = _run_passes(graph, passes(p, per_layer, ranges, int(table_bits)))
    options = {"precision": None if p is None else str(p), "per_layer": dict(per_layer or {}),
               "calibrated": calibrate is not None, "reuse": reuse, "profile": profile,
               "table_bits": int(table_bits)}
    if strategy != "mult":
        options["strategy"] = strategy
    if ranges is not None:
        options["calibration_sha256"] = __import__("hashlib").sha256(
            np.ascontiguousarray(calibrate, dtype=np.float32).tobytes()).hexdigest()
    head, g, tail = carve(g)
    extra = {name: fn(g) for name, fn in PLANS}
    return CompiledGraph(g, options, tuple(log), graph_id(g, options, head, tail), profile,
                         extra, head, tail)
