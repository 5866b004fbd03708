"""`--reuse auto` and the resource estimate for streamed models (hdl/streamed/units.py, hdl/streamed/lower.py).

Time, not the layer count, decides a streamed plan: one input pixel per handshake, and a
layer at a deeper level of the network sees fewer pixels per frame, so it may fold further at
no cost in throughput. A window unit (Conv) at reuse R occupies
`hp*wp + (R - 1) * ho*wo` cycles per frame (every padded position one step, every window R);
a Flatten->Dense (FlatDense) or a whole-vector Dense R. For a frame budget of T cycles each
layer takes its largest candidate reuse within T (fit.candidates); T runs over multiples of
T0, the busiest unit at reuse 1, and the first T whose estimate fits the device's logic
(LUT x margin, FF x margin, DSP) and its block RAM (weight ROMs + line buffers) wins.

The streamed memories are counted from the design itself (`stream_memories`, the exact
depths of hdl/streamed/top.py `schedule` for the plan): line buffers (kh - 1 per window unit,
padded width deep), Resize row buffers (in LUT RAM where shallower than the family's
`lutram_depth`), and every FIFO (depth >= BUFFERED_MIN_DEPTH: block RAM, else distributed
RAM in LUTs), each packed into the family's block RAM configurations
(`bram_tiles`: DP16KD 512x36 .. 16384x1 on ECP5, SB_RAM40_4K 256x16 .. 2048x2 on iCE40).

FIFOs are the one memory a plan cannot shrink (their depth is the structural lag of a skip
connection: the long path's rows of halo, pools and resizes, in tokens), so when they do not
fit the plan is still made and names them: the largest FIFOs move to external memory (size
and read + write bandwidth at the scheduled rate) until the rest fits on chip. The circuit
has no external-memory port, so `build` refuses such a plan (`refusal`), while compile and
verify (simulation) take it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ..errors import HdlError
from ..plan.schedule import lutram_cells
from ..streamed.memory import cells_of
from .layer_cost import bram_tiles
from .threshold_cost import threshold_costs, threshold_layers


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


# -- the plan -------------------------------------------------------------------------------
def _busy_fn(g: Any, node: Any, lay: dict[str, Any]) -> tuple[int, int]:
    """(base, per_extra_R): the layer's unit occupies base + (R - 1) * per cycles/frame."""
    from ...graphs.ops import RECURRENT, ConvAttrs, GruAttrs, Op
    from ..streamed.lower_context import geometry
    from ..streamed.recurrent import TAIL

    if node.op in RECURRENT:  # T steps of (the folded gate sums + the tail) each
        t = int(g.tensor(g.activations(node)[0]).shape[0])
        passes = 2 if node.op == Op.GRU and not GruAttrs.of(node).lbr else 1
        return t * passes * (TAIL["LSTM"] + 2), t * passes
    if node.op == Op.CONV:
        a = ConvAttrs.of(node)
        x = g.activations(node)[0]
        geo = geometry(tuple(g.tensor(x).shape), a.kernel, a.strides, a.pads,
                       f"node {node.name}")
        return geo.hp * geo.wp, geo.ho * geo.wo
    shp = g.tensor(g.activations(node)[0]).shape
    if len(shp) >= 2:  # a Dense per token of a sequence: R cycles for each of its T tokens
        t = int(np.prod(shp[:-1]))
        return t, t
    return 1, 1  # FlatDense (R = pixels x cycles per pixel) or a whole-vector Dense


def base_cycles(g: Any) -> int:
    """T0: cycles per frame of the busiest unit at reuse 1 (every window op's padded
    positions, Resize outputs, the input pixels)."""
    from ...graphs.ops import AvgPoolAttrs, ConvAttrs, MaxPoolAttrs, Op
    from ..streamed.lower_context import geometry

    shp = g.tensor(g.inputs[0]).shape
    t0 = int(np.prod(shp[:-1]))
    attrs = {Op.CONV: ConvAttrs, Op.MAX_POOL: MaxPoolAttrs, Op.AVG_POOL: AvgPoolAttrs}
    for n in g.nodes:
        if n.op in (Op.LSTM, Op.GRU):
            t0 = max(t0, _busy_fn(g, n, {})[0])
        elif n.op in attrs:
            a = attrs[n.op].of(n)
            x = g.activations(n)[0]
            geo = geometry(tuple(g.tensor(x).shape), a.kernel, a.strides, a.pads,
                           f"node {n.name}")
            t0 = max(t0, geo.hp * geo.wp)
        elif n.op == Op.RESIZE:
            t0 = max(t0, int(np.prod(g.tensor(n.outputs[0]).shape[:-1])))
        elif n.op == Op.ATTENTION:  # the load and T rows (hdl/streamed/attention.py)
            from ..streamed.attention import sequence_cycles
            t0 = max(t0, sequence_cycles(*(int(g.tensor(n.inputs[k]).shape[-2])
                                           for k in (0, 1))))
    return t0


