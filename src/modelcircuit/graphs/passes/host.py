"""Which float arithmetic of a model-quantized graph runs on the host, not in the circuit.

A QONNX model computes in float around its integer codes. Two ends of it have no integer
domain on one side, so no threshold can absorb them:
- the head: float pre-processing of the input (Add, Sub, Mul, Div, BatchNorm, layout) up to
  and including the first quantizer, which produces the codes the circuit receives;
- the tail: float affine ops (Add, Sub, Mul, Div, BatchNorm, Relu, layout) after the last integer
  tensor, up to the output (e.g. a BatchNorm the exporter expanded, or the scales of a
  scaled-integer last layer).
This pass types both float32 and records them (graph meta `host_head`, `host_tail`); at the end
of the pipeline graphs/host.py carves them out. The golden model and every runtime wrapper run
them on the host in float32, exactly as the model does; `inspect` lists them. Softmax and other
non-affine functions at the end stay in the circuit.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node
from ..ops import LAYOUT, GatherAttrs, Op
from ..types import FLOAT32, FixedType

AFFINE = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.BATCHNORM})
_INTEGER_SOURCES = frozenset({Op.DENSE, Op.CONV, Op.REQUANT, Op.BIPOLAR, Op.THRESHOLD})


def _host_op(g: Graph, n: Node) -> bool:
    if n.op in LAYOUT:
        return True
    return n.op in AFFINE and all(g.is_const(i) for i in n.inputs[1:] if i)


def _head(g: Graph) -> list[Node]:
    cur, nodes = g.inputs[0], []
    while True:
        cons = g.consumers(cur)
        if len(cons) != 1 or cur in g.outputs:
            return []
        n = cons[0]
        if n.op in (Op.REQUANT, Op.BIPOLAR) and isinstance(g.tensor(n.outputs[0]).dtype,
                                                         FixedType):
            floats = [m for m in nodes if m.op not in LAYOUT]
            return nodes + [n] if floats else []
        if not _host_op(g, n) or g.tensor(n.outputs[0]).dtype is not None:
            return []
        nodes.append(n)
        cur = n.outputs[0]


def _tail(g: Graph) -> list[Node]:
    cur, nodes = g.outputs[0], []
    while True:
        p = g.producer(cur)
        if p is None or g.tensor(cur).dtype is not None:
            break
        if not (_host_op(g, p) or p.op == Op.RELU):
            break
        if cur != g.outputs[0] and len(g.consumers(cur)) != 1:
            break
        nodes.append(p)
        cur = p.inputs[0]
    src = g.producer(cur)
    integer = isinstance(g.tensor(cur).dtype, FixedType) or (
        src is not None and src.op in _INTEGER_SOURCES)
    if not integer or cur in g.inputs or len(g.consumers(cur)) != 1:
        return []
    floats = [m for m in nodes if m.op not in LAYOUT and m.op != Op.RELU]
    return list(reversed(nodes)) if floats else []


def host_parts(g: Graph) -> Graph:
    if not g.get_meta("typed_by_model") or len(g.inputs) != 1 or len(g.outputs) != 1:
        return g
    head, tail = _head(g), _tail(g)
    if not head and not tail:
        return g
    tensors = dict(g.tensors)
    for n in head[:-1] + tail:
        for name in list(n.outputs) + [i for i in n.inputs[1:] if i and g.is_const(i)]:
            tensors[name] = dataclasses.replace(tensors[name], dtype=FLOAT32)
    if head:
        tensors[g.inputs[0]] = dataclasses.replace(tensors[g.inputs[0]], dtype=FLOAT32)
    return g.replace(tensors=tensors).with_meta(host_head=[n.name for n in head],
                                                host_tail=[n.name for n in tail])


# -- wire order: a channels-first model's layout moves at the circuit's ends -----------------
# A model with spatial ops streams one pixel (all channels) per handshake, in raster order
# (DESIGN.md, "HDL backend"). An NCHW model's importer writes its channels-first input as a
# Transpose (or, with one channel, a Reshape) into the channels-last IR frame, and a
# channels-first output as a Transpose (a permuted vector as a Gather) back: those are the
# host's reordering, not circuit work. `layout_ends` moves them into the host head and tail
# (graphs/host.py runs them), so the circuit, the GPU kernels and the golden model's body all
# see the same raster-order pixels. Codes are moved unchanged: exact in every backend.
_MOVES = frozenset({Op.RESHAPE, Op.TRANSPOSE, Op.GATHER})


def _keeps_pixels(g: Graph, n: Node) -> bool:
    """A Reshape that keeps the channels last: the same pixel stream under a new name."""
    if n.op != Op.RESHAPE:
        return False
    i, o = g.tensor(n.inputs[0]).shape, g.tensor(n.outputs[0]).shape
    return len(i) >= 2 and len(o) >= 2 and i[-1] == o[-1]


def _reorders(g: Graph, n: Node) -> bool:
    """A Gather that only puts every value of its axis in another order (a permuted vector
    back in ONNX order), not one that crops or picks."""
    idx = GatherAttrs.of(n).index_array()
    size = g.tensor(n.inputs[0]).shape[GatherAttrs.of(n).axis]
    return idx.ndim == 1 and np.array_equal(np.sort(idx), np.arange(size))


def _single_chain(g: Graph, start: str, ok) -> list[Node]:
    nodes, cur = [], start
    while cur not in g.outputs:
        cons = g.consumers(cur)
        if len(cons) != 1 or not ok(cons[0]) or g.activations(cons[0]) != [cur]:
            break
        nodes.append(cons[0])
        cur = cons[0].outputs[0]
    return nodes


# element-wise ops of one activation whose constants (if any) do not depend on the position:
# a layout move of codes commutes with them
_POINTWISE = frozenset({Op.REQUANT, Op.BIPOLAR, Op.RELU, Op.CLIP, Op.TRUNC, Op.LUT,
                        Op.LEAKY_RELU})


def _pointwise(g: Graph, n: Node) -> bool:
    """A fixed-point element-wise op that commutes with a layout move: one activation, and
    no per-position constant (a LeakyRelu's alpha one value; a Lut's table is indexed by the
    value, not the position)."""
    if n.op not in _POINTWISE or not isinstance(g.tensor(n.outputs[0]).dtype, FixedType):
        return False
    consts = [i for i in n.inputs[1:] if i]
    if not all(g.is_const(i) for i in consts):
        return False
    return n.op != Op.LEAKY_RELU or all(np.asarray(g.constants[i]).size == 1 for i in consts)


def _moves_first(g: Graph, start: str, chain: list[Node]) -> tuple[Graph, list[Node]]:
    """The chain (element-wise ops of fixed-point codes: requantizations, ReLU, Clip, ...,
    and layout moves) with its moves first: a move of codes commutes with an element-wise
    op, so the circuit keeps the model's input quantizer and activation whatever layout the
    model declares. Returns the graph and the moves (now reading `start`)."""
    moves = [n for n in chain if n.op in LAYOUT]
    reqs = [n for n in chain if n.op not in LAYOUT]
    if not reqs or chain[:len(moves)] == moves:
        return g, moves
    tensors = dict(g.tensors)
    t0 = g.tensor(start).dtype
    cur, new = start, []
    for m in moves:
        o = m.outputs[0] + "__host"
        tensors[o] = dataclasses.replace(g.tensor(m.outputs[0]), name=o, dtype=t0)
        new.append(dataclasses.replace(m, inputs=(cur,) + tuple(m.inputs[1:]), outputs=(o,)))
        cur = o
    shape = g.tensor(chain[-1].outputs[0]).shape
    last = chain[-1].outputs[0]
    if last in g.outputs:
        return g, moves
    for r in reqs:  # each op keeps its output's name (traces, comparisons)
        o = r.outputs[0]
        tensors[o] = dataclasses.replace(g.tensor(o), shape=shape)
        new.append(dataclasses.replace(r, inputs=(cur,) + tuple(r.inputs[1:])))
        cur = o
    first = g.nodes.index(chain[0])
    gone = {n.name for n in chain}
    rest = [dataclasses.replace(n, inputs=tuple(cur if i == last else i for i in n.inputs))
            for n in g.nodes[first:] if n.name not in gone]
    nodes = list(g.nodes[:first]) + new + rest
    keep = {t for n in nodes for t in (*n.inputs, *n.outputs) if t} | set(g.inputs)
    tensors = {k: v for k, v in tensors.items() if k in keep or k in g.constants}
    return g.replace(nodes=tuple(nodes), tensors=tensors), new[:len(moves)]


def layout_ends(g: Graph) -> Graph:
    if len(g.inputs) != 1 or len(g.outputs) != 1:
        return g
    if not any(n.op in (Op.CONV, Op.MAX_POOL, Op.AVG_POOL, Op.RESIZE) for n in g.nodes):
        return g
    head = list(g.get_meta("host_head") or ())
    tail = list(g.get_meta("host_tail") or ())
    start = g.node(head[-1]).outputs[0] if head else g.inputs[0]
    # the input's layout moves, with the element-wise ops between them (an input quantizer,
    # a ReLU before a Transpose): up to the last move
    chain = _single_chain(g, start, lambda n: n.op in LAYOUT or _pointwise(g, n))
    if not isinstance(g.tensor(start).dtype, FixedType):  # float codes: only a quantizer
        cut = [i for i, n in enumerate(chain) if n.op not in LAYOUT and n.op != Op.REQUANT]
        chain = chain[:cut[0]] if cut else chain
    while chain and chain[-1].op not in LAYOUT:
        chain.pop()
    new_head = head
    if any(n.op in LAYOUT and not _keeps_pixels(g, n) for n in chain):
        if isinstance(g.tensor(start).dtype, FixedType):
            g, chain = _moves_first(g, start, chain)
        new_head = head + [n.name for n in chain]
    # the output's: Transposes / Gathers (and Reshapes) back to the model's layout
    end = g.node(tail[0]).inputs[0] if tail else g.outputs[0]
    back: list[Node] = []
    cur = end
    while True:
        p = g.producer(cur)
        if p is None or p.op not in _MOVES or p.name in new_head or cur in g.inputs:
            break
        if p.op == Op.GATHER and not _reorders(g, p):
            break  # a crop or a pick of some values: the circuit's work
        if cur != end and len(g.consumers(cur)) != 1:
            break
        back.append(p)
        cur = p.inputs[0]
    back.reverse()
    if all(n.op == Op.RESHAPE for n in back):
        back = []  # a Flatten at the end is the circuit's (it collects the frame)
    if new_head == head and not back:
        return g
    tensors = dict(g.tensors)
    for n in back:
        tensors[n.outputs[0]] = dataclasses.replace(tensors[n.outputs[0]], dtype=FLOAT32)
    return g.replace(tensors=tensors).with_meta(
        host_head=new_head, host_tail=[n.name for n in back] + tail)
