"""Sliding windows over a streamed frame: `Geometry` (kernel, strides, pads), `WindowUnit`
(padding, line buffers, the window register, an inner unit on the window vector: a Conv's
Dense, `WindowMax`, `WindowAvg`) and the line buffers' memory style. Apart from units.py
(the stream-unit protocol and the simpler units) because a window is most of a CNN's
circuit and its own subject: buffers, padding, the chunked read of a folded Conv.
The protocol, the steps and the schedule are in units.py's docstring."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib.memory import Memory

from ...graphs.types import FixedType
from ..errors import HdlError
from ..units.arith import fit, requantize
from ..units.base import Unit, circuit
from .units import ChainUnit, Step, SUnit, Tok, ram_style


# -- windows -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """A sliding window over an (H, W, C) frame: kernel, strides, pads (top, left, bottom,
    right). 1-D: H = 1, kh = 1, no vertical pads."""

    h: int
    w: int
    c: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)

    def __post_init__(self) -> None:
        if min(self.h, self.w, self.c, self.kh, self.kw, self.sh, self.sw) < 1 or \
                min(self.pads) < 0:
            raise HdlError(f"window geometry {self} is not positive")
        if self.hp < self.kh or self.wp < self.kw:
            raise HdlError(f"kernel {self.kh}x{self.kw} is larger than the padded frame "
                           f"{self.hp}x{self.wp}")

    @property
    def hp(self) -> int:
        return self.h + self.pads[0] + self.pads[2]

    @property
    def wp(self) -> int:
        return self.w + self.pads[1] + self.pads[3]

    @property
    def ho(self) -> int:
        return (self.hp - self.kh) // self.sh + 1

    @property
    def wo(self) -> int:
        return (self.wp - self.kw) // self.sw + 1

    def row_emits(self, r: int) -> bool:
        q = r - self.kh + 1
        return q >= 0 and q % self.sh == 0 and q // self.sh < self.ho

    def col_emits(self, c: int) -> bool:
        q = c - self.kw + 1
        return q >= 0 and q % self.sw == 0 and q // self.sw < self.wo

    def interior(self, r: int, c: int) -> bool:
        return (self.pads[0] <= r < self.pads[0] + self.h
                and self.pads[1] <= c < self.pads[1] + self.w)


class WindowUnit(SUnit):
    """Padding, line buffers, the window register and an inner unit on the window vector
    (kh*kw*C codes, order (row, column, channel)). One padded position per step; a step that
    completes a window occupies the inner unit's II. Latency: 2 + the inner unit's.

    Where the inner unit is a fold that reads one pixel's chunk a step (Dense.read_window,
    DepthwiseFold.read_window: a whole pixel a tap), the window is a memory instead: kh rows of the padded frame in one memory of kh*Wp
    pixels (row r in slot r mod kh), written as the pixels come, and the fold's chunk k read
    from the pixel of its tap the cycle after it asks (k -> tap, channel offset: a table),
    with no window register and no line-buffer cascade. The next pixel is written no sooner
    than the fold's II after a window starts (the fire that follows it waits that long), and
    it overwrites a row the window no longer needs."""

    def __init__(self, geo: Geometry, tin: FixedType, inner: Unit, tout: FixedType,
                 cout: int, pad_code: int = 0, lutram_depth: int = 0):
        super().__init__([Tok(tin, geo.c, geo.h * geo.w)], Tok(tout, cout, geo.ho * geo.wo))
        self.geo, self.tin, self.inner, self.pad_code = geo, tin, inner, int(pad_code)
        self.lutram_depth = lutram_depth
        self.ram_style = ram_style(geo.wp, lutram_depth)
        if inner.in_specs[0][1] != geo.kh * geo.kw * geo.c:
            raise HdlError("window unit: the inner unit's input does not match the window")
        self.lat = 2 + inner.latency
        # the window register holds a window for the inner unit's II (the next fire comes
        # no sooner; the shift lands the cycle after it): a folded inner reads it in place
        hold = getattr(inner, "hold_input", None)
        if hold is not None:
            hold()
        rw = getattr(inner, "read_window", None)
        self.reader = rw(geo.c) if rw is not None and geo.kh * geo.kw > 1 else None

    def memories(self) -> list[tuple[int, int]]:
        """(width, depth) of its line buffers: kh - 1 rows, or the window memory's kh."""
        w, g = self.ins[0].width, self.geo
        if self.reader is not None:
            return [(w, g.kh * g.wp)]
        return [(w, g.wp)] * (g.kh - 1)

    @property
    def max_dur(self) -> int:
        return max(1, self.inner.ii)

    def then(self, b: Unit) -> WindowUnit:
        """The same window with `b` after its inner unit (ChainUnit)."""
        return WindowUnit(self.geo, self.tin, ChainUnit(self.inner, b), b.out_spec[0],
                          b.out_spec[1], self.pad_code, self.lutram_depth)

    def steps(self) -> Iterator[Step]:
        g, ii = self.geo, max(1, self.inner.ii)
        for r in range(g.hp):
            re = g.row_emits(r)
            for c in range(g.wp):
                e = re and g.col_emits(c)
                yield (g.interior(r, c),), e, ii if e else 1

    def describe(self) -> dict[str, Any]:
        g = self.geo
        d = {**super().describe(), "inner": {**self.inner.describe()}, "latency": self.lat,
             "window": {"frame": [g.h, g.w, g.c], "kernel": [g.kh, g.kw],
                        "strides": [g.sh, g.sw], "pads": list(g.pads),
                        "out": [g.ho, g.wo, self.out.elements]},
             "line_buffers": {"count": g.kh - 1, "depth": g.wp, "width": self.ins[0].width,
                              "style": self.ram_style}}
        if self.reader is not None:
            d["line_buffers"] = {"count": 1, "depth": g.kh * g.wp, "width": self.ins[0].width,
                                 "style": self.ram_style, "window": "memory"}
        return d

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g, en, port = self.geo, self.en, self.i0
        m.submodules.inner = circuit(self.inner)
        inner = self.inner
        r = Signal(range(max(2, g.hp)), name="row")
        c = Signal(range(max(2, g.wp)), name="col")
        rmask = sum(1 << i for i in range(g.hp) if g.row_emits(i))
        cmask = sum(1 << i for i in range(g.wp) if g.col_emits(i))
        emits = Signal(name="emits")
        m.d.comb += emits.eq(Const(rmask, g.hp).bit_select(r, 1)
                             & Const(cmask, g.wp).bit_select(c, 1))
        interior = Signal(name="interior")
        pt, pl = g.pads[0], g.pads[1]
        m.d.comb += interior.eq((r >= pt) & (r < pt + g.h) & (c >= pl) & (c < pl + g.w))
        fire = self._issue(m, [interior], Mux(emits, max(1, inner.ii) - 1, 0))
        with m.If(fire):
            with m.If(c == g.wp - 1):
                m.d.sync += [c.eq(0), r.eq(Mux(r == g.hp - 1, 0, r + 1))]
            with m.Else():
                m.d.sync += c.eq(c + 1)
        tw, C = self.tin.width, g.c
        pad_word = 0
        for ch in range(C):
            pad_word |= (self.pad_code & ((1 << tw) - 1)) << (ch * tw)
        pix = Signal(self.ins[0].width, name="pix")
        m.d.comb += pix.eq(Mux(interior, port.payload, pad_word))
        # stage 1
        s1_v, s1_e = Signal(name="s1_v"), Signal(name="s1_e")
        s1_pix = Signal(self.ins[0].width, name="s1_pix", reset_less=True)
        s1_c = Signal(range(max(2, g.wp)), name="s1_c", reset_less=True)
        with m.If(en):
            m.d.sync += [s1_v.eq(fire), s1_e.eq(fire & emits), s1_pix.eq(pix), s1_c.eq(c)]
        x0: list[Any] = []
        if self.reader is not None:
            self._window_memory(m, fire, r, c, s1_v, s1_e, s1_pix, s1_c)
        else:
            x0 = [inner.x0.eq(self._window_registers(m, c, s1_v, s1_pix, s1_c))]
        s2_v = Signal(name="s2_v")
        with m.If(en):
            m.d.sync += s2_v.eq(s1_e)
        m.d.comb += [inner.en.eq(en), inner.start.eq(s2_v), *x0, self.y.eq(inner.y),
                     self.push.eq(en & self._delay(m, s2_v, inner.latency, "v",
                                                   max(1, inner.ii)))]
        return m

    def _window_registers(self, m: Module, c: Value, s1_v: Value, s1_pix: Value,
                          s1_c: Value) -> Value:
        """kh - 1 line buffers in cascade and the kh x kw window register (x0, returned)."""
        g, en = self.geo, self.en
        rd: list[Value] = []
        for k in range(g.kh - 1):  # lb k holds row r-1-k
            mem = Memory(shape=self.ins[0].width, depth=g.wp, init=[],
                         attrs={"ram_style": self.ram_style})
            m.submodules[f"lb{k}"] = mem
            wp = mem.write_port()
            # the write (column s1_c, the cycle after a fire) never meets the read (column
            # c, moved on by that fire) unless a row is one column wide: no bypass (its
            # registers and muxes were ~1.5k FFs per 64-channel window) where wp > 1
            rp = mem.read_port(domain="sync", transparent_for=(wp,) if g.wp == 1 else ())
            m.d.comb += [rp.addr.eq(c), rp.en.eq(en), wp.addr.eq(s1_c),
                         wp.en.eq(en & s1_v)]
            rd.append(rp.data)
            m.d.comb += wp.data.eq(s1_pix if k == 0 else rd[k - 1])
        col = [*reversed(rd), s1_pix]  # rows r-kh+1 .. r
        win = [[Signal(self.ins[0].width, name=f"w{i}_{j}", reset_less=True)
                for j in range(g.kw)] for i in range(g.kh)]
        with m.If(en & s1_v):
            for i in range(g.kh):
                m.d.sync += [win[i][j].eq(win[i][j + 1]) for j in range(g.kw - 1)]
                m.d.sync += win[i][g.kw - 1].eq(col[i])
        return Cat(*[win[i][j] for i in range(g.kh) for j in range(g.kw)])

    def _window_memory(self, m: Module, fire: Value, r: Value, c: Value, s1_v: Value,
                       s1_e: Value, s1_pix: Value, s1_c: Value) -> None:
        """The window as kh rows of one memory, read a chunk a cycle (class docstring)."""
        g, en, rd = self.geo, self.en, self.reader
        ksel, chunk = rd.window_ports
        tw, C, cc = self.tin.width, g.c, len(chunk)
        per = C // cc  # chunks a pixel
        table = rd.window_chunks()  # chunk k: (tap, its index within the tap's pixel)
        kh, kw, wp = g.kh, g.kw, g.wp
        # the row slot of the current row (row r of the frame in slot r mod kh)
        rs = Signal(range(max(2, kh)), name="rs")
        with m.If(fire & (c == wp - 1)):
            m.d.sync += rs.eq(Mux((r == g.hp - 1) | (rs == kh - 1), 0, rs + 1))
        s1_rs = Signal(range(max(2, kh)), name="s1_rs", reset_less=True)
        with m.If(en):
            m.d.sync += s1_rs.eq(rs)
        base = Array([Const(i * wp, range(max(2, kh * wp))) for i in range(kh)])
        mem = Memory(shape=self.ins[0].width, depth=kh * wp, init=[],
                     attrs={"ram_style": self.ram_style})
        m.submodules.wmem = mem
        wport = mem.write_port()
        m.d.comb += [wport.addr.eq(base[s1_rs] + s1_c), wport.en.eq(en & s1_v),
                     wport.data.eq(s1_pix)]
        # a window that starts: its top row's slot and its left column, kept for its run
        top = Signal(range(max(2, kh)), name="wtop", reset_less=True)
        left = Signal(range(max(2, wp)), name="wleft", reset_less=True)
        with m.If(en & s1_e):
            m.d.sync += [top.eq(Mux(s1_rs == kh - 1, 0, s1_rs + 1)),
                         left.eq(s1_c - (kw - 1))]
        # chunk k: tap (i, j) and channel offset o of its pixel
        ti = Signal(range(max(2, kh)), name="ti")
        tj = Signal(range(max(2, kw)), name="tj")
        to = Signal(range(max(2, per)), name="to")
        with m.Switch(ksel):
            for k, (tap, part) in enumerate(table):
                i, j = divmod(tap, kw)
                with m.Case(k):
                    m.d.comb += [ti.eq(i), tj.eq(j), to.eq(part)]
        slot = Signal(range(max(2, 2 * kh)), name="wslot")
        m.d.comb += slot.eq(top + ti)
        rport = mem.read_port(domain="sync")
        m.d.comb += [rport.addr.eq(base[Mux(slot >= kh, slot - kh, slot)] + left + tj),
                     rport.en.eq(en)]
        off = Signal(range(max(2, per)), name="wto", reset_less=True)
        with m.If(en):
            m.d.sync += off.eq(to)
        word = rport.data.word_select(off, cc * tw) if per > 1 else rport.data
        m.d.comb += [chunk[i].eq(fit(word[i * tw:(i + 1) * tw], tw, self.tin.signed))
                     for i in range(cc)]


