"""`--reuse auto`: per-layer reuse factors that fit an FPGA profile at the least II.

Estimates per Dense layer at reuse R (the structure of hdl/dense.py, `reuse.Fold`): inputs
folded first (R_in chunks of c inputs), then outputs when R > N_in (R_out groups of m);
time-shared multipliers counted exactly as the HDL does (`reuse.fold_multipliers`, which
matches the cost ledger's count at R = 1); coefficient ROMs (R > 1) in block RAM when at
least 16 deep (else LUTs), adder trees in LUTs; products beyond the DSP budget become
shift-add logic (the flow turns them into logic with yosys `booth`, see fpga.synthesize),
costed in LUTs.

Search: the model's II is the largest layer R. For II = 1, 2, … (each layer at
min(II, N_in * N_out), its cheapest fold at that II) the first II whose estimate fits the budget
(DSP blocks, block RAMs, and LUTs x `lut_margin` for routing headroom) wins; then each layer takes the
smallest R <= II that still fits (lower latency). No fit even at the largest reuse: FitError
naming the budget and the estimate.

Margins (measured on 2 cores, nextpnr 0.11): iCE40 at 0.85 of its cells (digits at 81 %
placed and routed in 27 s, 37 MHz). ECP5 at 0.6 of its LUTs (`ECP5_MARGIN`): the jet tagger
at 79 % (66.6k COMB) placed in 18 min and had not routed after 20 more; and a fully
parallel layer (R = 1) routes like 1.5 times its LUTs (`R1_ROUTE`): every input fans out
to every output's adder tree; digits at R = 1 (41k COMB, 49 % of an 85k) did not route in
13 min.

The LUT constants were measured with this flow (yosys 0.70 / nextpnr 0.11, digits MLP): a
coefficient ROM of depth D and width B costs ~B*ceil(D/16) LUT4 (plus muxes), a soft
product Wx x Wc ~ Wx*Wc LUT4, an adder of width W ~W LUT4 (carry chain).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .fpga import FlowError


class FitError(FlowError):
    """No reuse plan fits the device."""


@dataclass
class LayerCost:
    node: str
    reuse: int
    multipliers: int
    lut: int          # LUTs without the multipliers
    lut_per_mul: int  # LUTs for one multiplier made of logic
    ff: int
    latency_extra: int
    bram: int = 0
    soft: bool = False  # products narrow enough that the flow builds them in logic

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FitPlan:
    reuse: dict[str, int]
    ii: int
    device: str
    budget: dict[str, int]
    estimate: dict[str, int]
    layers: list[dict[str, Any]] = field(default_factory=list)
    lut_unit: str = "LUT4"
    margin: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"reuse": dict(self.reuse), "ii": self.ii, "device": self.device,
                "budget": dict(self.budget), "estimate": dict(self.estimate),
                "lut_unit": self.lut_unit, "margin": self.margin,
                "layers": list(self.layers)}


def _width(g: Any, name: str, default: int = 16) -> int:
    t = g.tensor(name).dtype
    return int(getattr(t, "width", default) or default)


def dense_layers(compiled: Any) -> list[dict[str, Any]]:
    from ..graphs.types import parse_type

    g = compiled.graph
    out = []
    for n in g.nodes:
        if n.op != "Dense" or n.inputs[1] not in g.constants:
            continue
        w = np.asarray(g.constants[n.inputs[1]], dtype=np.int64)
        acc = n.get("acc")
        accw = parse_type(acc).width if acc else 32
        out.append({"node": n.name, "w": w, "wx": _width(g, n.inputs[0]),
                    "ww": _width(g, n.inputs[1]), "wo": _width(g, n.outputs[0]),
                    "acc": accw + 1})
    return out


# block RAM as a ROM at its widest: ECP5 DP16KD 512 x 36, iCE40 SB_RAM40_4K 256 x 16
BRAM_GEOMETRY = {"ecp5": (36, 512), "ice40": (16, 256)}


def layer_cost(layer: dict[str, Any], r: int, lean: bool = False) -> LayerCost:
    from .reuse import fold_multipliers

    w = layer["w"]
    n_in, n_out = w.shape
    wx, ww, acc, wo = layer["wx"], layer["ww"], layer["acc"], layer["wo"]
    mults = fold_multipliers(w, r)
    if r == 1:
        from .dense import PIPELINES, csd

        # the FPGA flow's "fmax" schedule: constants of few signed digits are shift-add
        # leaves of the tree (no multiplier), products registered, 2 levels per stage
        nz = w != 0
        a = np.abs(w)
        p2 = nz & ((a & (a - 1)) == 0)
        ndig = np.vectorize(lambda v: len(csd(v)), otypes=[np.int64])(w)
        sa = nz & ~p2 & (ndig <= PIPELINES["fmax"].csd_digits)
        mults = int((nz & ~p2 & ~sa).sum())
        terms = int(np.where(sa, ndig, nz.astype(np.int64)).sum()) + n_out
        adders = max(0, terms - n_out)
        lut = adders * acc + n_out * wo
        levels = max(1, math.ceil(math.log2(max(2, terms / max(1, n_out)))))
        ff = n_out * wo + (levels // 2) * n_out * acc + mults * acc
        # constant products as shift-add: about half the bits of a generic product
        return LayerCost(layer["node"], 1, mults, int(lut), max(1, wx * ww // 2), int(ff), 0, 0)
    from .dense import BRAM_MIN_DEPTH, FOLD_STAGES, LEAN_FOLD_STAGES
    from .reuse import fold_shape

    f = fold_shape(n_in, n_out, r)
    lanes = f.c * f.m
    cw = ww + 1
    width, depth = mults * cw, f.steps
    if mults and depth >= BRAM_MIN_DEPTH:  # coefficient ROM in block RAM
        bw, bd = layer.get("bram_geom", BRAM_GEOMETRY["ecp5"])
        bram = max(-(-width // bw) * -(-depth // bd), -(-width * depth // (bw * bd)))
        rom = 0
    else:
        bram = 0
        rom = width * max(1, -(-depth // 16)) * (1 if depth <= 16 else 2)
    tree = max(0, lanes - f.m) * acc
    if lean:
        # "area" schedule: input rotation (a mux per bit), one product register per lane,
        # the accumulators (carry chain), the requantization per lane and the output
        # registers; no extra coefficient/chunk/product registers
        pw = wx + cw
        ff = f.r_in * f.c * wx + f.c * wx + lanes * pw + f.m * acc + n_out * wo
        lut = rom + tree + f.r_in * f.c * wx + 2 * f.m * acc + n_out * wo + 60
        return LayerCost(layer["node"], r, mults, int(lut), max(1, 2 * wx * cw), int(ff),
                         depth + LEAN_FOLD_STAGES, int(bram))
    accum = f.m * acc * 2 + n_out * wo
    lut = rom + tree + accum + depth.bit_length() * 6
    levels = max(1, math.ceil(math.log2(max(2, f.c))))
    ff = (f.r_in * f.c * wx + 3 * f.c * wx + 2 * width + 2 * lanes * acc + f.m * acc
          + n_out * wo + (levels // 2) * lanes * acc)
    return LayerCost(layer["node"], r, mults, int(lut), max(1, wx * cw), int(ff),
                     depth + FOLD_STAGES, int(bram))


# measured / modelled LUTs. Old folded structure, digits MLP at R=64: iCE40 7168 LUT4 vs
# 5440 (fixed<4,2>), ECP5 9800 COMB vs 7492 (fixed<6,3>). Pipelined folds with block-RAM
# ROMs (fixed<6,3>, ecp5-25k, nextpnr TRELLIS_COMB, a carry cell counts 2): R=64 6119 vs
# 4397, R=16/16/6 25244 vs 19986. The model leaves out control, muxing, register-enable
# and carry-packing logic, so scale it.
LUT_SCALE = 1.75
# R = 1 (constant products as shift-add / booth): digits MLP fixed<6,3> on ecp5-85k gave
# 41k COMB against a raw model of 48.6k, the tiny MLP on ecp5-25k 3671 against 3460.
R1_LUT_SCALE = 1.0


# iCE40 ("area" schedule): a logic cell holds one LUT4 and one flip-flop, and a register fed
# by another register takes a cell of its own, so the estimate is in cells: the layers'
# LUTs, soft products, and the UART wrapper (its input buffer is such a register). Measured
# (yosys 0.70 / nextpnr-ice40, digits fixed<6,3>, placed in the UART wrapper): R 256/256/128
# 3995 cells against a raw model of 3280, R 128/128/64 5990 against 4908, 192/192/96 4858
# against 3976; fixed<4,2> R 128/128/64 4045 against 3160.
ICE40_LC_SCALE = 1.25
ICE40_MARGIN = 0.85
ECP5_MARGIN = 0.6
R1_ROUTE = 1.5


def estimate(costs: list[LayerCost], dsp_budget: int, family: str = "ecp5",
             io_bits: tuple[int, int] = (0, 0)) -> dict[str, int]:
    mults = sum(c.multipliers for c in costs)
    dsp = min(sum(c.multipliers for c in costs if not c.soft), dsp_budget)
    # the flow keeps the widest products in DSPs; assume the rest cost the layer average
    soft = mults - dsp
    per = (sum(c.lut_per_mul * c.multipliers for c in costs) / mults) if mults else 0
    if family == "ice40":
        in_bits, out_bits = io_bits
        wrapper = in_bits + 8 * -(-out_bits // 8) + 2 * out_bits + 250
        lut = ICE40_LC_SCALE * (sum(c.lut for c in costs) + soft * per + wrapper)
    else:
        lut = (sum((LUT_SCALE if c.reuse > 1 else R1_LUT_SCALE) * c.lut for c in costs)
               + LUT_SCALE * soft * per)
    # what the margin is checked against: on ECP5 fully parallel layers count extra for
    # routing (the iCE40 cell estimate is calibrated on placed designs as it is)
    route = lut if family == "ice40" else (
        lut + (R1_ROUTE - 1) * R1_LUT_SCALE * sum(c.lut for c in costs if c.reuse == 1))
    return {"lut": int(lut), "route": int(route), "ff": sum(c.ff for c in costs),
            "dsp": int(dsp), "bram": sum(c.bram for c in costs),
            "multipliers": int(mults), "soft_multipliers": int(soft)}


def _fits(est: dict[str, int], prof: dict[str, Any], margin: float, overhead: int) -> bool:
    return (est.get("route", est["lut"]) + overhead <= prof["lut"] * margin
            and est["ff"] + overhead <= prof["ff"] * margin
            and est.get("bram", 0) <= int(prof.get("bram") or 0))


def fit_reuse(compiled: Any, prof: dict[str, Any], lut_margin: float | None = None,
              overhead_lut: int | None = None, pipeline: str | None = None) -> FitPlan:
    """The least-II plan that fits `prof` (an FPGA profile dict with name, lut, ff, dsp)
    built with `pipeline` (default: the device's, top.default_pipeline)."""
    layers = dense_layers(compiled)
    from .dense import PIPELINES, family_pipeline
    from .fpga import SOFT_MAX

    family = prof.get("family", "ecp5")
    if lut_margin is None:
        lut_margin = ICE40_MARGIN if family == "ice40" else ECP5_MARGIN
    if pipeline is None:
        pipeline = family_pipeline(family)
    lean = PIPELINES[pipeline].lean if pipeline in PIPELINES else False
    io = (layers[0]["wx"] * layers[0]["w"].shape[0],
          layers[-1]["wo"] * layers[-1]["w"].shape[1]) if layers else (0, 0)
    geom = BRAM_GEOMETRY.get(prof.get("family", "ecp5"), BRAM_GEOMETRY["ecp5"])
    narrow = SOFT_MAX.get(prof.get("family", "ecp5"), 0)
    for lay in layers:
        lay["bram_geom"] = geom
        lay["soft"] = max(lay["wx"], lay["ww"] + 1) <= narrow
    name = prof.get("name", prof.get("title", "?"))
    budget = {"lut": int(prof["lut"]), "ff": int(prof["ff"]), "dsp": int(prof["dsp"]),
              "bram": int(prof.get("bram") or 0)}
    unit = "logic cells (LUT4 + FF)" if family == "ice40" else "LUT4"
    if not layers:
        return FitPlan({}, 1, name, budget, {"lut": 0, "ff": 0, "dsp": 0, "bram": 0},
                       lut_unit=unit, margin=lut_margin)
    # stream glue, other ops, the UART on small parts: a few hundred LUTs (iCE40: in the
    # estimate's wrapper term)
    overhead = overhead_lut if overhead_lut is not None else (0 if family == "ice40" else 300)
    cache: dict[tuple[str, int], LayerCost] = {}

    def cost(lay: dict[str, Any], r: int) -> LayerCost:
        key = (lay["node"], r)
        if key not in cache:
            cache[key] = layer_cost(lay, r, lean)
            cache[key].soft = bool(lay["soft"])
        return cache[key]

    # reuse factors that change a layer's fold: 1..N_in (input chunks), then N_in * k
    # (k output groups); others cost the same as the next smaller one at a larger II
    cands = {lay["node"]: list(range(1, lay["w"].shape[0] + 1))
             + [lay["w"].shape[0] * k for k in range(2, lay["w"].shape[1] + 1)]
             for lay in layers}

    def at_most(node: str, ii: int) -> int:
        c = cands[node]
        return c[bisect.bisect_right(c, ii) - 1]

    best = None
    for ii in sorted({r for c in cands.values() for r in c}):
        plan = {lay["node"]: at_most(lay["node"], ii) for lay in layers}
        est = estimate([cost(lay, plan[lay["node"]]) for lay in layers], budget["dsp"], family, io)
        if _fits(est, prof, lut_margin, overhead):
            best = (max(plan.values()), plan)
            break
    if best is None:
        plan = {lay["node"]: lay["w"].size for lay in layers}
        est = estimate([cost(lay, plan[lay["node"]]) for lay in layers], budget["dsp"], family, io)
        raise FitError(
            f"model {getattr(compiled.graph, 'name', '?')} at {compiled.options.get('precision')} "
            f"does not fit {name} even at the largest reuse ({', '.join(f'{k}={v}' for k, v in plan.items())}, "
            f"II {max(plan.values())}): estimated {est['lut'] + overhead} LUT and {est['ff']} FF "
            f"against a budget of {int(budget['lut'] * lut_margin)} LUT ({lut_margin:.0%} of "
            f"{budget['lut']}), {budget['ff']} FF, {budget['dsp']} DSP, {budget['bram']} BRAM; try a narrower "
            f"--precision or a larger device")
    ii, plan = best
    # lower latency: each layer takes the smallest R <= II that still fits
    for lay in sorted(layers, key=lambda x: x["w"].size):
        for r in [c for c in cands[lay["node"]] if c < plan[lay["node"]]]:
            trial = dict(plan, **{lay["node"]: r})
            est = estimate([cost(x, trial[x["node"]]) for x in layers], budget["dsp"], family, io)
            if _fits(est, prof, lut_margin, overhead):
                plan = trial
                break
    costs = [cost(x, plan[x["node"]]) for x in layers]
    est = estimate(costs, budget["dsp"], family, io)
    est["lut"] += overhead
    return FitPlan(plan, max(plan.values()), name, budget, est, [c.to_json() for c in costs],
                   lut_unit=unit, margin=lut_margin)
