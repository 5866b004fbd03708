"""Handlers of the ops that move values without computing them (Reshape, Flatten, Squeeze,
Unsqueeze, Transpose, Identity, Concat, Gather, Split), and the helpers every handler
shares: a node's attributes, an activation's per-sample shape, constant integer inputs, axes.

Shapes here are per sample: the batch (ONNX dimension 0) is not part of the IR, so an op
that would move or fold the batch is refused; a Reshape or Transpose that keeps the values
in order becomes an alias (no IR node).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

if TYPE_CHECKING:
    from .state import ImportState


def attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def act_shape(im: ImportState, name: str) -> tuple[int, ...]:
    """Per-sample shape of an activation input of the node being imported."""
    s = im.src(name)
    if s not in im.shapes:
        raise im.err(im.node, f"input {name!r} must be an activation here, not a constant")
    return im.shapes[s]


def int_const(im: ImportState, node: onnx.NodeProto, name: str, what: str) -> list[int]:
    """A constant 1-D (or scalar) integer input, e.g. a shape or axes."""
    if not im.is_const(name):
        raise im.err(node, f"{what} {name!r} must be a constant")
    v = np.asarray(im.const(name))
    if v.dtype.kind not in "iu" or v.ndim > 1:
        raise im.err(node, f"{what} {name!r} must be a 1-D integer tensor, got dtype {v.dtype} "
                     f"shape {list(v.shape)}")
    return [int(x) for x in v.reshape(-1)]


def norm_axes(im: ImportState, node: onnx.NodeProto, axes: list[int], rank: int) -> list[int]:
    """ONNX axes of a rank-`rank` tensor, made non-negative; out of range or repeated: refused."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise im.err(node, f"axis {a} is out of range for a rank-{rank} tensor")
        out.append(a + rank if a < 0 else a)
    if len(set(out)) != len(out):
        raise im.err(node, f"axes {axes} repeat an axis")
    return out



def batch_axis(im: ImportState, node: onnx.NodeProto, axis: int, rank: int) -> int:
    """ONNX axis of a rank-`rank` (batch-including) tensor -> per-sample axis."""
    ax = axis + rank if axis < 0 else axis
    if not 0 <= ax < rank:
        raise im.err(node, f"axis {axis} is out of range for a rank-{rank} tensor")
    if ax == 0:
        raise im.err(node, f"axis {axis} is the batch dimension (dimension 0); only per-sample "
                     "axes are supported")
    return ax - 1


def concat(im: ImportState, node: onnx.NodeProto) -> None:
    """Concat of activations along a per-sample axis (constants mixed in are refused)."""
    ins = [i for i in node.input if i]
    consts = [i for i in ins if im.is_const(i)]
    if consts:
        raise im.err(node, f"Concat of activations with constants {consts} is not supported")
    shapes = [act_shape(im, i) for i in ins]
    ax = batch_axis(im, node, int(attrs(node).get("axis", 1)), len(shapes[0]) + 1)
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(
                a != b for k, (a, b) in enumerate(zip(s, shapes[0], strict=True)) if k != ax):
            raise im.err(node, f"Concat of per-sample shapes {[list(t) for t in shapes]} along "
                         f"axis {ax + 1}: the other dimensions differ")
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    im.emit(node, "Concat", ins, node.output[0], tuple(out), axis=ax)


def gather(im: ImportState, node: onnx.NodeProto) -> None:
    """Gather along a per-sample axis of an activation with constant indices; the indices
    (negative ones made positive) are stored as the node's `indices` attribute."""
    x, idx = node.input[:2]
    if not im.is_const(idx):
        raise im.err(node, "Gather indices must be constants")
    shp = act_shape(im, x)
    ax = batch_axis(im, node, int(attrs(node).get("axis", 0)), len(shp) + 1)
    if im.const(idx).dtype.kind not in "iu":
        raise im.err(node, f"Gather indices {idx!r} must be integers, got {im.const(idx).dtype}")
    iv = np.asarray(im.const(idx)).astype(np.int64)
    n = shp[ax]
    if np.any(iv < -n) or np.any(iv >= n):
        raise im.err(node, f"Gather indices {iv.reshape(-1).tolist()} are out of range for "
                     f"a dimension of size {n}")
    iv = np.where(iv < 0, iv + n, iv)
    out = shp[:ax] + tuple(iv.shape) + shp[ax + 1:]
    im.emit(node, "Gather", [x], node.output[0], out, axis=ax, indices=iv.tolist(),
            indices_shape=list(iv.shape))


