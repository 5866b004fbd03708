"""Constant folding at import time: a node whose inputs are all constants is evaluated with
onnx's reference evaluator, and its outputs become constants.

Only the ops in FOLDABLE_OPS are folded (shape arithmetic, weight transforms): each one's
cost is bounded by the sizes of its inputs and outputs, which are checked before it runs
(the outputs' shapes by onnx shape inference; MatMul/Gemm also by their multiply-adds).
Control flow, random ops and anything else are refused.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...graphs import limits
from .io import q, show

if TYPE_CHECKING:
    from .state import ImportState

FOLDABLE_OPS = (
    "Abs", "Add", "And", "ArgMax", "ArgMin", "BatchNormalization", "Cast", "CastLike", "Ceil",
    "Clip", "Concat", "ConstantOfShape", "Cos", "CumSum", "DequantizeLinear", "Div", "Dropout",
    "Equal", "Erf", "Exp", "Expand", "Flatten", "Floor", "Gather", "GatherElements", "GatherND",
    "Gemm", "Greater", "GreaterOrEqual", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less",
    "LessOrEqual", "Log", "MatMul", "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Not", "Or",
    "Pad", "Pow", "Range", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
    "ReduceSum", "Relu", "Reshape", "Round", "Selu", "Shape", "Sigmoid", "Sign", "Sin", "Size",
    "Slice", "Softmax", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Tile", "Transpose",
    "Trilu", "Unsqueeze", "Where", "Xor",
)

# ops that keep their input's fixed-point type when they fold (they only move values)
_TYPE_KEEPING = ("Transpose", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten")


def fold(im: ImportState, node: onnx.NodeProto) -> None:
    """Evaluate `node` (all its inputs are constants) and store its outputs as constants."""
    _check_foldable(im, node)
    feeds = {i: im.const(i) for i in node.input if i}
    for k, v in feeds.items():
        if v.dtype.kind not in "fiub":
            raise im.err(node, f"input {q(k)} is not numeric (dtype {v.dtype})")
    shapes = fold_shapes(im, node, feeds)
    _check_cost(im, node, feeds, shapes)
    _store(im, node, _evaluate(im, node, feeds))


def _check_foldable(im: ImportState, node: onnx.NodeProto) -> None:
    if node.op_type not in FOLDABLE_OPS:
        raise im.unsupported_op(node, " (on constants: not folded at compile time)")
    A = onnx.AttributeProto
    for a in node.attribute:
        ts = [a.t] if a.type == A.TENSOR else list(a.tensors) if a.type == A.TENSORS else []
        if any(t.data_location == TensorProto.EXTERNAL for t in ts):
            raise im.err(node, f"attribute {show(a.name)} keeps its data in an external "
                         "file, which is not supported for this op")


def _one_node_model(im: ImportState, node: onnx.NodeProto, inputs: list[Any],
                    outputs: list[Any], inits: list[Any] | None = None) -> onnx.ModelProto:
    g = helper.make_graph([node], "fold", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", im.opset)])


def fold_shapes(im: ImportState, node: onnx.NodeProto, feeds: dict[str, np.ndarray]
                ) -> list[tuple[int, ...] | None]:
    """The outputs' shapes by onnx shape inference, before anything is computed (small
    inputs are given as values, so that shape-computing ops resolve)."""
    inits, vis = [], []
    for k, v in feeds.items():
        if v.size <= 64:
            inits.append(numpy_helper.from_array(v, k))
        else:
            vis.append(helper.make_tensor_value_info(
                k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
            for o in node.output if o]
    m = _one_node_model(im, node, vis, outs, inits)
    try:
        r = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=True,
                                              data_prop=True)
    except Exception as e:
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise im.err(node, f"cannot fold constant subgraph: {msg}") from None
    found = {vi.name: vi for vi in list(r.graph.output) + list(r.graph.value_info)}
    shapes: list[tuple[int, ...] | None] = []
    for o in node.output:
        if not o:
            shapes.append(None)
            continue
        vi = found.get(o)
        tt = vi.type.tensor_type if vi is not None and vi.type.HasField("tensor_type") else None
        if tt is None or not tt.HasField("shape") or not all(
                d.HasField("dim_value") and d.dim_value >= 0 for d in tt.shape.dim):
            raise im.err(node, f"cannot fold constant subgraph: the shape of output "
                         f"{q(o)} is not known before it is computed")
        shapes.append(tuple(d.dim_value for d in tt.shape.dim))
    return shapes


def _check_cost(im: ImportState, node: onnx.NodeProto, feeds: dict[str, np.ndarray],
                shapes: list[tuple[int, ...] | None]) -> None:
    """Outputs within MAX_TENSOR_ELEMENTS; MatMul/Gemm within MAX_FOLD_MACS."""
    for o, shp in zip(node.output, shapes, strict=True):
        if shp is not None and math.prod(shp) > limits.MAX_TENSOR_ELEMENTS:
            raise im.err(node, f"folding would make constant {q(o)} of shape {list(shp)} "
                         f"= {math.prod(shp):,} elements, over the limit "
                         f"MAX_TENSOR_ELEMENTS = {limits.MAX_TENSOR_ELEMENTS}")
    if node.op_type in ("MatMul", "Gemm") and shapes[0] is not None:
        a = feeds[node.input[0]]
        trans_a = any(x.name == "transA" and x.i for x in node.attribute)
        k = (a.shape[0] if trans_a else a.shape[-1]) if a.ndim else 1
        macs = math.prod(shapes[0]) * int(k)
        if macs > limits.MAX_FOLD_MACS:
            raise im.err(node, f"folding would take {macs:,} multiply-adds, over the "
                         f"limit MAX_FOLD_MACS = {limits.MAX_FOLD_MACS}")


def _evaluate(im: ImportState, node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> list[Any]:
    from onnx.reference import ReferenceEvaluator

    inputs = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for i, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
               for o in node.output]
    m = _one_node_model(im, node, inputs, outputs)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return list(ReferenceEvaluator(m).run(None, feeds))
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise im.err(node, f"cannot fold constant subgraph: {msg}") from None


def _store(im: ImportState, node: onnx.NodeProto, res: list[Any]) -> None:
    """The folded values as constants (numeric only), keeping a fixed-point type through
    ops that only move values."""
    for o, v in zip(node.output, res, strict=False):
        if not o:
            continue
        v = np.asarray(v)
        if v.dtype.kind not in "fiub":
            raise im.err(node, f"folds to a non-numeric constant {q(o)} ({v.dtype})")
        im.add_const(o, v)
        t = im.const_types.get(im.src(node.input[0])) if node.input else None
        if t is not None and node.op_type in _TYPE_KEEPING:
            im.const_types[o] = t
