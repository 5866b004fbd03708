"""LUT RAM of a streamed design: how many of the device's 16 x 4 cells a memory takes, and
which line and row buffers keep LUT RAM within the device's cells (the rest: block RAM).
The lowering (lower.py) budgets, the fit (hdl/flow/stream_cost.py) counts with the same
cell formula."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .window import WindowUnit

if TYPE_CHECKING:
    from .top import StreamDesign

# of the device's LUT-RAM cells, the share the streamed memories may take (the rest: room for
# the placer, which packs them only into some slices)
LUTRAM_MARGIN = 0.9


def cells_of(width: int, depth: int) -> int:
    """16 x 4 LUT-RAM cells of a width x depth memory."""
    return -(-width // 4) * -(-depth // 16)


def budget_lut_ram(d: StreamDesign, cells: int) -> None:
    """Line and row buffers keep LUT RAM (units.ram_style) only within the device's LUT-RAM
    cells, after every FIFO is counted as if shallow (one cell per 4 bits of its token: an
    upper bound, their depths come later from the schedule); the rest go back to block RAM,
    in design order. An 8-bit DS-CNN's depthwise line buffers (8 x 128 cells) on top of its
    FIFOs were 2,633 of an ECP5-85k's 2,613 and nextpnr found no placement."""
    if cells <= 0:
        return
    left = int(cells * LUTRAM_MARGIN) - sum(-(-t.width // 4) for _, u, _ in d.units for t in u.ins)
    left -= -(-d.output.width // 4)
    for _, u, _ in d.units:
        if getattr(u, "ram_style", "block") != "distributed":
            continue
        mems = (u.memories() if isinstance(u, WindowUnit)  # its line buffers or window memory
                else [(u.ins[0].width, u.w)] * (1 if u.sh > 1 else 0))
        need = sum(cells_of(w, depth) for w, depth in mems)
        if need <= left:
            left -= need
        else:
            u.ram_style = "block"
