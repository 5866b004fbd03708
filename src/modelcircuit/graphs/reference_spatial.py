"""The channels-last window ops (Conv, MaxPool, AvgPool, Resize), and im2col, which makes a
convolution reference_linear's GEMM: bounded chunks of window rows in reused buffers are
most of this code, a concern apart from what the other ops compute.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .ir import Graph, GraphError, Node
from .ops import AvgPoolAttrs, ConvAttrs, MaxPoolAttrs, ResizeAttrs, window_counts
from .reference_common import PER_THREAD as _local
from .reference_common import Array
from .reference_common import const as _const
from .reference_common import f32 as _f32
from .reference_common import finish as _finish
from .reference_common import is_fixed as _is_fixed
from .reference_common import tensor_type as _t
from .reference_common import to_out as _to_out
from .reference_linear import conv_linear, gemm_weights, linear_out

# im2col: at most this many elements of the window matrix at a time (4 MB in float32): a
# batch is cut into frames, a frame into rows of output. Memory stays bounded (a 512x512
# frame does not need gigabytes), and the chunk stays in cache between being written and
# read by the GEMM: 64 frames of 32x32x16, 3x3 -> 16 channels, float32, one thread: 6.1 ms
# in chunks of 2,000-8,000 rows, 17.8 ms as one 65,536-row matrix (7.6 ms of it the copy);
# much smaller chunks pay Python's overhead per chunk.
IM2COL_ELEMENTS = 1 << 20


# -- channels-last window ops (per sample (L, C) or (H, W, C); batch first here) ----------
def _pad(x: Array, pads: tuple[int, ...], value: float | int) -> Array:
    r = len(pads) // 2
    if not any(pads):
        return x
    width = [(0, 0)] + [(pads[i], pads[i + r]) for i in range(r)] + [(0, 0)]
    return np.pad(x, width, constant_values=value)


def _windows(xp: Array, kernel: tuple[int, ...], strides: tuple[int, ...],
             out_sp: tuple[int, ...]):
    """For each kernel offset (row-major), the (N, *out_sp, C) slice of the padded input
    that this offset of every output window reads."""
    for k in np.ndindex(*kernel):
        yield k, xp[(slice(None),) + tuple(
            slice(k[i], k[i] + strides[i] * (out_sp[i] - 1) + 1, strides[i])
            for i in range(len(kernel)))]


def _out_spatial(g: Graph, node: Node) -> tuple[int, ...]:
    return tuple(g.tensor(node.outputs[0]).shape[:-1])


def conv_rows(x: Array, a: ConvAttrs, out_sp: tuple[int, ...], dtype: np.dtype, cout: int,
              out_dtype: np.dtype, fn: Callable[[Array, Array], Array],
              out: Array | None = None) -> Array:
    """Convolution as one GEMM per chunk: the window of every output position is one row
    (im2col through a strided view of the padded input); `fn(rows, out)` writes the
    (rows, cout) results into `out`, a view of the (N, *out_sp, cout) result.
    Rows are (*kernel, Cin) (K * Cin values), or (group, Cin/group * K) for a grouped conv.
    The input is converted to the GEMM's dtype once, into a zero-padded buffer (padding
    costs no extra copy); chunks of whole frames, or of output rows within a frame, keep
    the window matrix under IM2COL_ELEMENTS. `out`: the result's array, where the caller
    keeps one (golden_plan reuses it call to call), else a fresh one."""
    r = len(a.kernel)
    n = x.shape[0]
    per_pos = int(np.prod(a.kernel)) * x.shape[-1]
    per_row = int(np.prod(out_sp[1:])) * per_pos  # window elements of one output row
    per_frame = per_row * out_sp[0]
    if per_frame <= IM2COL_ELEMENTS:
        frames, rows = max(1, IM2COL_ELEMENTS // max(per_frame, 1)), out_sp[0]
    else:
        frames, rows = 1, max(1, IM2COL_ELEMENTS // max(per_row, 1))
    if out is None:
        out = np.empty((n,) + out_sp + (cout,), dtype=out_dtype)
    pad_frames = max(frames, max(1, (1 << 24) // max(per_frame // max(len(a.kernel), 1), 1)))
    for p0 in range(0, n, pad_frames):  # padded copies of a bounded number of frames
        xp = _padded(x[p0:p0 + pad_frames], a.pads, dtype)
        win = np.lib.stride_tricks.sliding_window_view(xp, a.kernel, axis=tuple(range(1, r + 1)))
        win = win[(slice(None),) + tuple(slice(0, (o - 1) * st + 1, st)
                                         for o, st in zip(out_sp, a.strides, strict=True))]
        if a.group == 1:
            win = np.moveaxis(win, r + 1, -1)  # (frames, *out_sp, *kernel, C)
        # else (frames, *out_sp, C, *kernel): C = (group, C/group)
        for f0 in range(0, xp.shape[0], frames):
            for o0 in range(0, out_sp[0], rows):
                part = win[f0:f0 + frames, o0:o0 + rows]
                m = int(np.prod(part.shape[:r + 1]))
                buf = _scratch("cols", m * per_pos, dtype).reshape(part.shape)
                np.copyto(buf, part)  # the im2col copy, into memory reused chunk to chunk
                cols = buf.reshape((m, per_pos) if a.group == 1
                                   else (m, a.group, per_pos // a.group))
                fn(cols, out[p0 + f0:p0 + f0 + part.shape[0], o0:o0 + rows].reshape(m, cout))
    return out


def _scratch(key: str, size: int, dtype: np.dtype) -> Array:
    """A work buffer of `size` elements, kept per thread and reused: fresh large arrays cost
    a page fault per 4 KB on first touch (3,000 a call on a 32x32x16 conv layer, about half
    its time), reused ones do not."""
    bufs = getattr(_local, "scratch", None)
    if bufs is None:
        bufs = _local.scratch = {}
    nbytes = size * dtype.itemsize
    b = bufs.get(key)
    if b is None or b.nbytes < nbytes:
        b = bufs[key] = np.empty(nbytes, dtype=np.uint8)
    return b[:nbytes].view(dtype)


def _padded(x: Array, pads: tuple[int, ...], dtype: np.dtype) -> Array:
    """x in `dtype`, zero-padded: a view when there is nothing to do, else a reused buffer
    (its borders zeroed) the conversion writes into."""
    r = len(pads) // 2
    if not any(pads):
        return x if x.dtype == dtype else x.astype(dtype)
    sp = tuple(x.shape[1 + i] + pads[i] + pads[i + r] for i in range(r))
    shape = (x.shape[0],) + sp + (x.shape[-1],)
    xp = _scratch("pad", int(np.prod(shape)), dtype).reshape(shape)
    inner = tuple(slice(pads[i], pads[i] + x.shape[1 + i]) for i in range(r))
    for i in range(r):  # the border slabs of each spatial axis
        lo = (slice(None),) + inner[:i] + (slice(0, pads[i]),)
        hi = (slice(None),) + inner[:i] + (slice(pads[i] + x.shape[1 + i], None),)
        xp[lo] = 0
        xp[hi] = 0
    xp[(slice(None),) + inner] = x
    return xp


def conv_sum(x: Array, w: Array, a: ConvAttrs, out_sp: tuple[int, ...]) -> Array:
    """sum over each window and group of x * w, in the dtype of x and w (float32: the float
    model; float64 exact while every partial sum stays under 2**53; int64 beyond). x (N, *S,
    Cin), w (*kernel, Cin/group, Cout)."""
    dt = np.result_type(x, w)
    wg = gemm_weights(np.asarray(w, dtype=dt), a.group)

    def fn(cols: Array, out: Array) -> Array:
        if wg.ndim == 2:
            return np.matmul(cols, wg, out=out)
        out[...] = np.matmul(cols.transpose(1, 0, 2), wg).transpose(1, 0, 2).reshape(len(cols), -1)
        return out

    return conv_rows(np.asarray(x), a, out_sp, dt, np.asarray(w).shape[-1], dt, fn)


def conv(g: Graph, node: Node, ins: list[Array], out: Array | None = None) -> Array:
    """Channels-last convolution: per window and group, what Dense computes (the same
    `Linear`, one GEMM over every window of the batch)."""
    a = ConvAttrs.of(node)
    lp = conv_linear(g, node)
    dt = np.dtype(np.float32) if lp.arith is None else lp.dtype
    cout = g.tensor(node.outputs[0]).shape[-1]
    return conv_rows(ins[0], a, _out_spatial(g, node), dt, cout, lp.out_dtype,
                     lambda cols, o: linear_out(g, node, lp, cols, o), out)


def max_pool(g: Graph, node: Node, ins: list[Array]) -> Array:
    """Maximum over each window; padding never wins. Fixed point: the codes' maximum in the
    output type (the input's, unless a pass chose another)."""
    a = MaxPoolAttrs.of(node)
    out_sp = _out_spatial(g, node)
    fixed = _is_fixed(g, node)
    x = ins[0].astype(np.int64) if fixed else _f32(ins[0])
    low = np.iinfo(np.int64).min if fixed else -np.inf
    y = None
    for _, sl in _windows(_pad(x, a.pads, low), a.kernel, a.strides, out_sp):
        y = sl.copy() if y is None else np.maximum(y, sl)
    assert y is not None
    return _to_out(g, node, node.inputs[0], y) if fixed else _f32(y)


def avg_pool(g: Graph, node: Node, ins: list[Array]) -> Array:
    """Mean over each window, padding counted as zeros (count_include_pad=1), or with
    exclude_pad over the window's positions inside the input (ops.window_counts). Fixed
    point: the exact window sum times the constant recip = round(2**F / count) (recip_type,
    F its fractional bits; with exclude_pad the table entry of the window's count), one
    requantization to the output type; float32: sum / count."""
    a = AvgPoolAttrs.of(node)
    out_sp = _out_spatial(g, node)
    fixed = _is_fixed(g, node)
    x = ins[0].astype(np.int64) if fixed else _f32(ins[0])
    if a.exclude_pad:
        counts = window_counts(tuple(x.shape[1:-1]), a.kernel, a.strides, a.pads)
        counts = counts.reshape((1,) + out_sp + (1,))
    else:
        counts = np.asarray(int(np.prod(a.kernel)), dtype=np.int64)
    acc = np.zeros((x.shape[0],) + out_sp + (x.shape[-1],), dtype=x.dtype)
    for _, sl in _windows(_pad(x, a.pads, 0), a.kernel, a.strides, out_sp):
        acc += sl
    if not fixed:
        return _f32(acc / counts.astype(np.float32))
    if a.recip_type is None or len(node.inputs) < 2:
        raise GraphError(f"node {node.name}: AvgPool reciprocal not computed; compile first")
    rc = _const(g, node.inputs[1]).astype(np.int64)
    recip = rc[counts] if a.exclude_pad else rc.reshape(-1)[0]
    return _finish(g, node, acc * recip, _t(g, node.inputs[0]).frac + a.recip_type.frac)


def resize(g: Graph, node: Node, ins: list[Array]) -> Array:
    """Nearest-neighbour upsampling by integer factors: each input pixel repeated."""
    y = ins[0]
    for i, s in enumerate(ResizeAttrs.of(node).scales):
        if s != 1:
            y = np.repeat(y, s, axis=i + 1)
    return _to_out(g, node, node.inputs[0], y)
