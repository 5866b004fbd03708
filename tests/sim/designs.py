"""Small stand-in stream designs with the model's port convention (hdl/vector/top.py), written
directly in Amaranth, to test the bench itself: a good one and deliberately broken ones."""

from __future__ import annotations

import os
from pathlib import Path

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


class RegisteredRelu(wiring.Component):
    """Per-element ReLU of n signed W-bit codes, `latency` registers deep, one clock enable
    `en = ~o.valid | o.ready` (as hdl/vector/top.py). `bug` breaks it on purpose:
    'ignore_ready' drops outputs under backpressure, 'stuck' never answers."""

    def __init__(self, n: int, w: int, latency: int = 2, bug: str | None = None):
        self.n, self.w, self.latency, self.bug = n, w, latency, bug
        super().__init__({"i": In(stream.Signature(n * w)), "o": Out(stream.Signature(n * w))})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        en = Signal()
        relu = Signal(self.n * self.w)
        for k in range(self.n):
            x = self.i.payload[k * self.w:(k + 1) * self.w].as_signed()
            m.d.comb += relu[k * self.w:(k + 1) * self.w].eq(Mux(x < 0, 0, x))
        data = [relu] + [Signal(self.n * self.w, name=f"d{t}") for t in range(1, self.latency + 1)]
        valid = [Signal(name="v0")] + [Signal(name=f"v{t}") for t in range(1, self.latency + 1)]
        m.d.comb += valid[0].eq(self.i.valid & self.i.ready)
        if self.bug == "ignore_ready":
            m.d.comb += en.eq(1)
        elif self.bug == "stuck":
            m.d.comb += en.eq(0)
        else:
            m.d.comb += en.eq(~self.o.valid | self.o.ready)
        with m.If(en):
            for t in range(1, self.latency + 1):
                m.d.sync += [data[t].eq(data[t - 1]), valid[t].eq(valid[t - 1])]
        m.d.comb += [self.i.ready.eq(en), self.o.valid.eq(valid[-1]),
                     self.o.payload.eq(data[-1])]
        return m


def write_verilog(design: wiring.Component, out_dir: Path, name: str = "top") -> Path:
    from amaranth.back import verilog

    os.environ["AMARANTH_USE_YOSYS"] = "builtin"
    out_dir.mkdir(parents=True, exist_ok=True)
    p = out_dir / f"{name}.v"
    p.write_text(verilog.convert(design, name=name, emit_src=False))
    return p


def spec(n: int, w: int, latency: int, ii: int = 1) -> dict:
    port = {"elements": n, "element_width": w, "signed": True, "frac_bits": 0, "shape": [n]}
    return {"input": port, "output": port, "latency": latency, "ii": ii}
