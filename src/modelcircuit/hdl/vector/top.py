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

With a schedule that asks for credits ("fmax"): no clock enable at all. The pipeline always
runs; the output goes into a FIFO of ceil(latency / II) + 1 entries (bypassed while empty, so
the latency is unchanged), and an input is accepted only while fewer than that many vectors
are in flight or waiting (a counter of registers: accept adds one, an output transfer takes
one away). With o.ready always high nothing ever waits (full throughput at the II); a stalled
output fills the FIFO, never overflows it, and holds the input off.
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ...graphs.compiled import CompiledGraph
from ..errors import HdlError
from ..names import instance_name
from ..plan.circuit import CircuitPlan, resolve_plan
from ..plan.reuse import Reuse
from ..plan.schedule import DEFAULT_ADDER_LEVELS, FPGA_ADDER_LEVELS
from ..units.arith import check_fixed
from ..units.base import Unit, circuit
from .lower import Options, lower_node

__all__ = ["DEFAULT_ADDER_LEVELS", "FPGA_ADDER_LEVELS", "ModelTop", "VectorDesign", "build_top",
           "check_io", "plan_top"]


def check_io(g: Any) -> None:
    """The HDL backend's top level has one input and one output stream."""
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        raise HdlError(f"graph {g.name!r}: the HDL backend needs exactly one input and one "
                       f"output, got {len(g.inputs)} and {len(g.outputs)}")


def _packing(g: Any, name: str, port: str) -> dict[str, Any]:
    t = check_fixed(g.tensor(name).dtype, f"tensor {name!r}")
    n = g.tensor(name).size
    return {"port": port, "tensor": name, "shape": list(g.tensor(name).shape), "elements": n,
            "element_width": t.width, "width": t.width * n, "type": str(t), "signed": t.signed,
            "frac_bits": t.frac,
            "order": "element k (C order) in bits [k*W, (k+1)*W), element 0 least significant; "
                     "two's complement codes, value = code * 2**-frac_bits"}


