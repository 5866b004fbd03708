"""Quantizers: QONNX Quant, BipolarQuant and Trunc (ONNX QuantizeLinear/DequantizeLinear:
qdq.py, on the types and arithmetic written here).

On a constant (a weight) a quantizer is applied at import time and its result is a
constant carrying the fixed-point type. On an activation it becomes a Requant (or Bipolar)
node. A power-of-two scale with zero point 0 is a fixed-point type; any other scale (per tensor
or per channel) and zero point is a scaled integer, written as the float arithmetic that QONNX
defines around integer codes: Div(scale) -> Add(zero point) -> Requant to integer codes ->
Sub(zero point) -> Mul(scale). The codes are what circuits compute on; passes/scales.py moves
the scales through the next Dense and passes/thresholds.py turns the float arithmetic between
two quantizers into exact thresholds. A non-power-of-two weight scale is recorded
(graph meta `weight_scales`) so that passes/scales.py can factor the weights back into codes.
Parameters are checked first: constants, numeric, a positive finite scale, an integer
bitwidth of 1 to 64, zero points within the code range, shapes that broadcast.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ...graphs.ir import GraphError
from ...graphs.types import FixedType, Rounding
from .io import q, show
from .layout import act_shape, attrs

if TYPE_CHECKING:
    from .state import ImportState

# QONNX rounding modes (qonnx.custom_op.general.intquant.resolve_rounding_mode), for weights
_QONNX_ROUNDING = {
    "ROUND": np.round, "HALF_EVEN": np.round, "CEIL": np.ceil, "FLOOR": np.floor,
    "UP": lambda x: np.sign(x) * np.ceil(np.abs(x)), "DOWN": np.fix, "ROUND_TO_ZERO": np.fix,
    "HALF_UP": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
    "HALF_DOWN": lambda x: np.sign(x) * np.ceil(np.abs(x) - 0.5),
}
# ... and the ones a fixed-point type can carry (activations)
_ROUNDING_TYPES = {"ROUND": Rounding.RND_CONV, "HALF_EVEN": Rounding.RND_CONV,
                   "FLOOR": Rounding.TRN}

# zero-point dtypes of QuantizeLinear the importer carries as a fixed-point type

# -- parameters -----------------------------------------------------------------------------


def pow2_type(im: ImportState, node: onnx.NodeProto, scale: np.ndarray, zp: np.ndarray,
              bits: float, signed: bool, narrow: bool, rounding: str) -> FixedType | None:
    """The fixed-point type of a quantizer with one power-of-two scale and zero point 0
    (None for any other)."""
    s = np.unique(np.asarray(scale, dtype=np.float64))
    if s.size != 1 or np.any(np.asarray(zp) != 0) or not np.isfinite(s[0]) or s[0] <= 0:
        return None
    m, e = math.frexp(float(s[0]))
    if m != 0.5 or bits != int(bits):
        return None
    frac = -(e - 1)
    r = _ROUNDING_TYPES.get(rounding.upper())
    if r is None:
        raise im.unsupported(node, "rounding_mode", f"rounding_mode {rounding!r} is not "
                             "supported (ROUND and FLOOR are)")
    return FixedType(int(bits), int(bits) - frac, signed, r, narrow=narrow)


def qparam(im: ImportState, node: onnx.NodeProto, name: str, what: str) -> np.ndarray:
    """A quantizer parameter: a numeric constant, as float64."""
    if not im.is_const(name):
        raise im.err(node, f"{node.op_type} parameter {q(name)} ({what}) must be a "
                     "constant")
    v = im.const(name)
    if v.dtype.kind not in "fiub":
        raise im.err(node, f"{what} {q(name)} is not numeric (dtype {v.dtype})")
    return v.astype(np.float64)


def check_scale(im: ImportState, node: onnx.NodeProto, name: str, sc: np.ndarray) -> None:
    if sc.size == 0 or not np.all(np.isfinite(sc)) or np.any(sc <= 0):
        bad = sc.reshape(-1)[~(np.isfinite(sc.reshape(-1)) & (sc.reshape(-1) > 0))]
        raise im.err(node, f"scale {q(name)} must be positive and finite"
                     + (f", got {bad[0]}" if bad.size else " (it is empty)"))


def check_broadcast(im: ImportState, node: onnx.NodeProto, full: tuple[int, ...],
                    params: dict[str, np.ndarray]) -> None:
    """Quantizer parameters broadcast against the quantized tensor without changing its
    shape (ONNX batch-including shape)."""
    try:
        out = np.broadcast_shapes(full, *(v.shape for v in params.values()))
    except ValueError:
        out = None
    if out != tuple(full):
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in params.items())
        raise im.err(node, f"parameters ({shapes}) do not broadcast to the input's "
                     f"shape {list(full)}")


def rounding_mode(im: ImportState, node: onnx.NodeProto, a: dict[str, Any]) -> str:
    raw = a.get("rounding_mode", b"ROUND")
    try:
        rounding = raw.decode() if isinstance(raw, bytes) else str(raw)
    except UnicodeDecodeError:
        raise im.unsupported(node, "rounding_mode", f"rounding_mode {show(raw)} is not "
                             "valid UTF-8") from None
    if rounding.upper() not in _QONNX_ROUNDING:
        raise im.unsupported(node, "rounding_mode", f"rounding_mode {show(rounding)} is "
                             "not supported; supported: " + ", ".join(_QONNX_ROUNDING))
    return rounding


def emit_typed(im: ImportState, node: onnx.NodeProto, op: str, x: str, t: FixedType,
                **node_attrs: Any) -> None:
    """A quantizer on an activation: an IR node whose output carries the type `t`."""
    im.emit(node, op, [x], node.output[0], act_shape(im, x), **node_attrs)
    im.types[node.output[0]] = t


# -- QONNX ----------------------------------------------------------------------------------


def quant(im: ImportState, node: onnx.NodeProto) -> None:
    a = attrs(node)
    signed = im.flag(node, a, "signed", 1)
    narrow = im.flag(node, a, "narrow", 0)
    rounding = rounding_mode(im, node, a)
    x, scale, zp, bw = node.input[:4]
    sc, z = qparam(im, node, scale, "scale"), qparam(im, node, zp, "zero point")
    bits = _bitwidth(im, node, bw, signed, narrow)
    check_scale(im, node, scale, sc)
    qmin = (-(2 ** (bits - 1)) + (1 if narrow else 0)) if signed else 0
    qmax = (2 ** (bits - 1) - 1) if signed else 2 ** bits - 1 - (1 if narrow else 0)
    if not np.all(np.isfinite(z)) or np.any(z != np.round(z)) or np.any(z < qmin) \
            or np.any(z > qmax):
        raise im.err(node, f"zero point {q(zp)} must hold integers within "
                     f"[{qmin:g}, {qmax:g}], got {z.reshape(-1)[:4].tolist()}")
    check_broadcast(im, node, im.full_shape(x), {"scale": sc, "zero point": z})
    t = pow2_type(im, node, sc, z, bits, signed, narrow, rounding)
    if im.is_const(x):
        w = im.const(x).astype(np.float64)
        if not np.all(np.isfinite(w)):
            raise GraphError(f"weight {im.src(x)!r} contains NaN or Inf")
        with np.errstate(all="ignore"):  # huge weights saturate; no warning lines
            y = w / sc + z
            r = _QONNX_ROUNDING[rounding.upper()](y)
            vals = sc * (np.clip(r, qmin, qmax) - z)
        im.add_const(node.output[0], vals, t)
        if t is None:
            im.weight_scales.update(float(v) for v in np.unique(sc))
        return
    if t is None:
        codes = FixedType(int(bits), int(bits), signed, _rounding_type(im, node, rounding),
                          narrow=narrow)
        return scaled(im, node, "Requant", x, codes, sc, z, quant_type=str(codes))
    emit_typed(im, node, "Requant", x, t, quant_type=str(t))


def _rounding_type(im: ImportState, node: onnx.NodeProto, rounding: str) -> Rounding:
    r = _ROUNDING_TYPES.get(rounding.upper())
    if r is None:
        raise im.unsupported(node, "rounding_mode", f"rounding_mode {rounding!r} is not "
                             "supported on activations (ROUND and FLOOR are)")
    return r


def _per_sample(im: ImportState, x: str, v: np.ndarray) -> np.ndarray:
    """A quantizer parameter (ONNX shape, batch included) as a per-sample constant: a scalar
    when it is uniform, else broadcast to the activation's per-sample shape."""
    u = np.unique(v)
    if u.size == 1:
        return np.asarray(u[0], dtype=np.float64)
    full = im.full_shape(x)
    if v.ndim <= len(full):  # varying along the last axis only (per channel): kept (C,)
        lead = np.asarray(v).reshape((1,) * (len(full) - v.ndim) + v.shape)
        if all(d == 1 for d in lead.shape[:-1]) and lead.shape[-1] == full[-1] > 1:
            return lead.reshape(-1).astype(np.float64).copy()
    return np.broadcast_to(v, full)[0].astype(np.float64).copy()


