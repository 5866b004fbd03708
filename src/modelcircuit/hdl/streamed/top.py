"""A streamed model as a whole: the design (units in topological order and their sources),
its compile-time schedule (II per pixel, latency per frame, every FIFO depth, from the same step
rules the units follow) and the top-level component that wires the units with those FIFOs.
The units themselves are in hdl/streamed/units.py."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..errors import HdlError
from ..units.base import circuit
from .units import Step, SUnit, Tok

TIMING_FRAMES = 3  # frames the event model runs (latency per frame, FIFO levels)
BUFFERED_MIN_DEPTH = 16  # FIFOs this deep: block RAM (SyncFIFOBuffered), else distributed

INPUT = -1  # the source index of the top-level input


@dataclass
class StreamDesign:
    """Units in topological order, each with its sources (INPUT or an earlier unit's index);
    the last unit's output is the model's output."""

    name: str
    input: Tok
    units: list[tuple[str, SUnit, list[int]]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, unit: SUnit, sources: Sequence[int]) -> int:
        for k, s in enumerate(sources):
            src = self.input if s == INPUT else self.units[s][1].out
            want = unit.ins[k]
            if (src.t, src.elements, src.per_frame) != (want.t, want.elements, want.per_frame):
                raise HdlError(f"stream unit {name}: input {k} expects {want}, its source "
                               f"gives {src}")
        self.units.append((name, unit, list(sources)))
        return len(self.units) - 1

    @property
    def output(self) -> Tok:
        return self.units[-1][1].out


@dataclass
class Timing:
    ii: int  # cycles per input pixel
    latency: list[int]  # per modelled frame
    fifo_depth: dict[tuple[int, int], int]  # (unit, input) -> depth; (-1, 0): output FIFO
    frame_cycles: int  # cycles between frame starts
    busiest: str
    buffered: set[tuple[int, int]] = field(default_factory=set)  # SyncFIFOBuffered FIFOs


def schedule(d: StreamDesign, frames: int | None = None) -> Timing:
    """The event model of the step rules (see the module docstring) with the input paced at
    the II; no FIFO limits (the depths come out of it). A FIFO of BUFFERED_MIN_DEPTH or more
    is `SyncFIFOBuffered` (block RAM, 2 cycles from push to read); the model is rerun until
    that choice is stable.

    Each depth is the least with which no unit ever waits for room (a unit's `en` is the
    AND of its output FIFOs' w_rdy, so a full FIFO would freeze it and the timing would no
    longer be the model's). On a skip connection that is the structural lag: tiny_unet's
    top Concat holds 34,949 tokens against 135 rows x 256 = 34,560 from the rows of halo
    of the long path alone (3x3 Convs, pools, resizes; tests/hdl/test_unet.py checks this
    on a generated U-Net). The FIFO in front of a Resize holds the end-of-frame flush of a
    deeper level (it emits 4 tokens per input token); a smaller one would need a schedule
    with back-pressure."""
    if not d.units:
        raise HdlError(f"graph {d.name!r}: nothing to stream")
    if frames is None:  # fewer frames for big ones: the model is Python, per step
        frames = TIMING_FRAMES if d.input.per_frame * len(d.units) <= 200_000 else 2
    buffered: set[tuple[int, int]] = set()
    steps = [list(u.steps()) for _, u, _ in d.units]
    while True:
        tm = _schedule(d, frames, buffered, steps)
        big = {k for k, v in tm.fifo_depth.items() if v >= BUFFERED_MIN_DEPTH and k[0] >= 0}
        if big <= buffered:
            tm.buffered = buffered
            return tm
        buffered |= big


def _schedule(d: StreamDesign, frames: int, buffered: set[tuple[int, int]],
              steps: list[list[Step]]) -> Timing:
    pin = d.input.per_frame
    busy = [(sum(st[2] for st in steps[i]), n) for i, (n, _, _) in enumerate(d.units)]
    top_busy, busiest = max(busy)
    ii = max(1, math.ceil(top_busy / pin))
    period = ii * pin
    if ii > 1 and ii * pin - top_busy > top_busy - pin:
        # burst: pixels back to back, then the rest of the frame period idle (a 512x512
        # frame padded by one pixel needs 0.8 % more cycles than it has pixels: pacing at
        # II 2 would halve the throughput; the FIFOs hold the lag instead)
        ii, period = 1, top_busy
    in_times = [f * period + k * ii for f in range(frames) for k in range(pin)]
    pushes: dict[int, list[int]] = {INPUT: in_times}
    pops: dict[tuple[int, int], list[int]] = {}
    for ui, (_, u, srcs) in enumerate(d.units):
        arr = [pushes[s] for s in srcs]
        lat = [2 if (ui, k) in buffered else 1 for k in range(len(srcs))]
        ptr = [0] * len(srcs)
        my_pops: list[list[int]] = [[] for _ in srcs]
        out: list[int] = []
        t = 0
        ul = u.lat
        nin = len(srcs)
        for _ in range(frames):
            for needs, emits, dur in steps[ui]:
                tf = t
                if nin == 1:
                    if needs[0]:
                        a0 = arr[0][ptr[0]] + lat[0]
                        if a0 > tf:
                            tf = a0
                        my_pops[0].append(tf)
                        ptr[0] += 1
                else:
                    for k, nd in enumerate(needs):
                        if nd:
                            tf = max(tf, arr[k][ptr[k]] + lat[k])
                    for k, nd in enumerate(needs):
                        if nd:
                            my_pops[k].append(tf)
                            ptr[k] += 1
                if emits:
                    out.append(tf + ul)
                t = tf + dur
        pushes[ui] = out
        for k in range(len(srcs)):
            pops[(ui, k)] = my_pops[k]
    last = len(d.units) - 1
    outs = [p + 1 for p in pushes[last]]  # the output FIFO, o.ready high
    pops[(-1, 0)] = outs
    q = d.output.per_frame
    latency = [outs[(f + 1) * q - 1] - in_times[f * pin] for f in range(frames)]
    depth: dict[tuple[int, int], int] = {}
    for (ui, k), pp in pops.items():
        src = d.units[ui][2][k] if ui >= 0 else last
        ps = pushes[src]
        lvl, j_pop = 0, 0
        for j, p in enumerate(ps):  # level at the start of cycle p+1
            while j_pop < len(pp) and pp[j_pop] <= p:
                j_pop += 1
            lvl = max(lvl, j + 1 - j_pop)
        # SyncFIFOBuffered: w_rdy from its inner FIFO of depth - 1
        depth[(ui, k)] = max(2, lvl + (2 if (ui, k) in buffered else 1))
    return Timing(ii, latency, depth, period, busiest)


class StreamTop(wiring.Component):
    """The streamed model: i (one input token per handshake), o (one output token per
    handshake); FIFOs between units sized by `schedule`; input paced at the II."""

    def __init__(self, design: StreamDesign, timing: Timing | None = None):
        self.design = design
        self.timing = timing or schedule(design)
        super().__init__({"i": In(stream.Signature(design.input.width)),
                          "o": Out(stream.Signature(design.output.width))})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        d, tm = self.design, self.timing
        consumers: dict[int, list[Any]] = {}
        for ui, (name, u, srcs) in enumerate(d.units):
            m.submodules[name] = circuit(u)
            for k, s in enumerate(srcs):
                width = d.input.width if s == INPUT else d.units[s][1].out.width
                fcls = SyncFIFOBuffered if (ui, k) in tm.buffered else SyncFIFO
                f = fcls(width=width, depth=tm.fifo_depth[(ui, k)])
                m.submodules[f"{name}_fifo{k}"] = f
                port = getattr(u, f"i{k}")
                m.d.comb += [port.payload.eq(f.r_data), port.valid.eq(f.r_rdy),
                             f.r_en.eq(port.ready)]
                consumers.setdefault(s, []).append(f)
        last = len(d.units) - 1
        of = SyncFIFO(width=d.output.width, depth=tm.fifo_depth[(-1, 0)])
        m.submodules.out_fifo = of
        consumers.setdefault(last, []).append(of)
        m.d.comb += [self.o.payload.eq(of.r_data), self.o.valid.eq(of.r_rdy),
                     of.r_en.eq(self.o.ready)]
        for ui, (_, u, _) in enumerate(d.units):
            fs = consumers.get(ui, [])
            m.d.comb += u.en.eq(Cat(*[f.w_rdy for f in fs]).all() if fs else 1)
            for f in fs:
                m.d.comb += [f.w_data.eq(u.y), f.w_en.eq(u.push)]
        ins = consumers[INPUT]
        room = Cat(*[f.w_rdy for f in ins]).all()
        accept = Signal(name="accept")
        pin, period = d.input.per_frame, tm.frame_cycles
        ok = room
        if tm.ii > 1:  # pixels at least II cycles apart
            cool = Signal(range(tm.ii), name="in_cool")
            ok = ok & (cool == 0)
            with m.If(accept):
                m.d.sync += cool.eq(tm.ii - 1)
            with m.Elif(cool != 0):
                m.d.sync += cool.eq(cool - 1)
        if period > tm.ii * pin:  # burst: frames start at least `period` cycles apart (a
            # slow source, a UART, never waits: its frames are longer than that anyway)
            k = Signal(range(max(2, pin)), name="in_pixel")
            wait = Signal(range(period), name="in_frame_wait")
            ok = ok & ((k != 0) | (wait == 0))
            with m.If(accept):
                m.d.sync += k.eq(Mux(k == pin - 1, 0, k + 1))
            with m.If(accept & (k == 0)):
                m.d.sync += wait.eq(period - 1)
            with m.Elif(wait != 0):
                m.d.sync += wait.eq(wait - 1)
        m.d.comb += self.i.ready.eq(ok)
        m.d.comb += accept.eq(self.i.valid & self.i.ready)
        for f in ins:
            m.d.comb += [f.w_data.eq(self.i.payload), f.w_en.eq(accept)]
        return m


def tok_packing(tok: Tok, port: str, shape: Sequence[int], tensor: str) -> dict[str, Any]:
    """The port description (as hdl/vector/top.py `_packing`) of one token, plus the frame."""
    t = tok.t
    return {"port": port, "tensor": tensor, "shape": [tok.elements], "elements": tok.elements,
            "element_width": t.width, "width": t.width * tok.elements, "type": str(t),
            "signed": t.signed, "frac_bits": t.frac,
            "frame": {"shape": [int(s) for s in shape], "tokens": tok.per_frame},
            "order": "one token per handshake, tokens in raster order (row-major over the "
                     "spatial axes); element k (channel k) in bits [k*W, (k+1)*W), element 0 "
                     "least significant; two's complement codes, value = code * 2**-frac_bits"}


def design_info(d: StreamDesign, tm: Timing, in_shape: Sequence[int],
                out_shape: Sequence[int], in_name: str, out_name: str) -> dict[str, Any]:
    layers = []
    for ui, (name, u, srcs) in enumerate(d.units):
        layers.append({"instance": name, "sources": srcs,
                       "fifo_depths": [tm.fifo_depth[(ui, k)] for k in range(len(srcs))],
                       "fifo_block_ram": [(ui, k) in tm.buffered for k in range(len(srcs))],
                       **d.meta.get(name, {}), **u.describe()})
    mult = sum(int(getattr(getattr(u, "inner", getattr(u, "unit", None)), "multipliers", 0))
               for _, u, _ in d.units)
    return {"graph": d.name, "streamed": True, "latency": tm.latency[0],
            "latency_frames": tm.latency, "ii": tm.ii, "frame_cycles": tm.frame_cycles,
            "busiest": tm.busiest, "multipliers": mult, "layers": layers,
            "input": tok_packing(d.input, "i__payload", in_shape, in_name),
            "output": tok_packing(d.output, "o__payload", out_shape, out_name),
            "output_fifo_depth": tm.fifo_depth[(-1, 0)],
            "ports": ["clk", "rst", "i__payload", "i__valid", "i__ready", "o__payload",
                      "o__valid", "o__ready"],
            "handshake": "valid/ready; a transfer happens on a rising clk edge with valid and "
                         "ready both high; o__valid does not depend on o__ready; one input "
                         f"token at most every {tm.ii} cycles (the II per pixel)"}


__all__ = ["BUFFERED_MIN_DEPTH", "INPUT", "StreamDesign", "StreamTop", "Timing", "design_info",
           "schedule", "tok_packing"]
