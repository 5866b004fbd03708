"""`--reuse auto`: per-layer reuse factors that fit an FPGA profile at the least II.

Estimates per Dense layer at reuse R (the structure of hdl/dense.py): R_in = min(R, N_in)
chunks of c = ceil(N_in / R_in) inputs; time-shared multipliers counted exactly as the HDL
does (`reuse.fold_multipliers`, which matches the cost ledger's count at R = 1); coefficient
ROMs (R > 1) and adder trees in LUTs; products beyond the DSP budget become shift-add logic
(the flow turns them into logic with yosys `booth`, see fpga.synthesize), costed in LUTs.

Search: the model's II is the largest layer R. For II = 1, 2, … (each layer at
min(II, N_in), its cheapest fold at that II) the first II whose estimate fits the budget
(DSP blocks, and LUTs x `lut_margin` for routing headroom) wins; then each layer takes the
smallest R <= II that still fits (lower latency). No fit even at the largest reuse: FitError
naming the budget and the estimate.

The LUT constants were measured with this flow (yosys 0.70 / nextpnr 0.11, digits MLP): a
coefficient ROM of depth D and width B costs ~B*ceil(D/16) LUT4 (plus muxes), a soft
product Wx x Wc ~ Wx*Wc LUT4, an adder of width W ~W LUT4 (carry chain).
"""

from __future__ import annotations

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

    def to_json(self) -> dict[str, Any]:
        return {"reuse": dict(self.reuse), "ii": self.ii, "device": self.device,
                "budget": dict(self.budget), "estimate": dict(self.estimate),
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


def layer_cost(layer: dict[str, Any], r: int) -> LayerCost:
    from .reuse import fold_multipliers

    w = layer["w"]
    n_in, n_out = w.shape
    wx, ww, acc, wo = layer["wx"], layer["ww"], layer["acc"], layer["wo"]
    mults = fold_multipliers(w, r)
    if r == 1:
        nz = w != 0
        terms = int(nz.sum()) + n_out
        adders = max(0, terms - n_out)
        lut = adders * acc + n_out * wo
        levels = max(1, math.ceil(math.log2(max(2, terms / max(1, n_out)))))
        ff = n_out * wo + (levels // 4) * n_out * acc + n_in * 0
        # constant products as shift-add: about half the bits of a generic product
        return LayerCost(layer["node"], 1, mults, int(lut), max(1, wx * ww // 2), int(ff), 0)
    r_in = min(r, n_in)
    c = -(-n_in // r_in)
    lanes = c * n_out
    cw = ww + 1
    rom = lanes * cw * max(1, -(-r_in // 16)) * (1 if r_in <= 16 else 2)
    tree = max(0, lanes - n_out) * acc
    accum = n_out * acc * 2 + n_out * wo
    lut = rom + tree + accum + r_in.bit_length() * 4
    ff = r_in * c * wx + n_out * (acc + wo) + (max(1, math.ceil(math.log2(max(2, c)))) // 4) * lanes * acc
    return LayerCost(layer["node"], r, mults, int(lut), max(1, wx * cw), int(ff), r_in + 1)


# measured / modelled LUTs for the digits MLP fully folded (R=64): iCE40 7168 LUT4 vs 5440
# (fixed<4,2>), ECP5 9800 COMB vs 7492 (fixed<6,3>): the model leaves out control, muxing
# and register-enable logic, so scale it.
LUT_SCALE = 1.32


def estimate(costs: list[LayerCost], dsp_budget: int) -> dict[str, int]:
    mults = sum(c.multipliers for c in costs)
    dsp = min(mults, dsp_budget)
    # the flow keeps the widest products in DSPs; assume the rest cost the layer average
    soft = mults - dsp
    per = (sum(c.lut_per_mul * c.multipliers for c in costs) / mults) if mults else 0
    lut = int(LUT_SCALE * (sum(c.lut for c in costs) + soft * per))
    return {"lut": int(lut), "ff": sum(c.ff for c in costs), "dsp": int(dsp),
            "multipliers": int(mults), "soft_multipliers": int(soft)}


def _fits(est: dict[str, int], prof: dict[str, Any], margin: float, overhead: int) -> bool:
    return est["lut"] + overhead <= prof["lut"] * margin and est["ff"] + overhead <= prof["ff"] * margin


def fit_reuse(compiled: Any, prof: dict[str, Any], lut_margin: float = 0.85,
              overhead_lut: int | None = None) -> FitPlan:
    """The least-II plan that fits `prof` (an FPGA profile dict with name, lut, ff, dsp)."""
    layers = dense_layers(compiled)
    name = prof.get("name", prof.get("title", "?"))
    budget = {"lut": int(prof["lut"]), "ff": int(prof["ff"]), "dsp": int(prof["dsp"])}
    if not layers:
        return FitPlan({}, 1, name, budget, {"lut": 0, "ff": 0, "dsp": 0})
    # stream glue, other ops, the UART on small parts: a few hundred LUTs
    overhead = overhead_lut if overhead_lut is not None else 300
    max_r = max(lay["w"].shape[0] for lay in layers)
    cache: dict[tuple[str, int], LayerCost] = {}

    def cost(lay: dict[str, Any], r: int) -> LayerCost:
        key = (lay["node"], r)
        if key not in cache:
            cache[key] = layer_cost(lay, r)
        return cache[key]

    best = None
    for ii in range(1, max_r + 1):
        plan = {lay["node"]: min(ii, lay["w"].shape[0]) for lay in layers}
        if ii > 1 and all(plan[lay["node"]] < ii for lay in layers):
            break  # no layer can fold further
        est = estimate([cost(lay, plan[lay["node"]]) for lay in layers], budget["dsp"])
        if _fits(est, prof, lut_margin, overhead):
            best = (ii, plan)
            break
    if best is None:
        plan = {lay["node"]: lay["w"].shape[0] for lay in layers}
        est = estimate([cost(lay, plan[lay["node"]]) for lay in layers], budget["dsp"])
        raise FitError(
            f"model {getattr(compiled.graph, 'name', '?')} at {compiled.options.get('precision')} "
            f"does not fit {name} even at the largest reuse ({', '.join(f'{k}={v}' for k, v in plan.items())}, "
            f"II {max(plan.values())}): estimated {est['lut'] + overhead} LUT and {est['ff']} FF "
            f"against a budget of {int(budget['lut'] * lut_margin)} LUT ({lut_margin:.0%} of "
            f"{budget['lut']}), {budget['ff']} FF, {budget['dsp']} DSP; try a narrower "
            f"--precision or a larger device")
    ii, plan = best
    # lower latency: each layer takes the smallest R <= II that still fits
    for lay in sorted(layers, key=lambda x: x["w"].size):
        for r in range(1, plan[lay["node"]]):
            trial = dict(plan, **{lay["node"]: r})
            est = estimate([cost(x, trial[x["node"]]) for x in layers], budget["dsp"])
            if _fits(est, prof, lut_margin, overhead):
                plan = trial
                break
    costs = [cost(x, plan[x["node"]]) for x in layers]
    est = estimate(costs, budget["dsp"])
    est["lut"] += overhead
    return FitPlan(plan, max(plan.values()), name, budget, est, [c.to_json() for c in costs])
