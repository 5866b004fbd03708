"""Types, exact accumulators and tables of the recurrent ops (graphs/recurrent.py has the
numeric contract they implement).

`recurrent_types` (after assign_types, before quantize_constants): the state types — the
hidden state (the node's result type: per-layer map, calibration range "<node>::h", else the
precision), LSTM's cell state ("::c"), the gates' pre-activation type ("::pre") and GRU's
linear_before_reset hn ("::hn"), each like any activation's; W and R take one weight type
(a per-layer weight type, else the precision's, fitted to both with calibration), the initial
states the state types themselves (so they are exact codes of the state).

`recurrent_tables` (after quantize_constants): the exact accumulator of the gate sums, from
the weights and the x / h code ranges; the activation tables (the precision's width, the
integer bits each function needs over its domain) as constant inputs; and the check that every
intermediate of the step (graphs/recurrent.py) stays within 62 bits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from .. import fixed as fx
from .. import recurrent as rc
from ..ir import Graph, GraphError, Node, Tensor
from ..ops import RECURRENT, GruAttrs, LstmAttrs, Op, RecurrentAttrs, attrs
from ..types import FixedType, NumType, Rounding, parse_type
from .precision import DEFAULT_PRECISION, fit_int_bits
from .tables import DEFAULT_TABLE_BITS, check_table_bits, shift_for

# where the table's index saturates (as passes/tables.py's Lut tables); others: the whole type
_DOMAIN = {"sigmoid": (-8.0, 8.0), "tanh": (-4.0, 4.0), "hardsigmoid": (None, None)}
LIMIT_BITS = 62  # every intermediate of a step, signed (int64 kernels, numpy int64)


def _key(node: Node) -> str:
    return getattr(attrs(node), "source", None) or node.name


def _result_type(per_layer: Mapping[str, object], key: str) -> NumType | None:
    v = per_layer.get(key)
    if isinstance(v, dict):
        v = v.get("result")
    return None if v is None else parse_type(str(v))


def _ranged(base: FixedType, ranges: Mapping[str, tuple[float, float]], name: str) -> FixedType:
    if name not in ranges:
        return base
    lo, hi = ranges[name]
    signed = base.signed or lo < 0
    return dataclasses.replace(base, signed=signed,
                               int_bits=fit_int_bits(max(abs(lo), abs(hi)), base.width, signed))


def recurrent_types(g: Graph, precision: NumType | None = None,
                    per_layer: Mapping[str, object] | None = None,
                    ranges: Mapping[str, tuple[float, float]] | None = None) -> Graph:
    if not any(n.op in RECURRENT for n in g.nodes):
        return g
    if precision is not None and precision.is_float:
        return g
    base = precision if isinstance(precision, FixedType) else DEFAULT_PRECISION
    per_layer, ranges = per_layer or {}, ranges or {}
    tensors = dict(g.tensors)
    nodes = []
    for node in g.nodes:
        if node.op not in RECURRENT:
            nodes.append(node)
            continue
        key = _key(node)
        where = f"node {node.name} ({node.op})"
        user = _result_type(per_layer, key)
        if user is not None and not isinstance(user, FixedType):
            raise GraphError(f"{where}: a recurrent node's result type must be fixed point, got {user}")
        state = user or _ranged(base, ranges, f"{key}::h")
        types: dict[str, object] = {"state_type": str(state),
                                    "pre_type": str(_ranged(base, ranges, f"{key}::pre"))}
        if node.op == Op.LSTM:
            cell = _ranged(base, ranges, f"{key}::c")
            types["cell_type"] = str(cell)
        elif GruAttrs.of(node).lbr:
            types["hn_type"] = str(_ranged(base, ranges, f"{key}::hn"))
        node = node.with_attrs(**types)
        # W and R: one weight type; the initial states: the state types
        wn, rn = node.inputs[1], node.inputs[2]
        wt = tensors[wn].dtype
        uw = per_layer.get(key)
        if not (isinstance(uw, dict) and uw.get("weight")) and ranges:
            both = np.concatenate([np.ravel(g.constants[wn]), np.ravel(g.constants[rn])])
            m = float(np.max(np.abs(both))) if both.size else 0.0
            wt = dataclasses.replace(base, int_bits=fit_int_bits(m, base.width, True), signed=True)
        if not isinstance(wt, FixedType):
            raise GraphError(f"{where}: weights need a fixed-point type, got {wt}")
        for name, t in ((wn, wt), (rn, wt), (node.inputs[4], state)):
            tensors[name] = dataclasses.replace(tensors[name], dtype=t)
        if node.op == Op.LSTM:
            tensors[node.inputs[5]] = dataclasses.replace(tensors[node.inputs[5]], dtype=cell)
        out_t = cell if node.op == Op.LSTM and LstmAttrs.of(node).emit == "c" else state
        tensors[node.outputs[0]] = dataclasses.replace(tensors[node.outputs[0]], dtype=out_t)
        nodes.append(node)
    return g.replace(nodes=tuple(nodes), tensors=tensors)


def _check(where: str, lo: int, hi: int, what: str) -> None:
    bits = max(abs(int(lo)), abs(int(hi))).bit_length() + 1
    if bits > LIMIT_BITS:
        raise GraphError(f"{where}: the {what} needs {bits} bits, over the {LIMIT_BITS}-bit "
                         "limit; use a narrower precision")


def _table(node: Node, k: int, tin: FixedType, width: int, rounding: Rounding,
           bits: int) -> tuple[np.ndarray, int, int, FixedType]:
    """Table k of the node over tin's codes: (values, lo, shift, output type)."""
    a = attrs(node)
    assert isinstance(a, RecurrentAttrs)
    func = a.acts[k]
    dlo, dhi = _DOMAIN.get(func, (None, None))
    lo = tin.qmin if dlo is None else max(tin.qmin, math.ceil(dlo * 2.0 ** tin.frac))
    hi = tin.qmax if dhi is None else min(tin.qmax, math.floor(dhi * 2.0 ** tin.frac))
    shift = shift_for(hi - lo + 1, bits)
    lo = (lo >> shift) << shift
    size = ((hi - lo) >> shift) + 1
    s = lo + (np.arange(size, dtype=np.int64) << shift)
    e = np.minimum(s + (1 << shift) - 1, hi)
    mid = (s.astype(np.float64) + e.astype(np.float64)) / 2.0 * 2.0 ** -tin.frac
    vals = rc.act(a, k, mid)
    if not np.all(np.isfinite(vals)):
        raise GraphError(f"node {node.name} ({node.op}): activation {func} is not finite on "
                         f"the domain of {tin}")
    m = float(np.max(np.abs(vals))) if vals.size else 0.0
    signed = bool(np.any(vals < 0))
    tout = FixedType(width, fit_int_bits(m, width, signed), signed, rounding)
    return fx.quantize(vals, tout.with_(rounding=Rounding.RND)), int(lo), int(shift), tout


