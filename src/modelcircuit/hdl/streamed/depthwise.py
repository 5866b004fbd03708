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
- `DepthwiseFold`, its inner unit from R >= 2*kh*kw on: the channels folded too. L lanes,
  each walking G = ceil(Cout / L) channels' taps one per cycle (G = R // (kh*kw) at most,
  steps S = G*kh*kw <= R): one multiplier, one coefficient ROM of S words and one
  accumulator per lane, where DepthwiseDense needs a multiplier per channel (DS-CNN's 64
  channels at the 289 cycles a window its pointwise layers leave: 2 lanes instead of 64).
  The window vector is not copied: the WindowUnit holds its window register for the inner
  unit's II after start (the next window needs the next pixel, accepted II cycles later),
  so a lane's step s selects its code from it (stage A, an S:1 multiplexer: about half the
  logic of a shift register and no flip-flops) while its ROM word is read, registers the
  product (B), accumulates from the channel's bias at its first tap (C), and after its last
  tap requantizes into that channel's output register (D). Step 0 is the start cycle:
  latency S + 3, II R. Where the window has more than one tap, the WindowUnit keeps it in a
  memory instead (read_window): step s asks for tap k's pixel, which arrives the next
  cycle, and each lane selects its channel from it (G:1), with no window register (DS-CNN:
  33k flip-flops of windows and line-buffer reads -> 14k, 9 of 12k LUT4 of selection gone).
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
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib.memory import Memory

from ...graphs.types import FixedType
from ..errors import HdlError
from ..plan.schedule import Schedule
from ..units.arith import const_mul, fit, overflow_relu, shape_of, shift_round
from ..units.base import Unit, circuit
from ..units.dense import Dense
from ..units.rom_text import rom
from .units import Step, SUnit, Tok
from .window import Geometry


def is_depthwise(w4: np.ndarray, group: int, cin: int) -> bool:
    """A Conv (kh, kw, Cin/group, Cout) with one input channel per group (group = Cin > 1)."""
    return int(group) > 1 and int(group) == int(cin) and w4.shape[2] == 1 \
        and w4.shape[3] % int(group) == 0


def is_folded(reuse: int, kk: int, cout: int) -> bool:
    """Whether a depthwise window at this reuse folds its channels (DepthwiseFold)."""
    return int(reuse) >= 2 * int(kk) and int(cout) > 1


def is_global(geo: Geometry) -> bool:
    """A window over the whole unpadded frame: one output pixel."""
    return (geo.kh, geo.kw) == (geo.h, geo.w) and geo.pads == (0, 0, 0, 0)


def _depthwise_shape(u: Unit, tx: FixedType, cin: int, w4: np.ndarray, tout: FixedType
                     ) -> np.ndarray:
    """The (kh, kw, 1, cout) weights as int64; sets kk, c, cout, mult and the unit's ports
    (kk*c window codes in, cout out) of a depthwise unit."""
    w4 = np.asarray(w4, dtype=np.int64)
    kh, kw, _, cout = w4.shape
    if cout % cin:
        raise HdlError(f"depthwise: {cout} output channels are not a multiple of "
                       f"{cin} input channels")
    u.kk, u.c, u.cout, u.mult = kh * kw, int(cin), int(cout), cout // cin
    Unit.__init__(u, [(tx, u.kk * u.c)], (tout, u.cout))
    return w4


class DepthwiseDense(Unit):
    """Per output channel a Dense over its kh*kw taps (see the module docstring)."""

    def __init__(self, tx: FixedType, cin: int, w4: np.ndarray, tw: FixedType,
                 b: np.ndarray | None, tb: FixedType | None, tout: FixedType, acc: FixedType,
                 relu_: bool, reuse: int = 1, adder_levels: int = 4,
                 schedule: Schedule | None = None, strategy: str = "mult"):
        w4 = _depthwise_shape(self, tx, cin, w4, tout)
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

    def hold_input(self) -> None:
        """x0 held for ii cycles (hdl/units/dense.Dense.hold_input): so for each channel."""
        for d in self.chans:
            d.hold_input()

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


