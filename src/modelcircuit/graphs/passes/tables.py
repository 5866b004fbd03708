"""Lookup tables for every non-linear function, built once from the float function and
stored in the graph as constants, so the golden model, the CUDA kernels and the circuit index
the very same table.

Indexing (the contract every backend implements, see reference.table_index):
    idx = (clip(q, lo, lo + (size << shift) - 1) - lo) >> shift
q is the input code. With lo a multiple of 2**shift this is a slice of the input bits, after
saturation. Entry i holds f at the middle of the codes it covers, rounded to nearest in the
output type (so one table serves every backend).

Softmax: e_i = exp_table[d_i] (d_i = x_i - max x), r = recip_table[sum e], y_i = e_i * r.
Its input may be a quantizer's codes with the scale s in the exp table (exp(s * d), when
precision.py made s * (q - z) exact: softmax is shift-invariant, so the zero point drops).
Where a model quantizer rounds the result (the Threshold it became), the tables' index bits
grow from `table_bits` (up to 16) until `softmax_error_bound` is at most half that
quantizer's step: then the golden code is at most one from the exact softmax's, rounded.
Equality is impossible by design: y is a table product, and the exact value can lie as close
to a rounding boundary as it likes.
"""

from __future__ import annotations

import math

import numpy as np

from .. import fixed as fx
from ..ir import Graph, GraphError, Node, Tensor, prune
from ..ops import TABLE_OPS, LutAttrs, MulAttrs, Op, op_of
from ..reference import FLOAT_FUNCS
from ..types import FixedType, Rounding
from ._util import single_consumer

DEFAULT_TABLE_BITS = 10
# index bits of a table: at most 2**16 entries (a table is a ROM in the circuit and an array
# in every backend; 2**40 entries would never be built)
TABLE_BITS_RANGE = (4, 16)
EXP_TYPE = FixedType(18, 1, signed=False, rounding=Rounding.RND)
RECIP_TYPE = FixedType(18, 1, signed=False, rounding=Rounding.RND)
# a Softmax's e * r unrounded (precision.py: where a model quantizer rounds the result)
SOFTMAX_PRODUCT = FixedType(EXP_TYPE.frac + RECIP_TYPE.frac + 1, 1, signed=False)
SOFTMAX_SPAN = 16.0  # exp(-16) ~ 1e-7: below the exp type's lsb
# where the functions are flat enough that saturating the index costs nothing
_DOMAIN = {"sigmoid": (-8.0, 8.0), "tanh": (-4.0, 4.0), "selu": (-8.0, None), "exp": (None, None)}


def shift_for(n_codes: int, bits: int) -> int:
    return max(0, math.ceil(math.log2(n_codes / (1 << bits)))) if n_codes > (1 << bits) else 0


def _code(v: float, t: FixedType, up: bool) -> int:
    x = v * 2.0**t.frac
    return int(math.ceil(x) if up else math.floor(x))


def make_table(func: str, node: Node, lo: int, hi: int, shift: int, tin: FixedType,
               tout: FixedType, scale: float = 1.0) -> np.ndarray:
    """Entry i: func(scale * the value of the middle of the codes it covers)."""
    size = ((hi - lo) >> shift) + 1
    a = lo + (np.arange(size, dtype=np.int64) << shift)
    b = np.minimum(a + (1 << shift) - 1, hi)
    mid = (a.astype(np.float64) + b.astype(np.float64)) / 2.0 * 2.0**-tin.frac
    vals = FLOAT_FUNCS[func](mid if scale == 1.0 else mid * scale, node)
    return fx.quantize(vals, tout.with_(rounding=Rounding.RND))


def _lut(g: Graph, node: Node, bits: int) -> tuple[Node, dict[str, np.ndarray], dict[str, Tensor]]:
    tin, tout = g.tensor(node.inputs[0]).dtype, g.tensor(node.outputs[0]).dtype
    func = LutAttrs.of(node).func
    dlo, dhi = _DOMAIN.get(func, (None, None))
    lo = tin.qmin if dlo is None else max(tin.qmin, _code(dlo, tin, up=True))
    hi = tin.qmax if dhi is None else min(tin.qmax, _code(dhi, tin, up=False))
    shift = shift_for(hi - lo + 1, bits)
    lo = (lo >> shift) << shift  # a multiple of 2**shift: the index is a bit slice
    table = make_table(func, node, lo, hi, shift, tin, tout)
    name = f"{node.name}_table"
    attrs = {k: v for k, v in node.attrs}
    new = Node.make(node.name, Op.LUT, [node.inputs[0], name], node.outputs,
                    **{**attrs, "lo": lo, "shift": shift, "size": len(table)})
    return new, {name: table}, {name: Tensor(name, table.shape, tout)}


