"""The resource estimate of the model's Dense layers on an FPGA family, before synthesis.

Per Dense layer at reuse R (the structure of hdl/units/dense.py, `fold.Fold`): inputs folded first
(R_in chunks of c inputs), then outputs when R > N_in (R_out groups of m); time-shared
multipliers counted exactly as the HDL does (`fold.fold_multipliers`, which matches the cost
ledger's count at R = 1); coefficient ROMs (R > 1) in block RAM when at least 16 deep (else
LUTs), adder trees in LUTs; products beyond the DSP budget become shift-add logic (the flow
turns them into logic with yosys `booth`, see yosys.synthesize), costed in LUTs.

The calibration is profile data (graphs/profiles/fpga.json, "families" -> "fit"), measured
with this flow (yosys 0.70 / nextpnr 0.11, digits MLP): a coefficient ROM of depth D and
width B costs ~B*ceil(D/16) LUT4 (plus muxes), a soft product Wx x Wc ~ Wx*Wc LUT4, an adder
of width W ~W LUT4 (carry chain).

- `lut_scale` (ECP5 1.75): the model leaves out control, muxing, register-enable and
  carry-packing logic. Old folded structure, digits MLP at R=64: iCE40 7168 LUT4 vs 5440
  (fixed<4,2>), ECP5 9800 COMB vs 7492 (fixed<6,3>). Pipelined folds with block-RAM ROMs
  (fixed<6,3>, ecp5-25k, nextpnr TRELLIS_COMB, a carry cell counts 2): R=64 6119 vs 4397,
  R=16/16/6 25244 vs 19986.
- `r1_lut_scale` (1.0), R = 1 (constant products as shift-add / booth): digits MLP
  fixed<6,3> on ecp5-85k gave 41k COMB against a raw model of 48.6k, the tiny MLP on
  ecp5-25k 3671 against 3460.
- `r1_route` (1.5): a fully parallel layer routes like 1.5 times its LUTs (every input fans
  out to every output's adder tree); digits at R = 1 (41k COMB, 49 % of an 85k) did not
  route in 13 min.
- `logic_cells` (iCE40, "area" schedule): a logic cell holds one LUT4 and one flip-flop, and
  a register fed by another register takes a cell of its own, so the estimate is in cells:
  the layers' LUTs, soft products, and the UART wrapper (`uart_cells` plus its buffers),
  times `cell_scale` (1.25). Measured (digits fixed<6,3>, placed in the UART wrapper): R
  256/256/128 3995 cells against a raw model of 3280, R 128/128/64 5990 against 4908,
  192/192/96 4858 against 3976; fixed<4,2> R 128/128/64 4045 against 3160.
- Flip-flops on Gowin and Nexus (issue 27; `ff_scale` per schedule, `wrapper_ff`): these
  families place the model inside the UART wrapper (build._place), whose frame registers
  (`wrapper_ff`) the layers' sum leaves out, as it leaves out the valid chain of a schedule
  that is not lean (a register per cycle of latency, vector/top.py `_valid`:
  `valid_chain_ff`), and their synthesis keeps more registers than the layer model counts.
  yosys 0.70 `stat` after synth_gowin / synth_nexus, model in the wrapper, against the
  layers + chain (+ wrapper): gw1nr-9 "fmax", digits fixed<6,3> R 128: 4788 against 2955 +
  405 (+544): 1.26; R 192/160/64 (nextpnr's count) 4602 against 2724 + 437: 1.28; the jet
  tagger fixed<8,3> R 352/384/352/160: 5628 against 3431 + 1295 (+264): 1.14, R
  1024/1024/1024/160: 6812 against 2849 + 3279: 1.07; "fmax" scale 1.3. "area": digits R
  320/352/320 2244 against 1552: 1.1, the jet tagger R 352/384/352/160 3111 against 2880:
  0.99; scale 1.1. Nexus (lifcl-40) digits R 32: 9393 against 8099 + 117: 1.08; 1.1 (its
  "area" not measured: the same). On Gowin the flip-flops run out before the LUTs
  (GW1NR-9: 6480 FF for 8640 LUT4), so its fit keeps them to `ff_margin` (0.8) of the
  device (issue 27: a digits plan at 87 % of them did not place). ECP5 and iCE40 have no
  `ff_scale`: their flip-flop estimate is the layers' sum, as before.
- Products in logic (issue 27): a layer's products count as soft multipliers where the
  circuit plan builds them in logic (plan/circuit.dsp_lanes: the input and the widest
  coefficient the weights need within the family's soft width; fit._context), not by the
  weight type's width + 1: the jet tagger at fixed<8,3> (8-bit coefficients) was estimated
  with 14 DSPs on a GW1NR-9 while the circuit had none (its products are registered
  coefficient slices). At fixed<8,3> ECP5 plans change with it (more LUTs estimated;
  ECP5's lut_scale was calibrated at fixed<6,3> and fixed<16,6>, which this leaves alone).
- Products of the attention circuits (issue 25; flow/attention_cost.py): `dsp_first` costs
  whose `dsp_blocks` the DSP budget pays first (their `$mul`s are wider than the Dense lanes,
  and the flow keeps the widest in DSP blocks), then one block per Dense lane; a streamed
  Dense per token costs a lane in logic by its coefficients' own width (`soft_cw`: yosys
  narrows the `$mul` before `booth`). Measured, the small encoder (8 tokens, d 16, FFN 32)
  at fixed<16,6> on ecp5-85k, synth_ecp5 (yosys 0.70, prep with opt_merge): R 16 (70 lanes
  in logic) 44,612 LUT4 + 4,692 CCU2C against 59,568 estimated; every product in a DSP
  block 22,304 + 3,783.
- `lut_scale` on Gowin per schedule ("fmax" 1.65, "area" 1.0; `lut_scale(cal, lean)`) and
  Nexus (1.45), issue 27, against yosys 0.70 LUT1-4 + ALU after synth_gowin (nextpnr places
  a few more ALUs: 5133 LUT4 against 5002 for the jet tagger) or nextpnr's OXIDE_COMB, the
  model in the UART wrapper, the estimate with the family's 400 LUT overhead, 2026-12-06:
  GW1NR-9 "fmax" digits fixed<6,3> R 128/128/128 4638 against 4683, 192/128/64 4321
  against 4746, 192/160/64 4255 against 4627; "area" digits R 320/352/320 3094 against
  3074, digits fixed<8,3> R 192/128/64 6106 against 6538, the jet tagger fixed<8,3> R
  352/384/352/160 5002 against 5567, 256/320/256/160 5547 against 6108, 512/512/512/96
  4361 against 5025 (-1 %..+15 %; one scale for both schedules with the old rule for
  products in logic was -5 %..+56 % on "area"; the jet tagger's "fmax" plans, whose
  flip-flops decide them, stay 25-43 % over). Not covered: the digits MLP at fixed<8,3>
  calibrated on its test split ("area" R 192/192/160: 6785 against 5698, 16 % under, and
  1337 MUX2_LUT5-8 beside; its first layer alone 3461 against 2874): its 8-bit
  coefficients take 4-bit slices (dense_fold.FoldStages._plan_slices; 3-bit at the
  uncalibrated model's 6), about twice the LUTs per lane, while a soft product's cost here
  follows the weight type, not the slice. LIFCL-40: digits fixed<6,3> R 32 16319 against
  16051, R 32/32/8 19254 against 18513, the jet tagger fixed<8,3> R 64/64/64/11 20340
  against 21931, 96/64/96/32 16677 against 19126. Nexus flip-flops (OXIDE_FF) against the
  estimate at ff_scale 1.1: 9398/9581, 10828/11957, 10849/10525, 9132/8660: ff_scale 1.15
  (both schedules; "area" not measured). The same syntheses set Gowin's "area" ff_scale to
  1.3 (1.18-1.31 measured: the "area" fold's block-RAM read registers, Schedule.bram_reg,
  came after the 1.1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ops import RECURRENT, Op, attrs
from .devices import family
from .layer_cost import LayerCost, bram_tiles, tensor_width


def recurrent_costs(compiled: CompiledGraph, family_name: str) -> list[LayerCost]:
    """What an LSTM / GRU adds to its gate-sum Dense (hdl/streamed/recurrent.py): the
    elementwise products of the state update (3 per hidden unit, state-width squared) and
    the gate tables, one ROM copy per two lookups, each in block RAM."""
    from ...graphs.ops import GruAttrs
    from ..streamed.recurrent import TABLE_PORTS, table_lookups

    fam = family(family_name)
    geom = tuple(fam["bram_rom"])
    g = compiled.graph
    out = []
    for n in g.nodes:
        if n.op not in RECURRENT:
            continue
        a = attrs(n)
        hid = int(getattr(a, "hidden", 0))
        base = 6 if n.op == Op.LSTM else 5
        lbr = bool(n.op == Op.GRU and GruAttrs.of(n).lbr)
        bram = 0
        for k, looks in enumerate(table_lookups(str(n.op), hid, lbr)):
            if len(n.inputs) <= base + k or n.inputs[base + k] not in g.constants:
                continue
            depth = int(np.asarray(g.constants[n.inputs[base + k]]).size)
            width = tensor_width(g, n.inputs[base + k])
            bram += -(-looks // TABLE_PORTS) * bram_tiles(width, depth, family_name, geom)
        w = tensor_width(g, n.outputs[0])
        out.append(LayerCost(n.name + " (state update, tables)", 1, 3 * hid, 8 * w * hid,
                             max(1, w * w // 2), 6 * w * hid, 0, bram,
                             lut_per_mul_min=max(1, w * w // 4)))
    return out


def softmax_costs(compiled: CompiledGraph, plan: dict[str, int], family_name: str
                  ) -> list[LayerCost]:
    """Each Softmax as the circuit builds it for this plan (hdl/units/softmax.py:
    the serial unit where the design's II covers it, else the parallel one), as a
    LayerCost (its products as multipliers; reuse = its II), on the family's block RAM
    and DSP widths."""
    from ..units.softmax import softmax_cost, softmax_nodes

    fam = family(family_name)
    geom = tuple(fam["bram_rom"])
    out = []
    for nd in softmax_nodes(compiled.graph):
        c = softmax_cost(compiled.graph, nd, plan, geom, int(fam["dsp_max_width"]))
        out.append(LayerCost(nd.name, c["ii"], c["dsp"], c["lut"], c["lut_per_mul"], c["ff"],
                             c["latency"], c["bram"], lut_per_mul_min=c["lut_per_mul"] // 2))
    return out


# flip-flops of the UART wrapper (hdl/uart.py) besides its frame registers: the receiver's
# and transmitter's synchronisers, bit and byte counters and shift registers, the frame
# timeout counter (24 bits at 100 MHz) and the handshake flags
UART_FF = 96


def wrapper_ff(io_bits: tuple[int, int]) -> int:
    """Flip-flops of the UART wrapper around a model whose payloads are `io_bits` (in, out)
    wide: the input frame register and the output shift register, whole bytes each, and
    UART_FF more."""
    in_bits, out_bits = io_bits
    return 8 * -(-int(in_bits) // 8) + 8 * -(-int(out_bits) // 8) + UART_FF


def valid_chain_ff(costs: list[LayerCost]) -> int:
    """Registers of the valid chain of a schedule that is not lean: one per cycle of the
    layers' latency (their latency_extra, in sequence)."""
    return sum(max(0, int(c.latency_extra)) for c in costs)


def lut_scale(cal: dict[str, Any], lean: bool) -> float:
    """The family's `lut_scale` (fpga.json "fit"): one number, or one per schedule ("fmax",
    "area": Gowin) like `ff_scale`, picked by `lean`."""
    s = cal.get("lut_scale", cal.get("cell_scale", 1.0))
    return float(s["area" if lean else "fmax"] if isinstance(s, dict) else s)


def estimate(costs: list[LayerCost], dsp_budget: int, family_name: str = "ecp5",
             io_bits: tuple[int, int] = (0, 0), least: bool = False,
             lean: bool = False) -> dict[str, int]:
    """Resources of the layers' costs on a family (its calibration: fpga.json). `least`:
    multipliers made of logic at their least cost (lut_per_mul_min), for refusing an
    explicit reuse only when even that is over the device. `lean`: the design is built
    with a lean schedule ("area"), which picks the family's `ff_scale` for it."""
    cal = family(family_name)["fit"]
    mults = sum(c.multipliers for c in costs)
    # the attention circuits' products first (wider than the Dense lanes, several blocks
    # each; a share of them as the blocks allow), then one block per Dense lane
    first = [c for c in costs if c.dsp_first and not c.soft and c.multipliers]
    want = sum(c.dsp_blocks or c.multipliers for c in first)
    n_first = sum(c.multipliers for c in first)
    used = min(want, dsp_budget)
    in_dsp = n_first if want <= dsp_budget else n_first * dsp_budget // max(1, want)
    rest = min(sum(c.multipliers for c in costs if not c.soft and not c.dsp_first),
               dsp_budget - used)
    dsp = used + rest
    # the flow keeps the widest products in DSPs; assume the rest cost the layer average
    # (the attention circuits' products that find no block: their own average)
    soft = mults - in_dsp - rest

    def avg(cs: list[LayerCost]) -> float:
        n = sum(c.multipliers for c in cs)
        return sum((c.lut_per_mul_min if least else c.lut_per_mul) * c.multipliers
                   for c in cs) / n if n else 0

    ids = {id(c) for c in first}
    others = [c for c in costs if id(c) not in ids]
    soft_first = n_first - in_dsp
    per = ((avg(first) * soft_first + avg(others) * (soft - soft_first)) / soft
           if soft else 0)
    if cal["logic_cells"]:
        in_bits, out_bits = io_bits
        wrapper = in_bits + 8 * -(-out_bits // 8) + 2 * out_bits + cal["uart_cells"]
        lut = cal["cell_scale"] * (sum(c.lut for c in costs) + soft * per + wrapper)
        route = lut  # calibrated on placed designs as it is
    else:
        scale, r1_scale = lut_scale(cal, lean), cal["r1_lut_scale"]
        lut = (sum((scale if c.reuse > 1 else r1_scale) * c.lut for c in costs)
               + scale * soft * per)
        # what the margin is checked against: fully parallel layers count extra for routing
        route = lut + (cal["r1_route"] - 1) * r1_scale * sum(c.lut for c in costs
                                                             if c.reuse == 1)
    ff = sum(c.ff for c in costs)
    if cal.get("ff_scale"):  # per schedule: what the model leaves out, as measured
        if not lean:  # the input handshake delayed by a register per cycle of latency
            ff += valid_chain_ff(costs)  # (vector/top.py _valid; lean: down-counters)
        ff = ff * float(cal["ff_scale"]["area" if lean else "fmax"])
    if cal.get("wrapper_ff"):  # placed inside the UART wrapper (build._place)
        ff += wrapper_ff(io_bits)
    return {"lut": int(lut), "route": int(route), "ff": int(ff),
            "dsp": int(dsp), "bram": sum(c.bram for c in costs),
            "multipliers": int(mults), "soft_multipliers": int(soft)}