class WindowMax(Unit):
    """max over the kh*kw positions of a window, per channel, in the output type (a data
    movement: the codes requantized, which commutes with max); one register."""

    def __init__(self, t: FixedType, positions: int, c: int, tout: FixedType | None = None):
        super().__init__([(t, positions * c)], (tout or t, c))
        self.positions, self.c, self.tin = positions, c, t
        self.latency = 1

    def elaborate(self, platform: object) -> Module:
        m = Module()
        x = self.inputs()
        outs = []
        for ch in range(self.c):
            vals = [x[p * self.c + ch] for p in range(self.positions)]
            while len(vals) > 1:
                vals = [Mux(vals[i] >= vals[i + 1], vals[i], vals[i + 1])
                        if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
            outs.append(requantize(vals[0], self.tin.frac, self.out_spec[0]))
        self.out_regs(m, outs)
        return m


class WindowAvg(Unit):
    """Average pool (count_include_pad): the exact window sum per channel times the constant
    reciprocal code, requantized to the output type (frac = input frac + recip frac); two
    registers (sum, output)."""

    def __init__(self, tin: FixedType, positions: int, c: int, recip: int, recip_frac: int,
                 tout: FixedType):
        super().__init__([(tin, positions * c)], (tout, c))
        self.positions, self.c, self.tin = positions, c, tin
        self.recip, self.recip_frac = int(recip), int(recip_frac)
        self.latency = 2
        self.multipliers = c if self.recip & (self.recip - 1) else 0

    def elaborate(self, platform: object) -> Module:
        m = Module()
        x = self.inputs()
        sums = [sum((Value.cast(x[p * self.c + ch]) for p in range(self.positions)),
                    start=Const(0)) for ch in range(self.c)]
        s = self.regs(m, sums, "s")
        self.out_regs(m, [requantize(v * self.recip, self.tin.frac + self.recip_frac,
                                     self.out_spec[0]) for v in s])
        return m