def scaled(im: ImportState, node: onnx.NodeProto, op: str, x: str, codes: FixedType,
            sc: np.ndarray, z: np.ndarray | None, **node_attrs: Any) -> None:
    """A quantizer with a non-power-of-two scale or a zero point, on an activation: QONNX's
    definition spelled out, scale * (codes(x / scale + zero point) - zero point)."""
    shp = act_shape(im, x)
    s = _per_sample(im, x, sc)
    zp = _per_sample(im, x, z) if z is not None else np.zeros(())
    out = node.output[0]
    cur = x
    if op == "Requant" and np.any(s != 1):
        cur = _step(im, node, "Div", cur, s, f"{out}_scaled", shp)
    if op == "Requant" and np.any(zp != 0):
        cur = _step(im, node, "Add", cur, zp, f"{out}__shifted", shp)
    q = f"{out}__codes"
    im.emit(node, op, [cur], q, shp, **node_attrs)
    im.types[q] = codes
    cur = q
    if np.any(zp != 0):
        cur = _step(im, node, "Add", cur, -zp, f"{out}__centred", shp)
    if np.any(s != 1) or cur == q:
        _step(im, node, "Mul", cur, s, out, shp)
    else:
        im.emit(node, "Add", [cur, im.add_const(im.fresh(f"{out}__zero"), np.zeros(()))],
                out, shp)


