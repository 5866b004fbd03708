"""The cost of each layer as the circuit builds it (hdl/units/dense.py, the folds of
hdl/plan/fold.py, the streamed depthwise and recurrent units), before synthesis: LUTs,
flip-flops, multipliers, block RAM tiles per layer at a reuse factor, as `LayerCost`s.
hdl/flow/estimate.py adds them up on a family with its calibration (its docstring says
where each calibration number comes from); the fit (hdl/flow/fit.py, stream_fit.py) asks
both. Apart from estimate.py because the per-layer structure follows the circuits and
changes with them, the totals follow the device."""

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


def tensor_width(g: Any, name: str, default: int = 16) -> int:
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
        out.append({"node": n.name, "w": w, "wx": tensor_width(g, n.inputs[0]), "flat": flat,
                    "sx": bool(getattr(tx, "signed", True)),
                    "ww": tensor_width(g, n.inputs[1]), "wo": tensor_width(g, n.outputs[0]),
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
    wv = max(tensor_width(g, n.inputs[0]) + fxh - fx_, getattr(th, "width", 16) + fxh - fh) + 1
    acc = getattr(a, "acc", None)
    accw = (acc.width if acc else 32) + 2
    return {"node": n.name, "w": dense_weights(g)[n.name], "wx": wv, "flat": None, "sx": True,
            "ww": tensor_width(g, n.inputs[1]), "wo": accw, "acc": accw + 1}


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
    # hdl/streamed/window.WindowUnit) from the G of the pixel the step reads
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
    """The layer's CMVM adder graph (hdl/plan/cmvm.py, as the "da" strategy builds it: one
    graph per cluster of the schedule's `graph_cluster` output columns where the layer has
    more, hdl/units/dense_r1.DenseGraph), made once per layer dict."""
    if "graph" not in layer:
        from ..plan.cmvm import clustered, optimize

        wx, (n_in, n_out), sx = layer["wx"], layer["w"].shape, layer.get("sx", True)
        size = int(layer.get("graph_cluster") or 0)
        size = size if n_out > size else 0
        w = np.ascontiguousarray(layer["w"], dtype=np.int64)
        key = (w.shape, w.tobytes(), wx, sx, layer["acc"], size)
        g = _GRAPHS.get(key)
        if g is None:
            lo = -(1 << (wx - 1)) if sx else 0
            hi = (1 << (wx - (1 if sx else 0))) - 1
            if size:
                g = clustered(w, [lo] * n_in, [hi] * n_in, None, layer["acc"], size)[0]
            else:
                g = optimize(w, [lo] * n_in, [hi] * n_in, cap=layer["acc"])
            if len(_GRAPHS) >= 32:
                _GRAPHS.pop(next(iter(_GRAPHS)))
            _GRAPHS[key] = g
        layer["graph"] = g
    return layer["graph"]


# adder graphs of recent layers: the flow estimates a model several times (fit, strategy)
_GRAPHS: dict[tuple, Any] = {}


def da_cost(layer: dict[str, Any]) -> LayerCost:
    """R = 1 as one shared adder graph (strategy "da"; or one per cluster of columns, each
    reading its own registered copy of the inputs): no multiplier; every carry-chain bit
    one LUT4 (half a CCU2C on ECP5: nextpnr counts a CCU2C as 2 COMB), a constant adder
    per output (the bias), the requantization, and the registers: the outputs, the input
    copies, and every value alive across a stage boundary (one every `adder_levels` levels
    of the schedule, 4 unless the layer names it)."""
    g = adder_graph(layer)
    adder_levels = int(layer.get("adder_levels") or 4)
    n_in, n_out = layer["w"].shape
    acc, wo = layer["acc"], layer["wo"]
    bits = sum(g.chain_bits(i) for i in g.adders())
    # cmvm.AdderGraph.cost: 1.08 COMB per chain bit on ECP5 (a CCU2C counts 2), 1.26 LUT4
    # on iCE40
    lut = round(1.2 * bits) + n_out * (acc // 2 + wo)
    last_use = {}
    for nd in g.nodes:
        for o in (nd.a, nd.b) if nd.kind == "add" else (nd.a,) if nd.kind == "neg" else ():
            last_use[o] = max(last_use.get(o, 0), nd.depth)
    ff = n_out * wo + g.stats.get("clusters", 0) * n_in * layer["wx"]
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