def _alignment(tx: FixedType, tw: FixedType, b: np.ndarray | None, tb: FixedType | None,
               acc: FixedType, cout: int) -> tuple[int, int, list[int], int]:
    """(sum's fractional bits, the products' shift to them, the biases at them, the
    accumulator's modulus bits): the exact sum of hdl/units/dense.py (its docstring)."""
    frac = tx.frac + tw.frac
    fr = max(frac, tb.frac) if b is not None and tb is not None else frac
    bias = ([0] * cout if b is None or tb is None else
            [int(v) << (fr - tb.frac) for v in np.asarray(b).reshape(-1)])
    return fr, fr - frac, bias, acc.width + 1


def _finish(v: Value, frac: int, t: FixedType, relu_: bool) -> Value:
    """The one requantization of an exact sum at `frac` fractional bits (+ ReLU)."""
    return overflow_relu(shift_round(v, frac - t.frac, t.rounding), t, relu_)


class DepthwiseFold(Unit):
    """A depthwise window folded over its channels too (see the module docstring)."""

    def __init__(self, tx: FixedType, cin: int, w4: np.ndarray, tw: FixedType,
                 b: np.ndarray | None, tb: FixedType | None, tout: FixedType, acc: FixedType,
                 relu_: bool, reuse: int):
        w4 = _depthwise_shape(self, tx, cin, w4, tout)
        self.tx, self.tout, self.relu_ = tx, tout, bool(relu_)
        g = max(1, min(self.cout, int(reuse) // self.kk))
        self.lanes = -(-self.cout // g)
        self.group = -(-self.cout // self.lanes)  # balanced: the same lanes, fewer steps
        self.steps_ = self.group * self.kk
        self.reuse = self.ii = max(int(reuse), self.steps_)
        self.latency = self.steps_ + 3
        self.w = w4.reshape(self.kk, self.cout)  # (tap, output channel)
        self.frac, self.p_shift, self.bias, self.mod = _alignment(tx, tw, b, tb, acc,
                                                                  self.cout)
        self.cw = max(int(np.abs(self.w).max()).bit_length() + 1 if self.w.size else 1, 2)
        self.multipliers = sum(1 for ln in range(self.lanes)
                               if len(set(self._coefs(ln))) > 1
                               or const_kind(self._coefs(ln)[0]) == "mul")
        self.window_ports: tuple[Signal, list[Signal]] | None = None

    def read_window(self, channels: int) -> DepthwiseFold | None:
        """Asked by a window unit that can keep its window in a memory (hdl/streamed/units.py
        WindowUnit): the pixel of tap k arrives the cycle after the step asks for it, and
        each lane selects its channel from it (a G:1 selection) instead of its G*kk:1 one
        over the held window (DS-CNN's 3x3x64 windows: 4,608 flip-flops each)."""
        if channels != self.c:
            return None
        if self.window_ports is None:
            self.window_ports = (Signal(range(max(2, self.kk)), name="ktap"),
                                 [Signal(shape_of(self.tx), name=f"wpx{i}")
                                  for i in range(self.c)])
        return self

    def window_chunks(self) -> list[tuple[int, int]]:
        """Step k of the window: tap k's whole pixel."""
        return [(k, 0) for k in range(self.kk)]

    def _chan(self, lane: int, g: int) -> int | None:
        o = lane * self.group + g
        return o if o < self.cout else None

    def _coefs(self, lane: int) -> list[int]:
        """The lane's coefficient per step s = g * kk + k (0 past the last channel)."""
        out = []
        for g in range(self.group):
            o = self._chan(lane, g)
            out += [0] * self.kk if o is None else [int(v) for v in self.w[:, o]]
        return out

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "kind": "depthwise fold", "lanes": self.lanes,
                "channels_per_lane": self.group, "taps": self.kk, "steps": self.steps_}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        en, tx, kk, G, S = self.en, self.tx, self.kk, self.group, self.steps_
        xs = self.inputs(0)  # (tap, channel) order: tap k of channel ci at k * C + ci
        # the step in this cycle: 0 with start (the window is valid from then on, for II
        # cycles), then the counters' (registers: the next step)
        act, s = Signal(name="act"), Signal(range(max(2, S)), name="s")
        k, gc = Signal(range(max(2, kk)), name="k"), Signal(range(max(2, G)), name="g")
        cur_act = Signal(name="cur_act")
        cur_s, cur_k, cur_g = (Signal(v.shape(), name=f"cur_{v.name}") for v in (s, k, gc))
        m.d.comb += [cur_act.eq(self.start | act), cur_s.eq(Mux(self.start, 0, s)),
                     cur_k.eq(Mux(self.start, 0, k)), cur_g.eq(Mux(self.start, 0, gc))]
        with m.If(en & cur_act):
            m.d.sync += [s.eq(cur_s + 1), act.eq(cur_s != S - 1),
                         k.eq(Mux(cur_k == kk - 1, 0, cur_k + 1)),
                         gc.eq(Mux(cur_k == kk - 1, cur_g + 1, cur_g))]
        # stage A -> B -> C -> D control, shared by the lanes
        ctl_a = [cur_act, cur_k == 0, cur_k == kk - 1, cur_g]
        act_b, first_b, last_b, g_b = self.regs(m, ctl_a, "cb", [1, 1, 1, gc.shape()])
        act_c, first_c, last_c, g_c = self.regs(m, [act_b, first_b, last_b, g_b], "cc",
                                                [1, 1, 1, gc.shape()])
        act_d, last_d, g_d = self.regs(m, [act_c, last_c, g_c], "cd", [1, 1, gc.shape()])
        ys: list[Value] = [Const(0, shape_of(self.tout))] * self.cout
        if self.window_ports is not None:  # the window unit's memory reads tap cur_k
            m.d.comb += self.window_ports[0].eq(cur_k)
        for lane in range(self.lanes):
            xb: Value
            if self.window_ports is not None:  # the lane's channel of the step's pixel
                px = self.window_ports[1]
                chans = [((o if (o := self._chan(lane, g)) is not None else 0) // self.mult)
                         for g in range(G)]
                xb = (px[chans[0]] if G == 1 else
                      fit(Cat(*[px[ci] for ci in chans]).word_select(g_b, tx.width),
                          tx.width, tx.signed))
            else:
                # the lane's walking order, selected from the held window by the step
                order = []
                for g in range(G):
                    o = self._chan(lane, g)
                    ci = (o if o is not None else 0) // self.mult
                    order += [xs[t * self.c + ci] for t in range(kk)]
                sel = fit(Cat(*order).word_select(cur_s, tx.width), tx.width, tx.signed)
                xb = self.regs(m, [sel], f"xb{lane}_", [shape_of(tx)])[0]
            words = self._coefs(lane)
            if len(set(words)) == 1:
                prod, _ = const_mul(xb, words[0])
            else:
                mask = (1 << self.cw) - 1
                coef = rom(m, f"w{lane}", signed(self.cw), [v & mask for v in words], cur_s,
                           en)
                prod = xb * coef
            bw = [self.bias[o] if (o := self._chan(lane, g)) is not None else 0
                  for g in range(G)]
            bias_b: Value = (Const(bw[0], signed(self.mod)) if len(set(bw)) == 1
                             else Array(Const(v, signed(self.mod)) for v in bw)[g_b])
            pc, bc = self.regs(m, [fit((prod if prod is not None else Const(0)) << self.p_shift,
                                       self.mod, True), bias_b], f"pc{lane}_",
                               [signed(self.mod)] * 2)
            accv = Signal(signed(self.mod), name=f"acc{lane}", reset_less=True)
            with m.If(en & act_c):
                m.d.sync += accv.eq(fit(Mux(first_c, bc, accv) + pc, self.mod, True))
            q = fit(_finish(accv, self.frac, self.tout, self.relu_), self.tout.width,
                    self.tout.signed)
            for g in range(G):
                o = self._chan(lane, g)
                if o is None:
                    continue
                y = Signal(shape_of(self.tout), name=f"y{o}", reset_less=True)
                with m.If(en & act_d & last_d & (g_d == g)):
                    m.d.sync += y.eq(q)
                ys[o] = y
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
        self.frac, self.p_shift, self.bias, self.mod = _alignment(tin.t, tw, b, tb, acc,
                                                                  self.cout)
        self.cw = max(int(np.abs(self.w).max()).bit_length() + 1 if self.w.size else 1, 2)
        # channels whose weight varies over the frame read it from the ROM
        self.varying = [o for o in range(self.cout) if np.any(self.w[:, o] != self.w[0, o])]
        self.multipliers = global_products(self.w)

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
        y = [Signal(shape_of(t), name=f"y{o}", reset_less=True) for o in range(self.cout)]
        with m.If(en & done):
            m.d.sync += [y[o].eq(fit(_finish(accs[o], self.frac, t, self.relu_), t.width,
                                       t.signed))
                         for o in range(self.cout)]
        pushr = Signal(name="pushr")
        with m.If(en):
            m.d.sync += pushr.eq(done)
        m.d.comb += [self.y.eq(Cat(*y)), self.push.eq(en & pushr)]
        return m


def global_products(w: np.ndarray) -> int:
    """Products GlobalDepthwise builds for weights (pixels, Cout): a channel whose weight
    varies over the frame, or whose one weight is not 0 or a power of two (a pooling sum
    of ones has none: the estimate once counted one per channel)."""
    w = np.asarray(w, dtype=np.int64)
    vary = np.any(w != w[:1], axis=0)
    return int(sum(1 for o in range(w.shape[1])
                   if vary[o] or const_kind(int(w[0, o])) == "mul"))


def const_kind(c: int) -> str:
    """zero | shift | mul: what a product by the constant c is (arith.const_mul)."""
    a = abs(int(c))
    return "zero" if a == 0 else "shift" if a & (a - 1) == 0 else "mul"


__all__ = ["DepthwiseDense", "DepthwiseFold", "GlobalDepthwise", "is_depthwise", "is_global"]


def depthwise_unit(geo: Geometry, tok: Tok, w4: np.ndarray, tw: FixedType,
                   b: np.ndarray | None, tb: FixedType | None, tout: FixedType,
                   acc: FixedType, relu_: bool, reuse: int, adder_levels: int,
                   schedule: Schedule | None, strategy: str) -> SUnit:
    """The stream unit of a depthwise Conv (is_depthwise) over `geo`: GlobalDepthwise for a
    window over the whole frame, else a WindowUnit over a DepthwiseDense."""
    from .window import WindowUnit

    if is_global(geo):
        return GlobalDepthwise(tok, w4, tw, b, tb, tout, acc, relu_)
    inner: Unit
    if is_folded(reuse, geo.kh * geo.kw, np.shape(w4)[-1]):
        inner = DepthwiseFold(tok.t, geo.c, w4, tw, b, tb, tout, acc, relu_, reuse)
    else:
        inner = DepthwiseDense(tok.t, geo.c, w4, tw, b, tb, tout, acc, relu_, reuse,
                               adder_levels, schedule, strategy)
    return WindowUnit(geo, tok.t, inner, tout, inner.cout, 0,
                      schedule.lutram_depth if schedule is not None else 0)


__all__ += ["depthwise_unit", "global_products", "is_folded"]