def split(im: ImportState, node: onnx.NodeProto) -> None:
    """Split of an activation along a per-sample axis (torch's chunk: LSTMCell/GRUCell gates,
    packed projections): each output is a Gather of its part's contiguous indices; one part
    that is the whole axis is an alias. The sizes must be constants that fill the axis (a
    packed q/k/v projection cut by a Split is taken whole by the attention fusion first)."""
    x = node.input[0]
    shp = act_shape(im, x)
    ax = batch_axis(im, node, int(attrs(node).get("axis", 0)), len(shp) + 1)
    n = shp[ax]
    sizes = split_sizes(im, node, n)
    off = 0
    for out, s in zip(node.output, sizes, strict=True):
        part, off = list(range(off, off + s)), off + s
        if not out:
            continue
        if s == n:
            _alias(im, node, x, shp)
            continue
        im.emit(node, "Gather", [x], out, shp[:ax] + (s,) + shp[ax + 1:], axis=ax,
                indices=part, indices_shape=[s])


def split_sizes(im: ImportState, node: onnx.NodeProto, n: int) -> list[int]:
    """The sizes of a Split's parts of an axis of size n: the `split` input (opset >= 13) or
    attribute (before), else `num_outputs` parts (opset >= 18: the last one smaller when n
    is not a multiple), else one equal part per output. Parts that are empty or that do not
    fill the axis exactly are refused, naming the node."""
    k = len(node.output)
    a = attrs(node)
    if len(node.input) > 1 and node.input[1]:
        if not im.is_const(node.input[1]):
            raise im.err(node, f"split sizes {node.input[1]!r} are computed at run time; they "
                         "must be constants")
        sizes = int_const(im, node, node.input[1], "split sizes")
    elif "split" in a:
        sizes = [int(v) for v in a["split"]]
    elif "num_outputs" in a:
        if int(a["num_outputs"]) != k:
            raise im.err(node, f"num_outputs {a['num_outputs']} but {k} outputs")
        c = -(-n // k)
        sizes = [c] * (k - 1) + [n - c * (k - 1)]
    elif n % k:
        raise im.err(node, f"an axis of size {n} does not split into {k} equal parts")
    else:
        sizes = [n // k] * k
    if len(sizes) != k or any(s < 1 for s in sizes) or sum(sizes) != n:
        raise im.err(node, f"split sizes {sizes} into {k} outputs do not divide an axis of "
                     f"size {n} into {k} non-empty parts")
    return sizes


def _alias(im: ImportState, node: onnx.NodeProto, x: str, shp: tuple[int, ...]) -> None:
    """The node's output is its input `x`, values in the same order: no IR node."""
    im.alias[node.output[0]] = im.src(x)
    im.shapes[node.output[0]] = shp


def reshape_to(im: ImportState, node: onnx.NodeProto, x: str, full: tuple[int, ...]) -> None:
    """Reshape given an ONNX (batch-including, batch=1) target shape. Reshaping back to the
    shape of what an earlier Reshape started from is an alias of that tensor."""
    shp = act_shape(im, x)
    size = math.prod(shp)
    per = tuple(int(d) for d in full[1:])
    if any(d < 1 for d in per) or math.prod(per) != size:
        raise im.err(node, f"cannot reshape per-sample {list(shp)} to {list(per)}; the batch "
                     "dimension must stay first")
    base = im.reshaped.get(im.src(x), im.src(x))
    if per == shp:
        return _alias(im, node, x, shp)
    if per == im.shapes[base]:
        return _alias(im, node, base, per)
    im.emit(node, "Reshape", [x], node.output[0], per, shape=list(per))
    im.reshaped[node.output[0]] = base


def reshape(im: ImportState, node: onnx.NodeProto) -> None:
    """Flatten, Reshape, Squeeze and Unsqueeze: each computes its ONNX target shape."""
    x = node.input[0]
    shp = (1,) + act_shape(im, x)
    target = {"Flatten": flatten_target, "Reshape": reshape_target,
              "Squeeze": squeeze_target, "Unsqueeze": unsqueeze_target}[node.op_type]
    reshape_to(im, node, x, target(im, node, shp))


def flatten_target(im: ImportState, node: onnx.NodeProto, shp: tuple[int, ...]
                    ) -> tuple[int, ...]:
    axis = attrs(node).get("axis", 1)
    ax = axis + len(shp) if axis < 0 else axis
    if not 0 <= ax <= len(shp):
        raise im.err(node, f"axis {axis} is out of range for a rank-{len(shp)} tensor")
    if ax == 0 and im.batch != 1:  # (1, N * size): one sample only when N is 1
        raise im.err(node, "Flatten with axis 0 folds the batch dimension into the sample; "
                     "that is one sample only when the model's batch is fixed at 1 (it is "
                     f"{im.batch_text()})")
    if ax == 0:
        return (1, math.prod(shp))
    return (math.prod(shp[:ax]), math.prod(shp[ax:]))


def reshape_target(im: ImportState, node: onnx.NodeProto, shp: tuple[int, ...]
                    ) -> tuple[int, ...]:
    """The ONNX target (batch 1 first) of a Reshape of `shp` (batch 1 first). The target's
    first dimension must be the model's batch: 0 (copy), -1 with the others making one
    sample, or the batch itself (when the batch is symbolic: any number, which is then the
    batch the model runs at). Anything else moves values between samples: refused."""
    if len(node.input) > 1 and node.input[1]:
        if not im.is_const(node.input[1]):
            raise im.err(node, "Reshape target shape must be constant")
        t = int_const(im, node, node.input[1], "shape")
    elif "shape" in attrs(node):  # opset < 5: the shape is an attribute
        t = [int(v) for v in attrs(node)["shape"]]
    else:
        raise im.err(node, "Reshape needs a target shape")
    orig = list(t)
    allowzero = im.flag(node, attrs(node), "allowzero", 0)
    if any(v < -1 for v in t) or t.count(-1) > 1 or (allowzero and 0 in t and -1 in t):
        raise im.err(node, f"shape {t} is not a valid Reshape target (dimensions >= -1, at "
                     "most one -1, and no -1 with a 0 under allowzero=1)")
    if not allowzero and any(v == 0 and i >= len(shp) for i, v in enumerate(t)):
        raise im.err(node, f"shape {t} copies (0) a dimension the rank-{len(shp)} input "
                     "does not have")
    if not t:
        return ()
    size = math.prod(shp)  # one sample
    first, rest = t[0], [shp[i + 1] if (v == 0 and not allowzero) else v
                         for i, v in enumerate(t[1:])]
    if -1 in rest:
        known = math.prod(v for v in rest if v != -1)
        if known == 0 or size % known:
            raise im.err(node, f"cannot reshape per-sample {list(shp[1:])} to {orig}: no "
                         "whole size for the -1")
        rest[rest.index(-1)] = size // known
    copy = first == 0 and not allowzero
    fixed_ok = first >= 1 and (im.batch is None or first == im.batch)
    if not (copy or first == -1 or fixed_ok) or math.prod(rest) != size:
        want = f"{im.batch}, " if im.batch is not None else "the batch, "
        raise im.err(node, f"cannot reshape per-sample {list(shp[1:])} to {orig} without "
                     f"moving values between samples: the model's batch is "
                     f"{im.batch_text()}, so the first dimension must be {want}0 or -1, "
                     f"and the others must make one sample of {size} elements "
                     f"(per-sample shape {list(shp[1:])})")
    return (1, *rest)


def axes_of(im: ImportState, node: onnx.NodeProto) -> Any:
    """Squeeze/Unsqueeze axes: the attribute (opset < 13) or the constant input."""
    axes = attrs(node).get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = int_const(im, node, node.input[1], "axes")
    return axes


def squeeze_target(im: ImportState, node: onnx.NodeProto, shp: tuple[int, ...]
                    ) -> tuple[int, ...]:
    axes = axes_of(im, node)
    axes = (norm_axes(im, node, list(axes), len(shp)) if axes
            else [i for i, d in enumerate(shp) if d == 1 and i > 0])
    if 0 in axes:
        raise im.err(node, "cannot squeeze the batch dimension")
    if any(shp[i] != 1 for i in axes):
        raise im.err(node, f"cannot squeeze axes {sorted(axes)} of shape {list(shp)}: "
                     "only dimensions of size 1 can be squeezed")
    return tuple(d for i, d in enumerate(shp) if i not in axes)


def unsqueeze_target(im: ImportState, node: onnx.NodeProto, shp: tuple[int, ...]
                      ) -> tuple[int, ...]:
    axes = axes_of(im, node)
    if not axes:
        raise im.err(node, "Unsqueeze needs axes")
    out_rank = len(shp) + len(axes)
    axes = sorted(norm_axes(im, node, list(axes), out_rank))
    if 0 in axes:
        raise im.err(node, "cannot unsqueeze in front of the batch dimension")
    t = list(shp)
    for ax in axes:
        t.insert(ax, 1)
    return tuple(t)


def transpose(im: ImportState, node: onnx.NodeProto) -> None:
    """A Transpose that keeps the batch first is a per-sample Transpose (or an alias); one
    that moves it leaves the values where they are and marks its output as "swapped": only
    per-feature ops may use it, up to a Transpose back (onnx_ops.swapped_consumer)."""
    x = node.input[0]
    shp = act_shape(im, x)
    perm = list(attrs(node).get("perm", list(range(len(shp) + 1))[::-1]))
    if sorted(perm) != list(range(len(shp) + 1)):
        raise im.err(node, f"perm {perm} is not a permutation of the {len(shp) + 1} axes of "
                     "the input")
    prior = im.swapped.get(x)
    if prior is not None:  # the composed permutation, from the batch-first layout
        perm = [prior[0][p] for p in perm]
    if perm[0] != 0:
        _alias(im, node, x, shp)
        im.swapped[node.output[0]] = (tuple(perm), prior[1] if prior else im.label(node))
        return None
    per = [p - 1 for p in perm[1:]]
    if per == sorted(per):
        return _alias(im, node, x, shp)
    im.emit(node, "Transpose", [x], node.output[0], tuple(shp[p] for p in per), perm=per)


def identity(im: ImportState, node: onnx.NodeProto) -> None:
    _alias(im, node, node.input[0], act_shape(im, node.input[0]))