class VectorDesign:
    """The whole-vector model as data: every node's unit (a plan, hdl/units/base.py), its
    start time, the latency, the II and the output FIFO's credits, from a `CircuitPlan`
    (hdl/plan/circuit.py). Nothing is built: `ModelTop(design)` is the component."""

    def __init__(self, compiled: CompiledGraph, plan: CircuitPlan):
        g = compiled.graph
        check_io(g)
        sched = plan.schedule
        self.plan = plan
        self.schedule = plan.schedule_name
        self.lean = sched.lean
        self.adder_levels = sched.adder_levels
        self.fit = plan.fit
        self.strategy = plan.strategy
        opt = Options(plan.reuse, sched.adder_levels, sched, plan.strategy, plan.dsp_lanes)
        self.graph = g
        self.units: list[tuple[str, Any, Unit, int]] = []  # (instance, node, unit, start time)
        time = {g.inputs[0]: 0}
        for idx, node in enumerate(g.nodes):
            acts = g.activations(node)
            unit = lower_node(g, node, opt)
            t0 = max(time[a] for a in acts) if acts else 0
            if unit.ii > 1 and not sched.lean:  # a folded unit loads on `start`: a register,
                t0 = max(t0, 1)  # not the input handshake itself (its fan-out set the ECP5 clock)
            self.units.append((instance_name(idx, node.name), node, unit, t0))
            time[node.outputs[0]] = t0 + unit.latency
        self.time = time
        self.out_delay = 1 if time[g.outputs[0]] == 0 else 0
        self.latency = time[g.outputs[0]] + self.out_delay
        self.ii = max([u.ii for _, _, u, _ in self.units] + [1])
        # credits: the output FIFO holds everything accepted in the last `latency` cycles
        # (a credit comes back the cycle after its transfer) plus the vector being accepted
        self.credits = max(2, -(-self.latency // self.ii) + 1) if sched.credits else 0
        self.input_info = _packing(g, g.inputs[0], "i__payload")
        self.output_info = _packing(g, g.outputs[0], "o__payload")

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
            "pipeline": self.schedule, "adder_levels": self.adder_levels,
            **({"credits": self.credits} if self.credits else {}),
            **({"fit": self.fit} if self.fit is not None else {}),
            "ports": ["clk", "rst", "i__payload", "i__valid", "i__ready", "o__payload",
                      "o__valid", "o__ready"],
            "handshake": "valid/ready; a transfer happens on a rising clk edge with valid and "
                         "ready both high; o__valid does not depend on o__ready",
        }

    def component(self) -> ModelTop:
        return ModelTop(self)


class ModelTop(wiring.Component):
    """The model's component, built from its `VectorDesign`."""

    def __init__(self, design: VectorDesign):
        self.design = design
        self.graph, self.units, self.lean = design.graph, design.units, design.lean
        self.latency, self.ii, self.credits = design.latency, design.ii, design.credits
        self.output_info = design.output_info
        super().__init__({"i": In(stream.Signature(design.input_info["width"])),
                          "o": Out(stream.Signature(design.output_info["width"]))})

    def _valid(self, m: Module, en: Signal, accept: Signal) -> dict[int, Value]:
        """The input handshake delayed to every time a unit starts and to the output:
        {time: pulse}. A chain of registers; with the lean schedule a long stretch is a few
        down-counters instead (pulses are at least II enabled cycles apart, so at most
        ceil(D / II) are in flight over a delay of D)."""
        need = sorted({t0 for _, _, _, t0 in self.units} | {self.latency})
        valid: dict[int, Value] = {0: accept}
        last = 0
        for t in need:
            if t == last:
                continue
            d = t - last
            k = -(-d // self.ii) + 1
            if self.lean and k * (1 + d.bit_length()) * 2 < d:
                valid[t] = delay_pulse(m, en, valid[last], d, k, f"vd{t}")
            else:
                for u in range(last + 1, t + 1):
                    r = Signal(name=f"v{u}")
                    with m.If(en):
                        m.d.sync += r.eq(valid[u - 1])
                    valid[u] = r
            last = t
        return valid

    def elaborate(self, platform: object) -> Module:
        m = Module()
        # the clock enable and the input handshake: unnamed ("$signal") in the Verilog, as
        # they always were (generated files stay byte-identical)
        en, accept = Signal(name="$signal"), Signal(name="$signal")
        valid = self._valid(m, en, accept)
        if self.credits:
            m.d.comb += en.eq(1)
            pipe_out, room = self._output_fifo(m, valid[self.latency], accept)
        else:
            pipe_out, full_next = self._output_buffer(m, en, valid[self.latency])
            room = en
        self._input_ready(m, room, en, accept, None if self.credits else ~full_next)
        self._connect_units(m, en, valid, pipe_out)
        return m

    def _output_buffer(self, m: Module, en: Signal, out_valid: Value) -> tuple[Signal, Value]:
        """The output skid buffer (2 entries, bypassed when empty): the clock enable depends
        on its fill level (a register) only, not combinationally on o.ready. Returns the
        signal the pipeline's output drives, and whether the buffer is full next cycle (the
        clock enable's next value is its negation)."""
        width = self.output_info["width"]
        count = Signal(range(3), name="obuf_n")
        head = Signal(width, name="obuf0", reset_less=True)
        tail = Signal(width, name="obuf1", reset_less=True)
        pipe_out = Signal(width, name="pipe_out")
        m.d.comb += [en.eq(count < 2), self.o.valid.eq((count != 0) | out_valid),
                     self.o.payload.eq(Mux(count != 0, head, pipe_out))]
        pop = self.o.valid & self.o.ready
        push = Signal(name="obuf_push")
        m.d.comb += push.eq(out_valid & en & ~((count == 0) & self.o.ready))
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
        return pipe_out, ((count == 1) & push | (count == 2)) & ~pop

    def _output_fifo(self, m: Module, out_valid: Value, accept: Value) -> tuple[Signal, Value]:
        """The credit scheme's output FIFO (bypassed while empty) and its counter of vectors
        in flight or waiting. Returns the signal the pipeline's output drives and that
        counter's next value (what lets an input in: _input_ready)."""
        width = self.output_info["width"]
        q = fifo.SyncFIFO(width=width, depth=self.credits)
        m.submodules.obuf = q
        pipe_out = Signal(width, name="pipe_out")
        m.d.comb += [self.o.valid.eq(q.r_rdy | out_valid),
                     self.o.payload.eq(Mux(q.r_rdy, q.r_data, pipe_out)),
                     q.r_en.eq(self.o.ready),
                     q.w_data.eq(pipe_out),
                     q.w_en.eq(out_valid & (q.r_rdy | ~self.o.ready))]
        used = Signal(range(self.credits + 1), name="obuf_used")
        used_next = Signal.like(used, name="obuf_used_next")
        m.d.comb += used_next.eq(used + accept - (self.o.valid & self.o.ready))
        m.d.sync += used.eq(used_next)
        return pipe_out, used_next

    def _input_ready(self, m: Module, room: Value, en: Value, accept: Signal,
                     en_next: Value | None = None) -> None:
        """i.ready = room (the clock enable), and for II > 1 only every II enabled cycles;
        accept = handshake. With credits (`room` is then the next count in use) i.ready is a
        register of its own, computed a cycle ahead from the counters' next values: the
        same signal, but the handshake is one LUT from flip-flops (an input port far from
        the counters otherwise set the clock). Without credits and II > 1 the same holds
        from `en_next`, the clock enable's next value: i.ready leaves a flip-flop, so the
        host's handshake logic and the pipeline's valid chain behind it have the cycle to
        themselves (the iCE40 digits MLP inside its UART wrapper)."""
        m.d.comb += accept.eq(self.i.valid & self.i.ready)
        cool_ok: Value = 1  # II > 1: a down-counter from the last accept (cool == 0)
        cool_ok_next: Value = 1
        if self.ii > 1:
            cool = Signal(range(self.ii))
            cool_next = Signal.like(cool, name="cool_next")
            m.d.comb += cool_next.eq(Mux(accept, self.ii - 1, Mux(cool != 0, cool - 1, 0)))
            with m.If(en):
                m.d.sync += cool.eq(cool_next)
            cool_ok, cool_ok_next = cool == 0, cool_next == 0
            if not self.credits:  # i.ready = en & (cool == 0), both a cycle ahead: cool == 0
                # a flip-flop of its own (its compare's LUT tree, then the host's enables of
                # a whole input register, once set the clock of the iCE40 digits MLP)
                assert en_next is not None
                zero = Signal(init=1, name="cool_zero")
                with m.If(en):
                    m.d.sync += zero.eq(cool_ok_next)
                ready = Signal(init=1, name="i_ready")
                m.d.sync += ready.eq(en_next & Mux(en, cool_ok_next, zero))
                m.d.comb += self.i.ready.eq(ready)
                return
        if self.credits:
            ready = Signal(init=1, name="i_ready")
            m.d.sync += ready.eq((room < self.credits) & cool_ok_next)
            m.d.comb += self.i.ready.eq(ready)
        else:
            m.d.comb += self.i.ready.eq(room & cool_ok)

    def _connect_units(self, m: Module, en: Signal, valid: dict[int, Value],
                       pipe_out: Signal) -> None:
        """Every unit fed with its operands at its start time (delayed copies of a tensor
        where it is read later than it is made), the output into the buffer."""
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
            m.submodules[inst] = circuit(unit)
            m.d.comb += [unit.en.eq(en), unit.start.eq(valid[t0])]
            for k, a in enumerate(self.graph.activations(node)):
                m.d.comb += getattr(unit, f"x{k}").eq(get(a, t0))
            at[node.outputs[0]] = {t0 + unit.latency: unit.y}
        out = self.graph.outputs[0]
        m.d.comb += pipe_out.eq(get(out, self.latency))


def delay_pulse(m: Module, en: Value, pulse: Value, d: int, slots: int, name: str) -> Value:
    """`pulse` delayed by d enabled cycles, for pulses at least ceil(d / (slots - 1))
    enabled cycles apart: `slots` down-counters taken in turn over d - 1 cycles, then a
    register, so that the pulse leaves from a flip-flop (chained delays and the units'
    start logic were one combinational path on an iCE40)."""
    d -= 1
    wp = Signal(range(slots), name=f"{name}_wp")
    act = [Signal(name=f"{name}_a{i}") for i in range(slots)]
    cnt = [Signal(range(d), name=f"{name}_c{i}", reset_less=True) for i in range(slots)]
    fire = Cat(*[a & (c == 0) for a, c in zip(act, cnt, strict=True)]).any()
    out = Signal(name=name)
    with m.If(en):
        m.d.sync += out.eq(fire)
        for i in range(slots):
            with m.If(act[i]):
                with m.If(cnt[i] == 0):
                    m.d.sync += act[i].eq(0)
                with m.Else():
                    m.d.sync += cnt[i].eq(cnt[i] - 1)
        with m.If(pulse):
            m.d.sync += wp.eq(Mux(wp == slots - 1, 0, wp + 1))
            with m.Switch(wp):
                for i in range(slots):
                    with m.Case(i):
                        m.d.sync += [act[i].eq(1), cnt[i].eq(d - 1)]
    return out


def plan_top(compiled: CompiledGraph, reuse: CircuitPlan | Reuse | str | None = None,
             adder_levels: int | None = None, pipeline: str | None = None) -> dict[str, Any]:
    """The model's schedule and sizes (latency, II, per-layer figures, port packing; for a
    plan of `--reuse auto`, its fit block under "fit"), computed from the plan without
    building any component: what the fit, the estimate, inspect and the tests read."""
    return _design(compiled, resolve_plan(compiled, reuse, pipeline, adder_levels)).info()


def _design(compiled: CompiledGraph, plan: CircuitPlan) -> Any:
    from ..streamed.kind import is_streamed

    if is_streamed(compiled.graph):  # the streamed lowering imported only for a streamed model
        from ..streamed.lower import StreamModel

        return StreamModel(compiled, plan)
    return VectorDesign(compiled, plan)


def build_top(compiled: CompiledGraph, reuse: CircuitPlan | Reuse | str | None = None,
              adder_levels: int | None = None, pipeline: str | None = None
              ) -> tuple[wiring.Component, dict[str, Any]]:
    """The model's top-level component and its schedule (as plan_top). `reuse`: a
    `CircuitPlan` (hdl/plan/circuit.py), or what resolve_plan takes (a reuse factor, a
    per-layer mapping, the flow's ReusePlan) with the register schedule's adder_levels /
    pipeline (None: the profile's default). Raises HdlError for anything that cannot be
    lowered. A model with spatial ops (Conv, pools, Resize) streams one pixel per handshake
    (hdl/streamed/); its info says "streamed": true and gives the frame of each port."""
    design = _design(compiled, resolve_plan(compiled, reuse, pipeline, adder_levels))
    return design.component(), design.info()
