"""ONNX LSTM and GRU, and the sequence layouts around them.

ONNX recurrent ops take X as (T, N, F) (layout 0, what torch.onnx writes) or (N, T, F)
(layout 1); the IR is per sample, so the IR node reads a (T, F) sequence and writes the (T, H)
sequence of its states (graphs/recurrent.py). Layouts:
- torch's batch_first models put X through Transpose(perm [1, 0, 2]): that Transpose marks its
  output "swapped" (handlers.swapped_consumer: the values stay batch-first), which is just
  what layout 0 wants: absorbed, no IR node.
- a graph input fed straight into a layout-0 LSTM/GRU (torch's default batch_first=False) is
  sequence-first: its dimension 1 is the batch. The IR input is the per-sample (T, F) sequence,
  so callers pass (N, T, F) arrays (the host's order, DESIGN.md "Wire order").
- outputs: Y (T, 1, N, H) is the node's (T, H) sequence (an IR Reshape to (T, 1, H), marked
  swapped; torch's Squeeze / Transpose+Reshape after it become aliases again), Y_h (1, N, H) a
  Gather of the last step, Y_c (1, N, H) the last step of a twin LSTM node emitting the cell
  states (pruned unless used).
- `swapped_move`: Squeeze, Unsqueeze, Reshape and Gather of a swapped tensor that keep the
  order of the per-sample axes (only axes of size 1 come and go, or a Gather on a per-sample
  axis), a Concat of tensors in the same layout on a per-sample axis (h_n of stacked layers),
  and MatMul by a constant on its last axis (a token-wise Dense; `matmul`: its handler).

Refused, in one line naming the node: bidirectional or reverse direction, peepholes (P),
input_forget, sequence_lens given at run time (or shorter than the sequence), initial states
given at run time, activations without a table (unknown names).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import onnx

from ...graphs import recurrent as rc
from .io import q, show
from .layout import act_shape, attrs, int_const

if TYPE_CHECKING:
    from .state import ImportState

OPS = ("LSTM", "GRU")
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


def _text(v: object) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _activations(im: ImportState, node: onnx.NodeProto, a: dict) -> tuple[list[str], list[float],
                                                                          list[float]]:
    """The activation functions (our names) with one alpha and beta each (ONNX consumes
    activation_alpha/beta in order by the functions that take them)."""
    n = len(_DEFAULT_ACTS[node.op_type])
    names = [_text(x) for x in a.get("activations", [])] or _DEFAULT_ACTS[node.op_type]
    if len(names) != n:
        raise im.err(node, f"activations lists {len(names)} functions; a forward "
                     f"{node.op_type} takes {n} ({', '.join(_DEFAULT_ACTS[node.op_type])})")
    alphas = [float(x) for x in a.get("activation_alpha", [])]
    betas = [float(x) for x in a.get("activation_beta", [])]
    out, al, be = [], [], []
    for nm in names:
        key = next((k for k in rc.ONNX_ACTIVATIONS if k.lower() == nm.lower()), None)
        if key is None:
            raise im.err(node, f"activation {show(nm)} has no table; supported: "
                         f"{', '.join(rc.ONNX_ACTIVATIONS)}")
        name, da, db = rc.ONNX_ACTIVATIONS[key]
        out.append(name)
        al.append(alphas.pop(0) if name in rc.TAKES_ALPHA and alphas else
                  (da if name in rc.TAKES_ALPHA else 0.0))
        be.append(betas.pop(0) if name in rc.TAKES_BETA and betas else
                  (db if name in rc.TAKES_BETA else 0.0))
    return out, al, be


def _state(im: ImportState, node: onnx.NodeProto, name: str, hid: int, what: str) -> np.ndarray:
    """An initial state: zeros when absent; a constant (1, batch, H) the same for every sample."""
    if not name:
        return np.zeros(hid)
    if not im.is_const(name):
        raise im.err(node, f"{what} {q(name)} is given at run time; only constant initial "
                     "states (zeros or values in the model) are supported")
    v = np.asarray(im.const(name), dtype=np.float64)
    if v.ndim != 3 or v.shape[0] != 1 or v.shape[2] != hid:
        raise im.err(node, f"{what} {show(name)} has shape {list(v.shape)}; expected "
                     f"[1, batch, {hid}]")
    if not np.all(v == v[:, :1]):
        raise im.err(node, f"{what} {show(name)} differs between samples of the batch; only "
                     "an initial state that is the same for every sample is supported")
    return v[0, 0]


def _sequence_input(im: ImportState, node: onnx.NodeProto, x: str, layout: int
                    ) -> tuple[int, int]:
    """(T, F) of X, per sample, after checking (and, for a sequence-first graph input,
    setting) its layout."""
    if layout == 1:
        if x in im.swapped:
            raise im.err(node, f"layout 1 takes X batch-first, but {show(x)} is in a "
                         "batch-moving layout")
        shp = act_shape(im, x)
    elif x in im.swapped:
        perm = tuple(im.swapped[x][0])
        if perm != (1, 0, 2):
            raise im.err(node, f"input {show(x)} has the layout {list(perm)} of the batch-first "
                         "values; layout 0 takes it sequence-first, (T, N, F), i.e. [1, 0, 2]")
        shp = act_shape(im, x)
    else:
        shp = _sequence_first_input(im, node, x)
    if len(shp) != 2:
        raise im.err(node, f"input {show(x)} has per-sample shape {list(shp)}; a sequence is "
                     "(T, F)")
    return int(shp[0]), int(shp[1])


def _sequence_first_input(im: ImportState, node: onnx.NodeProto, x: str) -> tuple[int, ...]:
    """A graph input read by a layout-0 LSTM/GRU is (T, N, F): re-read its dimension 1 as the
    batch and mark it sequence-first (the IR input is the (T, F) sequence)."""
    vi = next((v for v in im.g.input if v.name == x), None)
    src = im.src(x)
    if vi is None or src != x or any(x in n.inputs for n in im.nodes):
        raise im.err(node, f"layout 0 takes X sequence-first, (T, N, F); input {show(x)} is "
                     "batch-first here (transpose it with perm [1, 0, 2], as torch does for "
                     "batch_first=True)")
    dims = vi.type.tensor_type.shape.dim
    if len(dims) != 3 or not dims[0].HasField("dim_value"):
        raise im.err(node, f"graph input {show(x)} read as a sequence (T, N, F) needs a fixed "
                     "length T (dimension 0) and rank 3")
    t, f = int(dims[0].dim_value), int(dims[2].dim_value)
    im.shapes[x] = (t, f)
    im.check_shape(node, x, (t, f), "input")
    im.batch = int(dims[1].dim_value) if dims[1].HasField("dim_value") else None
    im.swapped[x] = ((1, 0, 2), f"graph input {show(x)} (sequence-first for {im.label(node)})")
    return (t, f)


def recurrent(im: ImportState, node: onnx.NodeProto) -> None:
    """LSTM or GRU, forward, into the IR op of the same name (see the module docstring)."""
    op = node.op_type
    a = attrs(node)
    ins = list(node.input) + [""] * 8
    x, w, r, b, seq = ins[:5]
    direction = _text(a.get("direction", "forward"))
    if direction != "forward":
        raise im.unsupported(node, "direction", f"direction {direction} is not supported; "
                             "only forward recurrent layers are (bidirectional and reverse "
                             "are refused)")
    if op == "LSTM" and ins[7]:
        raise im.unsupported(node, "P", "peepholes (input P) are not supported")
    if op == "LSTM" and im.flag(node, a, "input_forget", 0):
        raise im.unsupported(node, "input_forget", "input_forget=1 (coupled input and forget "
                             "gates) is not supported")
    layout = int(a.get("layout", 0))
    if layout not in (0, 1):
        raise im.err(node, f"layout must be 0 or 1, got {layout}")
    g = rc.GATES[op]
    if "hidden_size" not in a:
        raise im.err(node, "hidden_size is missing")
    hid = int(a["hidden_size"])
    if hid < 1:
        raise im.err(node, f"hidden_size must be at least 1, got {hid}")
    for nm, what in ((w, "W"), (r, "R")):
        if not im.is_const(nm):
            raise im.err(node, f"{what} {show(nm)} must be a constant")
    t, f = _sequence_input(im, node, x, layout)
    W, R = (np.asarray(im.const(n), dtype=np.float64) for n in (w, r))
    if W.shape != (1, g * hid, f) or R.shape != (1, g * hid, hid):
        raise im.err(node, f"W {list(W.shape)} and R {list(R.shape)} do not match hidden_size "
                     f"{hid} and {f} input features: expected [1, {g * hid}, {f}] and "
                     f"[1, {g * hid}, {hid}]")
    if b and not im.is_const(b):
        raise im.err(node, f"B {show(b)} must be a constant")
    B = np.asarray(im.const(b), dtype=np.float64) if b else np.zeros((1, 2 * g * hid))
    if B.shape != (1, 2 * g * hid):
        raise im.err(node, f"B has shape {list(B.shape)}; expected [1, {2 * g * hid}]")
    if seq:
        if not im.is_const(seq):
            raise im.err(node, f"sequence_lens {q(seq)} is given at run time; only full-length "
                         "sequences are supported")
        lens = int_const(im, node, seq, "sequence_lens")
        if any(v != t for v in lens):
            raise im.err(node, f"sequence_lens {lens} differ from the sequence length {t}; only "
                         "full-length sequences are supported")
    h0 = _state(im, node, ins[5], hid, "initial_h")
    c0 = _state(im, node, ins[6], hid, "initial_c") if op == "LSTM" else None
    acts, alphas, betas = _activations(im, node, a)
    extra: dict[str, object] = {}
    if op == "GRU":
        extra["lbr"] = im.flag(node, a, "linear_before_reset", 0)
    clip = a.get("clip")
    if clip is not None:
        clip = float(clip)
        if not clip > 0:
            raise im.err(node, f"clip must be positive, got {clip}")
        extra["clip"] = clip
    base = node.name or op.lower()
    consts = [im.add_const(im.fresh(f"{base}_W"), W[0].T.copy()),
              im.add_const(im.fresh(f"{base}_R"), R[0].T.copy()),
              im.add_const(im.fresh(f"{base}_B"), B.reshape(2, g * hid)),
              im.add_const(im.fresh(f"{base}_h0"), h0)]
    if c0 is not None:
        consts.append(im.add_const(im.fresh(f"{base}_c0"), c0))
    seq_out = im.fresh(f"{base}_states")
    im.emit(node, op, [x, *consts], seq_out, (t, hid), hidden=hid, acts=acts, alphas=alphas,
            betas=betas, **extra)
    outs = list(node.output) + ["", "", ""]
    swap = layout == 0
    if outs[0]:  # Y: (T, num_directions=1, N, H) or (N, T, 1, H)
        _aux(im, node, "Reshape", seq_out, outs[0], (t, 1, hid), "Y", shape=[t, 1, hid])
        im.reshaped[outs[0]] = seq_out
        if swap:
            im.swapped[outs[0]] = ((1, 2, 0, 3), im.label(node))
    if outs[1]:  # Y_h: (1, N, H) or (N, 1, H)
        _last(im, node, seq_out, outs[1], t, hid, swap, "Y_h")
    if op == "LSTM" and outs[2]:  # Y_c: the last step of the cell-state sequence
        cells = im.fresh(f"{base}_cells")
        aux = _named(node, "cells")
        im.emit(aux, op, [x, *consts], cells, (t, hid), hidden=hid, acts=acts, alphas=alphas,
                betas=betas, emit="c", **extra)
        _last(im, node, cells, outs[2], t, hid, swap, "Y_c")


def _named(node: onnx.NodeProto, what: str) -> onnx.NodeProto:
    aux = onnx.NodeProto()
    aux.CopyFrom(node)
    aux.name = f"{node.name or node.op_type}_{what}"
    return aux


def _aux(im: ImportState, node: onnx.NodeProto, op: str, x: str, out: str,
         shp: tuple[int, ...], what: str, **a: object) -> None:
    im.emit(_named(node, what), op, [x], out, shp, **a)


def _last(im: ImportState, node: onnx.NodeProto, seq: str, out: str, t: int, hid: int,
          swap: bool, what: str) -> None:
    _aux(im, node, "Gather", seq, out, (1, hid), what, axis=0, indices=[t - 1],
         indices_shape=[1])
    if swap:
        im.swapped[out] = ((1, 0, 2), im.label(node))


# -- moves of swapped (sequence-first) tensors ------------------------------------------------
def _batch_pos(perm: tuple[int, ...]) -> int | None:
    """Where the batch is in the ONNX layout, if the other axes keep their batch-first order."""
    b = perm.index(0)
    rest = [p for p in perm if p != 0]
    return b if rest == sorted(rest) else None


def _set_layout(im: ImportState, name: str, b: int, rank: int, label: str) -> None:
    if b == 0:
        return
    perm = [i + 1 for i in range(b)] + [0] + list(range(b + 1, rank))
    im.swapped[name] = (tuple(perm), label)


def swapped_move(im: ImportState, node: onnx.NodeProto, x: str,
                 matmul: Callable[[ImportState, onnx.NodeProto], None]) -> bool:
    """Import a node on a swapped tensor x whose per-sample axes keep their order, when it is
    one of the moves this module knows (returns False otherwise: the caller refuses)."""
    op = node.op_type
    perm, label = im.swapped[x]
    b_in = _batch_pos(tuple(perm))
    if b_in is None or node.input[0] != x:
        return False
    if op in OPS:
        recurrent(im, node)
        return True
    shp = act_shape(im, x)
    bv = im.batch or 1
    full = list(shp[:b_in]) + [bv] + list(shp[b_in:])  # the ONNX shape
    if op in ("Squeeze", "Unsqueeze", "Reshape"):
        from .layout import axes_of, norm_axes

        if op == "Squeeze":
            axes = axes_of(im, node)
            axes = norm_axes(im, node, list(axes), len(full)) if axes else \
                [i for i, d in enumerate(full) if d == 1 and i != b_in]
            if b_in in axes or any(full[i] != 1 for i in axes):
                return False
            target = [d for i, d in enumerate(full) if i not in axes]
            b_out = b_in - sum(1 for i in axes if i < b_in)
        elif op == "Unsqueeze":
            axes = axes_of(im, node)
            if not axes:
                return False
            rank = len(full) + len(axes)
            axes = sorted(norm_axes(im, node, list(axes), rank))
            target, b_out, src = [], -1, iter(range(len(full)))
            for i in range(rank):
                if i in axes:
                    target.append(1)
                else:
                    k = next(src)
                    if k == b_in:
                        b_out = i
                    target.append(full[k])
        else:
            t = _reshape_full(im, node, full, b_in)
            if t is None:
                return False
            target, b_out = t
        per = tuple(d for i, d in enumerate(target) if i != b_out)
        if int(np.prod(per)) != int(np.prod(shp)):
            return False
        from .layout import reshape_to

        reshape_to(im, node, x, (1,) + per)
        _set_layout(im, node.output[0], b_out, len(target), label)
        return True
    if op == "Gather":
        idx = node.input[1]
        if not im.is_const(idx):
            return False
        ax = _sample_axis(node, full, b_in)
        if ax is None:
            return False
        pa = ax if ax < b_in else ax - 1
        iv = np.asarray(im.const(idx)).astype(np.int64)
        n = shp[pa]
        if np.any(iv < -n) or np.any(iv >= n):
            raise im.err(node, f"Gather indices {iv.reshape(-1).tolist()} are out of range for "
                         f"a dimension of size {n}")
        iv = np.where(iv < 0, iv + n, iv)
        out = shp[:pa] + tuple(iv.shape) + shp[pa + 1:]
        im.emit(node, "Gather", [x], node.output[0], out, axis=pa, indices=iv.tolist(),
                indices_shape=list(iv.shape))
        b_out = b_in - 1 + iv.ndim if ax < b_in else b_in
        _set_layout(im, node.output[0], b_out, len(out) + 1, label)
        return True
    if op == "Concat":
        return _swapped_concat(im, node, tuple(perm), label, b_in, full)
    if op == "MatMul" and b_in != len(full) - 1:
        matmul(im, node)
        im.swapped[node.output[0]] = (tuple(perm), label)
        return True
    return False


def _sample_axis(node: onnx.NodeProto, full: list[int], b_in: int) -> int | None:
    """The node's `axis` (negative counted from the end) in a swapped tensor of shape `full`
    whose batch is axis b_in; None when it is out of range or the batch."""
    ax = int(attrs(node).get("axis", 0))
    ax = ax + len(full) if ax < 0 else ax
    return None if not 0 <= ax < len(full) or ax == b_in else ax


def _swapped_concat(im: ImportState, node: onnx.NodeProto, perm: tuple[int, ...], label: str,
                    b_in: int, full: list[int]) -> bool:
    """Concat of tensors in one sequence-first layout along an axis that is not the batch
    (torch's h_n of a stacked LSTM/GRU: each layer's Y_h (1, N, H) joined along the layer
    axis): an IR Concat on the per-sample axis, the output in the same layout."""
    ins = [i for i in node.input if i]
    if any(i not in im.swapped or tuple(im.swapped[i][0]) != perm for i in ins):
        return False
    ax = _sample_axis(node, full, b_in)
    if ax is None:
        return False
    pa = ax if ax < b_in else ax - 1
    shapes = [act_shape(im, i) for i in ins]
    if any(len(t) != len(shapes[0]) or any(a != b for k, (a, b) in
                                           enumerate(zip(t, shapes[0], strict=True)) if k != pa)
           for t in shapes):
        return False
    out = list(shapes[0])
    out[pa] = sum(t[pa] for t in shapes)
    im.emit(node, "Concat", ins, node.output[0], tuple(out), axis=pa)
    im.swapped[node.output[0]] = (perm, label)
    return True


def _reshape_full(im: ImportState, node: onnx.NodeProto, full: list[int], b_in: int
                  ) -> tuple[list[int], int] | None:
    """An ONNX Reshape of a swapped tensor (shape `full`) that only adds or removes axes of
    size 1: the target shape and where the batch goes; None if it moves values."""
    if len(node.input) < 2 or not node.input[1] or not im.is_const(node.input[1]):
        return None
    t = int_const(im, node, node.input[1], "shape")
    if im.flag(node, attrs(node), "allowzero", 0) and 0 in t:
        return None
    t = [full[i] if v == 0 and i < len(full) else v for i, v in enumerate(t)]
    if t.count(-1) > 1 or any(v < -1 or v == 0 for v in t):
        return None
    size = int(np.prod(full))
    if -1 in t:
        known = int(np.prod([v for v in t if v != -1]))
        if known == 0 or size % known:
            return None
        t[t.index(-1)] = size // known
    if int(np.prod(t)) != size:
        return None
    big = [d for i, d in enumerate(full) if d != 1 and i != b_in]
    before = sum(1 for i, d in enumerate(full[:b_in]) if d != 1)
    bv = full[b_in]
    for j, d in enumerate(t):
        if d != bv:
            continue
        rest = [v for k, v in enumerate(t) if k != j and v != 1]
        if rest == big and sum(1 for v in t[:j] if v != 1) == before:
            return t, j
    return None


def sequence_first_view(im: ImportState, vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """A rank-3 graph input whose values only layout-0 LSTM/GRU nodes read, as X, is (T, N, F)
    (torch's batch_first=False): its batch is dimension 1, often symbolic. The checks of graph
    inputs (checks.input_shape, input_batch) take the batch first, so they get a copy with
    dimensions 0 and 1 swapped, and the input is marked sequence-first at once, so that a
    Shape read before the LSTM/GRU (torch's zero initial state for the batch) sees
    (T, N, F). Any other input is returned as it is."""
    readers = [n for n in im.g.node if vi.name in n.input and n.op_type not in ("Shape", "Size")]
    tt = vi.type.tensor_type
    if not readers or not tt.HasField("shape") or len(tt.shape.dim) != 3 or any(
            n.op_type not in OPS or n.domain not in ("", "ai.onnx") or n.input[0] != vi.name
            or vi.name in list(n.input)[1:] or int(attrs(n).get("layout", 0)) != 0
            for n in readers):
        return vi
    view = onnx.ValueInfoProto()
    view.CopyFrom(vi)
    dims = view.type.tensor_type.shape.dim
    d0, d1 = onnx.TensorShapeProto.Dimension(), onnx.TensorShapeProto.Dimension()
    d0.CopyFrom(dims[0])
    d1.CopyFrom(dims[1])
    dims[0].CopyFrom(d1)
    dims[1].CopyFrom(d0)
    im.swapped[vi.name] = ((1, 0, 2), f"graph input {show(vi.name)} (sequence-first for "
                           f"{im.label(readers[0])})")
    return view


def run_time_input(im: ImportState, name: str) -> None:
    """A graph input of another dtype than float32 that an LSTM/GRU reads as sequence_lens or
    an initial state: refused naming that node (the usual dtype refusal names the input)."""
    for n in im.g.node:
        if n.op_type in OPS and name in list(n.input)[4:]:
            what = {4: "sequence_lens", 5: "initial_h", 6: "initial_c", 7: "P"}[
                list(n.input).index(name, 4)]
            raise im.err(n, f"{what} {q(name)} is given at run time; only "
                         + ("full-length sequences are supported" if what == "sequence_lens"
                            else "constant values in the model are supported"))


__all__ = ["OPS", "recurrent", "run_time_input", "sequence_first_view", "swapped_move"]
