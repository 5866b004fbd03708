"""The resource model of a streamed plan: its design's memories and the glue the per-layer
estimate leaves out (windows, line buffers, FIFOs), and the FIFOs that would need external
memory.

The streamed memories are counted from the design itself (`stream_memories`, the exact
depths of hdl/streamed/top.py `schedule` for the plan): line buffers (kh - 1 per window unit,
padded width deep), Resize row buffers (in LUT RAM where shallower than the family's
`lutram_depth`), and every FIFO (depth >= BUFFERED_MIN_DEPTH: block RAM, else distributed
RAM in LUTs), each packed into the family's block RAM configurations
(`bram_tiles`: DP16KD 512x36 .. 16384x1 on ECP5, SB_RAM40_4K 256x16 .. 2048x2 on iCE40).
When they do not fit, the largest FIFOs move to external memory (size and read + write
bandwidth at the scheduled rate, `stream_block`) until the rest fits on chip.

Why a module of its own: this is what one plan costs, asked by the search for every plan it
weighs and by an explicit reuse's check (hdl/flow/stream_fit.py), and read by the memory
style tests; it knows nothing of how plans are chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...graphs.compiled import CompiledGraph
from ..plan.schedule import lutram_cells
from ..streamed.memory import cells_of
from .layer_cost import bram_tiles


@dataclass
class StreamMem:
    """One streamed memory: kind "line buffer" | "row buffer" | "fifo"."""

    kind: str
    unit: str  # the instance that reads it
    node: str  # its graph node (the consumer, for a FIFO)
    width: int
    depth: int
    block: bool  # in block RAM (else distributed)
    bram: int
    source: str = ""  # a FIFO: the producer (instance or "input")
    port: int = 0  # a FIFO: the consumer's input index
    tokens_per_frame: int = 0

    @property
    def bits(self) -> int:
        return self.width * self.depth

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "bits": self.bits}


def stream_memories(design: Any, timing: Any, family_name: str,
                    geom: tuple[int, int] = (36, 512)) -> list[StreamMem]:
    """Every streamed memory of a design with its schedule (hdl/streamed/top.py)."""
    from ..streamed.top import BUFFERED_MIN_DEPTH, INPUT
    from ..streamed.units import ResizeUnit
    from ..streamed.window import WindowUnit

    mems: list[StreamMem] = []
    node_of = {name: str(design.meta.get(name, {}).get("node", name))
               for name, _, _ in design.units}
    for ui, (name, u, srcs) in enumerate(design.units):
        if isinstance(u, WindowUnit):
            blk = u.ram_style == "block"
            for wdt, dep in u.memories():
                mems.append(StreamMem("line buffer", name, node_of[name], wdt, dep, blk,
                                      bram_tiles(wdt, dep, family_name, geom) if blk else 0))
        if isinstance(u, ResizeUnit) and u.sh > 1:
            wdt, blk = u.ins[0].width, u.ram_style == "block"
            mems.append(StreamMem("row buffer", name, node_of[name], wdt, u.w, blk,
                                  bram_tiles(wdt, u.w, family_name, geom) if blk else 0))
        for k, s in enumerate(srcs if timing is not None else ()):
            tok = design.input if s == INPUT else design.units[s][1].out
            depth = int(timing.fifo_depth[(ui, k)])
            block = depth >= BUFFERED_MIN_DEPTH
            mems.append(StreamMem("fifo", name, node_of[name], tok.width, depth, block,
                                  bram_tiles(tok.width, depth, family_name, geom) if block else 0,
                                  "input" if s == INPUT else design.units[s][0], k,
                                  tok.per_frame))
    if timing is None:  # the design alone: line and row buffers only
        return mems
    last = design.units[-1][0]
    depth = int(timing.fifo_depth[(-1, 0)])
    tok = design.output
    block = depth >= BUFFERED_MIN_DEPTH
    mems.append(StreamMem("fifo", "output", "output", tok.width, depth, block,
                          bram_tiles(tok.width, depth, family_name, geom) if block else 0,
                          last, 0, tok.per_frame))
    return mems


def glue_cost(design: Any, mems: list[StreamMem]) -> tuple[int, int]:
    """(LUT4, FF) of what the Dense estimate leaves out of a streamed design: window
    registers (kh*kw pixels + the stage-1 pixel), Resize hold registers, collected frames,
    and FIFOs in distributed RAM (a 16 x 4 LUT RAM = 2 LUT4, plus the read mux)."""
    from ..streamed.units import CollectUnit, ResizeUnit
    from ..streamed.window import WindowUnit

    ff = lut = 0
    for _, u, _ in design.units:
        if isinstance(u, WindowUnit) and u.reader is not None:  # the window a memory
            ff += u.ins[0].width + 40  # the pixel of stage 1, the window's base, the tap
            lut += 48  # the chunk's tap table and its address
        elif isinstance(u, WindowUnit):
            w = u.ins[0].width
            ff += (u.geo.kh * u.geo.kw + 1) * w + 16
            lut += 24
        elif isinstance(u, ResizeUnit):
            ff += u.ins[0].width + 16
            lut += u.ins[0].width + 16
        elif isinstance(u, CollectUnit):
            ff += u.pixels * u.ins[0].width
    for m in mems:
        if not m.block:  # LUT RAM; a line or row buffer's read registered
            lut += 2 * cells_of(m.width, m.depth) + 8
            ff += m.width if m.depth > 1 or m.kind != "fifo" else 0
        elif m.kind == "fifo":
            ff += m.width + 2 * int(m.depth).bit_length()
    return lut, ff


def design_timing(compiled: CompiledGraph, plan: dict[str, int], pipeline: str | None = None
                  ) -> tuple[Any, Any]:
    """The streamed design for a plan and its schedule (hdl/streamed/top.py)."""
    from ..streamed.top import schedule

    d = stream_design(compiled, plan, pipeline)
    return d, schedule(d)


def stream_design(compiled: CompiledGraph, plan: dict[str, int], pipeline: str | None = None) -> Any:
    """The streamed design (hdl/streamed/lower.py build_design) for a plan and register schedule
    (None: the compiled graph's), not elaborated."""
    from ..plan.circuit import resolve_plan
    from ..streamed.lower import StreamModel

    return StreamModel(compiled, resolve_plan(compiled, plan, pipeline)).design


def stream_layer(lut: int, ff: int, bram: int) -> Any:
    from .layer_cost import LayerCost

    # reuse 2: scaled like folded logic (control, muxes)
    return LayerCost("<stream: windows, line buffers, FIFOs>", 2, 0, int(lut), 1, int(ff), 0,
                     int(bram))


def _external(mems: list[StreamMem], over: int, frame_cycles: int, clock_mhz: float
              ) -> list[dict[str, Any]]:
    """The block-RAM FIFOs that leave the chip, largest first, until `over` BRAMs are freed."""
    out = []
    for m in sorted((m for m in mems if m.kind == "fifo" and m.block),
                    key=lambda m: (-m.bram, m.unit, m.port)):
        if over <= 0:
            break
        over -= m.bram
        rate = m.tokens_per_frame / max(1, frame_cycles)  # tokens per cycle, each way
        bpc = 2 * m.width * rate
        out.append({"fifo": f"{m.unit} input {m.port}", "node": m.node, "from": m.source,
                    "tokens": m.depth, "token_bits": m.width, "bits": m.bits,
                    "bytes": -(-m.bits // 8), "bram": m.bram,
                    "bandwidth_bits_per_cycle": round(bpc, 3),
                    "bandwidth_mbytes_s": round(bpc * clock_mhz / 8, 1),
                    "clock_mhz": clock_mhz})
    return out


def stream_block(compiled: CompiledGraph, plan: dict[str, int], family_name: str,
                 geom: tuple[int, int], bram_budget: int, weight_bram: int,
                 clock_mhz: float, pipeline: str | None = None
                 ) -> tuple[dict[str, Any], Any]:
    """The streamed part of a fit block for `plan`: II per pixel, frame cycles and latency,
    the memories, the BRAM they need on chip, and the FIFOs that would need external memory
    when it is over the budget. Also the LayerCost of the glue (for the estimate)."""
    d, tm = design_timing(compiled, plan, pipeline)
    mems = stream_memories(d, tm, family_name, geom)
    lut, ff = glue_cost(d, mems)
    lb = sum(m.bram for m in mems if m.kind != "fifo")
    fifo = sum(m.bram for m in mems if m.kind == "fifo")
    need = weight_bram + lb + fifo
    over = need - bram_budget
    # the FIFOs leave the chip (largest first) until the rest fits; weights and line
    # buffers stay (what they alone overflow is named as BRAM over the budget)
    fifo_over = min(fifo, over, fifo - max(0, bram_budget - weight_bram - lb))
    ext = _external(mems, fifo_over, tm.frame_cycles, clock_mhz) if fifo_over > 0 else []
    moved = sum(e["bram"] for e in ext)
    big = sorted((m for m in mems if m.kind == "fifo" and m.block), key=lambda m: -m.bits)
    blk = {"ii_per_pixel": tm.ii, "frame_cycles": tm.frame_cycles,
           "latency": tm.latency[0], "busiest": tm.busiest,
           "bram": {"weights": weight_bram, "line_buffers": lb, "fifos": fifo, "total": need,
                    "budget": bram_budget, "over": max(0, over),
                    "on_chip": need - moved},
           "line_buffer_bits": sum(m.bits for m in mems if m.kind != "fifo"),
           "fifo_bits": sum(m.bits for m in mems if m.kind == "fifo"),
           "largest_fifos": [{"fifo": f"{m.unit} input {m.port}", "node": m.node,
                              "from": m.source, "tokens": m.depth, "token_bits": m.width,
                              "bram": m.bram} for m in big[:5]],
           "external": ext}
    cap = lutram_cells(compiled.profile)
    if cap:  # 16 x 4 LUT-RAM cells: shallow FIFOs, line and row buffers out of block RAM
        blk["lutram"] = {"cells": sum(cells_of(m.width, m.depth) for m in mems if not m.block),
                         "budget": cap}
    return blk, stream_layer(lut, ff, lb)