def recurrent_tables(g: Graph, table_bits: int = DEFAULT_TABLE_BITS) -> Graph:
    if not any(n.op in RECURRENT for n in g.nodes):
        return g
    bits = check_table_bits(table_bits)
    nodes, consts, tensors = [], dict(g.constants), dict(g.tensors)
    for node in g.nodes:
        out_t = g.tensor(node.outputs[0]).dtype
        base = 6 if node.op == Op.LSTM else 5
        if node.op not in RECURRENT or not isinstance(out_t, FixedType) or len(node.inputs) > base:
            nodes.append(node)
            continue
        a = attrs(node)
        assert isinstance(a, RecurrentAttrs)
        where = f"node {node.name} ({node.op})"
        tx, tw, tb = (g.tensor(node.inputs[i]).dtype for i in (0, 1, 3))
        if not all(isinstance(t, FixedType) for t in (tx, tw, tb)):
            raise GraphError(f"{where}: input, weights and biases need fixed-point types")
        th, tp = a.state_type, a.pre_type
        assert th is not None and tp is not None
        w, r, b = (np.asarray(g.constants[n], dtype=np.int64) for n in node.inputs[1:4])
        hid = a.hidden
        fxh = max(tx.frac, th.frac)
        fa = max(fxh + tw.frac, tb.frac)
        sw, sb = fa - (fxh + tw.frac), fa - tb.frac
        xlo, xhi = tx.qmin << (fxh - tx.frac), tx.qmax << (fxh - tx.frac)
        hlo, hhi = th.qmin << (fxh - th.frac), th.qmax << (fxh - th.frac)
        lo_r, hi_r = rc.row_ranges(xlo, xhi, w.shape[0], hlo, hhi, r.shape[0])
        wr = np.concatenate([w, r], axis=0) << sw
        bias = (b[0] + b[1]) << sb
        lo, hi = rc.sum_range(wr, lo_r, hi_r, bias)
        # the pieces of GRU's candidate are within these too: Wh or Rh alone, each bias alone
        if node.op == Op.GRU:
            cn = slice(2 * hid, 3 * hid)
            for part, bb in ((np.concatenate([w[:, cn], 0 * r[:, cn]]), b[0, cn]),
                             (np.concatenate([0 * w[:, cn], r[:, cn]]), b[1, cn])):
                l2, h2 = rc.sum_range(part << sw, lo_r, hi_r, bb << sb)
                lo, hi = min(lo, l2), max(hi, h2)
        acc = None
        for width in range(2, 65):
            t = FixedType(width, width - fa)
            if t.qmin <= lo and hi <= t.qmax:
                acc = t
                break
        _check(where, lo, hi, "gate accumulator")
        assert acc is not None
        new: dict[str, object] = {"acc": str(acc)}
        tabs = []
        rnd = tp.rounding
        tf_vals, new["f_lo"], new["f_shift"], tf = _table(node, 0, tp, tp.width, rnd, bits)
        tg_vals, new["g_lo"], new["g_shift"], tg = _table(node, 1, tp, tp.width, rnd, bits)
        new["f_type"], new["g_type"] = str(tf), str(tg)
        tabs += [(tf_vals, tf), (tg_vals, tg)]
        if node.op == Op.LSTM:
            tc = LstmAttrs.of(node).cell_type
            assert tc is not None
            th_vals, new["h_lo"], new["h_shift"], tht = _table(node, 2, tc, tc.width, rnd, bits)
            new["h_type"] = str(tht)
            tabs.append((th_vals, tht))
            fu = max(tf.frac + tc.frac, tf.frac + tg.frac)
            m = (abs(tf.qmin) + tf.qmax) * ((max(abs(tc.qmin), tc.qmax) << (fu - tf.frac - tc.frac))
                                            + (max(abs(tg.qmin), tg.qmax) << (fu - tf.frac - tg.frac)))
            _check(where, -m, m, "cell update")
        else:
            fu = max(tf.frac + tg.frac, tf.frac + th.frac)
            one = 1 << tf.frac
            m = (one + max(abs(tf.qmin), tf.qmax)) * (
                (max(abs(tg.qmin), tg.qmax) << (fu - tf.frac - tg.frac))
                + (max(abs(th.qmin), th.qmax) << (fu - tf.frac - th.frac)))
            _check(where, -m, m, "state update")
            if GruAttrs.of(node).lbr:
                thn = GruAttrs.of(node).hn_type
                assert thn is not None
                fs = max(fa, tf.frac + thn.frac)
                m = (max(abs(lo), hi) << (fs - fa)) + (
                    max(abs(tf.qmin), tf.qmax) * max(abs(thn.qmin), thn.qmax) << (fs - tf.frac - thn.frac))
                _check(where, -m, m, "candidate sum")
        names = []
        for k, (vals, t) in enumerate(tabs):
            nm = f"{node.name}_table_{'fgh'[k]}"
            consts[nm] = vals
            tensors[nm] = Tensor(nm, vals.shape, t)
            names.append(nm)
        node = dataclasses.replace(node.with_attrs(**new), inputs=node.inputs + tuple(names))
        nodes.append(node)
    return g.replace(nodes=tuple(nodes), constants=consts, tensors=tensors)


def tables_for(node: Node) -> list[str]:
    """The table inputs of a compiled recurrent node (f, g[, h])."""
    return list(node.inputs[6 if node.op == Op.LSTM else 5:])


__all__ = ["recurrent_tables", "recurrent_types", "tables_for"]
