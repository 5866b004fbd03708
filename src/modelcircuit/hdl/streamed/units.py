"""Streaming circuits for convolutional networks: one pixel (all channels) per handshake.

A streamed model is a chain (a DAG: forks and joins) of *stream units*. Each unit reads
tokens from its input FIFOs, runs a static pipeline (clock enable `en`, like every `Unit` of
component.py) and pushes tokens into its output FIFO(s). A token is a pixel (C codes of one
spatial position, raster order) or, after a Flatten, a whole vector (the existing
whole-vector units run per frame).

Units (all with a static latency `lat` from a fire to its push):
- `MapUnit`: any whole-token `Unit` (elementwise ops per pixel, Dense on a collected vector,
  channel concat of two streams, Add of two streams).
- `WindowUnit` (hdl/streamed/window.py): padding, line buffers in block RAM (`amaranth.lib.memory.Memory`, one per
  kernel row above the current one), a kh x kw window register, then an inner unit on the
  window vector: a `Dense` over kh*kw*Cin inputs for Conv (hdl/units/dense.py, with its reuse
  factor: parallel over output channels, folded over inputs), `WindowMax` for MaxPool,
  `WindowAvg` for AvgPool. 1-D is the 2-D case with H = 1.
- `ResizeUnit`: nearest upsampling by integer factors, one row buffer.
- `CollectUnit`: a frame of pixels into one vector (Flatten into a Dense).
- `FlatDense` and the Conv weight layout (hdl/streamed/dense.py): the Dense parts of a
  streamed model.

Flow control: a unit steps through a fixed per-frame list of steps (`steps()`: which inputs
the step consumes, whether it emits a token, how many cycles it occupies). A step fires when
the unit is enabled, its cool-down is over and every input it needs is valid. `en` is the AND
of the `w_rdy` of the unit's output FIFOs (registered levels: no combinational path from a
consumer back into a producer), so a full FIFO freezes the producer's whole pipeline and
nothing is lost. The top level accepts one input pixel every `P` cycles (the II per pixel), or, where that
would waste more cycles than it saves, pixels back to back with frames starting at least
`frame_cycles` apart ("burst": II 1 per pixel; a source slower than that never waits).

Compile time (`schedule`, hdl/streamed/top.py with the design and the top level): the same
step rules run as an event model with the input paced at
P; it gives every unit's fire/push cycles, hence the latency of each frame (first input
handshake to last output handshake, output always ready) and each FIFO's depth (its highest
level + 1, at least 2), so in a run without stalls no FIFO ever fills (the timing equals the
model exactly) and a fork/join (a skip connection) cannot deadlock: the FIFO on the short
path holds every token the long path is still working on. P = ceil(the busiest unit's
cycles per frame / input pixels per frame), so the levels do not grow from frame to frame.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...graphs.types import FixedType
from ..errors import HdlError
from ..units.base import Planned, Unit, circuit


def delay_valid(m: Module, en: Value, v: Value, n: int, name: str,
                gap: int = 1) -> Value:
    """v delayed by n enabled cycles (reset registers: a valid bit). Where its pulses come
    at least `gap` enabled cycles apart (a unit's II), at most ceil(n / gap) are in
    flight: as many down-counters, loaded in turn, replace the n registers when they are
    fewer flip-flops (issue 29: the folded convolutions of an 8-bit ResNet-8 spent 12.5k
    of their 86.7k flip-flops on chains as long as their latency, up to 4,040, and the
    longest made yosys's recursive cell sort exhaust its stack)."""
    k = -(-n // max(1, gap))
    if n > 4 and k * (n + 1).bit_length() + (k - 1).bit_length() < n:
        cnt = [Signal(range(n + 1), name=f"{name}c{j}") for j in range(k)]
        turn = Signal(range(max(2, k)), name=f"{name}_turn")
        with m.If(en):
            for j, c in enumerate(cnt):
                with m.If(v & (turn == j)):
                    m.d.sync += c.eq(n)
                with m.Elif(c != 0):
                    m.d.sync += c.eq(c - 1)
            if k > 1:
                with m.If(v):
                    m.d.sync += turn.eq(Mux(turn == k - 1, 0, turn + 1))
        return Cat(*(c == 1 for c in cnt)).any()
    for i in range(n):
        r = Signal(name=f"{name}{i}")
        with m.If(en):
            m.d.sync += r.eq(v)
        v = r
    return v


@dataclass(frozen=True)
class Tok:
    """A stream's token: `elements` codes of type `t`; `per_frame` tokens make a frame."""

    t: FixedType
    elements: int
    per_frame: int

    @property
    def width(self) -> int:
        return max(1, self.t.width * self.elements)


Step = tuple[tuple[bool, ...], bool, int]  # (consumes input k?, emits?, cycles)


class SUnit(Planned):
    """Base of the stream units (a plan, as hdl/units/base.py `Unit`; its component is
    `circuit(unit)`). Ports: en In(1); i<k> In(stream.Signature) per input (payload/valid
    from the FIFO, ready = consume); y Out(width), push Out(1) (qualified by en; the top
    guarantees room)."""

    lat: int = 1

    def __init__(self, ins: Sequence[Tok], out: Tok):
        self.ins, self.out = list(ins), out

    def members(self) -> dict[str, Any]:
        sig: dict[str, Any] = {"en": In(1)}
        for k, t in enumerate(self.ins):
            sig[f"i{k}"] = In(stream.Signature(t.width))
        sig["y"] = Out(self.out.width)
        sig["push"] = Out(1)
        return sig

    def steps(self) -> Iterator[Step]:  # one frame
        raise NotImplementedError

    @property
    def max_dur(self) -> int:
        return 1

    def busy(self) -> int:
        """Cycles one frame occupies the unit at full speed."""
        return sum(s[2] for s in self.steps())

    def describe(self) -> dict[str, Any]:
        return {"latency": self.lat, "cycles_per_frame": self.busy(),
                "tokens_in": [t.per_frame for t in self.ins], "tokens_out": self.out.per_frame}

    # -- helpers ---------------------------------------------------------------------------
    def _port(self, k: int) -> Any:
        return getattr(self, f"i{k}")

    def _issue(self, m: Module, needs: Sequence[Value | int], dur_m1: Value | int) -> Signal:
        """fire = en, cool-down over, every needed input valid; ready = consume on fire.
        After a fire the unit waits `dur_m1` enabled cycles."""
        cool = Signal(range(self.max_dur), name="cool") if self.max_dur > 1 else None
        free = (cool == 0) if cool is not None else Const(1)
        needs = [Value.cast(n) for n in needs]
        avail = [~n | self._port(k).valid for k, n in enumerate(needs)]
        fire = Signal(name="fire")
        m.d.comb += fire.eq(self.en & free & Cat(*avail).all())
        for k, n in enumerate(needs):
            others = Cat(*[a for j, a in enumerate(avail) if j != k])
            ok = others.all() if len(others) else Const(1)
            m.d.comb += self._port(k).ready.eq(self.en & free & n & ok)
        if cool is not None:
            with m.If(self.en):
                with m.If(fire):
                    m.d.sync += cool.eq(dur_m1)
                with m.Elif(cool != 0):
                    m.d.sync += cool.eq(cool - 1)
        return fire

    def _delay(self, m: Module, v: Value, n: int, name: str, gap: int = 1) -> Value:
        """v delayed by n enabled cycles (`delay_valid` with the unit's en)."""
        return delay_valid(m, self.en, v, n, name, gap)


class MapUnit(SUnit):
    """A whole-token `Unit` (component.py) per token: one token from every input -> one
    token. II = the unit's II (a folded Dense), latency = the unit's."""

    def __init__(self, unit: Unit, ins: Sequence[Tok], out: Tok):
        super().__init__(ins, out)
        self.unit = unit
        self.lat = unit.latency

    @property
    def max_dur(self) -> int:
        return max(1, self.unit.ii)

    def steps(self) -> Iterator[Step]:
        need = (True,) * len(self.ins)
        for _ in range(self.ins[0].per_frame):
            yield need, True, max(1, self.unit.ii)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self.unit.describe(), "latency": self.lat}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.unit = circuit(self.unit)
        u = self.unit
        fire = self._issue(m, [1] * len(self.ins), max(1, u.ii) - 1)
        m.d.comb += [u.en.eq(self.en), u.start.eq(fire)]
        for k in range(len(self.ins)):
            m.d.comb += getattr(u, f"x{k}").eq(self._port(k).payload)
        m.d.comb += [self.y.eq(u.y), self.push.eq(self.en & self._delay(m, fire, self.lat, "v",
                                                                  max(1, u.ii)))]
        return m


class ChainUnit(Unit):
    """Two whole-token units back to back: `b` starts on `a`'s result (`a.latency` enabled
    cycles after `a` starts) and reads `a.y`. A window unit's inner unit: a Conv and the
    quantizer that alone reads it (lower_ops.py `lower_threshold`), without the FIFO and the
    stream unit between them (an 8-bit DS-CNN: 2-deep FIFOs of 1,216-1,344-bit accumulator
    tokens after each of its 9 convolutions, in LUT RAM). II: the slower of the two (b keeps its
    own copy of its input where it folds: a's output changes no sooner than II later);
    latency: the sum."""

    def __init__(self, a: Unit, b: Unit):
        if (a.out_spec[0].width, a.out_spec[1]) != (b.in_specs[0][0].width,
                                                    b.in_specs[0][1]):
            raise HdlError(f"chain: {a.out_spec} does not feed {b.in_specs[0]}")
        super().__init__(a.in_specs, b.out_spec)
        self.a, self.b = a, b
        self.latency = a.latency + b.latency
        self.ii = max(a.ii, b.ii)
        self.reuse = a.reuse
        self.multipliers = a.multipliers + b.multipliers
        self.shifts = a.shifts + b.shifts
        self.b_in_place = self._a_holds_for_b()
        if self.b_in_place:
            b.read_in_place()

    def _a_holds_for_b(self) -> bool:
        """Whether every output b reads stays in a's registers until b's step reads it, so b
        needs no copy (an 8-bit DS-CNN: 1,216-1,344 flip-flops per quantizer). a a folded
        Dense (hdl/units/dense_fold.py): output group g's registers take a run's results
        (R_out - 1 - g) * R_in cycles before its latency, the next run's no sooner than II
        later; b reads channel c read_cycle(c) cycles after it starts at a's latency."""
        a, b = self.a, self.b
        f = getattr(a, "fold", None)
        cycle = getattr(b, "read_cycle", None)
        if f is None or cycle is None or not hasattr(b, "read_in_place"):
            return False
        n = b.in_specs[0][1]
        return all(cycle(c) + (f.r_out - 1 - c // f.m) * f.r_in < self.ii for c in range(n))

    def hold_input(self) -> None:
        hold = getattr(self.a, "hold_input", None)
        if hold is not None:
            hold()

    def read_window(self, channels: int) -> Any:
        """a's window reader (Dense.read_window), if any."""
        rw = getattr(self.a, "read_window", None)
        return rw(channels) if rw is not None else None

    def describe(self) -> dict[str, object]:
        return {**self.a.describe(), "latency": self.latency, "ii": self.ii,
                "multipliers": self.multipliers, "shifts": self.shifts,
                "then": {**self.b.describe(), "reads_in_place": self.b_in_place}}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        a, b = self.a, self.b
        m.submodules.a, m.submodules.b = circuit(a), circuit(b)
        m.d.comb += [a.en.eq(self.en), b.en.eq(self.en), a.start.eq(self.start),
                     a.x0.eq(self.x0), b.x0.eq(a.y),
                     b.start.eq(delay_valid(m, self.en, self.start, a.latency, "bs",
                                            max(1, self.ii))),
                     self.y.eq(b.y)]
        return m


# -- memories ------------------------------------------------------------------------------
def ram_style(depth: int, lutram_depth: int) -> str:
    """A line or row buffer's memory: LUT RAM when shallower than the family's
    `lutram_depth` (hdl/plan/schedule.Schedule.lutram_depth; 0: none), else block RAM."""
    return "distributed" if depth < lutram_depth else "block"


class ConcatWire(Unit):
    """Channel concat of several tokens of the same type: wiring, latency 0."""

    def __init__(self, t: FixedType, counts: Sequence[int]):
        super().__init__([(t, n) for n in counts], (t, sum(counts)))
        self.latency = 0

    def elaborate(self, platform: object) -> Module:
        m = Module()
        vals = [v for k in range(len(self.in_specs)) for v in self.inputs(k)]
        self.drive_y(m, vals)
        return m


class ResizeUnit(SUnit):
    """Nearest upsampling by (sh, sw) of an (H, W, C) frame: every input pixel is emitted
    sw times in a row; a row buffer (block RAM) replays each input row sh - 1 more times.
    Latency 1."""

    def __init__(self, t: FixedType, h: int, w: int, c: int, sh: int, sw: int,
                 lutram_depth: int = 0):
        super().__init__([Tok(t, c, h * w)], Tok(t, c, h * w * sh * sw))
        self.h, self.w, self.c, self.sh, self.sw = h, w, c, sh, sw
        self.ram_style = ram_style(w, lutram_depth)
        self.lat = 1

    def steps(self) -> Iterator[Step]:
        for _ in range(self.h):
            for rep in range(self.sh):
                for _c in range(self.w):
                    for k in range(self.sw):
                        yield (rep == 0 and k == 0,), True, 1

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "scales": [self.sh, self.sw],
                "row_buffer": {"depth": self.w, "width": self.ins[0].width,
                               "style": self.ram_style}}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        en, port = self.en, self.i0
        r = Signal(range(max(2, self.h)), name="r")
        rep = Signal(range(max(2, self.sh)), name="rep")
        c = Signal(range(max(2, self.w)), name="c")
        k = Signal(range(max(2, self.sw)), name="k")
        need = Signal(name="need")
        m.d.comb += need.eq((rep == 0) & (k == 0))
        fire = self._issue(m, [need], 0)
        with m.If(fire):
            with m.If(k == self.sw - 1):
                m.d.sync += k.eq(0)
                with m.If(c == self.w - 1):
                    m.d.sync += c.eq(0)
                    with m.If(rep == self.sh - 1):
                        m.d.sync += [rep.eq(0), r.eq(Mux(r == self.h - 1, 0, r + 1))]
                    with m.Else():
                        m.d.sync += rep.eq(rep + 1)
                with m.Else():
                    m.d.sync += c.eq(c + 1)
            with m.Else():
                m.d.sync += k.eq(k + 1)
        width = self.ins[0].width
        hold = Signal(width, name="hold", reset_less=True)
        with m.If(fire & need):
            m.d.sync += hold.eq(port.payload)
        if self.sh > 1:
            mem = Memory(shape=width, depth=self.w, init=[],
                         attrs={"ram_style": self.ram_style})
            m.submodules.row = mem
            wp, rp = mem.write_port(), mem.read_port(domain="sync")
            m.d.comb += [wp.addr.eq(c), wp.data.eq(port.payload), wp.en.eq(fire & need),
                         rp.addr.eq(c), rp.en.eq(en)]
            first = Signal(name="first_row", reset_less=True)
            with m.If(en):
                m.d.sync += first.eq(rep == 0)
            m.d.comb += self.y.eq(Mux(first, hold, rp.data))
        else:
            m.d.comb += self.y.eq(hold)
        m.d.comb += self.push.eq(en & self._delay(m, fire, 1, "v"))
        return m


class CollectUnit(SUnit):
    """A frame of `pixels` tokens into one vector (pixel-major, channel-minor: the C order
    of (H, W, C)); latency 1."""

    def __init__(self, tin: Tok):
        super().__init__([tin], Tok(tin.t, tin.elements * tin.per_frame, 1))
        self.pixels = tin.per_frame
        self.lat = 1

    def steps(self) -> Iterator[Step]:
        for i in range(self.pixels):
            yield (True,), i == self.pixels - 1, 1

    def elaborate(self, platform: object) -> Module:
        m = Module()
        n, width = self.pixels, self.ins[0].width
        cnt = Signal(range(max(2, n)), name="cnt")
        fire = self._issue(m, [1], 0)
        sr = [Signal(width, name=f"p{i}", reset_less=True) for i in range(n)]
        done = Signal(name="done")
        with m.If(fire):
            m.d.sync += [sr[i].eq(sr[i + 1]) for i in range(n - 1)]
            m.d.sync += [sr[n - 1].eq(self.i0.payload), cnt.eq(Mux(cnt == n - 1, 0, cnt + 1))]
        with m.If(self.en):
            m.d.sync += done.eq(fire & (cnt == n - 1))
        m.d.comb += [self.y.eq(Cat(*sr)), self.push.eq(self.en & done)]
        return m


__all__ = ["ChainUnit", "CollectUnit", "ConcatWire", "MapUnit", "ResizeUnit", "SUnit", "Step",
           "Tok", "delay_valid", "ram_style"]
