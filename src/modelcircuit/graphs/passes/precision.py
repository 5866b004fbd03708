"""Number types for every tensor.

Priority: types from the model's own quantizers (QONNX Quant, QDQ) > per-layer map >
calibration ranges > the global precision > fixed<16,6>. Dense/Add outputs of a model-typed
graph with no user precision keep their exact accumulator type (as FINN does), and tensors of a
float chain that ends in a model quantizer stay untyped for the thresholds pass. There too, a
quantizer's scale s * codes that feeds a residual join (Add/Sub of two activations) rounded
by a model quantizer, or a Softmax, is exact: the scale typed exactly (every float is a binary
fraction), the product typed by accumulator_types (onnxruntime's QDQ Add dequantizes both
operands exactly, adds, quantizes once; the Softmax's exp table takes the scale,
passes/tables.py), and a Softmax whose result a model quantizer rounds keeps e * r unrounded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from ..ir import Graph, GraphError, Node, Tensor
from ..ops import ADDITIVE, FLOAT_CHAIN, LAYOUT, LINEAR, SELECTING, LeakyReluAttrs, Op
from ..types import FLOAT32, FixedType, NumType, TypeError_, parse_type, type_for_range
from ._util import single_consumer
from .tables import SOFTMAX_PRODUCT

DEFAULT_PRECISION = FixedType(16, 6)
_EXACT_OPS = frozenset({Op.DENSE, Op.CONV, Op.ADD, Op.SUB})  # ops with an `exact` attribute
MAX_EXACT_SCALE_BITS = 32  # a scale typed exactly (a float32 one needs at most 25 bits)


def fit_int_bits(max_abs: float, width: int, signed: bool = True) -> int:
    """Fewest integer bits (sign included) so that max_abs is representable."""
    if max_abs <= 0 or not math.isfinite(max_abs):
        return 1 if signed else 0
    i = math.floor(math.log2(max_abs)) + 1 + (1 if signed else 0)
    t = FixedType(width, i, signed)
    if max_abs > t.qmax * t.lsb:  # exactly a power of two at the top
        i += 1
    return i


def fit_type(values: np.ndarray, base: FixedType) -> FixedType:
    v = np.asarray(values, dtype=np.float64)
    m = float(np.max(np.abs(v))) if v.size else 0.0
    signed = base.signed or bool(np.any(v < 0))
    return dataclasses.replace(base, int_bits=fit_int_bits(m, base.width, signed), signed=signed)


def _chain_to_model_quant(g: Graph, node: Node) -> bool:
    """True if node's output flows through float-chain ops (single consumers) into a
    quantizer that came from the model (a Requant/Bipolar, or a Relu that took one's type),
    or into the float tail run on the host (passes/host.py): then node's output must be its
    exact value, rounded once by that quantizer (QONNX rounds once, from the exact sum)."""
    cur = node
    tail = set(g.get_meta("host_tail") or ())
    while True:
        cons = g.consumers(cur.outputs[0])
        if len(cons) != 1 or cur.outputs[0] in g.outputs:
            return False
        nxt = cons[0]
        if nxt.name in tail:
            return True
        if nxt.op in (Op.REQUANT, Op.BIPOLAR, Op.RELU) and g.tensor(nxt.outputs[0]).dtype is not None:
            return True
        if nxt.op not in FLOAT_CHAIN or any(not g.is_const(i) for i in nxt.inputs[1:]):
            return False
        cur = nxt


def exact_type(values: np.ndarray) -> FixedType | None:
    """The smallest fixed-point type that holds every value exactly (a finite float is a
    binary fraction), or None past MAX_EXACT_SCALE_BITS bits."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if not v.size or not np.all(np.isfinite(v)):
        return None
    ratios = [float(x).as_integer_ratio() for x in v]
    frac = max(d.bit_length() - 1 for _, d in ratios)
    codes = [n << (frac - (d.bit_length() - 1)) for n, d in ratios]
    try:
        t = type_for_range(min(codes + [0]), max(codes + [0]), frac)
    except TypeError_:
        return None
    return t if t.width <= MAX_EXACT_SCALE_BITS else None


def _exact_scale(g: Graph, node: Node, codes_typed: bool) -> bool:
    """A Mul of a quantizer's codes (`codes_typed`) by a constant scale whose exact product
    is read by a residual join (Add/Sub of two activations) that flows into a model quantizer,
    or by a Softmax (a positive per-tensor scale, which its exp table takes)."""
    if (node.op != Op.MUL or not codes_typed or not g.is_const(node.inputs[1])
            or g.is_const(node.inputs[0])):
        return False
    c = single_consumer(g, node.outputs[0])
    sc = np.asarray(g.constants[node.inputs[1]], dtype=np.float64)
    if c is None or exact_type(sc) is None:
        return False
    if c.op == Op.SOFTMAX:
        return bool(np.unique(sc).size == 1 and sc.reshape(-1)[0] > 0)
    return (c.op in ADDITIVE and not any(g.is_const(i) for i in c.inputs)
            and _chain_to_model_quant(g, c))


def _zero_point_of_scale(g: Graph, node: Node, tensors: dict[str, Tensor]) -> bool:
    """An Add of a quantizer's codes and a constant (minus its zero point) before an exact
    scale (`_exact_scale`): the constant is typed exactly too (an integer: no fraction bits)."""
    if (node.op != Op.ADD or not g.is_const(node.inputs[1]) or g.is_const(node.inputs[0])
            or not isinstance(tensors[node.inputs[0]].dtype, FixedType)):
        return False
    m = single_consumer(g, node.outputs[0])
    return (m is not None and exact_type(g.constants[node.inputs[1]]) is not None
            and _exact_scale(g, m, True))


def _per_layer_type(per_layer: Mapping[str, object], key: str, part: str) -> NumType | None:
    v = per_layer.get(key)
    if v is None:
        return None
    if isinstance(v, dict):
        v = v.get(part)
        if v is None:
            return None
    return parse_type(str(v))


def check_per_layer(g: Graph, per_layer: Mapping[str, object] | None) -> None:
    """Every entry of a per-layer precision map names a node or an input of this graph and
    holds types that parse: a typo must not be silently ignored."""
    if not per_layer:
        return
    known = [n.name for n in g.nodes] + list(g.inputs)
    by_name = {n.name: n for n in g.nodes}
    for key, v in per_layer.items():
        if not isinstance(key, str) or key not in known:
            near = [k for k in known if isinstance(key, str) and key.lower() in k.lower()][:3]
            raise GraphError(f"per-layer precision names {key!r}, which is not a node or input of "
                             f"{g.name}; known: {', '.join((near or known)[:12])}"
                             + (" …" if len(near or known) > 12 else ""))
        check_per_layer_entry(key, v, "per-layer precision")
        for part in v if isinstance(v, dict) else ():
            if part != "result" and not _has_part(g, by_name.get(key), part):
                n = by_name.get(key)
                what = f"node {key} ({n.op})" if n is not None else f"graph input {key!r}"
                raise GraphError(f"per-layer precision, entry {key!r}: key {part!r}, but {what} "
                                 f"has no {part} (no constant input to type); give it a result "
                                 "type only")


def _has_part(g: Graph, node: Node | None, part: str) -> bool:
    """Whether a per-layer "weight" or "bias" type has something to type in node (as
    assign_types reads them: the constant second input; a later constant, or the bias a
    Dense/Conv gets from the Add after it)."""
    if node is None:
        return False
    if part == "weight":
        return len(node.inputs) > 1 and g.is_const(node.inputs[1])
    return node.op in LINEAR or any(i and g.is_const(i) for i in node.inputs[2:])


PER_LAYER_PARTS = ("result", "weight", "bias")


def check_per_layer_entry(key: str, v: object, where: str) -> None:
    """One entry of a per-layer precision map: a type, or {result|weight|bias: type}, each
    type a string (or a NumType, from Python) that parses. `where` names the source."""
    at = f"{where}, entry {key!r}"
    if isinstance(v, dict):
        parts = list(v.items())
    elif isinstance(v, str | NumType):
        parts = [("result", v)]
    else:
        raise GraphError(f"{at}: expected a type string or an object with "
                         f"{'/'.join(PER_LAYER_PARTS)}, got {repr(v)[:60]}")
    for part, t in parts:
        if part not in PER_LAYER_PARTS:
            raise GraphError(f"{at}: unknown key {part!r}; known: {', '.join(PER_LAYER_PARTS)}")
        if not isinstance(t, str | NumType):
            raise GraphError(f"{at} ({part}): expected a type string, got {repr(t)[:60]}")
        try:
            parse_type(str(t))
        except ValueError as e:
            raise GraphError(f"{at} ({part}): {e}") from None


def assign_types(g: Graph, precision: NumType | None = None,
                 per_layer: Mapping[str, object] | None = None,
                 ranges: Mapping[str, tuple[float, float]] | None = None) -> Graph:
    per_layer = per_layer or {}
    tensors = dict(g.tensors)
    if precision is not None and precision.is_float:
        for k, t in tensors.items():
            tensors[k] = dataclasses.replace(t, dtype=FLOAT32)
        return g.replace(tensors=tensors)
    model_typed = bool(g.get_meta("typed_by_model"))
    base = precision if isinstance(precision, FixedType) else DEFAULT_PRECISION
    ranges = ranges or {}

    def activation_type(name: str, key: str) -> FixedType:
        t = _per_layer_type(per_layer, key, "result")
        if t is not None:
            return t  # type: ignore[return-value]
        if name in ranges:
            lo, hi = ranges[name]
            # a Dense feeding only a ReLU needs only the ReLU's range (negatives saturate to 0,
            # which is what the ReLU makes of them anyway): then the two fuse
            node = g.producer(name)
            cons = g.consumers(name)
            if node is not None and node.op in LINEAR and len(cons) == 1 and cons[0].op == Op.RELU:
                lo, hi = ranges.get(cons[0].outputs[0], (lo, hi))
            signed = lo < 0
            return dataclasses.replace(base, signed=signed,
                                       int_bits=fit_int_bits(max(abs(lo), abs(hi)), base.width, signed))
        return base

    def set_t(name: str, t: NumType | None) -> None:
        tensors[name] = dataclasses.replace(tensors[name], dtype=t)

    nodes: list[Node] = []
    consts = dict(g.constants)
    exact_model = model_typed and precision is None
    later: set[str] = set()  # outputs typed exactly by accumulator_types (scales, their joins)
    exact_adds: set[str] = set()

    def codes(x: str) -> bool:
        """A quantizer's codes, or codes minus a constant zero point (an exact Add)."""
        if isinstance(tensors[x].dtype, FixedType):
            return True
        p = g.producer(x)
        return (p is not None and p.op == Op.ADD and g.is_const(p.inputs[1])
                and isinstance(tensors[p.inputs[0]].dtype, FixedType)
                and p.name in exact_adds)

    for x in g.inputs:
        if tensors[x].dtype is None:
            set_t(x, activation_type(x, x))
    for node in g.nodes:
        in_chain = (node.op in FLOAT_CHAIN and _chain_to_model_quant(g, node)
                    and all(g.is_const(i) for i in node.inputs[1:] if i))  # not a sum of two
        scale = (exact_model and node.op == Op.MUL
                 and _per_layer_type(per_layer, node.name, "result") is None
                 and _exact_scale(g, node, codes(node.inputs[0])))
        if scale or (exact_model and _zero_point_of_scale(g, node, tensors)):
            set_t(node.inputs[1], exact_type(g.constants[node.inputs[1]]))
        # constants first: weights, biases, element-wise constants (float-chain constants stay
        # float: the thresholds pass evaluates them as the model does)
        for k, c in enumerate(node.inputs[1:], start=1):
            if in_chain:
                break
            if not c or not g.is_const(c) or tensors[c].dtype is not None:
                continue
            part = "weight" if k == 1 else "bias"
            t = _per_layer_type(per_layer, node.name, part)
            vals = g.constants[c]
            if t is None:
                if node.op in LINEAR and not ranges:
                    t = base
                else:
                    t = fit_type(vals, base)
            set_t(c, t)
        if node.op == Op.LEAKY_RELU and len(node.inputs) == 1:
            an = f"{node.name}_alpha"
            consts[an] = np.array(LeakyReluAttrs.of(node).alpha, dtype=np.float64)
            tensors[an] = Tensor(an, (), fit_type(consts[an], base))
            node = dataclasses.replace(node, inputs=node.inputs + (an,))
        out = node.outputs[0]
        if tensors[out].dtype is None:
            ins = [tensors[i].dtype for i in node.inputs if i]
            if node.op in LAYOUT or node.op in SELECTING:
                set_t(out, ins[0])
            elif (node.op == Op.CONCAT and model_typed and precision is None
                  and ins and all(t is not None and t == ins[0] for t in ins)):
                set_t(out, ins[0])  # channel concat of one quantizer's codes: no conversion
            elif _per_layer_type(per_layer, node.name, "result") is not None:
                set_t(out, activation_type(out, node.name))
            elif scale:
                node = node.with_attrs(exact=True)
                later.add(out)
            elif in_chain:
                pass  # left for the thresholds pass
            elif (exact_model and node.op in _EXACT_OPS
                  and all(tensors[i].dtype is not None or i in later for i in node.inputs if i)):
                node = node.with_attrs(exact=True)
                if node.op == Op.ADD:
                    exact_adds.add(node.name)
            elif exact_model and node.op == Op.SOFTMAX and _chain_to_model_quant(g, node):
                set_t(out, SOFTMAX_PRODUCT)  # e * r unrounded: the model quantizer rounds once
            elif (node.op in LINEAR and _chain_to_model_quant(g, node)
                  and all(t is not None for t in ins)):
                node = node.with_attrs(exact=True)
            else:
                set_t(out, activation_type(out, node.name))
        nodes.append(node)
    return g.replace(nodes=tuple(nodes), tensors=tensors, constants=consts)
