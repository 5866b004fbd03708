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

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...graphs.compiled import CompiledGraph
from ...graphs.ops import LINEAR, RECURRENT, ConvAttrs, DenseAttrs, Op, attrs
from ..plan.cmvm import csd
from ..plan.fold import coef_width, flat_fold, fold_multipliers, fold_shape, window_memory
from ..plan.schedule import FOLD_STAGES, LEAN_FOLD_STAGES, SCHEDULES
from ..streamed.depthwise import global_products, is_folded
from ..streamed.kind import flat_source
from .devices import family

# (width, depth) configurations of one block RAM, per family (pseudo-dual-port: one write
# and one read port, as every streamed memory uses)
BRAM_CONFIGS: dict[str, tuple[tuple[int, int], ...]] = {
    "ecp5": ((36, 512), (18, 1024), (9, 2048), (4, 4096), (2, 8192), (1, 16384)),
    "ice40": ((16, 256), (8, 512), (4, 1024), (2, 2048)),
}


def bram_tiles(width: int, depth: int, family_name: str,
               geom: tuple[int, int] = (36, 512)) -> int:
    """Block RAMs for one width x depth memory: the best configuration tiled over width and
    depth (a family without a table: its one `bram_rom` geometry `geom`)."""
    if width <= 0 or depth <= 0:
        return 0
    cfgs = BRAM_CONFIGS.get(family_name, (tuple(geom),))
    return min(-(-width // w) * -(-depth // d) for w, d in cfgs)


def bram_for_geom(width: int, depth: int, geom: tuple[int, int]) -> int:
    """bram_tiles for the family whose widest block-RAM configuration is `geom` (the
    `bram_rom` entry of fpga.json: (36, 512) ECP5, (16, 256) iCE40)."""
    fam = next((f for f, cfgs in BRAM_CONFIGS.items() if cfgs[0] == tuple(geom)), "")
    return bram_tiles(width, depth, fam, geom)


def bram_bits(family_name: str, geom: tuple[int, int] = (36, 512)) -> int:
    """Bits of one block RAM (its widest configuration)."""
    w, d = BRAM_CONFIGS.get(family_name, (tuple(geom),))[0]
    return w * d


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
    # the least a multiplier made of logic costs (yosys `booth` of a Wx x Wc product:
    # about Wx*Wc/2 LUT4): the explicit-reuse check (fit.check_plan) refuses only on that
    lut_per_mul_min: int = 0
    # DSP blocks its multipliers want together (0: one each); `dsp_first`: `$mul`s that the
    # flow keeps in DSP blocks before the Dense lanes (the attention circuits' products,
    # hdl/streamed/attention.fixed_products; plan/circuit.dsp_lanes gives the lanes the rest)
    dsp_blocks: int = 0
    dsp_first: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _width(g: Any, name: str, default: int = 16) -> int:
    t = g.tensor(name).dtype
    return int(getattr(t, "width", default) or default)


def dense_layers(compiled: CompiledGraph) -> list[dict[str, Any]]:
    """Per Dense layer with constant weights: its node, weights and widths (input, weight,
    output, accumulator + 1)."""
    g = compiled.graph
    out = []
    for n in g.nodes:
        if n.op in RECURRENT and n.inputs[1] in g.constants:
            out.append(_recurrent_layer(g, n))
            continue
        if n.op not in LINEAR or n.inputs[1] not in g.constants:
            continue
        w = np.asarray(g.constants[n.inputs[1]], dtype=np.int64)
        if w.ndim > 2:  # a Conv: the Dense its streaming circuit runs per window
            from ..plan.size import dense_weights

            w = dense_weights(g)[n.name]
        acc = (ConvAttrs if n.op == Op.CONV else DenseAttrs).of(n).acc
        accw = acc.width if acc else 32
        tx = g.tensor(n.inputs[0]).dtype
        flat = flat_source(g, n)
        out.append({"node": n.name, "w": w, "wx": _width(g, n.inputs[0]), "flat": flat,
                    "sx": bool(getattr(tx, "signed", True)),
                    "ww": _width(g, n.inputs[1]), "wo": _width(g, n.outputs[0]),
                    "acc": accw + 1})
        shp = g.tensor(n.inputs[0]).shape
        if flat is None and n.op == Op.DENSE and len(shp) >= 2 and int(np.prod(shp[:-1])) > 1:
            from ..streamed.kind import is_streamed

            if is_streamed(g):  # a Dense per token: its lanes beyond the DSPs are booth logic
                out[-1]["soft_cw"] = coef_width(w)
        if n.op == Op.CONV:  # its fold reads the window register in place (held);
            out[-1]["held"] = True  # depthwise: one lane per channel (depthwise_cost)
            out[-1]["channels"] = int(shp[-1])  # the window's pixels (plan/fold.window_memory)
            out[-1]["taps"] = int(w.shape[0]) // max(1, int(shp[-1]))
            dw = depthwise_shape(compiled, n)
            if dw is not None:
                out[-1]["depthwise"] = dw
                if dw[2]:  # global: its products (GlobalDepthwise: none for a pooling sum)
                    w4 = np.asarray(g.constants[n.inputs[1]], dtype=np.int64)
                    out[-1]["products"] = global_products(w4.reshape(dw[0], dw[1]))
    return out


def _recurrent_layer(g: Any, n: Any) -> dict[str, Any]:
    """An LSTM / GRU as the Dense its circuit runs every step (hdl/streamed/recurrent.py):
    [W; R] over x and h aligned to one binary point, the exact accumulator out (+2 bits)."""
    from ..plan.size import dense_weights

    a = attrs(n)
    tx, th = g.tensor(n.inputs[0]).dtype, getattr(a, "state_type", None)
    fx_, fh = getattr(tx, "frac", 0), getattr(th, "frac", 0)
    fxh = max(fx_, fh)
    wv = max(_width(g, n.inputs[0]) + fxh - fx_, getattr(th, "width", 16) + fxh - fh) + 1
    acc = getattr(a, "acc", None)
    accw = (acc.width if acc else 32) + 2
    return {"node": n.name, "w": dense_weights(g)[n.name], "wx": wv, "flat": None, "sx": True,
            "ww": _width(g, n.inputs[1]), "wo": accw, "acc": accw + 1}


def flat_cost(layer: dict[str, Any], r: int) -> LayerCost:
    """hdl/streamed/dense.py FlatDense at reuse r: d = r // pixels cycles per pixel
    (plan/fold.FlatFold: c * m multipliers), coefficients in block RAM (pixels*d words), N
    accumulators; no frame-wide input register."""
    pixels, c = layer["flat"]
    n_out = layer["w"].shape[1]
    f = flat_fold(c, n_out, r // pixels)
    wx, ww, acc, wo = layer["wx"], layer["ww"], layer["acc"], layer["wo"]
    cw = ww + 1
    width, depth = f.products * cw, pixels * f.steps
    bram = bram_for_geom(width, depth, layer.get("bram_geom", (16, 256)))
    # the pixel and its chunk, the ROM word and the products registered (issue 25), lane
    # sums, accumulators, outputs, the control stages; the chunk selection (a mux per bit)
    # accumulators and requantizers: one per output, or (one pixel, channels folded:
    # FlatDense.group_major) a bank of m, the outputs written a group at a time
    accs = f.m if pixels == 1 and f.chunks > 1 else n_out
    ff = (c * wx + f.c * wx + width + f.products * acc + f.m * acc + accs * acc
          + n_out * wo + 5 * depth.bit_length())
    mux = f.c * wx * (f.chunks // 2) if f.chunks > 1 else 0
    lut = (max(0, f.c - 1) * f.m * acc + accs * acc + 2 * accs * wo + mux
           + (n_out * wo // 2 if accs < n_out else 0) + depth.bit_length() * 6 + 40)
    return LayerCost(layer["node"], pixels * f.steps, f.products, int(lut), max(1, wx * cw),
                     int(ff), f.steps + 5, int(bram), lut_per_mul_min=max(1, wx * cw // 2))


def csd_digits(w: np.ndarray) -> np.ndarray:
    """Non-zero canonical signed digits of every |w| (len(dense.csd(v)), vectorized):
    the bits where n >> 1 and n + (n >> 1) differ. Needs |w| < 2**61."""
    a = np.abs(np.asarray(w, dtype=np.int64)).astype(np.uint64)
    h = a >> np.uint64(1)
    x = np.ascontiguousarray(h ^ (a + h))
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(x).astype(np.int64)
    bits = np.unpackbits(x.reshape(-1).view(np.uint8)).reshape(-1, 64)
    return bits.sum(axis=1, dtype=np.int64).reshape(x.shape)


def layer_cost(layer: dict[str, Any], r: int, lean: bool = False,
               strategy: str = "mult") -> LayerCost:
    """The cost of one layer (a dense_layers entry with its family's "bram_geom") at reuse
    r, built with a lean schedule or not (schedule.Schedule.lean), as products ("mult") or,
    at R = 1, as an adder graph ("da")."""
    if layer.get("flat"):
        return flat_cost(layer, r)
    if layer.get("depthwise"):
        return depthwise_cost(layer, r, lean, strategy)
    if r == 1 and strategy == "da":
        return da_cost(layer)
    if r == 1:
        return _parallel_cost(layer)
    w = layer["w"]
    n_in, n_out = w.shape
    wx, ww, acc, wo = layer["wx"], layer["ww"], layer["acc"], layer["wo"]
    mults = fold_multipliers(w, r)
    f = fold_shape(n_in, n_out, r)
    lanes = f.c * f.m
    cw = ww + 1
    # a product in logic: the coefficients' own width where the layer has it (a streamed
    # Dense per token, whose `$mul` lanes yosys narrows to it before `booth`: issue 25,
    # the small encoder's 16 x 11 lanes at 319 LUT4 + 13 CCU2C each, 44,612 LUT4 with 70 of
    # them against 22,304 with none), else the weight type's
    scw = int(layer.get("soft_cw", cw))
    width, depth = mults * cw, f.steps
    if mults and depth >= SCHEDULES["area" if lean else "fmax"].rom_bram_depth:  # block RAM
        bram = bram_for_geom(width, depth, layer["bram_geom"])
        rom = 0
    else:
        bram = 0
        rom = width * max(1, -(-depth // 16)) * (1 if depth <= 16 else 2)
    tree = max(0, lanes - f.m) * acc
    # the input: a ring of r_in chunks (a load mux per bit), or, where the window register
    # holds x (hdl/units/dense.Dense.hold_input), the chunk selected from it (an r_in:1 mux,
    # about one LUT4 per two inputs with the slices' PFUMX)
    held = bool(layer.get("held")) and f.r_in > 1
    ring = f.c * wx if held else f.r_in * f.c * wx
    ring_lut = f.c * wx * max(1, f.r_in // 2) if held else f.r_in * f.c * wx
    if held and window_memory(f, layer.get("taps", 1), layer.get("channels", n_in)):
        # the chunk read from the window's memory (WindowUnit): a C/c:1 selection of the
        # word, no chunk registers of its own
        ring, ring_lut = 0, f.c * wx * max(1, layer["channels"] // f.c // 2)
    if lean:
        # "area" schedule: input rotation (a mux per bit), one product register per lane,
        # the accumulators (carry chain), the requantization per lane and the output
        # registers; no extra coefficient/chunk/product registers
        pw = wx + cw
        ff = ring + f.c * wx + lanes * pw + f.m * acc + n_out * wo
        if bram and SCHEDULES["area"].bram_reg:  # the read and the chunk once more (an
            ff += width + f.c * wx  # upper bound for "latency", which has no bram_reg)
        lut = rom + tree + ring_lut + 2 * f.m * acc + n_out * wo + 60
        return LayerCost(layer["node"], r, mults, int(lut), max(1, 2 * wx * scw), int(ff),
                         depth + LEAN_FOLD_STAGES, int(bram), lut_per_mul_min=max(1, wx * scw // 2))
    accum = f.m * acc * 2 + n_out * wo
    lut = rom + tree + accum + depth.bit_length() * 6
    levels = max(1, math.ceil(math.log2(max(2, f.c))))
    ff = (ring + 3 * f.c * wx + (2 if bram else 3) * width + 2 * lanes * acc
          + f.m * acc + n_out * wo + (levels // 2) * lanes * acc)
    return LayerCost(layer["node"], r, mults, int(lut), max(1, wx * scw), int(ff),
                     depth + FOLD_STAGES, int(bram), lut_per_mul_min=max(1, wx * scw // 2))


def depthwise_shape(compiled: CompiledGraph, node: Any) -> tuple[int, int, bool] | None:
    """(kh*kw, Cout, global) of a depthwise Conv on a pixel stream, else None."""
    if node.op != Op.CONV:
        return None
    g = compiled.graph
    a = ConvAttrs.of(node)
    w = np.asarray(g.constants.get(node.inputs[1], np.zeros((0,))))
    shp = g.tensor(g.activations(node)[0]).shape
    if w.ndim < 3 or not (int(a.group) > 1 and int(a.group) == int(shp[-1])
                          and w.shape[-2] == 1):
        return None
    kk = int(np.prod(w.shape[:-2]))
    return kk, int(w.shape[-1]), tuple(a.kernel) == tuple(shp[:-1]) and not any(a.pads)


def depthwise_cost(layer: dict[str, Any], r: int, lean: bool = False,
                   strategy: str = "mult") -> LayerCost:
    """A dense_layers entry with "depthwise" = (taps, Cout, global) at reuse r: C lanes of
    a (kh*kw, 1) Dense at r (hdl/streamed/depthwise.py DepthwiseDense), from r >= 2*taps on
    the channels folded too (DepthwiseFold), or, global (the window is the frame), C
    products and accumulators (GlobalDepthwise)."""
    kk, cout, glob = layer["depthwise"]
    if glob:  # per channel one product (ROM coefficient or constant) and one accumulator
        wx, ww, acc, wo = layer["wx"], layer["ww"], layer["acc"], layer["wo"]
        return LayerCost(layer["node"], 2, int(layer.get("products", cout)),
                         int(cout * (acc + 2 * wo)),
                         max(1, wx * ww // 2), int(cout * (wx + 2 * acc + wo)), 4,
                         lut_per_mul_min=max(1, wx * ww // 2))
    memo = layer.setdefault("_depthwise_costs", {})
    if is_folded(r, kk, cout):
        key: tuple[Any, ...] = ("fold", r, lean)
        if key not in memo:
            memo[key] = _fold_cost(layer, kk, cout, r, lean)
        return memo[key]
    key = (max(1, min(r, kk)), lean, strategy)
    if key not in memo:
        memo[key] = _lanes_cost(layer, kk, cout, *key)
    return memo[key]


def _fold_cost(layer: dict[str, Any], kk: int, cout: int, r: int, lean: bool) -> LayerCost:
    """DepthwiseFold (hdl/streamed/depthwise.py) at reuse r: L lanes of G channels, each an
    S:1 multiplexer (S = G*kk) over the held window (about a LUT4 per two inputs, no
    flip-flops), one product, a coefficient ROM of S words, the bias selection, an
    accumulator and the requantization; one output register per channel."""
    g = max(1, min(cout, r // kk))
    lanes = -(-cout // g)
    g = -(-cout // lanes)
    steps = g * kk
    wx, ww, acc, wo = layer["wx"], layer["ww"], layer["acc"], layer["wo"]
    cw = ww + 1
    if steps >= SCHEDULES["area" if lean else "fmax"].rom_bram_depth:
        bram, rom = lanes * bram_for_geom(cw, steps, layer.get("bram_geom", (36, 512))), 0
    else:
        bram, rom = 0, lanes * cw * -(-steps // 16) * (1 if steps <= 16 else 2)
    # the lane's channel: from its G*kk window codes held, or (kk > 1: the window a memory,
    # hdl/streamed/units.WindowUnit) from the G of the pixel the step reads
    mux = lanes * (g if kk > 1 else steps) * wx // 2
    lut = rom + mux + lanes * (acc * (3 + g // 3)) + cout * wo // 2 + 40
    ff = lanes * (2 * wx + cw + 3 * acc) + cout * wo + 4 * steps.bit_length()
    return LayerCost(layer["node"], r, lanes, int(lut), max(1, wx * cw), int(ff), steps + 3,
                     int(bram), lut_per_mul_min=max(1, wx * cw // 2))


def _lanes_cost(layer: dict[str, Any], kk: int, cout: int, r: int, lean: bool,
                strategy: str) -> LayerCost:
    w = layer["w"]
    cin = w.shape[0] // kk
    mult = cout // max(1, cin)
    costs = []
    for o in range(cout):
        lane = dict(layer, w=w[np.arange(kk) * cin + o // mult, o].reshape(kk, 1),
                    node=layer["node"])
        lane.pop("depthwise")
        lane.pop("_depthwise_costs", None)
        costs.append(layer_cost(lane, r, lean, strategy))
    c0 = costs[0]
    return LayerCost(layer["node"], c0.reuse, sum(c.multipliers for c in costs),
                     sum(c.lut for c in costs), c0.lut_per_mul, sum(c.ff for c in costs),
                     max(c.latency_extra for c in costs), sum(c.bram for c in costs),
                     c0.soft, c0.lut_per_mul_min)


def adder_graph(layer: dict[str, Any]) -> Any:
    """The layer's CMVM adder graph (hdl/plan/cmvm.py, as the "da" strategy builds it), made
    once per layer dict."""
    if "graph" not in layer:
        from ..plan.cmvm import optimize

        wx, n_in, sx = layer["wx"], layer["w"].shape[0], layer.get("sx", True)
        w = np.ascontiguousarray(layer["w"], dtype=np.int64)
        key = (w.shape, w.tobytes(), wx, sx, layer["acc"])
        g = _GRAPHS.get(key)
        if g is None:
            lo = -(1 << (wx - 1)) if sx else 0
            hi = (1 << (wx - (1 if sx else 0))) - 1
            g = optimize(w, [lo] * n_in, [hi] * n_in, cap=layer["acc"])
            if len(_GRAPHS) >= 32:
                _GRAPHS.pop(next(iter(_GRAPHS)))
            _GRAPHS[key] = g
        layer["graph"] = g
    return layer["graph"]


# adder graphs of recent layers: the flow estimates a model several times (fit, strategy)
_GRAPHS: dict[tuple, Any] = {}


def da_cost(layer: dict[str, Any], adder_levels: int = 4) -> LayerCost:
    """R = 1 as one shared adder graph (strategy "da"): no multiplier; every carry-chain bit
    one LUT4 (half a CCU2C on ECP5: nextpnr counts a CCU2C as 2 COMB), a constant adder
    per output (the bias), the requantization, and the registers: the outputs, and every
    value alive across a stage boundary (one every `adder_levels` levels)."""
    g = adder_graph(layer)
    n_out = layer["w"].shape[1]
    acc, wo = layer["acc"], layer["wo"]
    bits = sum(g.chain_bits(i) for i in g.adders())
    # cmvm.AdderGraph.cost: 1.08 COMB per chain bit on ECP5 (a CCU2C counts 2), 1.26 LUT4
    # on iCE40
    lut = round(1.2 * bits) + n_out * (acc // 2 + wo)
    last_use = {}
    for nd in g.nodes:
        for o in (nd.a, nd.b) if nd.kind == "add" else (nd.a,) if nd.kind == "neg" else ():
            last_use[o] = max(last_use.get(o, 0), nd.depth)
    ff = n_out * wo
    for i, d in last_use.items():
        nd = g.nodes[i]
        crossings = d // adder_levels - nd.depth // adder_levels
        ff += max(0, crossings) * g.node_width(i) if nd.kind != "const" else 0
    return LayerCost(layer["node"], 1, 0, int(lut), 0, int(ff), 0, 0)


def _parallel_cost(layer: dict[str, Any]) -> LayerCost:
    """R = 1 as the FPGA flow's "fmax" schedule builds it: constants of few signed digits
    are shift-add leaves of the tree (no multiplier), products registered, 2 levels per
    stage."""
    w = layer["w"]
    n_out = w.shape[1]
    wx, ww, acc, wo = layer["wx"], layer["ww"], layer["acc"], layer["wo"]
    nz = w != 0
    a = np.abs(w)
    p2 = nz & ((a & (a - 1)) == 0)
    ndig = csd_digits(w) if a.max(initial=0) < (1 << 61) else \
        np.vectorize(lambda v: len(csd(v)), otypes=[np.int64])(w)
    sa = nz & ~p2 & (ndig <= SCHEDULES["fmax"].csd_digits)
    mults = int((nz & ~p2 & ~sa).sum())
    terms = int(np.where(sa, ndig, nz.astype(np.int64)).sum()) + n_out
    adders = max(0, terms - n_out)
    lut = adders * acc + n_out * wo
    levels = max(1, math.ceil(math.log2(max(2, terms / max(1, n_out)))))
    ff = n_out * wo + (levels // 2) * n_out * acc + mults * acc
    # constant products as shift-add: about half the bits of a generic product
    return LayerCost(layer["node"], 1, mults, int(lut), max(1, wx * ww // 2), int(ff), 0, 0,
                     lut_per_mul_min=max(1, wx * ww // 2))


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
            width = _width(g, n.inputs[base + k])
            bram += -(-looks // TABLE_PORTS) * bram_tiles(width, depth, family_name, geom)
        w = _width(g, n.outputs[0])
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