def within_time(cs: list[int], base: int, per: int, t: int) -> list[int]:
    """The candidates whose unit stays within t cycles per frame (at least the first),
    thinned out geometrically (every one up to 16, then steps of about 1/8) plus the
    largest: the cost of a fold changes slowly with R."""
    ok = [c for c in cs if base + (c - 1) * per <= t] or cs[:1]
    out, last = [], 0
    for c in ok:
        if c <= 16 or c >= last * 9 // 8:
            out.append(c)
            last = c
    if out[-1] != ok[-1]:
        out.append(ok[-1])
    return out


def plan_at(cands: dict[str, list[int]], busy: dict[str, tuple[int, int]], t: int,
            score: Any = None) -> dict[str, int]:
    """Each layer's reuse within t cycles per frame: the cheapest by `score(node, r)`
    (ties: the smaller R, lower latency), or without a score the largest."""
    out = {}
    for name, cs in cands.items():
        ok = within_time(cs, *busy[name], t)
        out[name] = ok[-1] if score is None else min(ok, key=lambda r: (score(name, r), r))
    return out


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


def _stream_layer(lut: int, ff: int, bram: int) -> Any:
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
    return blk, _stream_layer(lut, ff, lb)


# per-resource weights of a layer's score (LUT, FF, BRAM), tried in turn at each frame time:
# block RAM is the scarce one in a streamed design (line buffers and FIFOs need it too)
WEIGHTINGS = ((1.0, 1.0, 1.0), (2.0, 1.0, 0.25), (4.0, 2.0, 0.05), (1.0, 1.0, 4.0))