def _step(im: ImportState, node: onnx.NodeProto, op: str, x: str, c: np.ndarray, out: str,
          shp: tuple[int, ...]) -> str:
    im.emit(node, op, [x, im.add_const(im.fresh(f"{out}_c"), c)], out, shp)
    return out


def _bitwidth(im: ImportState, node: onnx.NodeProto, bw: str, signed: bool, narrow: bool
              ) -> float:
    """Quant's bitwidth: a scalar integer from 1 to 64 (2 for narrow signed)."""
    b = qparam(im, node, bw, "bitwidth")
    if b.size != 1:
        raise im.err(node, f"bitwidth {q(bw)} must be a scalar, got shape {list(b.shape)}")
    bits = float(b.reshape(-1)[0])
    if not math.isfinite(bits) or bits != int(bits) or not 1 <= bits <= 64:
        raise im.err(node, f"bitwidth {q(bw)} is {bits:g}; it must be an integer from 1 "
                     "to 64")
    if signed and narrow and bits < 2:
        raise im.err(node, "a narrow signed Quant needs a bitwidth of at least 2")
    return bits


def bipolar(im: ImportState, node: onnx.NodeProto) -> None:
    x, scale = node.input[:2]
    scv = qparam(im, node, scale, "scale")
    check_scale(im, node, scale, scv)
    check_broadcast(im, node, im.full_shape(x), {"scale": scv})
    uniform = np.unique(scv)
    sc = float(uniform[0])
    m, e = math.frexp(sc)
    t = FixedType(2, 2 - (1 - e), True, narrow=True) if m == 0.5 and uniform.size == 1 \
        else None
    if im.is_const(x):
        w = im.const(x)
        if w.dtype.kind == "f" and not np.all(np.isfinite(w)):
            raise GraphError(f"weight {im.src(x)!r} contains NaN or Inf")
        s = sc if scv.size == 1 else scv
        im.add_const(node.output[0], np.where(w >= 0, s, -s), t)
        if t is None:
            im.weight_scales.update(float(v) for v in uniform)
        return
    if t is None:  # codes +-1, then the scale
        return scaled(im, node, "Bipolar", x, FixedType(2, 2, True, narrow=True), scv, None,
                       scale=1.0)
    emit_typed(im, node, "Bipolar", x, t, scale=sc)


