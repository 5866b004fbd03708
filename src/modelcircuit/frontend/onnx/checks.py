"""The importer's checks of the model and its nodes, before any value is computed.

Model level: IR version, one opset for the default domain within what onnx knows, graph
size, names that are valid UTF-8. Node level: one producer per tensor and inputs defined
before use (which also refuses cycles), then the op's schema (input and output counts,
attribute names and types). Graph inputs and outputs: named once, float32, static
per-sample shapes. Every refusal is a GraphError naming what and where.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import onnx
from onnx import TensorProto

from ...graphs import limits
from ...graphs.ir import GraphError
from .io import Unsupported, attr_type_name, dtype_name, q, show

if TYPE_CHECKING:
    from .state import ImportState

MIN_OPSET = 1  # opsets < 7: legacy broadcast/axis of Add/Sub/Mul/Div (onnx_ops.legacy_*),
#                the legacy attributes of BatchNormalization/Dropout/Gemm (ignored or checked),
#                Reshape's shape attribute (< 5), Cast's string `to` (< 6), Concat's axis (< 4)

_A = onnx.AttributeProto
# QONNX ops have no onnx schema: (min inputs, max inputs, {attribute: type})
QONNX_SCHEMAS = {"Quant": (4, 4, {"signed": _A.INT, "narrow": _A.INT, "rounding_mode": _A.STRING}),
                 "BipolarQuant": (2, 2, {}),
                 "Trunc": (5, 6, {"signed": _A.INT, "narrow": _A.INT, "rounding_mode": _A.STRING})}

# -- the model ------------------------------------------------------------------------------


def check_model(m: onnx.ModelProto) -> int:
    """The model's header, opsets, graph size and names; returns the default-domain opset."""
    if not m.HasField("graph"):
        raise GraphError("the model has no graph (not an ONNX model?)")
    if m.ir_version < 1:
        raise GraphError("the model has no IR version (ir_version is missing: not an ONNX "
                         "model?)")
    if m.ir_version > onnx.IR_VERSION:
        raise GraphError(f"the model's IR version {m.ir_version} is newer than the newest "
                         f"onnx {onnx.__version__} understands ({onnx.IR_VERSION})")
    opset = _default_opset(m)
    _check_graph(m.graph)
    return opset


def _default_opset(m: onnx.ModelProto) -> int:
    seen: set[str] = set()
    default: list[int] = []
    for o in m.opset_import:
        if not isinstance(o.domain, str):
            raise GraphError(f"an opset_import domain is not valid UTF-8: {show(o.domain)}")
        if o.domain in seen:
            raise GraphError(f"opset_import lists domain {q(o.domain)} twice")
        seen.add(o.domain)
        if o.domain in ("", "ai.onnx"):
            default.append(o.version)
    if not default:
        raise GraphError("the model imports no opset for the default ONNX domain "
                         "(opset_import has no entry for domain ''); its ops' meaning is "
                         "unknown")
    if len(default) > 1:
        raise GraphError("opset_import lists the default domain twice ('' and 'ai.onnx')")
    newest = onnx.defs.onnx_opset_version()
    v = default[0]
    if v > newest:
        raise GraphError(f"the model's opset {v} is newer than the newest onnx "
                         f"{onnx.__version__} knows ({newest})")
    if v < MIN_OPSET:
        raise GraphError(f"the model's opset {v} is older than the oldest supported "
                         f"({MIN_OPSET}); convert it with onnx.version_converter")
    return v


def _check_graph(g: onnx.GraphProto) -> None:
    if len(g.node) > limits.MAX_NODES:
        raise GraphError(f"the graph has {len(g.node):,} nodes, over the limit MAX_NODES = "
                         f"{limits.MAX_NODES}")
    if not g.node:
        raise GraphError("the graph has no nodes")
    if not g.output:
        raise GraphError("the graph has no outputs")
    if len(g.sparse_initializer):
        raise GraphError(f"sparse initializer {q(g.sparse_initializer[0].values.name)} is "
                         "not supported (store it as a dense initializer)")
    check_strings(g)


