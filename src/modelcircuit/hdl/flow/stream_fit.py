"""`--reuse auto` for streamed models (hdl/streamed/units.py, hdl/streamed/lower.py): the
search for a plan, and the checks and words about a plan that does not fit.

For a frame budget of T cycles each layer takes its largest candidate reuse within T
(fit.candidates; the cycles per frame of a layer at a reuse: hdl/flow/stream_time.py); T runs
over multiples of T0, the busiest unit at reuse 1, and the first T whose estimate fits the
device's logic (LUT x margin, FF x margin, DSP) and its block RAM (weight ROMs + line buffers
+ FIFOs, counted from the plan's design: hdl/flow/stream_cost.py) wins.

FIFOs are the one memory a plan cannot shrink (their depth is the structural lag of a skip
connection: the long path's rows of halo, pools and resizes, in tokens), so when they do not
fit the plan is still made and names them: the largest FIFOs move to external memory (size
and read + write bandwidth at the scheduled rate) until the rest fits on chip. The circuit
has no external-memory port, so `build` refuses such a plan (`refusal`), while compile and
verify (simulation) take it as it is.
"""

from __future__ import annotations

from typing import Any

from ...graphs.compiled import CompiledGraph
from ..errors import HdlError
from .stream_cost import glue_cost, stream_block, stream_design, stream_layer, stream_memories
from .stream_time import base_cycles, busy_fn, frame_time, plan_at
from .threshold_cost import threshold_costs, threshold_layers

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
    busy = {lay["node"]: busy_fn(g, nodes[lay["node"]], lay) for lay in fx.layers}
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
    glue0 = stream_layer(*(min(x) for x in zip(*glues, strict=True)))

    def overuse(est: dict[str, int]) -> float:
        return max((est.get("route", est["lut"]) + fx.overhead) / (bud["lut"] * fx.lut_margin),
                   (est["ff"] + fx.overhead) / (bud["ff"] * (fx.ff_margin or fx.lut_margin)),
                   est["bram"] / max(1, bud["bram"]))

    def full(trial: dict[str, int]) -> tuple[dict[str, int], dict[str, Any], Any, list[Any]]:
        """The plan's estimate with what the search leaves out: its FIFOs (the schedule) and
        the Threshold searches at its own frame time (their ROMs counted with the
        weights)."""
        thr = threshold_costs(thl, frame_time(busy, trial), fx.family, geom, trial)
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
    busy = {lay["node"]: busy_fn(g, nodes[lay["node"]], lay) for lay in fx.layers}
    thr = threshold_costs(threshold_layers(compiled), frame_time(busy, plan), fx.family,
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