def _scaled_codes(g: Graph, node: Node) -> tuple[str, float]:
    """(q, s) where the Softmax reads s * (q - z): precision.py's exact Mul of a quantizer's
    codes by a positive per-tensor scale (after an Add of a per-tensor constant, the zero
    point, which softmax's shift invariance drops); else (its input, 1.0)."""
    x = node.inputs[0]
    p = g.producer(x)
    if (p is None or p.op != Op.MUL or not MulAttrs.of(p).exact or not g.is_const(p.inputs[1])
            or single_consumer(g, x) is None):
        return x, 1.0
    ct = g.tensor(p.inputs[1]).dtype
    s = np.unique(fx.to_float(np.asarray(g.constants[p.inputs[1]]), ct))
    if s.size != 1 or s[0] <= 0:
        return x, 1.0
    src = p.inputs[0]
    a = g.producer(src)
    if (a is not None and a.op == Op.ADD and g.is_const(a.inputs[1])
            and np.unique(g.constants[a.inputs[1]]).size == 1
            and single_consumer(g, src) is not None):
        src = a.inputs[0]
    if not isinstance(g.tensor(src).dtype, FixedType):
        return x, 1.0
    return src, float(s[0])


def softmax_tables(node: Node, tin: FixedType, scale: float, n: int, bits: int) -> dict:
    """exp over the SOFTMAX_SPAN units below the row maximum (codes of tin, times scale), the
    reciprocal of the sum of n of them; each table at most 2**bits entries."""
    span = max(1, math.ceil(SOFTMAX_SPAN * 2.0**tin.frac / scale))
    span = min(span, tin.qmax - tin.qmin)
    shift = shift_for(span + 1, bits)
    k = -(-span // (1 << shift))
    exp_lo = -(k << shift)
    exp_table = make_table("exp", node, exp_lo, 0, shift, tin, EXP_TYPE, scale)
    one = 1 << EXP_TYPE.frac
    if int(exp_table[-1]) != one:
        raise GraphError(f"node {node.name}: exp table does not map 0 to 1.0")
    r_lo, r_hi = one, n * int(exp_table.max())
    r_shift = shift_for(r_hi - r_lo + 1, bits)
    r_lo = (r_lo >> r_shift) << r_shift
    recip_table = make_table("reciprocal", node, r_lo, r_hi, r_shift, EXP_TYPE, RECIP_TYPE)
    return {"exp": exp_table, "exp_lo": exp_lo, "exp_shift": shift, "recip": recip_table,
            "recip_lo": r_lo, "recip_shift": r_shift}


def softmax_error_bound(tab: dict, unit: float, n: int) -> float:
    """The most a Softmax of n inputs (x_i = unit * code_i) computed with the tables `tab`
    can differ from the exact softmax, before its result's own rounding:
    (n + 1) * eps_e + eps_r, with eps_e = max |e(d) - exp(unit * d)| over every code
    difference d <= 0 and eps_r = max |S * r(S) - 1| over every sum S read. Why: the row
    maximum reads exp(0) = 1 exactly, so the sum S' >= 1 and e_i / S' <= 1;
    |e_i / S' - exp_i / S| <= (|de_i| S + exp_i sum |de_j|) / (S S') <= (n + 1) eps_e; and
    e_i * r(S') = (e_i / S') (1 + eta) with |eta| <= eps_r."""
    ef, rf = EXP_TYPE.frac, RECIP_TYPE.frac
    et = np.asarray(tab["exp"], dtype=np.float64)
    a = tab["exp_lo"] + (np.arange(et.size, dtype=np.int64) << tab["exp_shift"])
    b = np.minimum(a + (1 << tab["exp_shift"]) - 1, 0)
    lo_true = np.exp(unit * a.astype(np.float64))
    lo_true[0] = 0.0  # codes below the table read its first entry
    v = et * 2.0**-ef
    eps_e = float(max(np.abs(v - lo_true).max(), np.abs(v - np.exp(unit * b)).max()))
    rt = np.asarray(tab["recip"], dtype=np.float64)
    ra = tab["recip_lo"] + (np.arange(rt.size, dtype=np.int64) << tab["recip_shift"])
    rb = np.minimum(ra + (1 << tab["recip_shift"]) - 1, n * int(et.max()))
    ra = np.maximum(ra, 1 << ef)
    keep = ra <= rb
    w = rt[keep] * 2.0**-rf
    eps_r = float(max(np.abs(ra[keep] * 2.0**-ef * w - 1).max(),
                      np.abs(rb[keep] * 2.0**-ef * w - 1).max()))
    return (n + 1) * eps_e + eps_r


def quantizer_step(g: Graph, node: Node) -> float | None:
    """A lower bound of the step of the model quantizer that rounds node's result alone (the
    Threshold it became): its least gap between two thresholds less one code (each is a
    rounding boundary rounded up to a code), in real units; 0 where two levels share a
    threshold; None where no Threshold reads it alone or it has one threshold per row."""
    c = single_consumer(g, node.outputs[0])
    if c is None or c.op != Op.THRESHOLD:
        return None
    thr = np.asarray(g.constants[c.inputs[1]], dtype=np.int64)
    steps = np.broadcast_to(np.asarray(g.constants[c.inputs[2]]), thr.shape)
    if np.any(np.abs(steps) > 1):
        return 0.0
    gaps = [int(np.diff(np.sort(r[s != 0])).min()) for r, s in zip(thr, steps, strict=True)
            if np.count_nonzero(s) > 1]
    if not gaps:
        return None
    return max(0, min(gaps) - 1) * g.tensor(node.outputs[0]).dtype.lsb


def _softmax(g: Graph, node: Node, bits: int) -> tuple[Node, dict[str, np.ndarray], dict[str, Tensor]]:
    x, scale = _scaled_codes(g, node)
    tin = g.tensor(x).dtype
    shape = g.tensor(x).shape
    n = int(np.prod(shape))
    step = quantizer_step(g, node)
    tout = g.tensor(node.outputs[0]).dtype
    rounding = 0.0 if tout.frac >= EXP_TYPE.frac + RECIP_TYPE.frac else tout.lsb
    unit = scale * 2.0**-tin.frac
    for b in range(bits, max(bits, TABLE_BITS_RANGE[1]) + 1):
        tab = softmax_tables(node, tin, scale, n, b)
        if step is None or softmax_error_bound(tab, unit, int(shape[-1])) + rounding <= step / 2:
            break
    en, rn = f"{node.name}_exp_table", f"{node.name}_recip_table"
    new = Node.make(node.name, Op.SOFTMAX, [x, en, rn], node.outputs,
                    exp_lo=tab["exp_lo"], exp_shift=tab["exp_shift"], recip_lo=tab["recip_lo"],
                    recip_shift=tab["recip_shift"], exp_type=str(EXP_TYPE),
                    recip_type=str(RECIP_TYPE), **({"scale": scale} if scale != 1.0 else {}))
    et, rt = tab["exp"], tab["recip"]
    return (new, {en: et, rn: rt},
            {en: Tensor(en, et.shape, EXP_TYPE), rn: Tensor(rn, rt.shape, RECIP_TYPE)})


_BUILDERS = {Op.LUT: _lut, Op.SOFTMAX: _softmax}  # one per TABLE_OPS member


def check_table_bits(table_bits: object) -> int:
    lo, hi = TABLE_BITS_RANGE
    if isinstance(table_bits, bool) or not isinstance(table_bits, (int, np.integer)) \
            or not lo <= int(table_bits) <= hi:
        raise GraphError(f"table_bits must be an integer within {lo}..{hi}, got {table_bits!r}")
    return int(table_bits)


def build_tables(g: Graph, table_bits: int = DEFAULT_TABLE_BITS) -> Graph:
    table_bits = check_table_bits(table_bits)
    nodes, consts, tensors = [], dict(g.constants), dict(g.tensors)
    rewired = False
    for node in g.nodes:
        out_t = g.tensor(node.outputs[0]).dtype
        if node.op in TABLE_OPS and isinstance(out_t, FixedType) and len(node.inputs) == 1:
            new, c, t = _BUILDERS[op_of(node.op)](g, node, table_bits)
            nodes.append(new)
            consts.update(c)
            tensors.update(t)
            rewired |= new.inputs[0] != node.inputs[0]
        else:
            nodes.append(node)
    g = g.replace(nodes=tuple(nodes), constants=consts, tensors=tensors)
    return prune(g) if rewired else g  # a Softmax that took its input's scale
