"""A Gather on a pixel stream (an ONNX Slice of a feature map: a crop, a strided pick, some
channels): `PickUnit` passes on the pixels whose position it keeps and drops the others, and
of each kept pixel the channels it keeps. No buffer: the kept pixels stay in raster order."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from itertools import product
from typing import Any

from amaranth.hdl import Cat, Const, Module, Mux, Signal

from .units import Step, SUnit, Tok


class PickUnit(SUnit):
    """Pixels of a frame of spatial shape `dims` (raster order, the last axis fastest) are
    kept where every axis's position is in its `keep` set; of each kept pixel the channels
    `channels` (any order, repeats allowed: wiring). Latency 1, one input pixel a cycle."""

    def __init__(self, tin: Tok, dims: Sequence[int], keep: Sequence[Sequence[int]],
                 channels: Sequence[int]):
        self.dims = tuple(int(d) for d in dims)
        self.keep = tuple(tuple(sorted({int(i) for i in k})) for k in keep)
        self.channels = tuple(int(c) for c in channels)
        assert len(self.keep) == len(self.dims) and math.prod(self.dims) == tin.per_frame
        super().__init__([tin], Tok(tin.t, len(self.channels),
                                    math.prod(len(k) for k in self.keep)))
        self.lat = 1

    def _kept(self, pos: tuple[int, ...]) -> bool:
        return all(p in k for p, k in zip(pos, self.keep, strict=True))

    def steps(self) -> Iterator[Step]:
        for pos in product(*(range(d) for d in self.dims)):
            yield (True,), self._kept(pos), 1

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dims": list(self.dims),
                "kept": [len(k) for k in self.keep], "channels": len(self.channels)}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        fire = self._issue(m, [1], 0)
        cnt = [Signal(range(max(2, d)), name=f"pos{a}") for a, d in enumerate(self.dims)]
        # raster order: the last axis counts fastest, each wrap carries into the one before
        with m.If(fire):
            carry = Const(1)
            for a in reversed(range(len(self.dims))):
                last = cnt[a] == self.dims[a] - 1
                with m.If(carry):
                    m.d.sync += cnt[a].eq(Mux(last, 0, cnt[a] + 1))
                carry = carry & last
        keep = [Const(sum(1 << i for i in k), d).bit_select(c, 1)
                for k, d, c in zip(self.keep, self.dims, cnt, strict=True) if len(k) < d]
        kept = Cat(*keep).all() if keep else Const(1)
        w = self.ins[0].t.width
        px = self.i0.payload
        hold = Signal(self.out.width, name="hold", reset_less=True)
        done = Signal(name="done")
        with m.If(fire & kept):
            m.d.sync += hold.eq(Cat(*(px[c * w:(c + 1) * w] for c in self.channels)))
        with m.If(self.en):
            m.d.sync += done.eq(fire & kept)
        m.d.comb += [self.y.eq(hold), self.push.eq(self.en & done)]
        return m


__all__ = ["PickUnit"]
