"""The Dense parts of a streamed model (hdl/streamed/units.py has the stream units and their flow
control): `FlatDense`, a Flatten into a Dense accumulated pixel by pixel so the frame is
never stored, and `conv_weights`, the (kh*kw*Cin, Cout) matrix the window unit's Dense
runs (block-diagonal for groups), which the size checks (hdl/plan/size.py) share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib.memory import Memory

from ...graphs.types import FixedType
from ..errors import HdlError
from ..plan.fold import flat_fold
from ..units.arith import fit, shape_of
from .units import Step, SUnit, Tok


class FlatDense(SUnit):
    """Flatten into a Dense without collecting the frame: each pixel's C codes are
    multiplied with that pixel's rows of W (n_in = pixels*C rows, pixel-major) and added to
    Nout exact accumulators (starting from the bias, every sum modulo 2**(acc width + 1) as
    hdl/units/dense.py), then one requantization (+ ReLU) per output after the last pixel. A pixel
    takes `d` cycles: outputs in d groups of m = ceil(Nout / d), C*m multipliers whose
    coefficients are one word of a ROM (block RAM) per (pixel, group); with d > Nout, one
    output a step and the channels in chunks too (hdl/plan/fold.FlatFold: a pixel's
    channels selected by the chunk, c multipliers). Equivalent to a Dense at reuse
    pixels*d, without the two frame-wide registers (collect + fold input).

    Pipeline after a pixel's fire at t: step s's ROM word read at t+s (the read address runs
    one step ahead), at t+1+s the word and the pixel (its chunk) registered, t+2+s products
    registered, t+3+s lane sums, t+4+s accumulate; outputs registered at t+d+4, pushed at
    t+d+5: lat = d + 5. Every step has read the held pixel by t+d, the earliest next fire
    (the last step once read the next pixel when pixels came back to back). The block RAM's
    output and
    each product have a register of their own (issue 25: the encoder's classifier read the
    ROM, multiplied in MULT18X18Ds and summed in one cycle, its critical path on ECP5 once
    LayerNorm's was split: 29.85 ns, 33.5 MHz)."""

    def __init__(self, tin: Tok, w: np.ndarray, tw: FixedType, b: np.ndarray | None,
                 tb: FixedType | None, tout: FixedType, acc: FixedType, relu: bool,
                 d: int = 1):
        w = np.asarray(w, dtype=np.int64)
        if w.shape[0] != tin.elements * tin.per_frame:
            raise HdlError(f"flatten-dense: weights {list(w.shape)} do not match a frame of "
                           f"{tin.per_frame} pixels x {tin.elements} channels")
        self.n_out = int(w.shape[1])
        super().__init__([tin], Tok(tout, self.n_out, 1))
        self.pixels, self.c = tin.per_frame, tin.elements
        self.fold = flat_fold(self.c, self.n_out, d)
        self.d, self.m = self.fold.steps, self.fold.m
        # one pixel (a Dense after a global pool) with its channels folded: an output group
        # at a time, all its chunks, in one bank of m accumulators and m requantizers, not
        # one of each per output (CNV's 256 -> 512 classifier: 512 of each)
        self.group_major = self.pixels == 1 and self.fold.chunks > 1
        self.tx, self.w, self.tout, self.relu_ = tin.t, w, tout, bool(relu)
        frac = tin.t.frac + tw.frac
        self.frac = max(frac, tb.frac) if b is not None and tb is not None else frac
        self.p_shift = self.frac - frac
        self.bias = ([0] * self.n_out if b is None or tb is None else
                     [int(v) << (self.frac - tb.frac) for v in np.asarray(b).reshape(-1)])
        self.mod = acc.width + 1
        self.cw = max(int(np.abs(w).max()).bit_length() + 1 if w.size else 1, 2)
        self.lat = self.d + 5
        self.multipliers = self.fold.products

    @property
    def max_dur(self) -> int:
        return self.d

    def steps(self) -> Iterator[Step]:
        for p in range(self.pixels):
            yield (True,), p == self.pixels - 1, self.d

    def describe(self) -> dict[str, Any]:
        d = {**super().describe(), "latency": self.lat, "reuse": self.pixels * self.d,
             "cycles_per_pixel": self.d, "multipliers": self.multipliers,
             "rom": {"depth": self.pixels * self.d, "width": self.cw * self.fold.products}}
        if self.fold.chunks > 1:
            d["channel_chunks"] = self.fold.chunks
        return d

    def _words(self) -> list[int]:
        words = []
        mask = (1 << self.cw) - 1
        f = self.fold
        for p in range(self.pixels):
            for s in range(self.d):
                if self.group_major:
                    g, ck = divmod(s, f.chunks)
                else:
                    ck, g = divmod(s, f.groups)
                word, k = 0, 0
                for j in range(self.m):
                    o = g * self.m + j
                    for i in range(f.c):
                        ch = ck * f.c + i
                        v = (int(self.w[p * self.c + ch, o]) if o < self.n_out and ch < self.c
                             else 0)
                        word |= (v & mask) << (k * self.cw)
                        k += 1
                words.append(word)
        return words

    def elaborate(self, platform: object) -> Module:
        from amaranth.hdl import signed as _signed

        from ..units.arith import overflow_relu, shift_round

        m = Module()
        en, tx, d, mm, C = self.en, self.tx, self.d, self.m, self.c
        G, K, cc = self.fold.groups, self.fold.chunks, self.fold.c
        fire = self._issue(m, [1], d - 1)
        px = [Signal(shape_of(tx), name=f"px{i}", reset_less=True) for i in range(C)]
        with m.If(fire):
            m.d.sync += [px[i].eq(fit(self.i0.payload[i * tx.width:(i + 1) * tx.width],
                                      tx.width, tx.signed)) for i in range(C)]
        # stage A: group s of the current pixel; the ROM address runs over the frame
        busy = Signal(name="busy")
        s = Signal(range(max(2, d)), name="s")
        depth = self.pixels * d
        addr = Signal(range(max(2, depth)), name="addr")
        with m.If(en):
            with m.If(fire):
                m.d.sync += [busy.eq(1), s.eq(0)]
            with m.Elif(busy & (s == d - 1)):
                m.d.sync += busy.eq(0)
            with m.Elif(busy):
                m.d.sync += s.eq(s + 1)
            with m.If(busy):
                m.d.sync += addr.eq(Mux(addr == depth - 1, 0, addr + 1))
        # the step's output group and channel chunk (the step itself where one chunk)
        grp: Signal = s
        ck: Signal | None = None
        if K > 1:
            grp, ck = Signal(range(max(2, G)), name="grp"), Signal(range(max(2, K)), name="ck")
            inner, outer = (ck, grp) if self.group_major else (grp, ck)
            n_inner = K if self.group_major else G
            with m.If(en):
                with m.If(fire):
                    m.d.sync += [grp.eq(0), ck.eq(0)]
                with m.Elif(busy & (inner == n_inner - 1)):
                    m.d.sync += [inner.eq(0), outer.eq(outer + 1)]
                with m.Elif(busy):
                    m.d.sync += inner.eq(inner + 1)
        rom = Memory(shape=self.cw * cc * mm, depth=depth, init=self._words(),
                     attrs={"ram_style": "block"})
        m.submodules.rom = rom
        rp = rom.read_port(domain="sync")
        # the ROM address one step ahead of `addr`: step 0's word read at the fire
        ra = Signal(range(max(2, depth)), name="ra")
        with m.If(en & (fire | (busy & (s != d - 1)))):
            m.d.sync += ra.eq(Mux(ra == depth - 1, 0, ra + 1))
        m.d.comb += [rp.addr.eq(ra), rp.en.eq(en)]
        # stage A: the ROM word arrives; B1 registers it with the pixel, B2 the products
        # act, first (the group's first chunk of the frame), last (of the frame), group
        ctl = [busy, (ck == 0) if self.group_major and ck is not None else addr < G,
               addr == depth - 1, grp]
        shapes: list[Any] = [1, 1, 1, range(max(2, G))]
        if ck is not None:
            ctl.append(ck)
            shapes.append(range(max(2, K)))

        def stage(vals: list[Value], name: str) -> list[Signal]:
            out = [Signal(sh, name=f"{n}_{name}") for sh, n in
                   zip(shapes, ("act", "first", "last", "s", "ck"), strict=False)]
            with m.If(en):
                m.d.sync += [o.eq(v) for o, v in zip(out, vals, strict=True)]
            return out

        ctl_b = ctl
        px_b = [Signal(shape_of(tx), name=f"pxb{i}", reset_less=True) for i in range(cc)]
        coef = Signal(self.cw * cc * mm, name="coef", reset_less=True)
        ctl_b1 = stage(ctl_b, "b1")
        with m.If(en):
            m.d.sync += coef.eq(rp.data)
            if K == 1:
                m.d.sync += [px_b[i].eq(px[i]) for i in range(C)]
            else:  # the step's chunk of the held pixel (channels past C read as 0)
                with m.Switch(ctl_b[4]):
                    for k_ in range(K):
                        with m.Case(k_):
                            m.d.sync += [px_b[i].eq(px[k_ * cc + i] if k_ * cc + i < C else 0)
                                         for i in range(cc)]
        prods = [Signal(_signed(self.mod), name=f"prod{k}", reset_less=True)
                 for k in range(cc * mm)]
        ctl_b2 = stage(ctl_b1, "b2")
        with m.If(en):
            for j in range(mm):
                for i in range(cc):
                    k = j * cc + i
                    cf = coef[k * self.cw:(k + 1) * self.cw].as_signed()
                    m.d.sync += prods[k].eq(fit((px_b[i] * cf) << self.p_shift, self.mod,
                                                True))
        sums = []
        for j in range(mm):
            tot: Value = prods[j * cc]
            for t_ in prods[j * cc + 1:(j + 1) * cc]:
                tot = fit(tot + t_, self.mod, True)
            sums.append(tot)
        # stage C: registered lane sums, accumulate into group s
        act_b, first_b, last_b, s_b = ctl_b2[:4]
        act_c, first_c, last_c = (Signal(name=n) for n in ("act_c", "first_c", "last_c"))
        s_c = Signal(range(max(2, G)), name="s_c", reset_less=True)
        sum_c = [Signal(_signed(self.mod), name=f"sum{j}", reset_less=True) for j in range(mm)]
        with m.If(en):
            m.d.sync += [act_c.eq(act_b), first_c.eq(first_b), last_c.eq(last_b & act_b),
                         s_c.eq(s_b)] + [sum_c[j].eq(sums[j]) for j in range(mm)]
        t = self.tout

        def finish(v: Value) -> Value:
            return overflow_relu(shift_round(v, self.frac - t.frac, t.rounding), t, self.relu_)

        if self.group_major:
            self._group_major(m, ctl_b2, act_c, first_c, last_c, s_c, sum_c, finish)
            return m
        acc = [Signal(_signed(self.mod), name=f"acc{o}", reset_less=True)
               for o in range(self.n_out)]
        with m.If(en & act_c):
            with m.Switch(s_c):
                for g in range(G):
                    with m.Case(g):
                        for j in range(mm):
                            o = g * mm + j
                            if o < self.n_out:
                                m.d.sync += acc[o].eq(fit(Mux(first_c, self.bias[o], acc[o])
                                                          + sum_c[j], self.mod, True))
        # stage D: requantize every output; push the next cycle
        done = Signal(name="done")
        with m.If(en):
            m.d.sync += done.eq(act_c & last_c & (s_c == G - 1))
        y = [Signal(shape_of(t), name=f"y{o}", reset_less=True) for o in range(self.n_out)]
        with m.If(en & done):
            m.d.sync += [y[o].eq(fit(finish(acc[o]), t.width, t.signed))
                         for o in range(self.n_out)]
        pushr = Signal(name="pushr")
        with m.If(en):
            m.d.sync += pushr.eq(done)
        m.d.comb += [self.y.eq(Cat(*y)), self.push.eq(en & pushr)]
        return m

    def _group_major(self, m: Module, ctl_b2: list[Signal], act_c: Signal, first_c: Signal,
                     last_c: Signal, s_c: Signal, sum_c: list[Signal], finish: Any) -> None:
        """Stages C and D of a group-major fold: the bank accumulates group s_c's chunks (from
        its outputs' biases at the first), and after its last chunk its m outputs are
        requantized into their output registers (D); pushed after the frame's last."""
        from amaranth.hdl import Array, Const
        from amaranth.hdl import signed as _signed

        en, mm, G, K, t = self.en, self.m, self.fold.groups, self.fold.chunks, self.tout
        glast_c = Signal(name="glast_c")
        with m.If(en):
            m.d.sync += glast_c.eq(ctl_b2[4] == K - 1)
        acc = [Signal(_signed(self.mod), name=f"acc{j}", reset_less=True) for j in range(mm)]
        with m.If(en & act_c):
            for j in range(mm):
                bias = Array([Const(self.bias[g * mm + j] if g * mm + j < self.n_out else 0,
                                    _signed(self.mod)) for g in range(G)])[s_c]
                m.d.sync += acc[j].eq(fit(Mux(first_c, bias, acc[j]) + sum_c[j], self.mod,
                                          True))
        wr, g_d, done = Signal(name="wr_d"), Signal(range(max(2, G)), name="g_d"), \
            Signal(name="done")
        with m.If(en):
            m.d.sync += [wr.eq(act_c & glast_c), g_d.eq(s_c), done.eq(act_c & last_c)]
        y = [Signal(shape_of(t), name=f"y{o}", reset_less=True) for o in range(self.n_out)]
        q = [fit(finish(acc[j]), t.width, t.signed) for j in range(mm)]
        with m.If(en & wr):
            with m.Switch(g_d):
                for g in range(G):
                    with m.Case(g):
                        m.d.sync += [y[g * mm + j].eq(q[j]) for j in range(mm)
                                     if g * mm + j < self.n_out]
        pushr = Signal(name="pushr")
        with m.If(en):
            m.d.sync += pushr.eq(done)
        m.d.comb += [self.y.eq(Cat(*y)), self.push.eq(en & pushr)]


def conv_weights(w: np.ndarray, group: int) -> np.ndarray:
    """Conv weights (kh, kw, Cin/group, Cout) -> the Dense matrix (kh*kw*Cin, Cout) over a
    window (row, column, channel), zero outside each output channel's group."""
    w = np.asarray(w, dtype=np.int64)
    kh, kw, cig, cout = w.shape
    cin = cig * group
    cog = cout // group
    full = np.zeros((kh, kw, cin, cout), dtype=np.int64)
    for gi in range(group):
        full[:, :, gi * cig:(gi + 1) * cig, gi * cog:(gi + 1) * cog] = \
            w[:, :, :, gi * cog:(gi + 1) * cog]
    return full.reshape(kh * kw * cin, cout)


__all__ = ["FlatDense", "conv_weights"]