# -- QONNX Trunc ----------------------------------------------------------------------------


def _codes_of(im: ImportState, name: str) -> tuple[str, FixedType, float] | None:
    """(IR codes tensor, its type, multiplier m) of an activation whose float value is m times
    the codes' fixed-point value: a power-of-two quantizer's output (m = 1), or a scaled
    integer s * codes as `scaled` writes it with zero point 0 (m = s)."""
    src = im.src(name)
    t = im.types.get(src)
    if isinstance(t, FixedType):
        return src, t, 1.0
    p = next((n for n in reversed(im.nodes) if src in n.outputs), None)
    if p is not None and p.op in ("Transpose", "Reshape") and im.node is not None:
        inner = _codes_of(im, p.inputs[0])  # a layout move (to channels-last) of the codes
        if inner is None:
            return None
        moved = im.fresh(f"{inner[0]}_moved")
        im.emit(im.node, p.op, [inner[0]], moved, im.shapes[src], **dict(p.attrs))
        im.types[moved] = inner[1]
        return moved, inner[1], inner[2]
    if p is None or p.op != "Mul" or len(p.inputs) != 2 or p.inputs[1] not in im.consts:
        return None
    s = np.unique(np.asarray(im.consts[p.inputs[1]], dtype=np.float64))
    t = im.types.get(p.inputs[0])
    if s.size != 1 or not isinstance(t, FixedType):
        return None
    return p.inputs[0], t, float(s[0])


def _scalar(im: ImportState, node: onnx.NodeProto, name: str, what: str) -> float:
    v = qparam(im, node, name, what)
    u = np.unique(v)
    if u.size != 1:
        raise im.err(node, f"{what} {q(name)} must be one value (per tensor), got "
                     f"{v.size} different values")
    return float(u[0])


