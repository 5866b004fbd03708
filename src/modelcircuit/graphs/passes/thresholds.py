"""Float arithmetic between two quantizers -> exact MultiThreshold (FINN's streamlining).

The chain's input is an integer code with a known range (a Dense's exact accumulator range
from its constant weights), so the compiler evaluates the float chain (onnxruntime, float64:
the model's float constants exactly, no float32 rounding of its own) on the input codes,
applies the model's quantizer, and keeps the points where the output code steps: code by code
for ranges up to MAX_CODES, by bisection per output level beyond (every chain op is monotone
per channel). The result is the model's arithmetic done exactly and rounded once by its
quantizer. A float32 execution of the model (QONNX's) agrees except where its own float32
rounding moves a value across a quantizer's rounding boundary (tests/graphs/
test_exporter_models.py checks each such case is one).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import fixed as fx
from ..ir import Graph, GraphError, Node, Tensor, prune
from ..ops import FLOAT_CHAIN, LINEAR, BatchNormAttrs, Op, attrs
from ..types import FixedType
from ._util import splice
from .accumulators import dense_range, linear_weights

MAX_CODES = 1 << 16  # input ranges up to this are walked code by code, wider ones bisected
# ... and only while codes x channels stays under this: a wide layer (a MobileNet's 1024
# channels of 2**16 codes: 67M chain evaluations) is bisected too, O(levels * log range)
EXHAUSTIVE_WORK = 1 << 22
MAX_LEVELS = 1 << 12  # output levels of one quantizer turned into thresholds


def _chain(g: Graph, r: Node) -> list[Node] | None:
    """Walk back from Requant r through untyped float-chain ops to a typed source."""
    chain: list[Node] = []
    cur = r.inputs[0]
    while g.tensor(cur).dtype is None:
        p = g.producer(cur)
        if p is None or p.op not in FLOAT_CHAIN or not all(g.is_const(c) for c in p.inputs[1:]):
            return None
        chain.append(p)
        cur = p.inputs[0]
    return list(reversed(chain)) if chain else None


def _to_onnx(g: Graph, chain: list[Node], channels: int) -> onnx.ModelProto:
    inits, nodes = [], []
    src = chain[0].inputs[0]
    for n in chain:
        ins = [n.inputs[0]]
        for c in n.inputs[1:]:
            v = np.asarray(g.constants[c], dtype=np.float64)
            if n.op != Op.BATCHNORM and v.size == channels and v.shape[-1:] == (channels,):
                v = v.reshape(1, channels)
            inits.append(numpy_helper.from_array(v, c))
            ins.append(c)
        op = {Op.BATCHNORM: "BatchNormalization"}.get(n.op, str(n.op))  # ONNX op names
        kw = {"epsilon": BatchNormAttrs.of(n).epsilon} if n.op == Op.BATCHNORM else {}
        nodes.append(helper.make_node(op, ins, list(n.outputs), **kw))
    gi = helper.make_tensor_value_info(src, TensorProto.DOUBLE, None)
    go = helper.make_tensor_value_info(chain[-1].outputs[0], TensorProto.DOUBLE, None)
    graph = helper.make_graph(nodes, "chain", [gi], [go], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _input_range(g: Graph, src: str, t: FixedType) -> tuple[int, int]:
    """The codes the chain can see: a Dense's exact accumulator range (from its constant
    weights), else the whole range of the input type."""
    p = g.producer(src)
    if p is not None and p.op in LINEAR and attrs(p).exact:  # type: ignore[attr-defined]
        ts = [g.tensor(i).dtype for i in p.inputs]
        b = g.constants[p.inputs[2]] if len(p.inputs) > 2 else None
        lo, hi, frac = dense_range(ts[0], linear_weights(g, p), b,
                                   ts[2] if len(ts) > 2 else None, ts[1])
        if frac == t.frac:
            return max(lo, t.qmin), min(hi, t.qmax)
    return t.qmin, t.qmax


def steps_of(values: np.ndarray, lo: int) -> tuple[list[int], list[int], int]:
    """values[i] = f(lo + i) -> (thresholds, steps, base) with
    f(a) = base + sum_k steps[k] * (a >= thresholds[k])."""
    d = np.diff(values)
    idx = np.nonzero(d)[0]
    return [lo + int(i) + 1 for i in idx], [int(d[i]) for i in idx], int(values[0])


def _quantizer(g: Graph, r: Node):
    """The model quantizer at the end of a chain as a function of float values -> codes."""
    out_t = g.tensor(r.outputs[0]).dtype
    if r.op == Op.BIPOLAR:
        return lambda y: np.where(y >= 0, 1, -1).astype(np.int64)
    return lambda y: fx.quantize(y, out_t)  # the model's quantizer: exact scaling, its rounding


def _exhaustive(run, lo: int, hi: int, channels: int):
    codes = np.arange(lo, hi + 1, dtype=np.int64)
    q = run(np.repeat(codes[:, None], channels, axis=1))
    out = [steps_of(q[:, c], lo) for c in range(channels)]
    return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]


def _bisect(run, lo: int, hi: int, channels: int, r: Node):
    """Thresholds of a monotone chain without evaluating every code: every float-chain op is
    monotone per channel (affine maps, ReLU, BatchNorm, and IEEE rounding of each), so the
    output code is monotone in the input code; for each output level, bisection finds the first
    input code that reaches it. Same result as the exhaustive walk, in O(levels * log range)."""
    ends = run(np.array([[lo] * channels, [hi] * channels], dtype=np.int64))
    first, last = ends[0], ends[1]
    levels = int(np.max(np.abs(last - first))) if channels else 0
    if levels > MAX_LEVELS:
        raise GraphError(f"node {r.name}: the quantizer after this float arithmetic has "
                         f"{levels} output levels, too many for thresholds")
    ths, sts = [], []
    if levels:
        up = last >= first
        # level k (1..levels) of channel c: first code a with |f(a) - f(lo)| >= k
        k = np.arange(1, levels + 1)[:, None]
        lo_a = np.full((levels, channels), lo, dtype=np.int64)
        hi_a = np.full((levels, channels), hi + 1, dtype=np.int64)
        while np.any(hi_a - lo_a > 1):
            mid = (lo_a + hi_a) // 2
            v = run(np.minimum(mid, hi))
            reached = np.where(up[None, :], v - first[None, :], first[None, :] - v) >= k
            hi_a = np.where(reached, mid, hi_a)
            lo_a = np.where(reached, lo_a, mid)
        v_lo = run(lo_a)
        reached_lo = np.where(up[None, :], v_lo - first[None, :], first[None, :] - v_lo) >= k
        at = np.where(reached_lo, lo_a, hi_a)  # hi + 1: level never reached
    for c in range(channels):
        th, st = [], []
        if levels:
            sign = 1 if up[c] else -1
            pts, counts = np.unique(at[:, c][at[:, c] <= hi], return_counts=True)
            th = [int(p) for p in pts]
            st = [sign * int(n) for n in counts]
        ths.append(th)
        sts.append(st)
    return ths, sts, [int(b) for b in first]


def float_chains_to_thresholds(g: Graph) -> Graph:
    for r in list(g.nodes):
        if r.op not in (Op.REQUANT, Op.BIPOLAR):
            continue
        chain = _chain(g, r)
        if chain is None:
            continue
        src = chain[0].inputs[0]
        t = g.tensor(src).dtype
        out_t = g.tensor(r.outputs[0]).dtype
        if not isinstance(t, FixedType) or not isinstance(out_t, FixedType):
            continue
        lo, hi = _input_range(g, src, t)
        shape = g.tensor(src).shape
        per_channel = any(np.asarray(g.constants[c]).size > 1 for n in chain for c in n.inputs[1:])
        channels = (int(shape[-1]) if shape else 1) if per_channel else 1
        if per_channel and len(shape) != 1 and not all(
                np.asarray(g.constants[c]).size in (1, channels)
                and np.asarray(g.constants[c]).shape[-1:] in ((), (1,), (channels,))
                for n in chain for c in n.inputs[1:] if n.op != Op.BATCHNORM):
            raise GraphError(f"node {r.name}: float arithmetic with constants that vary other "
                             f"than per channel (the last axis) on a rank-{len(shape)} tensor "
                             "is not supported")
        import onnxruntime as ort  # here: a model without such chains never loads it (27 ms)

        sess = ort.InferenceSession(_to_onnx(g, chain, channels).SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        quantize = _quantizer(g, r)

        def run(codes: np.ndarray, sess=sess, quantize=quantize, t=t, src=src) -> np.ndarray:
            x = fx.to_float(codes, t).astype(np.float64)
            y = sess.run(None, {src: x})[0].astype(np.float64)
            return quantize(y)

        if hi - lo + 1 <= MAX_CODES and (hi - lo + 1) * channels <= EXHAUSTIVE_WORK:
            ths, sts, bases = _exhaustive(run, lo, hi, channels)
        else:
            ths, sts, bases = _bisect(run, lo, hi, channels, r)
        k = max(1, max(len(s) for s in ths))
        thr = np.full((channels, k), hi + 1, dtype=np.int64)
        stp = np.zeros((channels, k), dtype=np.int64)
        for c in range(channels):
            thr[c, : len(ths[c])] = ths[c]
            stp[c, : len(sts[c])] = sts[c]
        base = np.asarray(bases, dtype=np.int64)
        names = [f"{r.name}_thresholds", f"{r.name}_steps", f"{r.name}_base"]
        consts = dict(g.constants)
        tensors = dict(g.tensors)
        for nm, v in zip(names, (thr, stp, base), strict=True):
            consts[nm] = v
            tensors[nm] = Tensor(nm, v.shape, t if nm == names[0] else out_t)
        th_node = Node.make(r.name, Op.THRESHOLD, [src] + names, r.outputs,
                            source_ops=[str(n.op) for n in chain])
        drop = {n.name for n in chain}
        g = prune(g.replace(nodes=splice(g, drop, {r.name: th_node}), constants=consts,
                            tensors=tensors))
    for n in g.nodes:
        for o in n.outputs:
            if g.tensor(o).dtype is None:
                raise GraphError(f"node {n.name} ({n.op}): output {o!r} has no number type")
    return g