def fit_streamed(compiled: CompiledGraph, fx: Any, search: Any, pipeline: str | None = None) -> Any:
    """--reuse auto for a streamed model (fit.fit_reuse calls it): the least frame budget T
    (a multiple of T0) and layer scoring whose plan fits the logic (LUT, FF with the
    family's margin, DSP) and whose weight ROMs fit the block RAM; the streamed memories
    and glue are then counted from the plan's design (see the module docstring). When no
    plan fits, the one least over the logic budget is returned with what is over named in
    its `stream` block (build refuses it: `refusal`). HdlError as fit_reuse when no plan is
    within the HDL backend's size limits."""
    from .devices import family
    from .estimate import estimate, lut_scale
    from .nextpnr import clock_mhz

    g = compiled.graph
    nodes = {n.name: n for n in g.nodes}
    busy = {lay["node"]: _busy_fn(g, nodes[lay["node"]], lay) for lay in fx.layers}
    cands = {n: c for n, c in search.cands.items()}
    t0 = base_cycles(g)
    geom = tuple(fx.layers[0]["bram_geom"]) if fx.layers else (36, 512)
    top_t = max(b + (cands[n][-1] - 1) * p for n, (b, p) in busy.items())
    cal = family(fx.family)["fit"]
    scale = lut_scale(cal, fx.lean)
    lay_of = {lay["node"]: lay for lay in fx.layers}
    bud = fx.budget
    thl = threshold_layers(compiled)

    def scorer(wl: float, wf: float, wb: float) -> Any:
        def score(node: str, r: int) -> float:
            c = fx.cost(lay_of[node], r)
            lut = (scale if r > 1 else cal.get("r1_lut_scale", 1.0)) * (
                c.lut + c.multipliers * c.lut_per_mul)
            return (wl * lut / max(1, bud["lut"]) + wf * c.ff / max(1, bud["ff"])
                    + wb * c.bram / max(1, bud["bram"]))
        return score

    # windows and line buffers (no FIFOs: those need the schedule) of the fastest and the
    # slowest plans' designs, the least of each (a window read from its memory at a high
    # reuse has no register): the search's fit and overuse, which `full` then checks
    glues = []
    for tt in sorted({t0, top_t}):
        d0 = stream_design(compiled, plan_at(cands, busy, tt), pipeline)
        m0 = stream_memories(d0, None, fx.family, geom)
        glues.append((*glue_cost(d0, m0), sum(m.bram for m in m0)))
    glue0 = _stream_layer(*(min(x) for x in zip(*glues, strict=True)))

    def overuse(est: dict[str, int]) -> float:
        return max((est.get("route", est["lut"]) + fx.overhead) / (bud["lut"] * fx.lut_margin),
                   (est["ff"] + fx.overhead) / (bud["ff"] * (fx.ff_margin or fx.lut_margin)),
                   est["bram"] / max(1, bud["bram"]))

    def full(trial: dict[str, int]) -> tuple[dict[str, int], dict[str, Any], Any, list[Any]]:
        """The plan's estimate with what the search leaves out: its FIFOs (the schedule) and
        the Threshold searches at its own frame time (their ROMs counted with the
        weights)."""
        thr = threshold_costs(thl, _frame_time(busy, trial), fx.family, geom, trial)
        costs = fx.costs(trial) + thr
        blk, glue = stream_block(compiled, trial, fx.family, geom, bud["bram"],
                                 sum(c.bram for c in costs), clock_mhz(fx.prof, None),
                                 pipeline)
        est = estimate(costs + [glue], bud["dsp"], fx.family, fx.io, lean=fx.lean)
        est["lut"] += fx.overhead
        est["bram"] = blk["bram"]["total"]
        return est, blk, glue, thr

    def over_full(est: dict[str, int], blk: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = _over(est, fx)
        lr = blk.get("lutram")
        if lr and lr["cells"] > lr["budget"]:  # nextpnr would find no placement
            out["lutram"] = {"need": lr["cells"], "budget": lr["budget"]}
        return out

    plan, any_within, t, step = None, False, t0, 1
    tried: list[tuple[float, int, dict[str, int]]] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    done: dict[tuple[tuple[str, int], ...], Any] = {}
    while plan is None:
        for w in (*WEIGHTINGS, None):  # None: every layer at its largest reuse within t
            trial = plan_at(cands, busy, t, None if w is None else scorer(*w))
            key = tuple(sorted(trial.items()))
            if key in seen or not search.within(trial):
                continue
            seen.add(key)
            any_within = True
            est = estimate(fx.costs(trial) + [glue0]
                           + threshold_costs(thl, t, fx.family, geom, trial),
                           bud["dsp"], fx.family, fx.io, lean=fx.lean)
            if fx.fits_estimate(est):
                # the search's glue has no FIFOs: the whole plan decides (the ResNet-8 plan
                # it once took was ~8k flip-flops over with them, and build refused it)
                done[key] = res = full(trial)
                if not over_full(res[0], res[1]):
                    plan = trial
                    break
                est = {**res[0], "lut": res[0]["lut"] - fx.overhead}
            tried.append((overuse(est), t, trial))
        if t >= top_t:
            break
        step = step + 1 if step < 4 else step * 5 // 4
        t = min(top_t, t0 * step)
    if plan is None and not tried:
        raise fx.no_fit(compiled, search, any_within)
    fitted = plan is not None
    if plan is None:  # the least frame time within 10 % of the least overuse
        least = min(o for o, _, _ in tried)
        plan = min((x for x in tried if x[0] <= least * 1.1), key=lambda x: x[1])[2]
    key = tuple(sorted(plan.items()))
    est, blk, glue, thr = done[key] if key in done else full(plan)
    fp = fx.plan(plan)
    fp.estimate = est
    fp.ii = blk["ii_per_pixel"]
    fp.layers += [c.to_json() for c in thr]
    fp.layers.append(glue.to_json())
    blk["logic_fits"] = fitted
    blk["over"] = over_full(est, blk)
    fp.stream = blk
    return fp


def _frame_time(busy: dict[str, tuple[int, int]], plan: dict[str, int]) -> int:
    """The busiest layer's cycles per frame at the plan's reuse (the frame time)."""
    return max([b + (int(plan.get(n, 1)) - 1) * p for n, (b, p) in busy.items()] + [1])


def _over(est: dict[str, int], fx: Any) -> dict[str, dict[str, int]]:
    """Resources over the budget --reuse auto keeps to (LUT, FF: the family's margin;
    DSP; block RAM: the device)."""
    b, m = fx.budget, fx.lut_margin
    lim = {"lut": int(b["lut"] * m), "ff": int(b["ff"] * (fx.ff_margin or m)), "dsp": b["dsp"], "bram": b["bram"]}
    need = {"lut": est.get("route", est["lut"] - fx.overhead) + fx.overhead,
            "ff": est["ff"] + fx.overhead,
            "dsp": est["dsp"], "bram": est["bram"]}
    return {k: {"need": int(need[k]), "budget": int(lim[k])} for k in lim if need[k] > lim[k]}


def refusal(compiled: CompiledGraph, fp: Any) -> str | None:
    """Why a streamed plan cannot be built on its device, as one line, or None: logic over
    the budget, and FIFOs that would need external memory."""
    blk = getattr(fp, "stream", None) or {}
    over = blk.get("over") or {}
    if not over:
        return None
    b = blk["bram"]
    names = {"lut": fp.lut_unit, "ff": "FF", "dsp": "DSP", "bram": "BRAM",
             "lutram": "LUT-RAM cells of 16x4"}
    what = ", ".join(f"{v['need']:,} {names[k]} (budget {v['budget']:,})"
                     for k, v in over.items())
    ext = blk.get("external") or []
    parts = "; ".join(f"FIFO {e['fifo']} ({e['node']}, from {e['from']}): {e['tokens']:,} "
                      f"tokens x {e['token_bits']} bits = {e['bram']} BRAM, "
                      f"{e['bandwidth_mbytes_s']:g} MB/s at {e['clock_mhz']:g} MHz"
                      for e in ext[:3])
    more = f" and {len(ext) - 3} more" if len(ext) > 3 else ""
    alone = b["weights"] + b["line_buffers"]
    mem = (f"; block RAM: {b['weights']} weights + {b['line_buffers']} line buffers"
           + (f" (alone over the device's {b['budget']})" if alone > b["budget"] else "")
           + f" + {b['fifos']:,} FIFOs; FIFOs that would need external memory "
           f"({sum(e['bytes'] for e in ext):,} bytes in all), which the circuit does not "
           f"have: {parts}{more}" if ext else "")
    return (f"model {getattr(compiled.graph, 'name', '?')} does not fit {fp.device} at its "
            f"best streamed plan (II {blk['ii_per_pixel']} per pixel, latency "
            f"{blk['latency']:,} cycles per frame): it needs {what}{mem}; see the whole "
            f"plan with modelcircuit compile --target verilog --reuse auto --profile "
            f"{fp.device}")


def check_streamed(compiled: CompiledGraph, fx: Any, fp: Any, plan: dict[str, int],
                   pipeline: str | None = None) -> dict[str, int] | None:
    """An explicit reuse of a streamed model (fit.check_plan): the glue and the streamed
    memories added to the estimate (fp.estimate: as fit_streamed counts a plan, so `--reuse
    auto` and the same plan given explicitly show one number); BRAM over the device is
    refused naming the FIFOs. Returns the estimate with the multipliers in logic at their
    least cost (what check_plan refuses on), None when the circuit refuses the plan itself."""
    from .estimate import estimate
    from .nextpnr import clock_mhz
    from .tools import FitError

    geom = tuple(fx.layers[0]["bram_geom"]) if fx.layers else (36, 512)
    g = compiled.graph
    nodes = {n.name: n for n in g.nodes}
    busy = {lay["node"]: _busy_fn(g, nodes[lay["node"]], lay) for lay in fx.layers}
    thr = threshold_costs(threshold_layers(compiled), _frame_time(busy, plan), fx.family,
                          geom, plan)
    costs = fx.costs(plan) + thr
    wb = sum(c.bram for c in costs)
    try:
        blk, glue = stream_block(compiled, plan, fx.family, geom, fx.budget["bram"], wb,
                                 clock_mhz(fx.prof, None), pipeline)
    except HdlError:
        return None  # the circuit refuses it itself, with its own message
    est, low = (estimate(costs + [glue], fx.budget["dsp"], fx.family, fx.io, least, fx.lean)
                for least in (False, True))
    for e in (est, low):
        e["lut"] += fx.overhead
        e["bram"] = blk["bram"]["total"]
    blk["over"] = {k: v for k, v in _over(est, fx).items() if k == "bram"}
    fp.estimate, fp.stream = est, blk
    fp.layers.append(glue.to_json())
    why = refusal(compiled, fp)
    if why:
        raise FitError(why)
    return low


def plan_lines(fit: dict[str, Any]) -> list[str]:
    """A streamed plan (a fit block with "stream") as text lines for `inspect`: timing,
    block RAM by kind, what is over the budget, the FIFOs that would need external memory."""
    st, e = fit["stream"], fit.get("estimate", {})
    b = st["bram"]
    out = [f"streamed plan: II {st['ii_per_pixel']} cycles per input pixel, "
           f"{st['frame_cycles']:,} cycles per frame, latency {st['latency']:,} cycles; "
           f"{e.get('lut', 0):,} {fit.get('lut_unit', 'LUT4')}, {e.get('ff', 0):,} FF, "
           f"{e.get('dsp', 0)} DSP; block RAM {b['total']:,} of {b['budget']} "
           f"({b['weights']} weights, {b['line_buffers']} line buffers, {b['fifos']:,} FIFOs)"]
    over = st.get("over") or {}
    if over:
        out.append("over the budget: " + ", ".join(
            f"{k.upper()} {v['need']:,} > {v['budget']:,}" for k, v in over.items()))
    for x in st.get("external") or []:
        out.append(f"external memory: FIFO {x['fifo']} ({x['node']}, from {x['from']}) "
                   f"{x['tokens']:,} tokens x {x['token_bits']} bits = {x['bytes']:,} bytes "
                   f"({x['bram']} BRAM), {x['bandwidth_bits_per_cycle']:g} bits/cycle "
                   f"read + write = {x['bandwidth_mbytes_s']:g} MB/s at {x['clock_mhz']:g} MHz")
    return out
