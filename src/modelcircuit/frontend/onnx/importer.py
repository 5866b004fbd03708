"""ONNX (+ QONNX Quant/BipolarQuant, ONNX QDQ) -> Graph.

The batch dimension (fixed, e.g. 789444, or symbolic) is dropped: the IR is per sample.
Subgraphs that only compute constants (Shape/Gather/Concat/Reshape chains, weight Quant and
Transpose) are folded here with onnx's reference evaluator. Every refusal is a GraphError
naming what is wrong and where (the node and its op, the tensor, the input).

A model file is untrusted input. Before anything is read or allocated: the path must be a
regular file within `limits.MAX_MODEL_BYTES`; the model must name its opset, and every
declared size (initializers, Constant values, activations, folded constants) is checked
against `limits`. Then every node is checked against its ONNX schema (input and output
counts, attribute names and types) and the graph's structure (one producer per tensor,
inputs defined before use, which also refuses cycles), and each op's values (axes, perms,
shapes, quantizer parameters, BatchNorm statistics) by its handler.

This module is the walk (`_Importer`); the constants, shapes and aliases it owns are an
`ImportState` (state.py), which every handler module reads and extends. It sends each node
to the module that knows it:
  io.py        reading the file, printing names, decoding tensors (sizes checked first)
  checks.py    the model's and each node's structure and schema, inputs and outputs
  fold.py      nodes on constants, evaluated at import time
  quant.py     Quant, BipolarQuant, QuantizeLinear/DequantizeLinear
  handlers.py  the handler table of the other ops (with layout.py: the ops that only move
               values; channels.py, spatial.py: frames)
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import helper

from ...graphs import limits
from ...graphs.ir import Graph, GraphError, Tensor, prune, toposort
from ...util.userio import shown
from .attention import fuse
from .channels import (
    CHANNELS_LAST_OPS,
    layout_consumer,
    marked,
    materialize,
    nchw_inputs,
    onnx_shape,
    to_channels_last,
    transpose_plain,
)
from .checks import (
    check_float_attrs,
    check_input_initializer,
    check_model,
    check_node,
    check_outputs,
    input_batch,
    input_shape,
    named_once,
)
from .encoder import FUSED
from .fold import fold
from .fuse_graph import DOMAIN as FUSED_DOMAIN
from .handlers import HANDLERS, binary, swapped_consumer, swapped_output
from .io import (
    CHANNELS_LAST,
    Unsupported,
    declared_elements,
    graph_name,
    q,
    read_regular_file,
    show,
    tensor_value,
)
from .layout import attrs
from .qdq import clip_codes
from .quant import bipolar, quant, trunc
from .recurrent import run_time_input, sequence_first_view
from .spatial import conv, pad_folds, padded_reader, pool
from .state import SUPPORTED_OPS, ImportState

__all__ = ["SUPPORTED_OPS", "Unsupported", "import_model", "load_onnx"]

_QUANT_DOMAINS = ("qonnx", "finn", "brevitas")
# QONNX quantizers: taken in any domain, on constants as on activations (never folded)
_QUANTIZERS = {"Quant": quant, "BipolarQuant": bipolar, "Trunc": trunc}
_QDQ = ("QuantizeLinear", "DequantizeLinear")  # on constants too: by handlers.qdq, not folded


def load_onnx(path: str | os.PathLike[str]) -> Graph:
    """Read an ONNX file and import it; every failure is a one-line GraphError."""
    p = os.fspath(path)
    data = read_regular_file(p, "model file")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # protobuf DecodeError, truncated files, nesting too deep
        raise GraphError(f"{shown(p)} is not a readable ONNX model (truncated or not ONNX): "
                         f"{type(e).__name__}") from None
    del data
    if not model.HasField("graph") or not model.graph.node:
        raise GraphError(f"{shown(p)} is not an ONNX model with a graph (no nodes found)")
    base = os.path.dirname(os.path.abspath(p))
    return import_model(model, name=graph_name(p), base_dir=base)


class _Importer(ImportState):
    """The walk over the ONNX graph; the state it shares with the handlers is ImportState."""

    # -- the graph's initializers and inputs -----------------------------------
    def load_initializers(self) -> dict[str, onnx.TensorProto]:
        inits = {t.name: t for t in named_once(self.g.initializer, "initializer", "defined")}
        used = {i for n in self.g.node for i in n.input if i} | {o.name for o in self.g.output}
        total = sum(declared_elements(t, f"initializer {q(k)}")
                    for k, t in inits.items() if k in used)
        if total > limits.MAX_TOTAL_CONSTANT_ELEMENTS:
            raise GraphError(f"the initializers declare {total:,} elements, over the limit "
                             "MAX_TOTAL_CONSTANT_ELEMENTS = "
                             f"{limits.MAX_TOTAL_CONSTANT_ELEMENTS}")
        for k, t in inits.items():
            self.defined[k] = "an initializer"
            if k in used:
                where = f"initializer {q(k)}"
                arr = tensor_value(t, where, self.base_dir)
                self.count(arr.size, where)
                self.consts[k] = arr
        return inits

    def load_inputs(self, inits: dict[str, onnx.TensorProto]) -> list[str]:
        inputs: list[str] = []
        batches: set[int | None] = set()
        for vi in named_once(self.g.input, "graph input", "listed"):
            if vi.name in inits:
                check_input_initializer(vi, inits[vi.name])
                continue
            view = sequence_first_view(self, vi)  # (T, N, F) into an LSTM/GRU: N is dim 1
            try:
                per = input_shape(view)
            except Unsupported:
                run_time_input(self, vi.name)  # an LSTM/GRU's lengths: name that node
                raise
            batches.add(input_batch(view))
            self.check_shape(None, vi.name, per, "input")
            self.shapes[vi.name] = per
            self.defined[vi.name] = "a graph input"
            inputs.append(vi.name)
        if not inputs:
            raise GraphError("model has no non-constant input")
        self.batch = batches.pop() if len(batches) == 1 else None
        return inputs

    # -- the walk --------------------------------------------------------------
    def run(self) -> Graph:
        self.opset = check_model(self.model)
        # attention and Gelu patterns (attention.py); they read external data as the walk does
        self.model = fuse(self.model, self.base_dir)
        self.g = self.model.graph
        inits = self.load_initializers()
        inputs = self.load_inputs(inits)
        nchw_inputs(self, inputs)
        for node in self.g.node:
            self.visit(node)
        self.node = None
        for o in self.g.output:
            swapped_output(self, o.name)
            if o.name in self.cf or o.name in self.flat_perm:  # back to the ONNX layout
                self.alias[o.name] = materialize(self, None, o.name)
        outputs = check_outputs(self)
        for name, arr in self.consts.items():
            if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)) and name not in self.masks:
                used = any(name in n.inputs for n in self.nodes)
                if used:
                    raise GraphError(f"weight {name!r} contains NaN or Inf")
        return self.graph(inputs, outputs)

    def graph(self, inputs: list[str], outputs: list[str]) -> Graph:
        """The IR graph of what the walk emitted (numeric constants as float64), pruned."""
        tensors = {n: Tensor(n, s, self.types.get(n)) for n, s in self.shapes.items()}
        consts = {}
        for n, v in self.consts.items():
            if v.dtype.kind in "fiub":
                consts[n] = v.astype(np.float64)
                tensors[n] = Tensor(n, tuple(v.shape), self.const_types.get(n))
        nodes = toposort(self.nodes, list(inputs) + list(consts))
        typed = bool(self.types or self.const_types)
        g = Graph(self.name, tuple(inputs), tuple(outputs), nodes, tensors, consts,
                  meta=(("source", "onnx"), ("typed_by_model", typed)))
        if self.weight_scales:  # what passes/scales.py factors weights with
            g = g.with_meta(weight_scales=sorted(self.weight_scales, reverse=True))
        return prune(g)

    def visit(self, node: onnx.NodeProto) -> None:
        self.node = node
        op = node.op_type
        if op == "Pad" and node.domain in ("", "ai.onnx") and not self.is_const(node.input[0]):
            check_node(self, node, False)
            pad_folds(self, node)  # folded into its reader's pads, or refused
            self.defined[node.output[0]] = f"the output of {self.label(node)}"
            return
        if node.domain == FUSED_DOMAIN and op in FUSED:  # written by attention.fuse
            FUSED[op](self, node)
            self.record_outputs(node)
            return
        node = padded_reader(self, node)
        if self.pending_cf and any(i in self.pending_cf for i in node.input):
            to_channels_last(self, node)
        quant = op in _QUANTIZERS
        cl_op = node.domain == CHANNELS_LAST and op in CHANNELS_LAST_OPS
        if not quant and not cl_op and (node.domain not in ("", "ai.onnx")
                                        or any(d in node.domain for d in _QUANT_DOMAINS)):
            raise self.unsupported_op(node)
        check_node(self, node, quant)
        ins = list(node.input)
        if op != "Shape" and any(i and i in self.swapped for i in ins):
            swapped_consumer(self, node)
        elif cl_op:  # qonnx's channels-last Conv/MaxPool: the IR's own layout
            check_float_attrs(self, node)
            self.check_finite_weights(node)
            (conv if op == "Conv" else pool)(self, node, cl_domain=True)
        elif op != "Shape" and marked(self, node):
            layout_consumer(self, node, self.dispatch, binary)
        else:
            self.dispatch(node)
        self.record_outputs(node)

    def dispatch(self, node: onnx.NodeProto) -> None:
        """A node whose inputs are in ONNX layout (or that takes a marked frame as it is)."""
        op = node.op_type
        quant = op in _QUANTIZERS
        ins = list(node.input)
        if quant:
            _QUANTIZERS[op](self, node)
        elif op == "Constant":
            self.constant(node)
        elif op == "Shape" and not self.is_const(ins[0]):
            self.shape_of(node)
        elif op == "Clip" and ins and self.src(ins[0]) in self.qdq:
            check_float_attrs(self, node)
            clip_codes(self, node)  # QuantizeLinear -> Clip -> DequantizeLinear (QCDQ)
        elif ins and all((not i) or self.is_const(i) for i in ins) and op not in _QDQ:
            fold(self, node)
        elif op == "Transpose" and transpose_plain(self, node):
            pass
        else:
            self.handle(node)

    def handle(self, node: onnx.NodeProto) -> None:
        """An op on activations, by its handler in onnx_ops.HANDLERS."""
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            raise self.unsupported_op(node)
        check_float_attrs(self, node)
        self.check_finite_weights(node)
        handler(self, node)

    def check_finite_weights(self, node: onnx.NodeProto) -> None:
        for i in node.input:
            v = self.consts.get(self.src(i)) if i else None
            if v is not None and v.dtype.kind == "f" and not np.all(np.isfinite(v)):
                raise self.err(node, f"weight {q(self.src(i))} contains NaN or Inf")

    def record_outputs(self, node: onnx.NodeProto) -> None:
        """What defines each of the node's outputs; those not computed are remembered, so
        that a later use names them."""
        for k, o in enumerate(node.output):
            if not o:
                continue
            if o in self.shapes or o in self.consts or o in self.alias:
                self.defined[o] = f"the output of {self.label(node)}"
            else:
                self.defined[o] = f"an output of {self.label(node)}"
                self.uncomputed[o] = (f"output #{k} of {self.label(node)}, which the import does "
                                      "not compute (e.g. a Dropout mask or BatchNormalization "
                                      "training outputs)")

    def constant(self, node: onnx.NodeProto) -> None:
        if len(node.attribute) != 1:
            raise self.err(node, f"needs exactly one value attribute, got "
                           f"{len(node.attribute)}")
        a = node.attribute[0]
        where = f"{self.label(node)} attribute {a.name}"
        if a.name == "value":
            v = tensor_value(a.t, where, self.base_dir)
        elif a.name in ("value_float", "value_floats", "value_int", "value_ints"):
            dt = np.float32 if "float" in a.name else np.int64
            v = np.array(helper.get_attribute_value(a), dtype=dt)
        elif a.name in ("value_string", "value_strings"):
            raise Unsupported(f"{where}: constants of dtype STRING are not supported", "dtype",
                              "STRING")
        else:
            raise self.err(node, f"{a.name} (a sparse constant) is not supported")
        self.add_const(node.output[0], v)

    def shape_of(self, node: onnx.NodeProto) -> None:
        """Shape of an activation: known here (the model's fixed batch, else 1), so a
        constant."""
        x = node.input[0]
        full = (self.batch or 1,) + onnx_shape(self, x)
        if x in self.swapped:
            full = tuple(full[p] for p in self.swapped[x][0])
        a = attrs(node)
        start, end = a.get("start", 0), a.get("end", None)
        self.add_const(node.output[0], np.array(full[start:end], dtype=np.int64))


def import_model(model: onnx.ModelProto, name: str = "model",
                 base_dir: str | bytes | None = None) -> Graph:
    """Import an in-memory ModelProto (used by load_onnx and the conformance backend).
    `base_dir`: the model's folder, where external tensor data is looked for (none: refused).
    Every failure is a GraphError."""
    if not isinstance(model, onnx.ModelProto):
        raise GraphError(f"expected an onnx.ModelProto, got {type(model).__name__}")
    im = _Importer(model, name if isinstance(name, str) else show(name), base_dir)
    try:
        with np.errstate(all="ignore"):  # overflow to Inf/NaN is refused by name, not warned
            return im.run()
    except GraphError:
        raise
    except (RecursionError, MemoryError) as e:
        raise GraphError(f"{im.label(im.node)}: the model is too large or too deeply nested to "
                         f"import ({type(e).__name__})") from None
    except Exception as e:  # a check missing above: still one line naming where
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise GraphError(f"malformed ONNX model at {im.label(im.node)}: "
                         f"{type(e).__name__} {show(msg, 200)}") from None
