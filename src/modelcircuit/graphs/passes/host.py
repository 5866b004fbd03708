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

from ..ir import Graph, Node
from ..ops import LAYOUT, Op
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
