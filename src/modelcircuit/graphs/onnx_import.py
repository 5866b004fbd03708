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
"""

from __future__ import annotations

import math
import os
import stat
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import limits
from .ir import Graph, GraphError, Node, Tensor, prune, toposort
from .onnx_ops import HANDLERS
from .types import FixedType, NumType, Rounding

SUPPORTED_OPS = (
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Selu", "Sigmoid",
    "Tanh", "Softmax", "BatchNormalization", "Flatten", "Reshape", "Transpose", "Squeeze",
    "Unsqueeze", "Identity", "Dropout", "Quant", "BipolarQuant", "QuantizeLinear",
    "DequantizeLinear", "Shape", "Gather", "Concat", "Constant", "Cast",
)
_QUANT_DOMAINS = ("qonnx", "finn", "brevitas")

# Ops evaluated at import time when all their inputs are constants (shape arithmetic, weight
# transforms). Each one's cost is bounded by the sizes of its inputs and outputs, which are
# checked before it runs (MatMul/Gemm: by their multiply-adds); control flow, random ops and
# anything else are refused.
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

MIN_OPSET = 7  # older opsets change Add/Mul/Gemm broadcasting and Dropout/BatchNorm attributes

# constant dtypes the importer reads, and the TensorProto field that holds their values
_DATA_FIELD = {
    TensorProto.FLOAT: "float_data", TensorProto.DOUBLE: "double_data",
    TensorProto.FLOAT16: "int32_data", TensorProto.BOOL: "int32_data",
    TensorProto.INT8: "int32_data", TensorProto.INT16: "int32_data",
    TensorProto.INT32: "int32_data", TensorProto.UINT8: "int32_data",
    TensorProto.UINT16: "int32_data", TensorProto.INT64: "int64_data",
    TensorProto.UINT32: "uint64_data", TensorProto.UINT64: "uint64_data",
}

# QONNX rounding modes (qonnx.custom_op.general.intquant.resolve_rounding_mode), for weights
_QONNX_ROUNDING = {
    "ROUND": np.round, "HALF_EVEN": np.round, "CEIL": np.ceil, "FLOOR": np.floor,
    "UP": lambda x: np.sign(x) * np.ceil(np.abs(x)), "DOWN": np.fix, "ROUND_TO_ZERO": np.fix,
    "HALF_UP": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
    "HALF_DOWN": lambda x: np.sign(x) * np.ceil(np.abs(x) - 0.5),
}
# ... and the ones a fixed-point type can carry (activations)
_ROUNDING_TYPES = {"ROUND": Rounding.RND_CONV, "HALF_EVEN": Rounding.RND_CONV,
                   "FLOOR": Rounding.TRN}

_A = onnx.AttributeProto
# QONNX ops have no onnx schema: (min inputs, max inputs, {attribute: type})
_QONNX_SCHEMAS = {"Quant": (4, 4, {"signed": _A.INT, "narrow": _A.INT, "rounding_mode": _A.STRING}),
                  "BipolarQuant": (2, 2, {})}


class Unsupported(GraphError):
    """A refusal because of a dtype or an attribute value the golden model does not support.

    `kind` is "dtype" or "attribute"; `what` names the dtype or the attribute, and the
    message says it (the conformance table counts only these refusals as excused)."""

    def __init__(self, message: str, kind: str, what: str) -> None:
        super().__init__(message)
        self.kind, self.what = kind, what


# -- printing names from an untrusted file --------------------------------------------------


def show(s: Any, limit: int = 80) -> str:
    """A name from the model as it can be printed on one line: as it is when plain, else its
    repr (escapes); very long names are cut."""
    if isinstance(s, bytes):
        s = s.decode("utf-8", "backslashreplace")
    s = str(s)
    if len(s) > limit:
        s = s[:limit - 3] + "..."
    return s if s and s.isprintable() else repr(s)


def q(s: Any) -> str:
    """A tensor name, quoted (as the messages have always quoted them)."""
    if isinstance(s, bytes):
        s = s.decode("utf-8", "backslashreplace")
    s = str(s)
    return repr(s if len(s) <= 80 else s[:77] + "...")


def show_path(p: str | bytes) -> str:
    """A path as it can be printed: undecodable bytes as \\xNN, control characters escaped."""
    t = os.fsencode(p).decode("utf-8", "backslashreplace")
    t = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in t)
    return t if len(t) <= 240 else "..." + t[-237:]


def _dtype_name(dt: int) -> str:
    try:
        return TensorProto.DataType.Name(dt)
    except ValueError:
        return f"unknown dtype {dt}"


def _attr_type_name(t: int) -> str:
    try:
        return _A.AttributeType.Name(t)
    except ValueError:
        return f"unknown type {t}"


# -- reading files --------------------------------------------------------------------------

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((k for f, k in _KINDS if f(mode)), "not a regular file")


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n:,} bytes"


def read_regular_file(path: str | bytes, what: str, offset: int = 0,
                      length: int | None = None) -> bytes:
    """The bytes of a regular file (all of it, at most limits.MAX_MODEL_BYTES, or `length`
    bytes at `offset`). FIFOs, devices, sockets and directories are refused before they are
    opened (opening a FIFO would wait for a writer; /dev/zero never ends)."""
    shown = show_path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise GraphError(f"{what} not found: {shown}") from None
    except (OSError, ValueError) as e:
        raise GraphError(f"cannot read {what} {shown}: "
                         f"{getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode) and what == "model file":
        raise GraphError(f"model path is a directory, not an ONNX file: {shown}")
    if not stat.S_ISREG(st.st_mode):
        raise GraphError(f"{what} {shown} is {_kind(st.st_mode)}, not a regular file")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise GraphError(f"cannot read {what} {shown}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between stat and open
            raise GraphError(f"{what} {shown} is {_kind(st.st_mode)}, not a regular file")
        if length is None:
            if st.st_size == 0:
                raise GraphError(f"{what} {shown} is empty (0 bytes), not an ONNX model")
            if st.st_size > limits.MAX_MODEL_BYTES:
                raise GraphError(f"{what} {shown} is {_gib(st.st_size)}, over the limit "
                                 f"MAX_MODEL_BYTES = {limits.MAX_MODEL_BYTES} bytes "
                                 f"({_gib(limits.MAX_MODEL_BYTES)}, protobuf's own limit)")
            length = st.st_size
        elif offset + length > st.st_size:
            raise GraphError(f"{what} {shown} holds {st.st_size} bytes; {length} bytes at "
                             f"offset {offset} are past its end")
        buf = bytearray(length)
        view = memoryview(buf)
        got = 0
        while got < length:
            n = os.preadv(fd, [view[got:got + (1 << 24)]], offset + got)
            if n <= 0:
                raise GraphError(f"{what} {shown} ended after {got} of {length} bytes "
                                 "(it changed while being read)")
            got += n
        return bytes(buf)
    except OSError as e:
        raise GraphError(f"cannot read {what} {shown}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _graph_name(p: str | bytes) -> str:
    name = os.path.splitext(os.path.basename(os.fsdecode(p)))[0]
    if not (name.isprintable() and name.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            == name):
        name = "".join(c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else "_"
                       for c in name)
    return name or "model"


def load_onnx(path: str | os.PathLike[str]) -> Graph:
    """Read an ONNX file and import it; every failure is a one-line GraphError."""
    p = os.fspath(path)
    shown = show_path(p)
    data = read_regular_file(p, "model file")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # protobuf DecodeError, truncated files, nesting too deep
        raise GraphError(f"{shown} is not a readable ONNX model (truncated or not ONNX): "
                         f"{type(e).__name__}") from None
    del data
    if not model.HasField("graph") or not model.graph.node:
        raise GraphError(f"{shown} is not an ONNX model with a graph (no nodes found)")
    base = os.path.dirname(os.path.abspath(p))
    return import_model(model, name=_graph_name(p), base_dir=base)


class _Importer:
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
            where = f"node {show(self.node.name or '?')} ({show(self.node.op_type)}): " + where
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
        return f"node {show(node.name or '?')} ({show(node.op_type)})"

    def err(self, node: onnx.NodeProto | None, msg: str) -> GraphError:
        return GraphError(f"{self.label(node)}: {msg}")

    def unsupported(self, node: onnx.NodeProto, attr: str, msg: str) -> Unsupported:
        """An attribute value the golden model does not support; msg must name `attr`."""
        return Unsupported(f"{self.label(node)}: {msg}", "attribute", attr)

    def unsupported_op(self, node: onnx.NodeProto, extra: str = "") -> GraphError:
        op = show(node.op_type)
        if node.domain not in ("", "ai.onnx"):
            op = f"{show(node.domain)}.{op}"
        return self.err(node, f"unsupported op {op}{extra}; supported: " + ", ".join(SUPPORTED_OPS))

    def flag(self, node: onnx.NodeProto, a: dict[str, Any], name: str, default: int) -> bool:
        """An INT attribute that means a boolean: 0 or 1, nothing else."""
        v = a.get(name, default)
        if v not in (0, 1):
            raise self.err(node, f"attribute {name} must be 0 or 1, got {v}")
        return bool(v)

    # -- the model and its tensors ---------------------------------------------
    def check_model(self) -> None:
        m = self.model
        if not m.HasField("graph"):
            raise GraphError("the model has no graph (not an ONNX model?)")
        if m.ir_version < 1:
            raise GraphError("the model has no IR version (ir_version is missing: not an ONNX "
                             "model?)")
        if m.ir_version > onnx.IR_VERSION:
            raise GraphError(f"the model's IR version {m.ir_version} is newer than the newest "
                             f"onnx {onnx.__version__} understands ({onnx.IR_VERSION})")
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
        self.opset = v
        g = self.g
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
        self.check_strings()

    def check_strings(self) -> None:
        """protobuf hands out bytes for a string field that is not valid UTF-8."""
        def check(s: Any, where: str) -> None:
            if not isinstance(s, str):
                raise GraphError(f"{where} is not valid UTF-8: {show(s)}")
        for what, vis in (("graph input", self.g.input), ("graph output", self.g.output),
                          ("initializer", self.g.initializer)):
            for vi in vis:
                check(vi.name, f"the name of a {what}")
        for k, n in enumerate(self.g.node):
            where = f"node #{k}"
            check(n.name, f"the name of {where}")
            check(n.op_type, f"the op_type of {where}")
            check(n.domain, f"the domain of {where}")
            for i in n.input:
                check(i, f"an input name of {where}")
            for o in n.output:
                check(o, f"an output name of {where}")
            for a in n.attribute:
                check(a.name, f"an attribute name of {where}")
            if not n.op_type:
                raise GraphError(f"{where} ({show(n.name or '?')}) has no op_type")

    def declared_elements(self, t: onnx.TensorProto, where: str) -> int:
        dims = list(t.dims)
        if len(dims) > limits.MAX_RANK:
            raise GraphError(f"{where} has rank {len(dims)}, over the limit MAX_RANK = "
                             f"{limits.MAX_RANK}")
        if any(d < 0 for d in dims):
            raise GraphError(f"{where} has a negative dimension: dims {dims}")
        n = math.prod(dims)
        if n > limits.MAX_TENSOR_ELEMENTS:
            raise GraphError(f"{where} declares dims {dims} = {n:,} elements, over the limit "
                             f"MAX_TENSOR_ELEMENTS = {limits.MAX_TENSOR_ELEMENTS}")
        return n

    def tensor_value(self, t: onnx.TensorProto, where: str) -> np.ndarray:
        """A TensorProto as an array, after checking its dtype, dims and data length."""
        dt = t.data_type
        if dt not in _DATA_FIELD:
            name = _dtype_name(dt)
            raise Unsupported(f"{where} has dtype {name}; supported constant dtypes: "
                              + ", ".join(_dtype_name(d) for d in _DATA_FIELD), "dtype", name)
        n = self.declared_elements(t, where)
        itemsize = helper.tensor_dtype_to_np_dtype(dt).itemsize
        if t.HasField("segment"):
            raise GraphError(f"{where} is a segment of a tensor; segmented tensors are not "
                             "supported")
        if t.data_location not in (TensorProto.DEFAULT, TensorProto.EXTERNAL):
            raise GraphError(f"{where} has an unknown data_location {t.data_location}")
        if t.data_location == TensorProto.EXTERNAL:
            raw = self.external_data(t, n * itemsize, where)
            t2 = TensorProto()
            t2.data_type = dt
            t2.dims.extend(t.dims)
            t2.raw_data = raw
            t = t2
        elif t.HasField("raw_data"):
            have = len(t.raw_data)
            if have != n * itemsize:
                raise GraphError(f"{where} has {have} bytes of raw_data, but its dims "
                                 f"{list(t.dims)} of {_dtype_name(dt)} need {n * itemsize}")
        else:
            have = len(getattr(t, _DATA_FIELD[dt]))
            if have != n:
                raise GraphError(f"{where} holds {have} values, but its dims {list(t.dims)} "
                                 f"need {n}")
        try:
            return numpy_helper.to_array(t)
        except Exception as e:
            raise GraphError(f"{where} cannot be read: {str(e).splitlines()[0] if str(e) else ''}"
                             ) from None

    def external_data(self, t: onnx.TensorProto, nbytes: int, where: str) -> bytes:
        """Data in a file beside the model: a relative path inside the model's folder, a
        regular file, exactly the bytes the dims need."""
        if self.base_dir is None:
            raise GraphError(f"{where} keeps its data in an external file; load the model "
                             "from its file (load_onnx) so that the file can be found")
        kv: dict[str, str] = {}
        for e in t.external_data:
            if not isinstance(e.key, str) or not isinstance(e.value, str):
                raise GraphError(f"{where}: an external_data entry is not valid UTF-8")
            if e.key in kv:
                raise GraphError(f"{where}: external_data lists {q(e.key)} twice")
            kv[e.key] = e.value
        loc = kv.get("location", "")
        if not loc:
            raise GraphError(f"{where} keeps its data in an external file but names none "
                             "(no 'location')")
        if "\x00" in loc or os.path.isabs(loc):
            raise GraphError(f"{where}: external data location {q(loc)} must be a path "
                             "relative to the model's folder")
        base = os.path.realpath(os.fsdecode(self.base_dir))
        full = os.path.realpath(os.path.join(base, loc))
        if os.path.commonpath([base, full]) != base:
            raise GraphError(f"{where}: external data location {q(loc)} points outside the "
                             f"model's folder {show_path(base)}")
        try:
            offset = int(kv.get("offset", "0"))
            length = int(kv["length"]) if "length" in kv else nbytes
        except ValueError:
            raise GraphError(f"{where}: external data offset/length are not integers: "
                             f"{q(kv.get('offset', ''))}, {q(kv.get('length', ''))}") from None
        if offset < 0 or length != nbytes:
            raise GraphError(f"{where}: external data of {length} bytes at offset {offset} "
                             f"does not fit its dims {list(t.dims)} ({nbytes} bytes)")
        return read_regular_file(full, f"external data file of {where}", offset, nbytes)

    def load_initializers(self) -> dict[str, onnx.TensorProto]:
        inits: dict[str, onnx.TensorProto] = {}
        for t in self.g.initializer:
            if not t.name:
                raise GraphError("an initializer has no name")
            if t.name in inits:
                raise GraphError(f"initializer {q(t.name)} is defined twice")
            inits[t.name] = t
        used = {i for n in self.g.node for i in n.input if i} | {o.name for o in self.g.output}
        total = sum(self.declared_elements(t, f"initializer {q(k)}")
                    for k, t in inits.items() if k in used)
        if total > limits.MAX_TOTAL_CONSTANT_ELEMENTS:
            raise GraphError(f"the initializers declare {total:,} elements, over the limit "
                             "MAX_TOTAL_CONSTANT_ELEMENTS = "
                             f"{limits.MAX_TOTAL_CONSTANT_ELEMENTS}")
        for k, t in inits.items():
            self.defined[k] = "an initializer"
            if k in used:
                where = f"initializer {q(k)}"
                arr = self.tensor_value(t, where)
                self.count(arr.size, where)
                self.consts[k] = arr
        return inits

    def check_input_initializer(self, vi: onnx.ValueInfoProto, t: onnx.TensorProto) -> None:
        """A graph input that is also an initializer (its default): they must agree."""
        if not vi.type.HasField("tensor_type"):
            return
        tt = vi.type.tensor_type
        if tt.elem_type not in (TensorProto.UNDEFINED, t.data_type):
            raise GraphError(f"input {q(vi.name)} is declared {_dtype_name(tt.elem_type)}, but "
                             f"its initializer is {_dtype_name(t.data_type)}")
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if len(dims) != len(t.dims) or any(
                    d is not None and d != e for d, e in zip(dims, t.dims, strict=False)):
                raise GraphError(f"input {q(vi.name)} is declared with shape "
                                 f"{['?' if d is None else d for d in dims]}, but its "
                                 f"initializer has a conflicting shape {list(t.dims)}")

    def load_inputs(self, inits: dict[str, onnx.TensorProto]) -> list[str]:
        inputs: list[str] = []
        seen: set[str] = set()
        for vi in self.g.input:
            if not vi.name:
                raise GraphError("a graph input has no name")
            if vi.name in seen:
                raise GraphError(f"graph input {q(vi.name)} is listed twice")
            seen.add(vi.name)
            if vi.name in inits:
                self.check_input_initializer(vi, inits[vi.name])
                continue
            where = f"input {q(vi.name)}"
            if not vi.type.HasField("tensor_type"):
                kind = vi.type.WhichOneof("value") or "no type"
                raise Unsupported(f"{where} has type {kind}; only float32 tensors are supported",
                                  "dtype", kind)
            tt = vi.type.tensor_type
            if tt.elem_type != TensorProto.FLOAT:
                name = _dtype_name(tt.elem_type)
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
            per = []
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
                per.append(d.dim_value)
            self.check_shape(None, vi.name, tuple(per), "input")
            self.shapes[vi.name] = tuple(per)
            self.defined[vi.name] = "a graph input"
            inputs.append(vi.name)
        if not inputs:
            raise GraphError("model has no non-constant input")
        return inputs

    def check_outputs(self) -> list[str]:
        outputs = []
        seen: set[str] = set()
        for vo in self.g.output:
            o = vo.name
            if not o:
                raise GraphError("a graph output has no name")
            if o in seen:
                raise GraphError(f"graph output {q(o)} is listed twice")
            seen.add(o)
            if o in self.uncomputed or o not in self.defined:
                raise GraphError(f"output {q(o)} is not computed by any supported node "
                                 "(e.g. a Dropout mask or BatchNormalization training outputs)"
                                 if o in self.uncomputed else
                                 f"output {q(o)} is not computed by any node (no node, input "
                                 "or initializer has this name)")
            s = self.src(o)
            if s in self.consts:
                raise GraphError(f"output {q(o)} is a constant; nothing to compute")
            if vo.type.HasField("tensor_type"):
                tt = vo.type.tensor_type
                if tt.elem_type not in (TensorProto.FLOAT, TensorProto.UNDEFINED):
                    name = _dtype_name(tt.elem_type)
                    raise Unsupported(f"output {q(o)} is declared {name}; the golden model "
                                      "computes float32 (FLOAT) outputs", "dtype", name)
                if tt.HasField("shape"):
                    self.check_output_shape(o, [d.dim_value if d.HasField("dim_value") else None
                                                for d in tt.shape.dim], self.shapes[s])
            elif vo.type.WhichOneof("value") is not None:
                kind = vo.type.WhichOneof("value")
                raise Unsupported(f"output {q(o)} has type {kind}; only float32 tensors are "
                                  "supported", "dtype", kind)
            outputs.append(s)
        return outputs

    def check_output_shape(self, o: str, dims: list[int | None], got: tuple[int, ...]) -> None:
        per = dims[1:]
        if len(dims) != len(got) + 1 or any(d is not None and d != e
                                            for d, e in zip(per, got, strict=True)):
            shown = ["N"] + list(got)
            raise GraphError(f"output {q(o)} is declared with shape "
                             f"{['?' if d is None else d for d in dims]}, but the graph "
                             f"computes {shown}")

    # -- the walk --------------------------------------------------------------
    def run(self) -> Graph:
        self.check_model()
        inits = self.load_initializers()
        inputs = self.load_inputs(inits)
        for node in self.g.node:
            self.visit(node)
        self.node = None
        outputs = self.check_outputs()
        for name, arr in self.consts.items():
            if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                used = any(name in n.inputs for n in self.nodes)
                if used:
                    raise GraphError(f"weight {name!r} contains NaN or Inf")
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
        return prune(g)

    def check_node(self, node: onnx.NodeProto, quant: bool) -> None:
        """Structure (one producer per tensor, inputs defined before use) and the op's
        schema (input/output counts, attribute names and types)."""
        if not node.output or not node.output[0]:
            raise self.err(node, "has no output")
        outs = [o for o in node.output if o]
        if len(set(outs)) != len(outs):
            raise self.err(node, f"lists an output twice: {[show(o) for o in node.output]}")
        for o in outs:
            if o in self.defined:
                raise self.err(node, f"output {q(o)} is already defined ({self.defined[o]}); "
                               "every tensor must have exactly one producer")
        for i in node.input:
            if not i:
                continue
            if i in self.uncomputed:
                raise self.err(node, f"input {q(i)} is {self.uncomputed[i]}")
            if i not in self.defined:
                raise self.err(node, f"input {q(i)} is not defined before this node (no graph "
                               "input, initializer or earlier node output has this name; ONNX "
                               "nodes must be in topological order, without cycles)")
        op = node.op_type
        if quant:
            lo, hi, types = _QONNX_SCHEMAS[op]
            req: dict[str, bool] = {k: False for k in types}
            options = None
            out_lo, out_hi = 1, 1
        else:
            try:
                s = onnx.defs.get_schema(op, self.opset, "")
            except Exception:
                raise self.unsupported_op(node) from None
            if s.deprecated:
                raise self.unsupported_op(node, f" (deprecated in opset {s.since_version})")
            lo, hi = s.min_input, s.max_input
            types = {k: int(a.type.value) for k, a in s.attributes.items()}
            req = {k: a.required for k, a in s.attributes.items()}
            options = [p.option for p in s.inputs]
            out_lo, out_hi = s.min_output, s.max_output
        n = len(node.input)
        if not lo <= n <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}" if hi < 2**30 else f"at least {lo}"
            raise self.err(node, f"has {n} inputs; {show(op)} takes {want}")
        single = onnx.defs.OpSchema.FormalParameterOption.Single
        for k, i in enumerate(node.input):
            required = quant or (options and options[min(k, len(options) - 1)] == single)
            if not i and required:
                raise self.err(node, f"required input #{k} is empty")
        if not out_lo <= len(node.output) <= out_hi:
            want = str(out_lo) if out_lo == out_hi else f"{out_lo} to {out_hi}"
            raise self.err(node, f"has {len(node.output)} outputs; {show(op)} has {want}")
        seen: set[str] = set()
        for a in node.attribute:
            if a.name in seen:
                raise self.err(node, f"attribute {show(a.name)} is given twice")
            seen.add(a.name)
            if a.ref_attr_name:
                raise self.err(node, f"attribute {show(a.name)} refers to a function attribute "
                               f"({show(a.ref_attr_name)}) outside a function")
            if a.name not in types:
                raise self.err(node, f"unknown attribute {show(a.name)}; {show(op)} takes: "
                               + (", ".join(sorted(types)) or "none"))
            if a.type != types[a.name]:
                raise self.err(node, f"attribute {show(a.name)} must be of type "
                               f"{_attr_type_name(types[a.name])}, got "
                               f"{_attr_type_name(a.type)}")
        missing = [k for k, r in req.items() if r and k not in seen]
        if missing:
            raise self.err(node, f"required attribute {missing[0]} is missing")

    def check_float_attrs(self, node: onnx.NodeProto) -> None:
        for a in node.attribute:
            vals = [a.f] if a.type == _A.FLOAT else list(a.floats) if a.type == _A.FLOATS else []
            if not all(math.isfinite(v) for v in vals):
                raise self.err(node, f"attribute {show(a.name)} is "
                               f"{vals[0] if len(vals) == 1 else vals}; it must be finite")

    def visit(self, node: onnx.NodeProto) -> None:
        self.node = node
        op = node.op_type
        quant = op in ("Quant", "BipolarQuant")
        if not quant and (node.domain not in ("", "ai.onnx")
                          or any(d in node.domain for d in _QUANT_DOMAINS)):
            raise self.unsupported_op(node)
        self.check_node(node, quant)
        ins = list(node.input)
        if quant:
            self.quant(node) if op == "Quant" else self.bipolar(node)
        elif op == "Constant":
            self.constant(node)
        elif op == "Shape" and not self.is_const(ins[0]):
            self.shape_of(node)
        elif ins and all((not i) or self.is_const(i) for i in ins) and op != "QuantizeLinear":
            self.fold(node)
        else:
            handler = HANDLERS.get(op)
            if handler is None:
                raise self.unsupported_op(node)
            self.check_float_attrs(node)
            for i in ins:
                v = self.consts.get(self.src(i)) if i else None
                if v is not None and v.dtype.kind == "f" and not np.all(np.isfinite(v)):
                    raise self.err(node, f"weight {q(self.src(i))} contains NaN or Inf")
            handler(self, node)
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
            v = self.tensor_value(a.t, where)
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
        """Shape of an activation: known here (batch 1), so a constant."""
        full = (1,) + self.shapes[self.src(node.input[0])]
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        start, end = a.get("start", 0), a.get("end", None)
        self.add_const(node.output[0], np.array(full[start:end], dtype=np.int64))

    # -- constant folding ------------------------------------------------------
    def fold_shapes(self, node: onnx.NodeProto, feeds: dict[str, np.ndarray]
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
        g = helper.make_graph([node], "fold", vis, outs, initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            r = onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=True,
                                                  data_prop=True)
        except Exception as e:
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise self.err(node, f"cannot fold constant subgraph: {msg}") from None
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
                raise self.err(node, f"cannot fold constant subgraph: the shape of output "
                               f"{q(o)} is not known before it is computed")
            shapes.append(tuple(d.dim_value for d in tt.shape.dim))
        return shapes

    def fold(self, node: onnx.NodeProto) -> None:
        from onnx.reference import ReferenceEvaluator

        op = node.op_type
        if op not in FOLDABLE_OPS:
            raise self.unsupported_op(node, " (on constants: not folded at compile time)")
        for a in node.attribute:
            ts = [a.t] if a.type == _A.TENSOR else list(a.tensors) if a.type == _A.TENSORS else []
            if any(t.data_location == TensorProto.EXTERNAL for t in ts):
                raise self.err(node, f"attribute {show(a.name)} keeps its data in an external "
                               "file, which is not supported for this op")
        feeds = {i: self.const(i) for i in node.input if i}
        for k, v in feeds.items():
            if v.dtype.kind not in "fiub":
                raise self.err(node, f"input {q(k)} is not numeric (dtype {v.dtype})")
        shapes = self.fold_shapes(node, feeds)
        for o, shp in zip(node.output, shapes, strict=True):
            if shp is not None and math.prod(shp) > limits.MAX_TENSOR_ELEMENTS:
                raise self.err(node, f"folding would make constant {q(o)} of shape {list(shp)} "
                               f"= {math.prod(shp):,} elements, over the limit "
                               f"MAX_TENSOR_ELEMENTS = {limits.MAX_TENSOR_ELEMENTS}")
        if op in ("MatMul", "Gemm") and shapes[0] is not None:
            a = feeds[node.input[0]]
            trans_a = any(x.name == "transA" and x.i for x in node.attribute)
            k = (a.shape[0] if trans_a else a.shape[-1]) if a.ndim else 1
            macs = math.prod(shapes[0]) * int(k)
            if macs > limits.MAX_FOLD_MACS:
                raise self.err(node, f"folding would take {macs:,} multiply-adds, over the "
                               f"limit MAX_FOLD_MACS = {limits.MAX_FOLD_MACS}")
        inputs = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                  for i, v in feeds.items()]
        outputs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                   for o in node.output]
        g = helper.make_graph([node], "fold", inputs, outputs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = ReferenceEvaluator(m).run(None, feeds)
        except Exception as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise self.err(node, f"cannot fold constant subgraph: {msg}") from None
        for o, v in zip(node.output, res, strict=False):
            if not o:
                continue
            v = np.asarray(v)
            if v.dtype.kind not in "fiub":
                raise self.err(node, f"folds to a non-numeric constant {q(o)} ({v.dtype})")
            self.add_const(o, v)
            t = self.const_types.get(self.src(node.input[0])) if node.input else None
            if t is not None and node.op_type in ("Transpose", "Reshape", "Identity", "Squeeze",
                                                  "Unsqueeze", "Flatten"):
                self.const_types[o] = t

    # -- quantizers ------------------------------------------------------------
    def _pow2_type(self, node: onnx.NodeProto, scale: np.ndarray, zp: np.ndarray, bits: float,
                   signed: bool, narrow: bool, rounding: str) -> FixedType | None:
        s = np.unique(np.asarray(scale, dtype=np.float64))
        if s.size != 1 or np.any(np.asarray(zp) != 0) or not np.isfinite(s[0]) or s[0] <= 0:
            return None
        m, e = math.frexp(float(s[0]))
        if m != 0.5 or bits != int(bits):
            return None
        frac = -(e - 1)
        r = _ROUNDING_TYPES.get(rounding.upper())
        if r is None:
            raise self.unsupported(node, "rounding_mode", f"rounding_mode {rounding!r} is not "
                                   "supported (ROUND and FLOOR are)")
        return FixedType(int(bits), int(bits) - frac, signed, r, narrow=narrow)

    def qparam(self, node: onnx.NodeProto, name: str, what: str) -> np.ndarray:
        """A quantizer parameter: a numeric constant, as float64."""
        if not self.is_const(name):
            raise self.err(node, f"{node.op_type} parameter {q(name)} ({what}) must be a "
                           "constant")
        v = self.const(name)
        if v.dtype.kind not in "fiub":
            raise self.err(node, f"{what} {q(name)} is not numeric (dtype {v.dtype})")
        return v.astype(np.float64)

    def check_scale(self, node: onnx.NodeProto, name: str, sc: np.ndarray) -> None:
        if sc.size == 0 or not np.all(np.isfinite(sc)) or np.any(sc <= 0):
            bad = sc.reshape(-1)[~(np.isfinite(sc.reshape(-1)) & (sc.reshape(-1) > 0))]
            raise self.err(node, f"scale {q(name)} must be positive and finite"
                           + (f", got {bad[0]}" if bad.size else " (it is empty)"))

    def check_broadcast(self, node: onnx.NodeProto, full: tuple[int, ...],
                        params: dict[str, np.ndarray]) -> None:
        """Quantizer parameters broadcast against the quantized tensor without changing its
        shape (ONNX batch-including shape)."""
        try:
            out = np.broadcast_shapes(full, *(v.shape for v in params.values()))
        except ValueError:
            out = None
        if out != tuple(full):
            shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in params.items())
            raise self.err(node, f"parameters ({shapes}) do not broadcast to the input's "
                           f"shape {list(full)}")

    def rounding_mode(self, node: onnx.NodeProto, a: dict[str, Any]) -> str:
        raw = a.get("rounding_mode", b"ROUND")
        try:
            rounding = raw.decode() if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError:
            raise self.unsupported(node, "rounding_mode", f"rounding_mode {show(raw)} is not "
                                   "valid UTF-8") from None
        if rounding.upper() not in _QONNX_ROUNDING:
            raise self.unsupported(node, "rounding_mode", f"rounding_mode {show(rounding)} is "
                                   "not supported; supported: " + ", ".join(_QONNX_ROUNDING))
        return rounding

    def full_shape(self, name: str) -> tuple[int, ...]:
        """ONNX shape (batch included, as 1) of a constant or an activation."""
        return tuple(self.const(name).shape) if self.is_const(name) else \
            (1,) + self.shapes[self.src(name)]

    def quant(self, node: onnx.NodeProto) -> None:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        signed = self.flag(node, a, "signed", 1)
        narrow = self.flag(node, a, "narrow", 0)
        rounding = self.rounding_mode(node, a)
        x, scale, zp, bw = node.input[:4]
        sc, z, b = (self.qparam(node, scale, "scale"), self.qparam(node, zp, "zero point"),
                    self.qparam(node, bw, "bitwidth"))
        if b.size != 1:
            raise self.err(node, f"bitwidth {q(bw)} must be a scalar, got shape {list(b.shape)}")
        bits = float(b.reshape(-1)[0])
        if not math.isfinite(bits) or bits != int(bits) or not 1 <= bits <= 64:
            raise self.err(node, f"bitwidth {q(bw)} is {bits:g}; it must be an integer from 1 "
                           "to 64")
        if signed and narrow and bits < 2:
            raise self.err(node, "a narrow signed Quant needs a bitwidth of at least 2")
        self.check_scale(node, scale, sc)
        qmin = (-(2 ** (bits - 1)) + (1 if narrow else 0)) if signed else 0
        qmax = (2 ** (bits - 1) - 1) if signed else 2 ** bits - 1 - (1 if narrow else 0)
        if not np.all(np.isfinite(z)) or np.any(z != np.round(z)) or np.any(z < qmin) \
                or np.any(z > qmax):
            raise self.err(node, f"zero point {q(zp)} must hold integers within "
                           f"[{qmin:g}, {qmax:g}], got {z.reshape(-1)[:4].tolist()}")
        self.check_broadcast(node, self.full_shape(x), {"scale": sc, "zero point": z})
        t = self._pow2_type(node, sc, z, bits, signed, narrow, rounding)
        if self.is_const(x):
            w = self.const(x).astype(np.float64)
            if not np.all(np.isfinite(w)):
                raise GraphError(f"weight {self.src(x)!r} contains NaN or Inf")
            with np.errstate(all="ignore"):  # huge weights saturate; no warning lines
                y = w / sc + z
                r = _QONNX_ROUNDING[rounding.upper()](y)
                vals = sc * (np.clip(r, qmin, qmax) - z)
            self.add_const(node.output[0], vals, t)
            return
        if t is None:
            raise self.err(node, "Quant on activations needs one power-of-two scale and zero "
                           "point 0 (per-channel or non power-of-two scales are not supported)")
        shp = self.shapes[self.src(x)]
        self.emit(node, "Requant", [x], node.output[0], shp, quant_type=str(t))
        self.types[node.output[0]] = t

    def bipolar(self, node: onnx.NodeProto) -> None:
        x, scale = node.input[:2]
        scv = self.qparam(node, scale, "scale")
        self.check_scale(node, scale, scv)
        self.check_broadcast(node, self.full_shape(x), {"scale": scv})
        uniform = np.unique(scv)
        sc = float(uniform[0])
        m, e = math.frexp(sc)
        t = FixedType(2, 2 - (1 - e), True, narrow=True) if m == 0.5 and uniform.size == 1 \
            else None
        if self.is_const(x):
            w = self.const(x)
            if w.dtype.kind == "f" and not np.all(np.isfinite(w)):
                raise GraphError(f"weight {self.src(x)!r} contains NaN or Inf")
            s = sc if scv.size == 1 else scv
            self.add_const(node.output[0], np.where(w >= 0, s, -s), t)
            return
        if t is None:
            raise self.err(node, "BipolarQuant on activations needs one power-of-two scale")
        shp = self.shapes[self.src(x)]
        self.emit(node, "Bipolar", [x], node.output[0], shp, scale=sc)
        self.types[node.output[0]] = t


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
