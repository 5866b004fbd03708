"""`Unit`, the base class of every lowered op's circuit (the concrete units: dense.py for
Dense, elementwise.py and softmax.py for the others), and `Circuit`, its component.

A unit is a plan: its latency, II, reuse and sizes are data, decided in `__init__` without
building anything, so a design's whole schedule (and the fit, the estimate, inspect) is
known before elaboration and planning builds no component (Amaranth warns about every
component that is never elaborated). `circuit(unit)` makes its `wiring.Component` when the
design is elaborated; the component's ports are bound on the unit, whose `elaborate` builds
the logic. The ports:

    en    In(1)        global clock enable (the whole pipeline stalls together; 1 under
                       credit flow control, hdl/vector/top.py)
    start In(1)        the input vector is valid this cycle (folded units load on it)
    x0..  In(n*W)      packed input vectors, element 0 in the least significant bits
    y     Out(n*W)     packed output vector, valid `latency` enabled cycles after `start`

Units are pipelines with a static latency and initiation interval decided in `__init__`,
so the top level knows the whole schedule before elaboration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from amaranth.hdl import Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...graphs.types import FixedType
from .arith import fit, shape_of


class Planned:
    """A unit's plan; `members()` are its component's ports (hdl/units/base.py `Circuit`)."""

    def members(self) -> dict[str, Any]:
        raise NotImplementedError

    def elaborate(self, platform: object) -> Module:
        raise NotImplementedError


class Circuit(wiring.Component):
    """The component of a planned unit: its ports, bound on the unit, and the unit's logic."""

    def __init__(self, unit: Planned):
        self.unit = unit
        super().__init__(unit.members())
        for name in self.signature.members:  # the latest circuit's ports: one conversion
            setattr(unit, name, getattr(self, name))  # elaborates each plan once

    def elaborate(self, platform: object) -> Module:
        return self.unit.elaborate(platform)


def circuit(unit: Planned) -> Circuit:
    """The unit's component (made once, when its design is elaborated)."""
    return Circuit(unit)


class Unit(Planned):
    latency: int = 1
    ii: int = 1
    reuse: int = 1
    multipliers: int = 0
    shifts: int = 0

    def __init__(self, ins: Sequence[tuple[FixedType, int]], out: tuple[FixedType, int]):
        self.in_specs = list(ins)
        self.out_spec = out

    def members(self) -> dict[str, Any]:
        sig: dict[str, Any] = {"en": In(1), "start": In(1)}
        for k, (t, n) in enumerate(self.in_specs):
            sig[f"x{k}"] = In(max(1, t.width * n))
        sig["y"] = Out(max(1, self.out_spec[0].width * self.out_spec[1]))
        return sig

    # -- helpers for elaborate ---------------------------------------------------------
    def inputs(self, k: int = 0) -> list[Value]:
        t, n = self.in_specs[k]
        port = getattr(self, f"x{k}")
        return [fit(port[i * t.width:(i + 1) * t.width], t.width, t.signed) for i in range(n)]

    def regs(self, m: Module, values: Sequence[Value], name: str,
             shapes: Sequence[object] | None = None, en: Value | None = None) -> list[Signal]:
        """Register values (enabled by `en`, the unit's unless given); data registers need
        no reset."""
        out = []
        for i, v in enumerate(values):
            v = Value.cast(v)
            s = Signal(shapes[i] if shapes else v.shape(), name=f"{name}{i}", reset_less=True)
            out.append(s)
        with m.If(self.en if en is None else en):
            m.d.sync += [s.eq(v) for s, v in zip(out, values, strict=True)]
        return out

    def drive_y(self, m: Module, values: Sequence[Value]) -> None:
        t, n = self.out_spec
        assert len(values) == n
        for i, v in enumerate(values):
            m.d.comb += self.y[i * t.width:(i + 1) * t.width].eq(fit(v, t.width, t.signed))

    def out_regs(self, m: Module, values: Sequence[Value]) -> None:
        """The usual last stage: registers of the output type, driving y."""
        t = self.out_spec[0]
        self.drive_y(m, self.regs(m, [fit(v, t.width, t.signed) for v in values], "y",
                                  [shape_of(t)] * len(values)))

    def describe(self) -> dict[str, object]:
        return {"latency": self.latency, "ii": self.ii, "reuse": self.reuse,
                "multipliers": self.multipliers, "shifts": self.shifts}