def trunc(im: ImportState, node: onnx.NodeProto) -> None:
    """QONNX Trunc (qonnx.custom_op.general.trunc, v2 with 6 inputs, v1 with 5) on the integer
    codes its input carries: an IR Trunc (reference.trunc: every QONNX rounding mode, exact)
    whose output type is the output grid, then the output scale. brevitas' TruncAvgPool writes
    AveragePool -> Trunc with the Trunc's scale = the pool input's scale / window size: the
    pair is the exact window sum (a depthwise Conv of ones on the codes) truncated."""
    a = attrs(node)
    ins = list(node.input)
    # qonnx picks Trunc_v1 or Trunc_v2 by the model's opset of the node's domain
    ver = max([o.version for o in im.model.opset_import if o.domain == node.domain] or [1])
    v2 = ver >= 2
    if len(ins) != (6 if v2 else 5):
        raise im.err(node, f"Trunc v{2 if v2 else 1} (opset {ver} of {show(node.domain)}) "
                     f"takes {6 if v2 else 5} inputs, got {len(ins)}")
    raw = a.get("rounding_mode", b"FLOOR")
    mode = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)).upper()
    if mode not in _QONNX_ROUNDING or mode == "ROUND_TO_ZERO":
        raise im.unsupported(node, "rounding_mode", f"rounding_mode {show(mode)} is not one of "
                             "QONNX's: ROUND, HALF_EVEN, CEIL, FLOOR, UP, DOWN, HALF_UP, "
                             "HALF_DOWN")
    x = ins[0]
    if im.is_const(x):
        raise im.err(node, "Trunc of a constant is not supported (it truncates activations)")
    scale = _scalar(im, node, ins[1], "scale")
    zp = _scalar(im, node, ins[2], "zero point")
    in_bits = _scalar(im, node, ins[3], "input bit width")
    out_bits = _scalar(im, node, ins[5 if v2 else 4], "output bit width")
    for b, what in ((in_bits, "input"), (out_bits, "output")):
        if b != int(b) or not 1 <= b <= 62:
            raise im.err(node, f"{what} bit width {b:g} must be an integer from 1 to 62")
    if not math.isfinite(scale) or scale <= 0:
        raise im.err(node, f"scale {q(ins[1])} must be positive and finite, got {scale}")
    if zp != 0:
        raise im.err(node, f"Trunc with zero point {zp:g} is not supported (zero point 0)")
    if v2:
        out_scale = _scalar(im, node, ins[4], "output scale")
        if not math.isfinite(out_scale) or out_scale <= 0:
            raise im.err(node, f"output scale {q(ins[4])} must be positive and finite")
        k = int(np.round(np.log2(out_scale / scale)))
        signed, narrow = im.flag(node, a, "signed", 1), im.flag(node, a, "narrow", 0)
    else:  # v1: no clamp; the output stays on the input's scale, divided by 2**k
        k = int(in_bits - out_bits)
        out_scale, signed, narrow = scale * 2.0 ** k, True, False
        out_bits = in_bits - k + 1
    # the codes the Trunc reads: the input itself, or (after brevitas' AveragePool) their
    # window sum
    src = im.src(x)
    pool = next((n for n in reversed(im.nodes) if src in n.outputs), None)
    users = [n for n in im.g.node if any(i == x for i in n.input)]
    count = 1
    if pool is not None and pool.op == "AvgPool" and len(users) == 1 and x not in \
            [o.name for o in im.g.output]:
        pa = dict(pool.attrs)
        count = int(np.prod(pa["kernel"]))
        inner = pool.inputs[0]
    else:
        pool, inner = None, x
    got = _codes_of(im, inner)
    if got is None:
        raise im.err(node, f"the input of Trunc ({q(x)}) is not the output of a quantizer "
                     "(integer codes with one scale), which it must truncate")
    codes, t, m = got
    ratio = m * 2.0 ** -t.frac / (count * scale)
    if abs(ratio - 1.0) > 1e-5:
        raise im.err(node, f"Trunc scale {scale:g} does not match its input's ({m:g} x "
                     f"2^{-t.frac}{f' / {count}' if count > 1 else ''}): only a Trunc of the "
                     "codes as they are (a ratio of 1) is supported")
    shp = act_shape(im, x)
    cur = codes
    if pool is not None:
        im.nodes.remove(pool)
        pa = dict(pool.attrs)
        ch = shp[-1]
        w = np.ones(tuple(pa["kernel"]) + (1, ch))
        wn = im.add_const(im.fresh(f"{node.name or 'trunc'}_ones"), w,
                          FixedType(2, 2, True))
        cur = im.fresh(f"{node.output[0]}__sum")
        im.emit(node, "Conv", [codes, wn], cur, shp, kernel=list(pa["kernel"]),
                strides=list(pa["strides"]), pads=list(pa["pads"]), group=ch)
    frac_out = t.frac - k
    tout = FixedType(int(out_bits), int(out_bits) - frac_out, bool(signed), narrow=bool(narrow))
    unit = 2.0 ** -frac_out  # the value of one output code in the IR
    out = node.output[0]
    mul = out_scale / unit
    tq = out if mul == 1.0 else f"{out}__codes"
    im.emit(node, "Trunc", [cur], tq, shp, mode=mode)
    im.types[tq] = tout
    if mul != 1.0:
        _step(im, node, "Mul", tq, np.asarray(mul), out, shp)