def check_strings(g: onnx.GraphProto) -> None:
    """protobuf hands out bytes for a string field that is not valid UTF-8."""
    def check(s: Any, where: str) -> None:
        if not isinstance(s, str):
            raise GraphError(f"{where} is not valid UTF-8: {show(s)}")
    for what, vis in (("graph input", g.input), ("graph output", g.output),
                      ("initializer", g.initializer)):
        for vi in vis:
            check(vi.name, f"the name of a {what}")
    for k, n in enumerate(g.node):
        where = f"node #{k}"
        for s, part in ((n.name, "the name"), (n.op_type, "the op_type"),
                        (n.domain, "the domain")):
            check(s, f"{part} of {where}")
        for i in n.input:
            check(i, f"an input name of {where}")
        for o in n.output:
            check(o, f"an output name of {where}")
        for a in n.attribute:
            check(a.name, f"an attribute name of {where}")
        if not n.op_type:
            raise GraphError(f"{where} ({show(n.name or '?')}) has no op_type")


def named_once(items: Iterable[Any], noun: str, verb: str) -> Iterator[Any]:
    """The graph's initializers, inputs or outputs, each refused (as it comes) when it has no
    name or a name an earlier one had."""
    seen: set[str] = set()
    for x in items:
        name = x.name
        if not name:
            raise GraphError(f"{'an' if noun[0] in 'aeiou' else 'a'} {noun} has no name")
        if name in seen:
            raise GraphError(f"{noun} {q(name)} is {verb} twice")
        seen.add(name)
        yield x


# -- graph inputs and outputs ---------------------------------------------------------------


def check_input_initializer(vi: onnx.ValueInfoProto, t: onnx.TensorProto) -> None:
    """A graph input that is also an initializer (its default): they must agree."""
    if not vi.type.HasField("tensor_type"):
        return
    tt = vi.type.tensor_type
    if tt.elem_type not in (TensorProto.UNDEFINED, t.data_type):
        raise GraphError(f"input {q(vi.name)} is declared {dtype_name(tt.elem_type)}, but "
                         f"its initializer is {dtype_name(t.data_type)}")
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if len(dims) != len(t.dims) or any(
                d is not None and d != e for d, e in zip(dims, t.dims, strict=False)):
            raise GraphError(f"input {q(vi.name)} is declared with shape "
                             f"{['?' if d is None else d for d in dims]}, but its "
                             f"initializer has a conflicting shape {list(t.dims)}")


def input_shape(vi: onnx.ValueInfoProto) -> tuple[int, ...]:
    """A graph input's per-sample shape: float32, static but for the batch (dimension 0)."""
    where = f"input {q(vi.name)}"
    if not vi.type.HasField("tensor_type"):
        kind = vi.type.WhichOneof("value") or "no type"
        raise Unsupported(f"{where} has type {kind}; only float32 tensors are supported",
                          "dtype", kind)
    tt = vi.type.tensor_type
    if tt.elem_type != TensorProto.FLOAT:
        name = dtype_name(tt.elem_type)
        if tt.elem_type == TensorProto.UNDEFINED:
            raise GraphError(f"{where} has no dtype (elem_type is missing); the golden "
                             "model takes float32 (FLOAT) inputs")
        raise Unsupported(f"{where} has dtype {name}; the golden model takes float32 "
                          "(FLOAT) inputs only", "dtype", name)
    dims = tt.shape.dim
    if not tt.HasField("shape") or len(dims) < 1:
        raise GraphError(f"{where} has no shape; a static shape is needed")
    if len(dims) > limits.MAX_RANK:
        raise GraphError(f"{where} has rank {len(dims)}, over the limit MAX_RANK = "
                         f"{limits.MAX_RANK}")
    if dims[0].HasField("dim_value") and dims[0].dim_value < 1:
        raise GraphError(f"{where} has a batch dimension (dimension 0) of "
                         f"{dims[0].dim_value}; it must be at least 1 or symbolic")
    for k, d in enumerate(dims[1:], start=1):
        if d.HasField("dim_value") and d.dim_value == 0:
            raise GraphError(f"{where} has a zero-sized dimension {k}; every "
                             "per-sample dimension must be at least 1")
        if d.HasField("dim_value") and d.dim_value < 0:
            raise GraphError(f"{where} has a negative dimension {k} ({d.dim_value})")
        if not d.HasField("dim_value"):
            raise GraphError(
                f"{where} has a dynamic dimension {k} "
                f"({show(d.dim_param) if d.dim_param else '?'}) that cannot be fixed; "
                "only the batch (first) dimension may be dynamic")
    return tuple(d.dim_value for d in dims[1:])


