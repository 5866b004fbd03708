"""The handlers of transformer-encoder ops in the ONNX walk: the nodes frontend/onnx/
attention.py fused (Attention, Lut: `FUSED`, by op type of its DOMAIN) and the standard
ops of encoders (LayerNormalization, Gelu, ReduceMean over the tokens). Apart from
attention.py because that module rewrites the ModelProto before the walk (pattern
matching, evaluation, fitting) while these read the walk's state and emit graph nodes,
like handlers.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from .io import q
from .layout import act_shape, attrs

if TYPE_CHECKING:
    from .state import ImportState


def attention(im: ImportState, node: onnx.NodeProto) -> None:
    """The fused Attention node (DOMAIN): q, k, v per-sample (T, H*d) [, constant mask]."""
    a = attrs(node)
    qn, kn, vn = node.input[:3]
    (t, hdk), (s, hdk2), (s2, hdv) = act_shape(im, qn), act_shape(im, kn), act_shape(im, vn)
    h = int(a["heads"])
    if hdk != hdk2 or s != s2 or h < 1 or hdk % h or hdv % h:
        raise im.err(node, f"q {[t, hdk]}, k {[s, hdk2]}, v {[s2, hdv]} do not split into "
                     f"{h} heads")
    ins = [qn, kn, vn]
    if len(node.input) > 3:
        mn = im.src(node.input[3])
        im.masks.add(mn)
        ins.append(mn)
    im.emit(node, "Attention", ins, node.output[0], (t, hdv), heads=int(a["heads"]),
            scale=float(a["scale"]), masked=len(ins) > 3)


def lut(im: ImportState, node: onnx.NodeProto) -> None:
    x = node.input[0]
    func = attrs(node)["func"]
    func = func.decode() if isinstance(func, bytes) else str(func)
    im.emit(node, "Lut", [x], node.output[0], act_shape(im, x), func=func)


FUSED: dict[str, Callable[[ImportState, onnx.NodeProto], None]] = {
    "Attention": attention, "Lut": lut}


def layer_norm(im: ImportState, node: onnx.NodeProto) -> None:
    """LayerNormalization over the last axis, constant scale and bias."""
    a = attrs(node)
    x = node.input[0]
    shp = act_shape(im, x)
    axis = int(a.get("axis", -1))
    if axis not in (-1, len(shp)):
        raise im.unsupported(node, "axis", f"LayerNormalization over axis {axis} of a rank-"
                             f"{len(shp) + 1} tensor: only the last axis is supported")
    if int(a.get("stash_type", 1)) != 1:
        raise im.unsupported(node, "stash_type", "LayerNormalization with stash_type other "
                             "than 1 (float32) is not supported")
    d = shp[-1]
    ins = list(node.input) + [""] * (3 - len(node.input))
    vals = []
    for nm, what, default in ((ins[1], "scale", 1.0), (ins[2], "bias", 0.0)):
        if not nm:
            vals.append(np.full(d, default))
            continue
        if not im.is_const(nm):
            raise im.err(node, f"the {what} {q(nm)} must be a constant")
        v = np.asarray(im.const(nm), dtype=np.float64)
        try:
            vals.append(np.broadcast_to(v, (d,)).copy())
        except ValueError:
            raise im.err(node, f"the {what} {q(nm)} of shape {list(v.shape)} does not match "
                         f"the last axis ({d})") from None
    if len(node.output) > 1 and any(node.output[1:]):
        raise im.err(node, "the Mean / InvStdDev outputs (training) are not supported")
    gn = im.add_const(im.fresh(f"{node.name or 'ln'}_gamma"), vals[0])
    bn = im.add_const(im.fresh(f"{node.name or 'ln'}_beta"), vals[1])
    im.emit(node, "LayerNorm", [x, gn, bn], node.output[0], shp,
            epsilon=float(a.get("epsilon", 1e-5)))


def gelu(im: ImportState, node: onnx.NodeProto) -> None:
    """ONNX Gelu (opset 20): a table, erf form or tanh approximation."""
    approx = attrs(node).get("approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else str(approx)
    if approx not in ("none", "tanh"):
        raise im.unsupported(node, "approximate", f"Gelu approximate={approx!r}")
    x = node.input[0]
    im.emit(node, "Lut", [x], node.output[0], act_shape(im, x),
            func="gelu" if approx == "none" else "gelu_tanh")


def token_mean(im: ImportState, node: onnx.NodeProto, axes: list[int] | None,
               keepdims: bool) -> bool:
    """ReduceMean over the tokens of a batch-first (N, T, D) sequence: an AvgPool over the
    whole 1-D frame (then a Reshape unless keepdims). False: not that case."""
    x = node.input[0]
    shp = act_shape(im, x)
    if len(shp) != 2 or axes is None or sorted({a % 3 for a in axes}) != [1] \
            or x in im.swapped or x in im.cf or x in im.channels_last:
        return False  # a channels-first frame (an NCW input moved by the host) is no sequence
    t, d = shp
    out = node.output[0]
    pooled = out if keepdims else im.fresh(f"{out}_pool")
    im.emit(node, "AvgPool", [x], pooled, (1, d), kernel=(t,), strides=(t,), pads=(0, 0))
    if not keepdims:
        im.emit(node, "Reshape", [pooled], out, (d,), shape=(d,))
    return True


def token_mean_axes(im: ImportState, node: onnx.NodeProto) -> tuple[list[int] | None, bool]:
    a: dict[str, Any] = attrs(node)
    if "axes" in a:
        axes = [int(v) for v in a["axes"]]
    elif len(node.input) > 1 and node.input[1]:
        if not im.is_const(node.input[1]):
            return None, True
        axes = [int(v) for v in np.asarray(im.const(node.input[1])).reshape(-1)]
    else:
        axes = None
    return axes, bool(int(a.get("keepdims", 1)))


__all__ = ["FUSED", "attention", "gelu", "layer_norm", "lut", "token_mean", "token_mean_axes"]
