"""ONNX QuantizeLinear/DequantizeLinear as exporters write them (onnxruntime's QDQ format,
brevitas' QCDQ: QuantizeLinear -> Clip -> DequantizeLinear): the same fixed-point types and
scaled-integer arithmetic as the QONNX quantizers (quant.py), from a scale and a zero point
whose dtype gives the codes; constant codes (onnxruntime's weights and int32 biases)
dequantized exactly at import time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from ...graphs.types import FixedType, Rounding
from .io import Unsupported
from .layout import attrs, identity
from .quant import check_scale, emit_typed, pow2_type, qparam, scaled

if TYPE_CHECKING:
    from .state import ImportState

_QDQ_DTYPES = {np.dtype(np.int8): onnx.TensorProto.INT8, np.dtype(np.uint8): onnx.TensorProto.UINT8,
               np.dtype(np.int16): onnx.TensorProto.INT16,
               np.dtype(np.uint16): onnx.TensorProto.UINT16}


def qdq(im: ImportState, node: onnx.NodeProto) -> None:
    """QuantizeLinear -> a fixed-point type (Requant); DequantizeLinear right after it (same
    scale and zero point, possibly through a Clip of the codes: `clip_codes`) is the identity,
    since the IR carries real values. A DequantizeLinear of constant integer codes (the weights
    and int32 biases of onnxruntime's QDQ format) is the constant scale * (codes - zero point),
    with the codes' grid recorded as a quantized weight's is."""
    x = node.input[0]
    sc, zpv = _qdq_params(im, node)
    if node.op_type == "DequantizeLinear":
        made = im.qdq.get(im.src(x))  # the QuantizeLinear's scale and zero point
        if made is None and im.is_const(x):
            return _dequantize_const(im, node, sc, zpv)
        if made is None:
            raise im.err(node, f"input {x!r} is not the output of a QuantizeLinear (integer "
                         "codes); only QuantizeLinear -> DequantizeLinear pairs are supported")
        if made[1].dtype != zpv.dtype or not (np.array_equal(made[0], sc)
                                              and np.array_equal(made[1], zpv)):
            raise im.err(node, f"scale/zero point ({zpv.dtype}) do not match the QuantizeLinear "
                         f"that produced {x!r} ({made[1].dtype})")
        if im.is_const(x):
            return _alias_const(im, node, x)
        return identity(im, node)
    signed = zpv.dtype.kind == "i"
    bits = 8 * zpv.dtype.itemsize
    t = pow2_type(im, node, sc, zpv, bits, signed, False, "ROUND")
    scb, zpb = _along(im, node, sc, zpv)
    if im.is_const(x):
        w = im.const(x).astype(np.float64)
        if not np.all(np.isfinite(w)):
            raise im.err(node, f"weight {im.src(x)!r} contains NaN or Inf")
        qmin, qmax = (int(np.iinfo(zpv.dtype).min), int(np.iinfo(zpv.dtype).max))
        with np.errstate(all="ignore"):  # huge weights saturate; no warning lines
            vals = scb * (np.clip(np.round(w / scb) + zpb, qmin, qmax) - zpb)
        im.add_const(node.output[0], vals, t)
        if t is None:
            im.weight_scales.update(float(v) for v in np.unique(sc))
        im.qdq[node.output[0]] = (sc, zpv, None)
        return
    out = node.output[0]
    if t is None:
        codes = FixedType(bits, bits, signed, Rounding.RND_CONV)
        scaled(im, node, "Requant", x, codes, scb, zpb, quant_type=str(codes))
        out = f"{out}__codes"  # the tensor scaled gives the codes' type
    else:
        emit_typed(im, node, "Requant", x, t, quant_type=str(t))
    im.qdq[node.output[0]] = (sc, zpv, out)


def _along(im: ImportState, node: onnx.NodeProto, sc: np.ndarray, zpv: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point (float64) in the input's full shape: per-axis parameters (1-D)
    along `axis`, for broadcasting."""
    full = im.full_shape(node.input[0])
    ax = attrs(node).get("axis", 1) % max(len(full), 1)
    along = [1] * len(full)
    if sc.ndim == 1 and full:
        along[ax] = sc.shape[0]
    scb = sc.reshape(along) if sc.ndim == 1 else sc
    zpb = zpv.astype(np.float64).reshape(along) if zpv.ndim == 1 else zpv.astype(np.float64)
    return scb, zpb


def _dequantize_const(im: ImportState, node: onnx.NodeProto, sc: np.ndarray,
                      zpv: np.ndarray) -> None:
    """DequantizeLinear of constant codes: scale * (codes - zero point), exact (float64)."""
    x = node.input[0]
    codes = np.asarray(im.const(x))
    if codes.dtype != zpv.dtype:
        raise im.err(node, f"input {x!r} ({codes.dtype}) is not integer codes of the zero "
                     f"point's dtype {zpv.dtype}")
    scb, zpb = _along(im, node, sc, zpv)
    vals = scb * (codes.astype(np.float64) - zpb)
    t = pow2_type(im, node, sc, zpv, 8 * codes.dtype.itemsize, codes.dtype.kind == "i", False,
                  "ROUND")
    im.add_const(node.output[0], vals, t)
    if t is None:
        im.weight_scales.update(float(v) for v in np.unique(sc))


def _alias_const(im: ImportState, node: onnx.NodeProto, x: str) -> None:
    """The output of a constant QuantizeLinear (its values already dequantized), as it is."""
    src = im.src(x)
    im.add_const(node.output[0], im.consts[src], im.const_types.get(src))


def _code_range(lo: int, hi: int) -> tuple[int, bool, bool] | None:
    """(bits, signed, narrow) of the fixed-point codes whose range is exactly [lo, hi]."""
    if lo == 0 and hi >= 1:  # unsigned: [0, 2^b - 1], or narrow [0, 2^b - 2]
        for m, narrow in ((hi + 1, False), (hi + 2, True)):
            if m & (m - 1) == 0:
                return m.bit_length() - 1, False, narrow
        return None
    m = hi + 1  # signed: [-2^(b-1), 2^(b-1) - 1], or narrow from -2^(b-1) + 1
    if lo >= 0 or m < 1 or m & (m - 1):
        return None
    bits = m.bit_length()
    if lo == -m:
        return bits, True, False
    return (bits, True, True) if lo == 1 - m and bits >= 2 else None


def clip_codes(im: ImportState, node: onnx.NodeProto) -> None:
    """Clip of a QuantizeLinear's integer codes (brevitas' QCDQ export writes QuantizeLinear ->
    Clip -> DequantizeLinear for bit widths under 8): the codes' type narrows to [lo, hi],
    which must be the range of a fixed-point type (b bits, signed or not, narrow or not)."""
    x = node.input[0]
    src = im.src(x)
    sc, zpv, codes = im.qdq[src]
    lo, hi = clip_bounds(im, node)
    qmin, qmax = int(np.iinfo(zpv.dtype).min), int(np.iinfo(zpv.dtype).max)
    for v, what in ((lo, "min"), (hi, "max")):
        if v is not None and v != math.floor(v):
            raise im.err(node, f"Clip bound {v:g} ({what}) of the codes of {x!r} is not an "
                         "integer")
    lo = qmin if lo is None else max(qmin, int(lo))
    hi = qmax if hi is None else min(qmax, int(hi))
    rng = _code_range(lo, hi)
    if rng is None:
        raise im.err(node, f"Clip [{lo}, {hi}] of the codes of {x!r} is not the range of a "
                     "fixed-point type (b-bit signed, unsigned or narrow); not supported")
    bits, signed, narrow = rng
    users = [n for n in im.g.node if x in n.input] + [o for o in im.g.output if o.name == x]
    if len(users) != 1:
        raise im.err(node, f"the codes {x!r} this Clip narrows have other users; only "
                     "QuantizeLinear -> Clip -> DequantizeLinear is supported")
    if im.is_const(x):
        scb, zpb = _along(im, node, sc, zpv)
        with np.errstate(all="ignore"):
            q = np.clip(np.round(im.consts[src] / scb + zpb), lo, hi)
        t = pow2_type(im, node, sc, zpv, bits, signed, narrow, "ROUND")
        im.add_const(node.output[0], scb * (q - zpb), t)
        im.qdq[node.output[0]] = (sc, zpv, None)
        return
    old = im.types[codes]
    assert isinstance(old, FixedType)
    new = FixedType(bits, bits - old.frac, signed, old.rounding, old.overflow, narrow=narrow)
    im.types[codes] = new
    k = next(k for k, n in enumerate(im.nodes) if codes in n.outputs)
    n = im.nodes[k]
    im.nodes[k] = dataclasses.replace(n, attrs=tuple((a, str(new) if a == "quant_type" else v)
                                                     for a, v in n.attrs))
    identity(im, node)


def clip_bounds(im: ImportState, node: onnx.NodeProto) -> tuple[float | None, float | None]:
    """Clip's constant bounds (opset >= 11: optional inputs; before: attributes min/max);
    None where there is none (or it is an infinity on its side)."""
    a = attrs(node)
    ins = list(node.input) + ["", ""]
    bounds: list[float | None] = []
    for k, (nm, key) in enumerate(((ins[1], "min"), (ins[2], "max"))):
        if im.opset < 11:
            v = a.get(key)
            bounds.append(None if v is None else float(v))
            continue
        if not nm:
            bounds.append(None)
            continue
        if not im.is_const(nm):
            raise im.err(node, f"Clip bound {nm!r} ({key}) must be a constant")
        c = np.asarray(im.const(nm), dtype=np.float64)
        if c.size != 1 or np.isnan(c.reshape(-1)[0]):
            raise im.err(node, f"Clip bound {nm!r} ({key}) must be one number (not NaN), got "
                         f"shape {list(c.shape)}")
        v = float(c.reshape(-1)[0])
        bounds.append(None if np.isinf(v) and (v < 0) == (k == 0) else v)
    return bounds[0], bounds[1]


def _qdq_params(im: ImportState, node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point of a QuantizeLinear/DequantizeLinear: constants, a positive
    finite scale, a supported zero-point dtype, shapes that fit `axis`."""
    x, s = node.input[:2]
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    a = attrs(node)
    sc = qparam(im, node, s, "scale")
    check_scale(im, node, s, sc)
    if zp is not None and not im.is_const(zp):
        raise im.err(node, f"{node.op_type} parameter {zp!r} (zero point) must be a constant")
    codes = None  # a DequantizeLinear's constant integer codes (onnxruntime's weights, biases)
    if node.op_type == "DequantizeLinear" and im.is_const(x) and im.src(x) not in im.qdq:
        codes = np.asarray(im.const(x)).dtype
    zpv = _qdq_zero_point(im, node, zp, sc, a.get("output_dtype", 0), codes)
    if a.get("block_size", 0):
        raise im.unsupported(node, "block_size", "blocked quantization (block_size != 0) is "
                             "not supported")
    if sc.ndim == 1 and sc.size == 1:  # per tensor, as onnxruntime reads it (its biases')
        sc, zpv = sc.reshape(()), zpv.reshape(())
    full = im.full_shape(x)
    if sc.ndim > 1:
        raise im.err(node, f"scale {s!r} must be a scalar or 1-D, got shape {list(sc.shape)}")
    if sc.ndim == 1:
        axis = a.get("axis", 1)
        if not -len(full) <= axis < len(full):
            raise im.err(node, f"axis {axis} is out of range for a rank-{len(full)} tensor")
        if sc.shape[0] != full[axis]:
            raise im.err(node, f"scale {s!r} has {sc.shape[0]} values; axis {axis} of the "
                         f"input has {full[axis]}")
    return sc, zpv


def _qdq_zero_point(im: ImportState, node: onnx.NodeProto, zp: str | None, sc: np.ndarray,
                    out_dt: int, codes: np.dtype | None = None) -> np.ndarray:
    """The zero point (zeros of `output_dtype`, default UINT8, when there is none). `codes`:
    the dtype of a DequantizeLinear's constant input, the default there; INT32 is allowed
    there too (onnxruntime's quantized biases)."""
    dtypes = dict(_QDQ_DTYPES)
    if codes is not None:
        dtypes[np.dtype(np.int32)] = onnx.TensorProto.INT32
        if zp is None and codes in dtypes:
            return np.zeros((), codes)
    if zp is None:
        np_dt = (helper.tensor_dtype_to_np_dtype(out_dt) if out_dt in _QDQ_DTYPES.values()
                 else None)
        if out_dt and np_dt is None:
            name = onnx.TensorProto.DataType.Name(out_dt) if out_dt in \
                onnx.TensorProto.DataType.values() else str(out_dt)
            raise Unsupported(f"{im.label(node)}: output_dtype {name} is not supported "
                              "(INT8, UINT8, INT16, UINT16 are)", "dtype", name)
        return np.zeros((), np_dt or np.uint8)
    zpv = np.asarray(im.const(zp))
    if zpv.dtype not in dtypes:
        name = str(zpv.dtype).upper()
        raise Unsupported(f"{im.label(node)}: zero point {zp!r} has dtype {name}; "
                          "supported: " + ", ".join(str(d).upper() for d in dtypes), "dtype",
                          name)
    if out_dt and out_dt != dtypes[zpv.dtype]:
        raise im.err(node, f"output_dtype {out_dt} does not match the zero point's dtype "
                     f"{zpv.dtype}")
    if zpv.shape != sc.shape and not (zpv.size == 1 and sc.size == 1):
        raise im.err(node, f"zero point {zp!r} of shape {list(zpv.shape)} does not match "
                     f"the scale's shape {list(sc.shape)}")
    return zpv
