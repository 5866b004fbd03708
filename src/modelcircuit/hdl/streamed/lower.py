"""Graph -> streaming design (hdl/streamed/units.py) for models with spatial ops (Conv, MaxPool,
AvgPool, Resize: graphs/ops.py SPATIAL).

Every channels-last activation ((L, C) or (H, W, C)) is a pixel stream: one token of C codes
per spatial position, raster order (cnn_ir.md, "Streaming"). Per node:
- Conv -> `WindowUnit` with a `Dense` (hdl/units/dense.py) over the kh*kw*Cin window, its
  weights block-diagonal for 1 < group < Cin; reuse from the plan (parallel over the output
  channels, folded over the window's inputs); a depthwise Conv (group = Cin) -> one Dense
  lane per channel, or, over the whole frame, an accumulator per channel
  (hdl/streamed/depthwise.py);
- Threshold with many thresholds per channel -> a binary search (or, where exact, a
  product) on lanes
  (hdl/streamed/threshold.py); with few, the comparators per pixel as below;
- MaxPool / AvgPool -> `WindowUnit` with `WindowMax` / `WindowAvg`;
- Resize -> `ResizeUnit` (+ a requantization if the output type differs);
- Concat on the last axis -> a per-pixel join (each part requantized to the output type);
- element-wise ops (Relu, LeakyRelu, Requant, Bipolar, Threshold, Add/Sub/Mul with a
  per-channel constant or of two streams) -> the whole-vector lowering (hdl/vector/lower.py) on a
  one-pixel view of the tensors, per token (`MapUnit`);
- Reshape/Flatten of a pixel stream into a vector feeding a Dense -> `FlatDense` (each
  pixel multiplied into the accumulators as it arrives; its reuse R = pixels x cycles per
  pixel); into anything else -> `CollectUnit` (the frame, C order of (H, W, C)); everything
  after it runs on the vector with the whole-vector units.

This module is the backend's table by op (STREAM_LOWERING, STREAM_REFUSED), the walk over the
graph that calls it (build_design) and the model as data (StreamModel); the per-op functions
are in hdl/streamed/lower_ops.py, what they share with the walk in
hdl/streamed/lower_context.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ir import Graph
from ...graphs.ops import Op
from ..errors import HdlError
from ..names import instance_name
from ..plan.circuit import CircuitPlan
from ..vector.lower import Options
from .attention import lower_attention, lower_layer_norm
from .lower_context import PER_PIXEL_OPS, Lowering, StreamLower, ftype, refuse_on_stream
from .lower_ops import (
    lower_concat,
    lower_flat_dense,
    lower_gather,
    lower_per_pixel,
    lower_recurrent,
    lower_reshape,
    lower_resize,
    lower_threshold,
    lower_vector,
    lower_window,
)
from .memory import budget_lut_ram
from .top import INPUT, StreamDesign
from .units import Tok

# The lowering table of nodes on a pixel stream (a node after a Flatten takes the
# whole-vector table instead, hdl/vector/lower.py). An op missing here is refused on a
# stream with the reason in STREAM_REFUSED; tests/graphs/test_ops.py checks that the two
# cover the vocabulary.
STREAM_LOWERING: dict[Op, StreamLower] = {
    Op.CONV: lower_window, Op.MAX_POOL: lower_window, Op.AVG_POOL: lower_window,
    Op.RESIZE: lower_resize,
    Op.CONCAT: lower_concat,
    Op.RESHAPE: lower_reshape, Op.TRANSPOSE: lower_reshape,
    Op.DENSE: lower_flat_dense,
    Op.LSTM: lower_recurrent, Op.GRU: lower_recurrent,
    Op.GATHER: lower_gather,
    Op.ATTENTION: lower_attention, Op.LAYER_NORM: lower_layer_norm,  # hdl/streamed/attention.py
    Op.THRESHOLD: lower_threshold,
    **{op: lower_per_pixel for op in PER_PIXEL_OPS},
}
STREAM_REFUSED: dict[Op, str] = {
    op: "no streaming circuit on a pixel stream (after a Flatten it runs on the whole vector, "
        "hdl/vector/lower.py)"
    for op in Op if op not in STREAM_LOWERING}
STREAM_REFUSED[Op.MATMUL] = ("a product of two activations streams only inside an Attention "
                             "node (hdl/streamed/attention.py)")


def build_design(g: Graph, opt: Options) -> tuple[StreamDesign, list[int], list[int]]:
    """The streaming design of a graph with spatial ops. Returns (design, input frame
    shape, output frame shape)."""
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise HdlError(f"graph {g.name!r}: the HDL backend needs exactly one input and one "
                       f"output, got {len(g.inputs)} and {len(g.outputs)}")
    xin = g.inputs[0]
    shp = tuple(g.tensor(xin).shape)
    if len(shp) < 2:
        raise HdlError(f"graph {g.name!r}: input {xin!r} of shape {list(shp)} is not a "
                       "channels-last frame ((L, C) or (H, W, C)); the streaming circuit "
                       "takes one pixel per handshake")
    d = StreamDesign(g.name, Tok(ftype(g, xin), shp[-1], int(np.prod(shp[:-1]))))
    lw = Lowering(g, opt, d, xin)
    for idx, node in enumerate(g.nodes):
        inst = instance_name(idx, node.name)
        if not lw.on_stream(node):
            lower_vector(lw, node, inst)
            continue
        fn = STREAM_LOWERING.get(node.op)
        if fn is None:
            refuse_on_stream(node)
        fn(lw, node, inst)
    res = lw.src[g.outputs[0]]
    if res[0] != len(d.units) - 1 or res[0] == INPUT:
        raise HdlError(f"graph {g.name!r}: the output {g.outputs[0]!r} is not made by the "
                       "last streamed node")
    oshape = list(g.tensor(g.outputs[0]).shape)
    budget_lut_ram(d, opt.schedule.lutram_cells)
    return d, list(shp), oshape


class StreamModel:
    """The streamed model as data, from a `CircuitPlan` (hdl/plan/circuit.py), as
    hdl/vector/top.py `VectorDesign` is for whole-vector models: the design (units as plans),
    its compile-time schedule (hdl/streamed/top.py `schedule`) and ports. Nothing is built:
    `component()` is the top-level `StreamTop`."""

    def __init__(self, compiled: CompiledGraph, plan: CircuitPlan):
        from .top import schedule

        g = compiled.graph
        self.plan = plan
        self.schedule = plan.schedule_name
        self.fit = plan.fit
        self.adder_levels = plan.adder_levels
        self.strategy = plan.strategy
        # no dsp_lanes: a streamed Dense writes every lane as a `$mul` and yosys moves those
        # beyond the DSP budget to logic (`booth`); issue 25, the small encoder at R 16 on
        # ECP5 (70 lanes without a block): booth 44,612 LUT4 + 4,692 CCU2C + 31,612 FF,
        # the plan's registered coefficient slices 43,541 + 9,139 + 46,876
        self.design, self.in_shape, self.out_shape = build_design(
            g, Options(plan.reuse, plan.adder_levels, plan.schedule, plan.strategy))
        self.timing = schedule(self.design)
        self.graph = g

    def component(self) -> Any:
        from .top import StreamTop

        return StreamTop(self.design, self.timing)

    def info(self) -> dict[str, Any]:
        from .top import design_info

        g = self.graph
        return {**design_info(self.design, self.timing, self.in_shape, self.out_shape,
                              g.inputs[0], g.outputs[0]),
                "pipeline": self.schedule, "adder_levels": self.adder_levels,
                **({"fit": self.fit} if self.fit is not None else {})}
