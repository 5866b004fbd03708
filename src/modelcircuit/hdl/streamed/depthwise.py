"""Depthwise convolution on a pixel stream: one MAC lane per output channel, no zero lanes.

A Conv with group = Cin (each group one input channel; Cout = m * Cin, m the channel
multiplier) is not a Dense over the whole window: output channel o reads only input channel
o // m. Two stream circuits:

- `DepthwiseDense`, the inner unit of a `WindowUnit` (hdl/streamed/units.py): the window
  vector (kh*kw*C codes, order (row, column, channel)) split per output channel into its
  kh*kw taps, one `Dense` (hdl/units/dense.py: the same exact products, sums, bias alignment
  and requantization as every Conv) of kh*kw inputs and one output per channel, all at one
  reuse R <= kh*kw (II R: ceil(kh*kw / R) multipliers per channel). Channels whose Dense is
  shallower (zero weights at R = 1) are delayed to the deepest one's latency.
- `GlobalDepthwise`, a window over the whole frame without padding (one output pixel: an
  average pool that an exporter wrote as a depthwise Conv, or a global depthwise layer):
  no line buffers and no window register. Each pixel's C codes are multiplied with that
  pixel's weights (a ROM word per pixel, or constants when a channel's weights do not vary
  over the frame, as an average's) and added to Cout exact accumulators (from the bias,
  modulo 2**(acc width + 1) as Dense); after the last pixel, one requantization (+ ReLU).
  One cycle per pixel; fire at t: pixel and ROM word registered (t+1), products registered
  (t+2), accumulated (t+3), outputs registered, pushed at t+4: lat = 4.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, Value, signed
from amaranth.lib.memory import Memory

from ...graphs.types import FixedType
from ..errors import HdlError
from ..plan.schedule import Schedule
from ..units.arith import const_mul, fit, overflow, relu, shape_of, shift_round
from ..units.base import Unit, circuit
from ..units.dense import Dense
from .units import Geometry, Step, SUnit, Tok


def is_depthwise(w4: np.ndarray, group: int, cin: int) -> bool:
    """A Conv (kh, kw, Cin/group, Cout) with one input channel per group (group = Cin > 1)."""
    return int(group) > 1 and int(group) == int(cin) and w4.shape[2] == 1 \
        and w4.shape[3] % int(group) == 0


def is_global(geo: Geometry) -> bool:
    """A window over the whole unpadded frame: one output pixel."""
    return (geo.kh, geo.kw) == (geo.h, geo.w) and geo.pads == (0, 0, 0, 0)


class DepthwiseDense(Unit):
    """Per output channel a Dense over its kh*kw taps (see the module docstring)."""

    def __init__(self, tx: FixedType, cin: int, w4: np.ndarray, tw: FixedType,
                 b: np.ndarray | None, tb: FixedType | None, tout: FixedType, acc: FixedType,
                 relu_: bool, reuse: int = 1, adder_levels: int = 4,
                 schedule: Schedule | None = None, strategy: str = "mult"):
        w4 = np.asarray(w4, dtype=np.int64)
        kh, kw, _, cout = w4.shape
        if cout % cin:
            raise HdlError(f"depthwise: {cout} output channels are not a multiple of "
                           f"{cin} input channels")
        self.kk, self.c, self.cout, self.mult = kh * kw, int(cin), int(cout), cout // cin
        super().__init__([(tx, self.kk * self.c)], (tout, self.cout))
        self.tx = tx
        self.reuse = max(1, min(int(reuse), self.kk))
        self.chans: list[Dense] = []
        bb = None if b is None else np.asarray(b).reshape(-1)
        for o in range(self.cout):
            wk = w4[:, :, 0, o].reshape(self.kk, 1)
            self.chans.append(Dense(tx, wk, tw, None if bb is None else bb[o:o + 1], tb,
                                    tout, acc, relu_, self.reuse, adder_levels, schedule,
                                    strategy))
        self.latency = max(d.latency for d in self.chans)
        self.ii = max(d.ii for d in self.chans)
        self.multipliers = sum(d.multipliers for d in self.chans)
        self.shifts = sum(d.shifts for d in self.chans)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "kind": "depthwise", "lanes": self.cout,
                "taps": self.kk}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        t = self.tx
        x = self.x0
        for o, d in enumerate(self.chans):
            m.submodules[f"ch{o}"] = circuit(d)
            ci = o // self.mult
            taps = [x[(k * self.c + ci) * t.width:(k * self.c + ci + 1) * t.width]
                    for k in range(self.kk)]
            m.d.comb += [d.en.eq(self.en), d.start.eq(self.start), d.x0.eq(Cat(*taps))]
        ys = []
        for o, d in enumerate(self.chans):
            v: Value = d.y
            for i in range(self.latency - d.latency):  # align to the deepest channel
                r = Signal(len(d.y), name=f"al{o}_{i}", reset_less=True)
                with m.If(self.en):
                    m.d.sync += r.eq(v)
                v = r
            ys.append(v)
        m.d.comb += self.y.eq(Cat(*ys))
        return m


class GlobalDepthwise(SUnit):
    """A depthwise Conv over the whole frame, accumulated pixel by pixel (module docstring)."""

    lat = 4

    def __init__(self, tin: Tok, w4: np.ndarray, tw: FixedType, b: np.ndarray | None,
                 tb: FixedType | None, tout: FixedType, acc: FixedType, relu_: bool):
        w4 = np.asarray(w4, dtype=np.int64)
        kh, kw, _, cout = w4.shape
        if kh * kw != tin.per_frame or cout % tin.elements:
            raise HdlError(f"global depthwise: weights {list(w4.shape)} do not match a frame "
                           f"of {tin.per_frame} pixels x {tin.elements} channels")
        super().__init__([tin], Tok(tout, int(cout), 1))
        self.pixels, self.c, self.cout = tin.per_frame, tin.elements, int(cout)
        self.mult = self.cout // self.c
        self.w = w4.reshape(kh * kw, cout)  # (pixel, output channel), raster order
        self.tx, self.tout, self.relu_ = tin.t, tout, bool(relu_)
        frac = tin.t.frac + tw.frac
        self.frac = max(frac, tb.frac) if b is not None and tb is not None else frac
        self.p_shift = self.frac - frac
        self.bias = ([0] * self.cout if b is None or tb is None else
                     [int(v) << (self.frac - tb.frac) for v in np.asarray(b).reshape(-1)])
        self.mod = acc.width + 1
        self.cw = max(int(np.abs(self.w).max()).bit_length() + 1 if self.w.size else 1, 2)
        # channels whose weight varies over the frame read it from the ROM
        self.varying = [o for o in range(self.cout) if np.any(self.w[:, o] != self.w[0, o])]
        self.multipliers = sum(1 for o in range(self.cout)
                               if o in self.varying or const_kind(int(self.w[0, o])) == "mul")

    def steps(self) -> Iterator[Step]:
        for p in range(self.pixels):
            yield (True,), p == self.pixels - 1, 1

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "latency": self.lat, "kind": "global depthwise",
                "multipliers": self.multipliers,
                "rom": {"depth": self.pixels if self.varying else 0,
                        "width": self.cw * len(self.varying)}}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        en, tx, C, P = self.en, self.tx, self.c, self.pixels
        fire = self._issue(m, [1], 0)
        px = [Signal(shape_of(tx), name=f"px{i}", reset_less=True) for i in range(C)]
        cnt = Signal(range(max(2, P)), name="cnt")
        act_b, first_b, last_b = (Signal(name=n) for n in ("act_b", "first_b", "last_b"))
        with m.If(en):
            m.d.sync += [act_b.eq(fire), first_b.eq(cnt == 0), last_b.eq(cnt == P - 1)]
            with m.If(fire):
                m.d.sync += [px[i].eq(fit(self.i0.payload[i * tx.width:(i + 1) * tx.width],
                                          tx.width, tx.signed)) for i in range(C)]
                m.d.sync += cnt.eq(Mux(cnt == P - 1, 0, cnt + 1))
        coef: dict[int, Value] = {}
        if self.varying:
            mask = (1 << self.cw) - 1
            words = [sum((int(self.w[p, o]) & mask) << (k * self.cw)
                         for k, o in enumerate(self.varying)) for p in range(P)]
            rom = Memory(shape=self.cw * len(self.varying), depth=P, init=words,
                         attrs={"ram_style": "block"})
            m.submodules.rom = rom
            rp = rom.read_port(domain="sync")
            m.d.comb += [rp.addr.eq(cnt), rp.en.eq(en)]
            for k, o in enumerate(self.varying):
                coef[o] = rp.data[k * self.cw:(k + 1) * self.cw].as_signed()
        prods = []
        for o in range(self.cout):
            x = px[o // self.mult]
            if o in coef:
                p_: Value | None = x * coef[o]
            else:
                p_ = const_mul(x, int(self.w[0, o]))[0]
            prods.append(fit(p_ << self.p_shift, self.mod, True) if p_ is not None
                         else fit(Value.cast(0), self.mod, True))
        act_c, first_c, last_c = (Signal(name=n) for n in ("act_c", "first_c", "last_c"))
        prod_c = [Signal(signed(self.mod), name=f"pr{o}", reset_less=True)
                  for o in range(self.cout)]
        with m.If(en):
            m.d.sync += [act_c.eq(act_b), first_c.eq(first_b), last_c.eq(last_b & act_b)]
            m.d.sync += [prod_c[o].eq(prods[o]) for o in range(self.cout)]
        accs = [Signal(signed(self.mod), name=f"acc{o}", reset_less=True)
                for o in range(self.cout)]
        with m.If(en & act_c):
            m.d.sync += [accs[o].eq(fit(Mux(first_c, self.bias[o], accs[o]) + prod_c[o],
                                        self.mod, True)) for o in range(self.cout)]
        done = Signal(name="done")
        with m.If(en):
            m.d.sync += done.eq(act_c & last_c)
        t = self.tout

        def finish(v: Value) -> Value:
            q = overflow(shift_round(v, self.frac - t.frac, t.rounding), t)
            return relu(q) if self.relu_ else q

        y = [Signal(shape_of(t), name=f"y{o}", reset_less=True) for o in range(self.cout)]
        with m.If(en & done):
            m.d.sync += [y[o].eq(fit(finish(accs[o]), t.width, t.signed))
                         for o in range(self.cout)]
        pushr = Signal(name="pushr")
        with m.If(en):
            m.d.sync += pushr.eq(done)
        m.d.comb += [self.y.eq(Cat(*y)), self.push.eq(en & pushr)]
        return m


def const_kind(c: int) -> str:
    """zero | shift | mul: what a product by the constant c is (arith.const_mul)."""
    a = abs(int(c))
    return "zero" if a == 0 else "shift" if a & (a - 1) == 0 else "mul"


__all__ = ["DepthwiseDense", "GlobalDepthwise", "is_depthwise", "is_global"]


def depthwise_unit(geo: Geometry, tok: Tok, w4: np.ndarray, tw: FixedType,
                   b: np.ndarray | None, tb: FixedType | None, tout: FixedType,
                   acc: FixedType, relu_: bool, reuse: int, adder_levels: int,
                   schedule: Schedule | None, strategy: str) -> SUnit:
    """The stream unit of a depthwise Conv (is_depthwise) over `geo`: GlobalDepthwise for a
    window over the whole frame, else a WindowUnit over a DepthwiseDense."""
    from .units import WindowUnit

    if is_global(geo):
        return GlobalDepthwise(tok, w4, tw, b, tb, tout, acc, relu_)
    inner = DepthwiseDense(tok.t, geo.c, w4, tw, b, tb, tout, acc, relu_, reuse,
                           adder_levels, schedule, strategy)
    return WindowUnit(geo, tok.t, inner, tout, inner.cout, 0)


__all__ += ["depthwise_unit"]
