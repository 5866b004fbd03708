"""LSTM and GRU step by step, float32 and on codes (graphs/recurrent.py holds the numeric
contract): the longest definitions, with the probes a traced run records for calibration;
apart so that reference.py stays the table of the ops and their short definitions.
"""

from __future__ import annotations

from contextvars import ContextVar

import numpy as np

from . import fixed as fx
from . import recurrent
from .ir import Graph, GraphError, Node
from .ops import GruAttrs, LstmAttrs, Op, RecurrentAttrs, attrs
from .reference_common import Array, table_index
from .reference_common import const as _const
from .reference_common import f32 as _f32
from .reference_common import is_fixed as _is_fixed
from .reference_common import tensor_type as _t
from .types import FixedType

# -- recurrent ops (graphs/recurrent.py: the numeric contract) -------------------------
# A traced run (execute(trace=True)) records the float model's internal values of every
# recurrent node here too ("<node>::h", "::c", "::pre", "::hn"): calibration types them.
PROBES: ContextVar[dict[str, Array] | None] = ContextVar("recurrent_probes", default=None)


def _probe(key: str, v: Array) -> None:
    env = PROBES.get()
    if env is not None:
        prev = env.get(key)
        env[key] = v if prev is None else np.concatenate([prev.reshape(-1), v.reshape(-1)])


def _rnn_consts(g: Graph, node: Node) -> tuple[Array, Array, Array, Array, Array]:
    w, r, b, h0 = (_const(g, n) for n in node.inputs[1:5])
    c0 = _const(g, node.inputs[5]) if node.op == Op.LSTM else np.zeros_like(h0)
    return w, r, b, h0, c0


def _rnn_float(g: Graph, node: Node, x: Array) -> Array:
    """The ONNX equations in float32, one step after the other (as onnxruntime)."""
    a = attrs(node)
    assert isinstance(a, RecurrentAttrs)
    w, r, b, h0, c0 = (_f32(v) for v in _rnn_consts(g, node))
    x = _f32(x)
    n, hid = x.shape[0], a.hidden
    h = np.broadcast_to(h0, (n, hid)).astype(np.float32)
    c = np.broadcast_to(c0, (n, hid)).astype(np.float32)
    key = getattr(a, "source", None) or node.name
    clip = None if a.clip is None else np.float32(a.clip)

    def cl(v: Array) -> Array:
        return v if clip is None else np.clip(v, -clip, clip)

    ys, pres = [], []
    for t in range(x.shape[1]):
        xt = x[:, t]
        if node.op == Op.LSTM:
            gates = cl(xt @ w + h @ r + (b[0] + b[1]))
            pres.append(gates)
            i, o, f, cc = (gates[:, k * hid:(k + 1) * hid] for k in range(4))
            i, o, f = (recurrent.act(a, 0, v) for v in (i, o, f))
            c = _f32(f * c + i * recurrent.act(a, 1, cc))
            h = _f32(o * recurrent.act(a, 2, c))
            ys.append(c if LstmAttrs.of(node).emit == "c" else h)
        else:
            lbr = GruAttrs.of(node).lbr
            gx = xt @ w + b[0]
            gh = h @ r[:, :2 * hid] + b[1, :2 * hid]
            zr = cl(gx[:, :2 * hid] + gh)
            z, rr = recurrent.act(a, 0, zr[:, :hid]), recurrent.act(a, 0, zr[:, hid:])
            rn, bn = r[:, 2 * hid:], b[1, 2 * hid:]
            if lbr:
                hn = h @ rn + bn
                _probe(f"{key}::hn", hn)
                pre = cl(gx[:, 2 * hid:] + rr * hn)
            else:
                pre = cl(gx[:, 2 * hid:] + (rr * h) @ rn + bn)
            pres.append(np.concatenate([zr, pre], axis=1))
            nn_ = recurrent.act(a, 1, pre)
            h = _f32((np.float32(1) - z) * nn_ + z * h)
            ys.append(h)
        _probe(f"{key}::h", h)
        _probe(f"{key}::c", c)
    _probe(f"{key}::pre", np.stack(pres, axis=1))
    return _f32(np.stack(ys, axis=1))


