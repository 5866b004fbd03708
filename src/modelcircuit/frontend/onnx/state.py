"""The state of one ONNX import, shared by the walk (importer.py) and the handler modules."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from ...graphs import limits
from ...graphs.ir import GraphError, Node
from ...graphs.types import NumType
from .io import CHANNELS_LAST, Unsupported, node_name, q, show

SUPPORTED_OPS = (
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Selu", "Sigmoid",
    "Tanh", "Softmax", "BatchNormalization", "Flatten", "Reshape", "Transpose", "Squeeze",
    "Unsqueeze", "Identity", "Dropout", "Quant", "BipolarQuant", "QuantizeLinear",
    "DequantizeLinear", "Shape", "Gather", "Split", "Concat", "Constant", "Cast", "Conv",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize", "LSTM", "GRU",
    f"{CHANNELS_LAST}.Conv", f"{CHANNELS_LAST}.MaxPool",
    "Clip", "HardSigmoid", "HardSwish", "Pad", "ReduceMean", "ReduceMax", "Trunc",
    "Gelu", "Slice",
)
# taken in part (frontend/onnx/attention.py), so not in the ONNX node-test conformance run
# (every LayerNormalization node test asks for the Mean/InvStdDev training outputs)
PARTLY_SUPPORTED_OPS = (
    "LayerNormalization (last axis, no training outputs)", "Erf/Tanh in a Gelu sub-graph",
    "MatMul of two activations + Softmax in a self-attention pattern",
)

class ImportState:
    """What the import knows so far (constants, per-sample shapes, aliases, layouts) and the
    helpers every handler module uses to read it and to emit IR nodes. Public so that the
    handler modules (handlers, layout, channels, spatial, quant, fold, checks) name one type
    without importing the walk (importer.py), which imports them."""

    def __init__(self, model: onnx.ModelProto, name: str, base_dir: str | bytes | None = None
                 ) -> None:
        self.model = model
        self.g = model.graph
        self.name = name
        self.base_dir = base_dir
        self.opset = 13
        self.consts: dict[str, np.ndarray] = {}
        self.const_types: dict[str, NumType] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}  # per-sample shapes of activations
        self.types: dict[str, NumType] = {}
        self.nodes: list[Node] = []
        self.alias: dict[str, str] = {}
        self.counter = 0
        self.node: onnx.NodeProto | None = None  # the ONNX node being imported
        self.node_names: set[str] = set()
        self.defined: dict[str, str] = {}  # every tensor name so far -> what defines it
        self.uncomputed: dict[str, str] = {}  # declared outputs the import does not compute
        self.const_elements = 0
        self.qdq: dict[str, tuple[Any, ...]] = {}  # QuantizeLinear output -> its parameters
        # the model's batch (dimension 0 of its inputs): an int when every input fixes the
        # same one, else None (symbolic); the IR is per sample either way
        self.batch: int | None = None
        # an activation in a batch-moving layout: ONNX name -> (perm from the per-sample
        # layout (batch first) to its own, the Transpose that made it); see onnx_layout
        self.swapped: dict[str, tuple[tuple[int, ...], str]] = {}
        # the output of an IR Reshape emitted here -> the tensor it reshapes (values in order)
        self.reshaped: dict[str, str] = {}
        self.weight_scales: set[float] = set()  # non-power-of-two scales of weight quantizers
        self.masks: set[str] = set()  # constant attention masks (-inf entries allowed)
        # a Pad folded into its one reader (a Conv/AveragePool): its output -> (its input,
        # the spatial pads to add, begins then ends); see spatial.pad_folds
        self.pad_fold: dict[str, tuple[str, list[int]]] = {}
        # ONNX names of channels-first frames whose IR tensor is their channels-last storage,
        # and permuted vectors (IR element j = ONNX element perm[j]); see onnx_spatial
        self.cf: set[str] = set()
        self.flat_perm: dict[str, np.ndarray] = {}
        self.materialized: dict[str, str] = {}
        # a channels-first ONNX tensor -> its channels-last IR copy, made once for every
        # spatial reader (one host reorder of an NCHW input, not one Transpose per reader)
        self.channels_last: dict[str, str] = {}
        self.pending_cf: set[str] = set()  # channels-first inputs moved at their first reader

    # -- helpers ---------------------------------------------------------------
    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}__{self.counter}"

    def src(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def is_const(self, name: str) -> bool:
        return self.src(name) in self.consts

    def const(self, name: str) -> np.ndarray:
        try:
            return self.consts[self.src(name)]
        except KeyError:
            raise self.err(self.node, f"input {q(name)} must be a constant") from None

    def full_shape(self, name: str) -> tuple[int, ...]:
        """ONNX shape (batch included, as 1) of a constant or an activation."""
        return tuple(self.const(name).shape) if self.is_const(name) else \
            (1,) + self.shapes[self.src(name)]

    def count(self, n: int, where: str) -> None:
        """Account n more constant elements against MAX_TOTAL_CONSTANT_ELEMENTS."""
        self.const_elements += int(n)
        if self.const_elements > limits.MAX_TOTAL_CONSTANT_ELEMENTS:
            raise GraphError(f"{where}: the model's constants reach {self.const_elements:,} "
                             "elements, over the limit MAX_TOTAL_CONSTANT_ELEMENTS = "
                             f"{limits.MAX_TOTAL_CONSTANT_ELEMENTS}")

    def add_const(self, name: str, value: np.ndarray, t: NumType | None = None) -> str:
        value = np.asarray(value)
        where = f"constant {q(name)}"
        if self.node is not None:
            where = f"{self.label(self.node)}: {where}"
        if value.size > limits.MAX_TENSOR_ELEMENTS:
            raise GraphError(f"{where} has {value.size:,} elements, over the limit "
                             f"MAX_TENSOR_ELEMENTS = {limits.MAX_TENSOR_ELEMENTS}")
        self.count(value.size, where)
        self.consts[name] = value
        if t is not None:
            self.const_types[name] = t
        return name

    def check_shape(self, node: onnx.NodeProto | None, name: str, shape: tuple[int, ...],
                    what: str = "output") -> None:
        """A per-sample activation shape: every dimension >= 1, within the limits."""
        def fail(msg: str) -> GraphError:
            return self.err(node, msg) if node is not None else GraphError(msg)
        if len(shape) + 1 > limits.MAX_RANK:
            raise fail(f"{what} {q(name)} would have rank {len(shape) + 1}, over the limit "
                       f"MAX_RANK = {limits.MAX_RANK}")
        if any(d < 1 for d in shape):
            raise fail(f"{what} {q(name)} would have the per-sample shape {list(shape)}; "
                       "every dimension must be at least 1 (zero-sized or negative "
                       "dimensions, e.g. a zero-width layer, are not supported)")
        n = math.prod(shape)
        if n > limits.MAX_TENSOR_ELEMENTS:
            raise fail(f"{what} {q(name)} would have {n:,} elements per sample "
                       f"{list(shape)}, over the limit MAX_TENSOR_ELEMENTS = "
                       f"{limits.MAX_TENSOR_ELEMENTS}")

    def emit(self, onnx_node: onnx.NodeProto, op: str, inputs: list[str], out: str,
             out_shape: tuple[int, ...], **attrs: Any) -> None:
        shape = tuple(int(s) for s in out_shape)
        self.check_shape(onnx_node, out, shape)
        base = onnx_node.name or f"{op.lower()}_{len(self.nodes)}"
        nm = base if base not in self.node_names else self.fresh(base)
        self.node_names.add(nm)
        self.nodes.append(Node.make(nm, op, [self.src(i) for i in inputs], [out], **attrs))
        self.shapes[out] = shape

    def label(self, node: onnx.NodeProto | None) -> str:
        if node is None:
            return "graph"
        return f"node {node_name(node)} ({show(node.op_type)})"

    def err(self, node: onnx.NodeProto | None, msg: str) -> GraphError:
        return GraphError(f"{self.label(node)}: {msg}")

    def unsupported(self, node: onnx.NodeProto, attr: str, msg: str) -> Unsupported:
        """An attribute value the golden model does not support; msg must name `attr`."""
        return Unsupported(f"{self.label(node)}: {msg}", "attribute", attr)

    def unsupported_op(self, node: onnx.NodeProto, extra: str = "") -> GraphError:
        op = show(node.op_type)
        if node.domain not in ("", "ai.onnx"):
            op = f"{show(node.domain)}.{op}"
        return self.err(node, f"unsupported op {op}{extra}; supported: "
                        + ", ".join(SUPPORTED_OPS + PARTLY_SUPPORTED_OPS))

    def flag(self, node: onnx.NodeProto, a: dict[str, Any], name: str, default: int) -> bool:
        """An INT attribute that means a boolean: 0 or 1, nothing else."""
        v = a.get(name, default)
        if v not in (0, 1):
            raise self.err(node, f"attribute {name} must be 0 or 1, got {v}")
        return bool(v)

    def batch_text(self) -> str:
        """The model's batch, for messages."""
        return f"fixed at {self.batch}" if self.batch is not None else "symbolic"