def check_outputs(im: ImportState) -> list[str]:
    """The graph's outputs, each computed by the import and declared as it is computed;
    returns the names of the tensors they are."""
    outputs = []
    declared = list(im.g.output)
    for k, vo in enumerate(named_once(declared, "graph output", "listed")):
        o = vo.name
        if o in im.uncomputed or o not in im.defined:
            raise GraphError(f"output {q(o)} is not computed by any supported node "
                             "(e.g. a Dropout mask or BatchNormalization training outputs)"
                             if o in im.uncomputed else
                             f"output {q(o)} is not computed by any node (no node, input "
                             "or initializer has this name)")
        s = im.src(o)
        if s in im.consts:
            raise GraphError(_constant_output(im, declared, k))
        _check_output_type(im, vo, s)
        outputs.append(s)
    return outputs


def _constant_output(im: ImportState, declared: list, k: int) -> str:
    """The refusal of graph output k, a constant (an initializer, a Constant node's value or
    what folds to one): not computed from the input, which is all a compiled model returns.
    It names every constant output, and how many are computed (brevitas' QCDQ export lists
    quantizer parameters as outputs next to the model's own)."""
    names = [vo.name for vo in declared]
    const = [n for n in names if n in im.defined and n not in im.uncomputed
             and im.src(n) in im.consts]
    computed = len(names) - len(const)
    o = names[k]
    where = f" (output {k + 1} of {len(names)})" if len(names) > 1 else ""
    listed = ", ".join(q(n) for n in const[:6]) + (" …" if len(const) > 6 else "")
    return (f"output {q(o)}{where} is a constant ({im.defined.get(o, 'a constant')}), not "
            f"computed from the input; constant outputs are not supported: "
            + (f"remove {len(const)} constant output{'s' if len(const) > 1 else ''} "
               f"({listed}) from the graph's outputs, which leaves {computed} computed"
               if computed else "the model computes nothing from its input"))


def _check_output_type(im: ImportState, vo: onnx.ValueInfoProto, s: str) -> None:
    """A declared output type (if any): a float32 tensor, of the shape computed for `s`."""
    o = vo.name
    if vo.type.HasField("tensor_type"):
        tt = vo.type.tensor_type
        if tt.elem_type not in (TensorProto.FLOAT, TensorProto.UNDEFINED):
            name = dtype_name(tt.elem_type)
            raise Unsupported(f"output {q(o)} is declared {name}; the golden model "
                              "computes float32 (FLOAT) outputs", "dtype", name)
        if tt.HasField("shape"):
            check_output_shape(o, [d.dim_value if d.HasField("dim_value") else None
                                   for d in tt.shape.dim], im.shapes[s])
    elif vo.type.WhichOneof("value") is not None:
        kind = vo.type.WhichOneof("value")
        raise Unsupported(f"output {q(o)} has type {kind}; only float32 tensors are "
                          "supported", "dtype", kind)


def input_batch(vi: onnx.ValueInfoProto) -> int | None:
    """A graph input's batch (dimension 0; `input_shape` has checked it): fixed or None."""
    d = vi.type.tensor_type.shape.dim[0]
    return int(d.dim_value) if d.HasField("dim_value") else None


def check_output_shape(o: str, dims: list[int | None], got: tuple[int, ...]) -> None:
    per = dims[1:]
    if len(dims) != len(got) + 1 or any(d is not None and d != e
                                        for d, e in zip(per, got, strict=True)):
        shown = ["N"] + list(got)
        raise GraphError(f"output {q(o)} is declared with shape "
                         f"{['?' if d is None else d for d in dims]}, but the graph "
                         f"computes {shown}")


# -- nodes ----------------------------------------------------------------------------------


class _Schema(NamedTuple):
    lo: int  # inputs
    hi: int
    types: dict[str, int]  # attribute -> AttributeProto type
    required: dict[str, bool]
    options: list[Any] | None  # each formal input's option (Single, Optional, Variadic)
    out_lo: int
    out_hi: int


def check_node(im: ImportState, node: onnx.NodeProto, quant: bool) -> None:
    """Structure (one producer per tensor, inputs defined before use) and the op's
    schema (input/output counts, attribute names and types)."""
    _check_structure(im, node)
    s = _schema(im, node, quant)
    _check_counts(im, node, s, quant)
    _check_attributes(im, node, s)