def _imatmul(v: Array, w: Array, width: int) -> Array:
    """Integer v @ w, exact (float64 BLAS while the accumulator is within 53 bits)."""
    if width <= 53:
        return (v.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
    return np.einsum("bk,kn->bn", v.astype(np.int64), w.astype(np.int64))


def _tab(g: Graph, node: Node, k: int, q: Array, lo: int | None, shift: int | None) -> Array:
    """Table k (0: f, 1: g, 2: LSTM's h) of a compiled recurrent node, at codes q."""
    base = 6 if node.op == Op.LSTM else 5
    if lo is None or shift is None or len(node.inputs) <= base + k:
        raise GraphError(f"node {node.name} ({node.op}): tables not built; compile first")
    t = _const(g, node.inputs[base + k]).astype(np.int64)
    return t[table_index(q, lo, shift, t.shape[0])]


def rnn_types(node: Node) -> dict[str, FixedType]:
    """The fixed-point types of a compiled recurrent node, by role."""
    a = attrs(node)
    names = ["acc", "pre_type", "f_type", "g_type", "state_type"]
    names += ["cell_type", "h_type"] if node.op == Op.LSTM else []
    names += ["hn_type"] if node.op == Op.GRU and GruAttrs.of(node).lbr else []
    out = {}
    for n in names:
        t = getattr(a, n)
        if t is None:
            raise GraphError(f"node {node.name} ({node.op}): {n} not set; compile the graph first")
        out[n] = t
    return out


def _rnn_fixed(g: Graph, node: Node, x: Array) -> Array:
    """The fixed-point contract of graphs/recurrent.py, step by step, on int64 codes."""
    a = attrs(node)
    assert isinstance(a, RecurrentAttrs)
    ty = rnn_types(node)
    tx, tw, tb = _t(g, node.inputs[0]), _t(g, node.inputs[1]), _t(g, node.inputs[3])
    th, tp, tf, tg = ty["state_type"], ty["pre_type"], ty["f_type"], ty["g_type"]
    w, r, b, h0, c0 = (v.astype(np.int64) for v in _rnn_consts(g, node))
    hid, n = a.hidden, x.shape[0]
    fxh = max(tx.frac, th.frac)
    fa = max(fxh + tw.frac, tb.frac)
    sw, sb = fa - (fxh + tw.frac), fa - tb.frac  # alignment of the sums and of the biases
    bias = (b[0] + b[1]) << sb
    wide = ty["acc"].width
    cc = recurrent.clip_code(a.clip, tp.frac, tp.qmax)

    def pre(acc: Array, frac: int = fa) -> Array:
        p = fx.requantize(acc, frac, tp)
        return p if cc is None else np.clip(p, -cc, cc)

    def xsum(xs: Array, hs: Array, cols: slice, rmat: Array | None = None) -> Array:
        s = _imatmul(xs, w[:, cols], wide) + _imatmul(hs, r[:, cols] if rmat is None else rmat, wide)
        return s << sw

    xq = x.astype(np.int64) << (fxh - tx.frac)
    h = np.broadcast_to(h0, (n, hid)).astype(np.int64)
    c = np.broadcast_to(c0, (n, hid)).astype(np.int64)
    ys = []
    for t in range(x.shape[1]):
        xs, hs = xq[:, t], h << (fxh - th.frac)
        if node.op == Op.LSTM:
            la = LstmAttrs.of(node)
            tc, tht = ty["cell_type"], ty["h_type"]
            p = pre(xsum(xs, hs, slice(None)) + bias)
            i, o, f, cg = (p[:, k * hid:(k + 1) * hid] for k in range(4))
            i, o, f = (_tab(g, node, 0, v, a.f_lo, a.f_shift) for v in (i, o, f))
            gg = _tab(g, node, 1, cg, a.g_lo, a.g_shift)
            fu = max(tf.frac + tc.frac, tf.frac + tg.frac)
            u = fx.align(f * c, tf.frac + tc.frac, fu) + fx.align(i * gg, tf.frac + tg.frac, fu)
            c = fx.requantize(u, fu, tc)
            hc = _tab(g, node, 2, c, la.h_lo, la.h_shift)  # clip: gates only (onnxruntime)
            h = fx.requantize(o * hc, tf.frac + tht.frac, th)
            ys.append(c if la.emit == "c" else h)
            continue
        # GRU
        ga = GruAttrs.of(node)
        zr = pre(xsum(xs, hs, slice(0, 2 * hid)) + bias[:2 * hid])
        z = _tab(g, node, 0, zr[:, :hid], a.f_lo, a.f_shift)
        rr = _tab(g, node, 0, zr[:, hid:], a.f_lo, a.f_shift)
        cn = slice(2 * hid, 3 * hid)
        if ga.lbr:
            thn = ty["hn_type"]
            axn = (_imatmul(xs, w[:, cn], wide) << sw) + (b[0, cn] << sb)
            ahn = (_imatmul(hs, r[:, cn], wide) << sw) + (b[1, cn] << sb)
            hn = fx.requantize(ahn, fa, thn)
            fs = max(fa, tf.frac + thn.frac)
            p = pre(fx.align(axn, fa, fs) + fx.align(rr * hn, tf.frac + thn.frac, fs), fs)
        else:
            rh = fx.requantize(rr * h, tf.frac + th.frac, th)
            p = pre(xsum(xs, rh << (fxh - th.frac), cn) + bias[cn])
        nn_ = _tab(g, node, 1, p, a.g_lo, a.g_shift)
        one = np.int64(1) << np.int64(tf.frac)
        fu = max(tf.frac + tg.frac, tf.frac + th.frac)
        u = fx.align((one - z) * nn_, tf.frac + tg.frac, fu) + fx.align(z * h, tf.frac + th.frac, fu)
        h = fx.requantize(u, fu, th)
        ys.append(h)
    return np.stack(ys, axis=1)


def rnn(g: Graph, node: Node, ins: list[Array]) -> Array:
    """LSTM / GRU over the (batch, T, F) input: the (batch, T, H) states (graphs/recurrent.py)."""
    if not _is_fixed(g, node):
        return _rnn_float(g, node, ins[0])
    return _rnn_fixed(g, node, ins[0])
