"""Lookup tables for every non-linear function, built once from the float function and
stored in the graph as constants, so the golden model, the CUDA kernels and the circuit index
the very same table.

Indexing (the contract every backend implements, see reference.table_index):
    idx = (clip(q, lo, lo + (size << shift) - 1) - lo) >> shift
q is the input code. With lo a multiple of 2**shift this is a slice of the input bits, after
saturation. Entry i holds f at the middle of the codes it covers, rounded to nearest in the
output type (so one table serves every backend).
"""

from __future__ import annotations

import math

import numpy as np

from .. import fixed as fx
from ..ir import Graph, GraphError, Node, Tensor
from ..ops import TABLE_OPS, LutAttrs, Op, op_of
from ..reference import FLOAT_FUNCS
from ..types import FixedType, Rounding

DEFAULT_TABLE_BITS = 10
# index bits of a table: at most 2**16 entries (a table is a ROM in the circuit and an array
# in every backend; 2**40 entries would never be built)
TABLE_BITS_RANGE = (4, 16)
EXP_TYPE = FixedType(18, 1, signed=False, rounding=Rounding.RND)
RECIP_TYPE = FixedType(18, 1, signed=False, rounding=Rounding.RND)
# where the functions are flat enough that saturating the index costs nothing
_DOMAIN = {"sigmoid": (-8.0, 8.0), "tanh": (-4.0, 4.0), "selu": (-8.0, None), "exp": (None, None)}


def shift_for(n_codes: int, bits: int) -> int:
    return max(0, math.ceil(math.log2(n_codes / (1 << bits)))) if n_codes > (1 << bits) else 0


def _code(v: float, t: FixedType, up: bool) -> int:
    x = v * 2.0**t.frac
    return int(math.ceil(x) if up else math.floor(x))


def make_table(func: str, node: Node, lo: int, hi: int, shift: int, tin: FixedType,
               tout: FixedType) -> np.ndarray:
    size = ((hi - lo) >> shift) + 1
    a = lo + (np.arange(size, dtype=np.int64) << shift)
    b = np.minimum(a + (1 << shift) - 1, hi)
    mid = (a.astype(np.float64) + b.astype(np.float64)) / 2.0 * 2.0**-tin.frac
    vals = FLOAT_FUNCS[func](mid, node)
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


def _softmax(g: Graph, node: Node, bits: int) -> tuple[Node, dict[str, np.ndarray], dict[str, Tensor]]:
    tin = g.tensor(node.inputs[0]).dtype
    n = int(np.prod(g.tensor(node.inputs[0]).shape))
    span = max(1, math.ceil(16.0 * 2.0**tin.frac))  # exp(-16) ~ 1e-7: below the exp type's lsb
    span = min(span, tin.qmax - tin.qmin)
    shift = shift_for(span + 1, bits)
    k = -(-span // (1 << shift))
    exp_lo = -(k << shift)
    exp_table = make_table("exp", node, exp_lo, 0, shift, tin, EXP_TYPE)
    one = 1 << EXP_TYPE.frac
    if int(exp_table[-1]) != one:
        raise GraphError(f"node {node.name}: exp table does not map 0 to 1.0")
    r_lo, r_hi = one, n * int(exp_table.max())
    r_shift = shift_for(r_hi - r_lo + 1, bits)
    r_lo = (r_lo >> r_shift) << r_shift
    recip_table = make_table("reciprocal", node, r_lo, r_hi, r_shift, EXP_TYPE, RECIP_TYPE)
    en, rn = f"{node.name}_exp_table", f"{node.name}_recip_table"
    new = Node.make(node.name, Op.SOFTMAX, [node.inputs[0], en, rn], node.outputs,
                    exp_lo=exp_lo, exp_shift=shift, recip_lo=r_lo, recip_shift=r_shift,
                    exp_type=str(EXP_TYPE), recip_type=str(RECIP_TYPE))
    return (new, {en: exp_table, rn: recip_table},
            {en: Tensor(en, exp_table.shape, EXP_TYPE), rn: Tensor(rn, recip_table.shape, RECIP_TYPE)})


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
    for node in g.nodes:
        out_t = g.tensor(node.outputs[0]).dtype
        if node.op in TABLE_OPS and isinstance(out_t, FixedType) and len(node.inputs) == 1:
            new, c, t = _BUILDERS[op_of(node.op)](g, node, table_bits)
            nodes.append(new)
            consts.update(c)
            tensors.update(t)
        else:
            nodes.append(node)
    return g.replace(nodes=tuple(nodes), constants=consts, tensors=tensors)
