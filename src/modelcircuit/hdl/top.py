"""The model as one `wiring.Component` with an input and an output stream.

Ports (Verilog names after export): clk, rst, i__payload, i__valid, i__ready, o__payload,
o__valid, o__ready. Payloads are packed fixed-point vectors: element k (C order of the
tensor) occupies bits [k*W, (k+1)*W), two's complement for signed types, so element 0 is in
the least significant bits.

Schedule: every unit has a static latency and II, so the time (in enabled cycles after the
input handshake) at which each tensor is valid is known at compile time; where two operands
arrive at different times the earlier one is delayed by registers. A valid bit travels
alongside the data. Backpressure: the whole pipeline shares one clock enable; a 2-entry
output skid buffer (bypassed while empty, so the latency is unchanged) sets
`en = buffer not full`, a function of registers only: o.ready never reaches the enable of
every register combinationally (on ECP5 that path set the clock). A stalled output fills
the buffer, then freezes every register (no vector is lost or duplicated);
`i.ready = en` (and, for II > 1, only every II enabled cycles).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from amaranth.hdl import Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..graphs.pipeline import CompiledGraph
from .arith import HdlError, check_fixed
from .dense import PIPELINES, Pipeline
from .lower import Options, lower_node
from .names import instance_name
from .reuse import resolve_plan
from .unit import Unit

DEFAULT_ADDER_LEVELS = PIPELINES["latency"].adder_levels  # 4
FPGA_ADDER_LEVELS = PIPELINES["fmax"].adder_levels


def resolve_pipeline(compiled: CompiledGraph, pipeline: str | None, adder_levels: int | None
                     ) -> tuple[str, Pipeline]:
    """The register schedule preset and adder levels per stage. Default: "fmax" (aims at
    >= 100 MHz on an ECP5) when the graph was compiled for an FPGA profile, else "latency"
    (fewest cycles: the jet tagger at R=1 in 13)."""
    if pipeline is None:
        pipeline = "latency"
        if compiled.profile:
            from ..graphs.profiles import all_profiles

            if all_profiles().get(compiled.profile, {}).get("kind") == "fpga":
                pipeline = "fmax"
    if pipeline not in PIPELINES:
        raise HdlError(f"pipeline must be one of {', '.join(sorted(PIPELINES))}, got {pipeline!r}")
    pipe = PIPELINES[pipeline]
    if adder_levels is None:
        adder_levels = pipe.adder_levels
    if isinstance(adder_levels, bool) or not isinstance(adder_levels, int) or adder_levels < 1:
        raise HdlError(f"adder_levels must be a positive integer, got {adder_levels!r}")
    return pipeline, dataclasses.replace(pipe, adder_levels=adder_levels)


def _packing(g: Any, name: str, port: str) -> dict[str, Any]:
    t = check_fixed(g.tensor(name).dtype, f"tensor {name!r}")
    n = g.tensor(name).size
    return {"port": port, "tensor": name, "shape": list(g.tensor(name).shape), "elements": n,
            "element_width": t.width, "width": t.width * n, "type": str(t), "signed": t.signed,
            "frac_bits": t.frac,
            "order": "element k (C order) in bits [k*W, (k+1)*W), element 0 least significant; "
                     "two's complement codes, value = code * 2**-frac_bits"}


class ModelTop(wiring.Component):
    def __init__(self, compiled: CompiledGraph, reuse: int | Mapping[str, int] | str | None = None,
                 adder_levels: int | None = None, pipeline: str | None = None):
        g = compiled.graph
        if len(g.inputs) != 1 or len(g.outputs) != 1:
            raise HdlError(f"graph {g.name!r}: the HDL backend needs exactly one input and one "
                           f"output, got {len(g.inputs)} and {len(g.outputs)}")
        self.pipeline, pipe = resolve_pipeline(compiled, pipeline, adder_levels)
        self.adder_levels = pipe.adder_levels
        if reuse is None:
            reuse = compiled.options.get("reuse", 1)
        plan, self.fit = resolve_plan(compiled, reuse)
        opt = Options(plan, pipe.adder_levels, pipe)
        self.graph = g
        self.units: list[tuple[str, Any, Unit, int]] = []  # (instance, node, unit, start time)
        time = {g.inputs[0]: 0}
        for idx, node in enumerate(g.nodes):
            acts = g.activations(node)
            unit = lower_node(g, node, opt)
            t0 = max(time[a] for a in acts) if acts else 0
            if unit.ii > 1:  # a folded unit loads on `start`: a register, never the
                t0 = max(t0, 1)  # input handshake itself (its fan-out set the ECP5 clock)
            self.units.append((instance_name(idx, node.name), node, unit, t0))
            time[node.outputs[0]] = t0 + unit.latency
        self.time = time
        self.out_delay = 1 if time[g.outputs[0]] == 0 else 0
        self.latency = time[g.outputs[0]] + self.out_delay
        self.ii = max([u.ii for _, _, u, _ in self.units] + [1])
        self.input_info = _packing(g, g.inputs[0], "i__payload")
        self.output_info = _packing(g, g.outputs[0], "o__payload")
        super().__init__({"i": In(stream.Signature(self.input_info["width"])),
                          "o": Out(stream.Signature(self.output_info["width"]))})

    def info(self) -> dict[str, Any]:
        layers = []
        for inst, node, unit, t0 in self.units:
            layers.append({"node": node.name, "op": node.op, "instance": inst, "start": t0,
                           **unit.describe()})
        return {
            "graph": self.graph.name, "latency": self.latency, "ii": self.ii,
            "multipliers": sum(u.multipliers for _, _, u, _ in self.units),
            "shifts": sum(u.shifts for _, _, u, _ in self.units),
            "layers": layers, "input": self.input_info, "output": self.output_info,
            "pipeline": self.pipeline, "adder_levels": self.adder_levels,
            **({"fit": self.fit} if self.fit is not None else {}),
            "ports": ["clk", "rst", "i__payload", "i__valid", "i__ready", "o__payload",
                      "o__valid", "o__ready"],
            "handshake": "valid/ready; a transfer happens on a rising clk edge with valid and "
                         "ready both high; o__valid does not depend on o__ready",
        }

    def elaborate(self, platform: object) -> Module:
        m = Module()
        en, accept = Signal(), Signal()
        valid = [accept] + [Signal(name=f"v{t}") for t in range(1, self.latency + 1)]
        with m.If(en):
            m.d.sync += [valid[t].eq(valid[t - 1]) for t in range(1, self.latency + 1)]
        # output skid buffer (2 entries, bypassed when empty): the clock enable depends on
        # its fill level (a register) only, not combinationally on o.ready
        width = self.output_info["width"]
        count = Signal(range(3), name="obuf_n")
        head = Signal(width, name="obuf0", reset_less=True)
        tail = Signal(width, name="obuf1", reset_less=True)
        pipe_out = Signal(width, name="pipe_out")
        m.d.comb += [en.eq(count < 2), self.o.valid.eq((count != 0) | valid[-1]),
                     self.o.payload.eq(Mux(count != 0, head, pipe_out))]
        pop = self.o.valid & self.o.ready
        push = Signal(name="obuf_push")
        m.d.comb += push.eq(valid[-1] & en & ~((count == 0) & self.o.ready))
        with m.Switch(count):
            with m.Case(0):
                with m.If(push):
                    m.d.sync += [head.eq(pipe_out), count.eq(1)]
            with m.Case(1):
                with m.If(push & pop):
                    m.d.sync += head.eq(pipe_out)
                with m.Elif(push):
                    m.d.sync += [tail.eq(pipe_out), count.eq(2)]
                with m.Elif(pop):
                    m.d.sync += count.eq(0)
            with m.Case(2):
                with m.If(pop):
                    m.d.sync += [head.eq(tail), count.eq(1)]
        if self.ii > 1:
            cool = Signal(range(self.ii))
            m.d.comb += self.i.ready.eq(en & (cool == 0))
            with m.If(en):
                with m.If(accept):
                    m.d.sync += cool.eq(self.ii - 1)
                with m.Elif(cool != 0):
                    m.d.sync += cool.eq(cool - 1)
        else:
            m.d.comb += self.i.ready.eq(en)
        m.d.comb += accept.eq(self.i.valid & self.i.ready)

        # delayed copies of every tensor: {name: {time: value}}
        at: dict[str, dict[int, Value]] = {self.graph.inputs[0]: {0: self.i.payload}}

        def get(name: str, t: int) -> Value:
            stages = at[name]
            last = max(stages)
            while last < t:
                r = Signal(len(stages[last]), name=f"d_{last + 1}", reset_less=True)
                with m.If(en):
                    m.d.sync += r.eq(stages[last])
                stages[last + 1] = r
                last += 1
            return stages[t]

        for inst, node, unit, t0 in self.units:
            m.submodules[inst] = unit
            m.d.comb += [unit.en.eq(en), unit.start.eq(valid[t0])]
            for k, a in enumerate(self.graph.activations(node)):
                m.d.comb += getattr(unit, f"x{k}").eq(get(a, t0))
            at[node.outputs[0]] = {t0 + unit.latency: unit.y}
        out = self.graph.outputs[0]
        m.d.comb += pipe_out.eq(get(out, self.latency))
        return m


def build_top(compiled: CompiledGraph, reuse: int | Mapping[str, int] | str | None = None,
              adder_levels: int | None = None, pipeline: str | None = None
              ) -> tuple[ModelTop, dict[str, Any]]:
    """The model's top-level component and its schedule (latency, II, per-layer figures,
    port packing; with reuse="auto" the fit plan under "fit"). adder_levels / pipeline:
    None = the default for the compiled graph's target (see resolve_pipeline). Raises
    HdlError for anything that cannot be lowered."""
    top = ModelTop(compiled, reuse, adder_levels, pipeline)
    return top, top.info()