def _check_structure(im: ImportState, node: onnx.NodeProto) -> None:
    # LSTM/GRU may leave their sequence output Y unnamed and give only the last states
    if not node.output or not (node.output[0] or (node.op_type in ("LSTM", "GRU")
                                                  and any(node.output))):
        raise im.err(node, "has no output")
    outs = [o for o in node.output if o]
    if len(set(outs)) != len(outs):
        raise im.err(node, f"lists an output twice: {[show(o) for o in node.output]}")
    for o in outs:
        if o in im.defined:
            raise im.err(node, f"output {q(o)} is already defined ({im.defined[o]}); "
                         "every tensor must have exactly one producer")
    for i in node.input:
        if not i:
            continue
        if i in im.uncomputed:
            raise im.err(node, f"input {q(i)} is {im.uncomputed[i]}")
        if i not in im.defined:
            raise im.err(node, f"input {q(i)} is not defined before this node (no graph "
                         "input, initializer or earlier node output has this name; ONNX "
                         "nodes must be in topological order, without cycles)")


def _schema(im: ImportState, node: onnx.NodeProto, quant: bool) -> _Schema:
    op = node.op_type
    if quant:
        lo, hi, types = QONNX_SCHEMAS[op]
        return _Schema(lo, hi, types, {k: False for k in types}, None, 1, 1)
    try:
        s = onnx.defs.get_schema(op, im.opset, "")
    except Exception:
        raise im.unsupported_op(node) from None
    if s.deprecated:
        raise im.unsupported_op(node, f" (deprecated in opset {s.since_version})")
    return _Schema(s.min_input, s.max_input,
                   {k: int(a.type.value) for k, a in s.attributes.items()},
                   {k: a.required for k, a in s.attributes.items()},
                   [p.option for p in s.inputs], s.min_output, s.max_output)


def _check_counts(im: ImportState, node: onnx.NodeProto, s: _Schema, quant: bool) -> None:
    op = node.op_type
    n = len(node.input)
    if not s.lo <= n <= s.hi:
        want = str(s.lo) if s.lo == s.hi else f"{s.lo} to {s.hi}" if s.hi < 2**30 \
            else f"at least {s.lo}"
        raise im.err(node, f"has {n} inputs; {show(op)} takes {want}")
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    for k, i in enumerate(node.input):
        required = quant or (s.options and s.options[min(k, len(s.options) - 1)] == single)
        if not i and required:
            raise im.err(node, f"required input #{k} is empty")
    if not s.out_lo <= len(node.output) <= s.out_hi:
        want = str(s.out_lo) if s.out_lo == s.out_hi else f"{s.out_lo} to {s.out_hi}"
        raise im.err(node, f"has {len(node.output)} outputs; {show(op)} has {want}")


def _check_attributes(im: ImportState, node: onnx.NodeProto, s: _Schema) -> None:
    op = node.op_type
    seen: set[str] = set()
    for a in node.attribute:
        if a.name in seen:
            raise im.err(node, f"attribute {show(a.name)} is given twice")
        seen.add(a.name)
        if a.ref_attr_name:
            raise im.err(node, f"attribute {show(a.name)} refers to a function attribute "
                         f"({show(a.ref_attr_name)}) outside a function")
        if a.name not in s.types:
            raise im.err(node, f"unknown attribute {show(a.name)}; {show(op)} takes: "
                         + (", ".join(sorted(s.types)) or "none"))
        if a.type != s.types[a.name]:
            raise im.err(node, f"attribute {show(a.name)} must be of type "
                         f"{attr_type_name(s.types[a.name])}, got "
                         f"{attr_type_name(a.type)}")
    missing = [k for k, r in s.required.items() if r and k not in seen]
    if missing:
        raise im.err(node, f"required attribute {missing[0]} is missing")


def check_float_attrs(im: ImportState, node: onnx.NodeProto) -> None:
    """Float attributes (alpha, epsilon, ...) must be finite."""
    for a in node.attribute:
        vals = [a.f] if a.type == _A.FLOAT else list(a.floats) if a.type == _A.FLOATS else []
        if not all(math.isfinite(v) for v in vals):
            raise im.err(node, f"attribute {show(a.name)} is "
                         f"{vals[0] if len(vals) == 1 else vals}; it must be finite")
