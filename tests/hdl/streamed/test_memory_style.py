"""Where a streamed design keeps its line buffers, and what a folded Conv copies of its
window (hdl/streamed/units.py WindowUnit, hdl/units/dense_fold.py): an 8-bit ResNet-8 on an
ECP5-85k needed 239 block RAMs (10-deep, 512-bit line buffers at 15 DP16KD each) and spent
two window copies per folded Conv. Bit-exactness of the held-window fold is shown by the
Verilator runs of tests/hdl/streamed/test_stream.py (its folded Conv c2)."""

from __future__ import annotations

import pytest

from modelcircuit.graphs.pipeline import compile_graph
from modelcircuit.hdl.flow.stream_cost import design_timing, stream_memories
from modelcircuit.hdl.streamed.window import WindowUnit
from modelcircuit.hdl.units.dense import Dense

from .test_stream import _G, REUSE_2D, graph_2d


def _wide(w: int):
    """One 3x3 Conv over a 3 x w frame (padded w + 2 wide), folded."""
    g = _G(5)
    x = g.tensor("x", (3, w, 4))
    c = g.conv("c", x, (3, 3), 3, (3, w, 3), (1, 1), (1, 1, 1, 1))
    return g.graph("wide", x, c)


def _windows(cg, reuse):
    d, tm = design_timing(cg, reuse)
    return d, tm, [u for _, u, _ in d.units if isinstance(u, WindowUnit)]


@pytest.mark.parametrize("profile,style", [("ecp5-85k", "distributed"),
                                           ("ice40-up5k", "block"), (None, "block")])
def test_shallow_line_buffers_in_lut_ram_where_the_family_has_it(profile, style) -> None:
    cg = compile_graph(graph_2d(), precision="fixed<12,5>", profile=profile)
    d, tm, wins = _windows(cg, REUSE_2D)
    assert wins and all(u.geo.wp < 16 for u in wins)
    assert {u.ram_style for u in wins} == {style}
    lbs = [m for m in stream_memories(d, tm, "ecp5") if m.kind == "line buffer"]
    assert lbs and all(m.block == (style == "block") for m in lbs)
    assert all((m.bram > 0) == m.block for m in lbs)  # LUT RAM needs no block RAM


def test_a_row_of_sixteen_or_more_stays_in_block_ram() -> None:
    for w, style in ((13, "distributed"), (14, "block"), (30, "block")):  # wp = w + 2
        cg = compile_graph(_wide(w), precision="fixed<8,3>", profile="ecp5-85k")
        _, _, (win,) = _windows(cg, {"c": 4})
        assert (win.geo.wp, win.ram_style) == (w + 2, style)
        assert win.describe()["line_buffers"]["style"] == style


def test_a_folded_window_dense_reads_the_held_window() -> None:
    """The window unit tells its folded Dense that x0 is held; no other holder does."""
    cg = compile_graph(graph_2d(), precision="fixed<12,5>")
    d, _, wins = _windows(cg, REUSE_2D)
    folded = [u.inner for u in wins if isinstance(u.inner, Dense) and u.inner.reuse > 1]
    assert folded and all(f.x_held for f in folded)
    others = [getattr(u, "unit", None) for _, u, _ in d.units if not isinstance(u, WindowUnit)]
    assert not any(isinstance(o, Dense) and o.x_held for o in others)


def test_line_buffers_leave_lut_ram_to_the_fifos_when_it_runs_short() -> None:
    """Every FIFO counted first (one 16x4 cell per 4 bits of its token), then line buffers in
    design order while cells are left; none with no budget."""
    from modelcircuit.hdl.streamed.memory import LUTRAM_MARGIN, budget_lut_ram, cells_of

    cg = compile_graph(graph_2d(), precision="fixed<12,5>", profile="ecp5-85k")
    fifo = None
    for cells, want_block in ((10**6, 0), (0, 0), (None, "some"), (1, "all")):
        d, _, wins = _windows(cg, REUSE_2D)
        lbs = [u for u in wins if u.memories()]
        assert lbs and all(u.ram_style == "distributed" for u in lbs)
        # c2 (folded, a pixel a chunk) keeps its window in one memory of kh rows
        assert [u.memories() for u in lbs if u.reader is not None] == \
            [[(u.ins[0].width, u.geo.kh * u.geo.wp)] for u in lbs if u.reader is not None] != []
        fifo = sum(-(-t.width // 4) for _, u, _ in d.units for t in u.ins) + \
            -(-d.output.width // 4)
        need = [sum(cells_of(w, dp) for w, dp in u.memories()) for u in lbs]
        if cells is None:  # room for the first line buffer only
            cells = -(-(fifo + need[0]) * 10 // int(LUTRAM_MARGIN * 10))
        budget_lut_ram(d, cells)
        styles = [u.ram_style for u in lbs]
        if want_block == 0:
            assert styles == ["distributed"] * len(lbs)
        elif want_block == "all":
            assert styles == ["block"] * len(lbs)
        else:
            assert styles[0] == "distributed" and "block" in styles[1:], styles


def test_a_plan_over_the_lut_ram_is_refused_in_one_line(monkeypatch) -> None:
    from modelcircuit.graphs import profiles
    from modelcircuit.hdl.flow import fit_reuse, fpga_profile
    from modelcircuit.hdl.flow.stream_fit import refusal

    real = profiles.fpga_families()
    fams = {**real, "ecp5": {**real["ecp5"], "lutram_cells_per_lut": 2e-5}}  # 1 cell
    monkeypatch.setattr(profiles, "fpga_families", lambda: fams)
    cg = compile_graph(graph_2d(), precision="fixed<12,5>", profile="ecp5-85k")
    fp = fit_reuse(cg, fpga_profile("ecp5-85k"))
    assert fp.stream["lutram"]["cells"] > fp.stream["lutram"]["budget"]
    msg = refusal(cg, fp)
    assert msg is not None and "LUT-RAM cells of 16x4" in msg and "\n" not in msg
