"""Hostile and malformed models: every one is refused cleanly by the real command line.

Each case builds a model (with onnx.helper, or as raw bytes, or a special file) in tmp_path,
runs `modelcircuit compile MODEL --out OUT` (a few: `inspect MODEL`) in-process, and asserts
exit 2, exactly one `error:` line that names what is wrong (`match`), no traceback, a line
that prints (no surrogates, no control characters), and tmp_path unchanged byte for byte
(so no artifact and no temp folder was left). Limits are lowered with monkeypatch where a
real model over them would be slow to build.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelcircuit.graphs import limits
from tests.hostile import assert_refused, run_cli, snapshot

F = TensorProto.FLOAT
QD = "qonnx.custom_op.general"


# -- building models ------------------------------------------------------------------------


def vi(name: str, shape: list | None, dt: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dt, shape)


def init(name: str, value: object, dtype: object = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def model(nodes: list, inputs: list | None = None, outputs: list | None = None,
          inits: list | None = None, opset: int | None = 17, extra: tuple = ()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [vi("x", ["N", 4])] if inputs is None else inputs,
                          [vi("y", ["N", 3])] if outputs is None else outputs, inits or [])
    ops = ([helper.make_opsetid("", opset)] if opset is not None else []) + [
        helper.make_opsetid(d, 1) for d in extra]
    m = helper.make_model(g, opset_imports=ops)
    if opset is None:
        del m.opset_import[:]
    return m


def gemm(w: object = None, b: object = None, **attrs: object) -> onnx.ModelProto:
    """x[N,4] -> Gemm(w, b) -> y[N,3], the base most cases bend."""
    w = np.ones((4, 3), np.float32) if w is None else w
    b = np.zeros(3, np.float32) if b is None else b
    return model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", **attrs)],
                 inits=[init("w", w), init("b", b)])


def unary(op: str, x_shape: list, y_shape: list | None = None, inits: list | None = None,
          inputs: tuple = ("x",), opset: int = 17, **attrs: object) -> onnx.ModelProto:
    return model([helper.make_node(op, list(inputs), ["y"], name="n0", **attrs)],
                 [vi("x", x_shape)], [vi("y", y_shape)], inits, opset)


def quant(scale: object = 0.125, zp: object = 0.0, bits: object = 8.0, on: str = "act",
          **attrs: object) -> onnx.ModelProto:
    """QONNX Quant on the activation (x -> y) or on the weight of a MatMul."""
    ps = [init("s", scale), init("z", zp), init("b", bits)]
    if on == "act":
        return model([helper.make_node("Quant", ["x", "s", "z", "b"], ["y"], name="q0",
                                       domain=QD, **attrs)],
                     outputs=[vi("y", ["N", 4])], inits=ps, extra=(QD,))
    nodes = [helper.make_node("Quant", ["w", "s", "z", "b"], ["wq"], name="q0", domain=QD,
                              **attrs), helper.make_node("MatMul", ["x", "wq"], ["y"], name="mm")]
    return model(nodes, inits=ps + [init("w", np.ones((4, 3)))], extra=(QD,))


def bipolar(scale: object) -> onnx.ModelProto:
    return model([helper.make_node("BipolarQuant", ["x", "s"], ["y"], name="bq", domain=QD)],
                 outputs=[vi("y", ["N", 4])], inits=[init("s", scale)], extra=(QD,))


def qdq(scale: object = 2.0**-4, zp: object = 0, zp_dtype: object = np.int8,
        dq_zp_dtype: object = None, **attrs: object) -> onnx.ModelProto:
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="ql", **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "z2"], ["y"], name="dq")]
    return model(nodes, outputs=[vi("y", ["N", 4])],
                 inits=[init("s", scale), init("z", zp, zp_dtype),
                        init("z2", zp, dq_zp_dtype or zp_dtype)])


def batchnorm(scale=(1, 1, 1, 1), bias=(0, 0, 0, 0), mean=(0, 0, 0, 0), var=(1, 1, 1, 1),
              **attrs: object) -> onnx.ModelProto:
    node = helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"], name="bn",
                            **attrs)
    return model([node], outputs=[vi("y", ["N", 4])],
                 inits=[init("s", scale), init("bb", bias), init("m", mean), init("v", var)])


def with_attr(m: onnx.ModelProto, node: int, name: str, value: object) -> onnx.ModelProto:
    """Add an attribute of any type (helper.make_attribute infers the type from the value)."""
    m.graph.node[node].attribute.append(helper.make_attribute(name, value))
    return m


def tensor(name: str, dt: int, dims: list, **fields: object) -> onnx.TensorProto:
    t = TensorProto()
    t.name, t.data_type = name, dt
    t.dims.extend(dims)
    for k, v in fields.items():
        if isinstance(v, bytes):
            setattr(t, k, v)
        else:
            getattr(t, k).extend(v)
    return t


def gemm_with_weight(t: onnx.TensorProto) -> onnx.ModelProto:
    m = gemm()
    m.graph.initializer[0].CopyFrom(t)
    return m


def external(location: str, dims: tuple = (4, 3), **kv: str) -> onnx.ModelProto:
    t = tensor("w", F, list(dims))
    t.data_location = TensorProto.EXTERNAL
    for k, v in {"location": location, **kv}.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return gemm_with_weight(t)


def save(m: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(m.SerializeToString())
    return path


# -- the cases ------------------------------------------------------------------------------

Build = Callable[[Path], object]  # returns the MODEL argument (a path), or a ModelProto
CASES: list = []


def case(kind: str, match: str, build: Build, cmd: str = "compile", **patch: int) -> None:
    CASES.append(pytest.param(build, match, cmd, patch, id=kind))


def proto(m: Callable[[], onnx.ModelProto]) -> Build:
    return lambda d: m()


def raw(data: bytes, name: str = "model.onnx") -> Build:
    def b(d: Path) -> Path:
        (d / name).write_bytes(data)
        return d / name
    return b


def fifo(d: Path) -> Path:
    os.mkfifo(d / "pipe.onnx")
    return d / "pipe.onnx"


def undecodable(content: bytes | None) -> Build:
    def b(d: Path) -> str:
        p = os.fsencode(d) + b"/m\xff\xfe\x1b[31m.onnx"
        if content is not None:
            with open(p, "wb") as f:
                f.write(content)
        return os.fsdecode(p)
    return b


def symlink_loop(d: Path) -> Path:
    os.symlink(d / "loop.onnx", d / "loop.onnx")
    return d / "loop.onnx"


def with_file(name: str, data: bytes | None, m: Callable[[], onnx.ModelProto]) -> Build:
    """A model plus a file (or a FIFO when data is None) beside it."""
    def b(d: Path) -> onnx.ModelProto:
        if data is None:
            os.mkfifo(d / name)
        else:
            (d / name).write_bytes(data)
        return m()
    return b


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    n, size = len(payload), b""
    while True:
        size += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return bytes([number << 3 | 2]) + size + payload


def nested_bytes(depth: int) -> bytes:
    """A model whose graph nests If-like subgraphs `depth` deep (graph.node.attribute.g...)."""
    g = b""
    for _ in range(depth):
        g = _field(1, _field(5, _field(6, g)))  # GraphProto.node / NodeProto.attribute / .g
    return bytes([0x08, 8]) + _field(7, g)  # ir_version 8, ModelProto.graph


def valid_bytes() -> bytes:
    return gemm().SerializeToString()


def renamed(old: bytes, new: bytes) -> Build:
    """The valid model's bytes with a name replaced by bytes of the same length."""
    assert len(old) == len(new)
    m = gemm()
    m.graph.node[0].name = old.decode()
    return raw(m.SerializeToString().replace(old, new))


# files
case("file-missing", "not found", lambda d: d / "nope.onnx")
case("file-directory", "directory", lambda d: (d / "sub.onnx").mkdir() or d / "sub.onnx")
case("file-fifo", "FIFO", fifo)
case("file-dev-zero", "character device", lambda d: "/dev/zero")
case("file-dev-null", "character device", lambda d: "/dev/null")
case("file-empty", "empty", raw(b""))
case("file-truncated", "truncated", raw(valid_bytes()[:len(valid_bytes()) // 2]))
case("file-text", "model.onnx", raw(b"this is a text file, not a model\n" * 20))
case("file-random-bytes", "model.onnx",
     raw(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()))
case("file-undecodable-path-missing", "not found", undecodable(None))
case("file-undecodable-path-garbage", "not a readable ONNX model", undecodable(b"\xff" * 64))
case("file-over-size-limit", "MAX_MODEL_BYTES", raw(valid_bytes()), MAX_MODEL_BYTES=64)
case("file-path-through-a-file", "not a directory",
     lambda d: (d / "f").write_bytes(b"x") and d / "f" / "model.onnx")
case("file-symlink-loop", "symbolic links", symlink_loop)
case("file-no-graph", "no nodes", raw(helper.make_model(
    helper.make_graph([], "g", [], [])).SerializeToString()))
case("file-deeply-nested", "model.onnx", lambda d: raw(nested_bytes(3000))(d))

# external data
case("external-missing-file", "not found", proto(lambda: external("w.bin")))
case("external-outside-folder", "outside", proto(lambda: external("../w.bin")))
case("external-absolute-path", "relative", proto(lambda: external("/etc/passwd")))
case("external-length-mismatch", "does not fit",
     with_file("w.bin", b"\0" * 48, lambda: external("w.bin", length="1000000000000")))
case("external-past-end", "past its end", with_file("w.bin", b"\0" * 20,
                                                     lambda: external("w.bin")))
case("external-huge-dims", "MAX_TENSOR_ELEMENTS",
     with_file("w.bin", b"\0" * 48, lambda: external("w.bin", dims=(100000, 100000))))
case("external-fifo", "FIFO", with_file("w.bin", None, lambda: external("w.bin")))
case("external-symlink-outside", "outside", lambda d: (
    os.symlink("/etc/hostname", d / "w.bin"), external("w.bin"))[1])
case("external-in-attribute", "external file", proto(lambda: external_attribute()))
case("external-bad-offset", "not integers",
     with_file("w.bin", b"\0" * 48, lambda: external("w.bin", offset="zero")))

# model structure
case("opset-99", "newer", proto(lambda: gemm_opset(99)))
case("opset-newer-than-onnx", "newer",
     proto(lambda: gemm_opset(onnx.defs.onnx_opset_version() + 1)))
case("opset-missing-default-domain", "default ONNX domain", proto(lambda: gemm_opset(None)))
case("opset-too-old", "older", proto(lambda: gemm_opset(0)))
case("opset-domain-twice", "twice", proto(lambda: add_opset(gemm(), "", 13)))
case("ir-version-missing", "IR version", proto(lambda: set_ir(gemm(), 0)))
case("ir-version-future", "IR version", proto(lambda: set_ir(gemm(), onnx.IR_VERSION + 5)))
case("graph-no-outputs", "no outputs", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["y"])], outputs=[])))
case("graph-no-inputs", "no non-constant input", proto(lambda: model(
    [helper.make_node("Relu", ["c"], ["y"])], inputs=[], inits=[init("c", np.ones((1, 3)))])))
case("graph-too-many-nodes", "MAX_NODES", proto(lambda: relu_chain(6)), MAX_NODES=5)
case("names-duplicate-input", "listed twice", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 3]), vi("x", ["N", 3])])))
case("names-duplicate-initializer", "defined twice", proto(lambda: dup_init()))
case("names-produced-twice", "already defined", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["h"], name="a"), helper.make_node("Relu", ["x"], ["h"], name="b"),
     helper.make_node("Relu", ["h"], ["y"])], outputs=[vi("y", ["N", 4])])))
case("names-output-overwrites-input", "already defined", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["x"], name="r")], outputs=[vi("x", ["N", 4])])))
case("names-input-initializer-conflict", "conflicting shape", proto(lambda: model(
    [helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", ["N", 4]), vi("w", [5, 3])],
    inits=[init("w", np.ones((4, 3)))])))
case("names-dangling-input", "'ghost' is not defined", proto(lambda: model(
    [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], outputs=[vi("y", ["N", 4])])))
case("names-cycle", "not defined", proto(lambda: model(
    [helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
     helper.make_node("Relu", ["a"], ["b"], name="n2")], outputs=[vi("b", ["N", 4])])))
case("names-invalid-utf8", "UTF-8", renamed(b"NODENAME", b"NODE\xff\xfeME"))
case("names-newline-in-node-name", "'bad\\nname'", proto(lambda: model(
    [helper.make_node("Erf", ["x"], ["y"], name="bad\nname")], outputs=[vi("y", ["N", 4])])))
case("names-output-twice", "listed twice", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["y"])], outputs=[vi("y", ["N", 4]), vi("y", ["N", 4])])))
case("output-not-computed", "not computed by any node", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["h"])], outputs=[vi("y", ["N", 4])])))
case("output-dropout-mask", "not computed", proto(lambda: model(
    [helper.make_node("Dropout", ["x"], ["h", "mask"], name="do")],
    outputs=[vi("mask", ["N", 4], TensorProto.BOOL)])))
case("output-dtype-int64", "INT64", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["y"])], outputs=[vi("y", ["N", 4], TensorProto.INT64)])))
case("output-shape-mismatch", "declared with shape", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["y"])], outputs=[vi("y", ["N", 7])])))
case("output-is-constant", "is a constant", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["h"])], outputs=[vi("c", [3])], inits=[init("c", [1, 2, 3])])))
# brevitas' QCDQ export lists quantizer parameters as outputs next to the computed one: the
# refusal said "nothing to compute" of a model that computes its first output
case("output-constant-beside-computed",
     "output 'c' (output 2 of 3) is a constant (an initializer), not computed from the input; "
     "constant outputs are not supported: remove 2 constant outputs ('c', 'k') from the "
     "graph's outputs, which leaves 1 computed", proto(lambda: model(
         [helper.make_node("Relu", ["x"], ["y"])], outputs=[vi("y", ["N", 4]), vi("c", [3]),
                                                         vi("k", [])],
         inits=[init("c", [1, 2, 3]), init("k", 0.5)])))

# dtypes of inputs and constants
for dt in ("BOOL", "STRING", "COMPLEX64", "INT64", "DOUBLE", "UINT8"):
    case(f"input-dtype-{dt.lower()}", dt, proto(lambda dt=dt: model(
        [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 4], getattr(TensorProto, dt))],
        [vi("y", ["N", 4])])))
case("input-no-dtype", "no dtype", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 4], TensorProto.UNDEFINED)])))
case("input-sequence-type", "sequence_type", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["y"])],
    [helper.make_tensor_sequence_value_info("x", F, ["N", 4])])))
case("initializer-string", "STRING", proto(lambda: gemm_with_weight(
    helper.make_tensor("w", TensorProto.STRING, [1], [b"a"]))))
case("initializer-complex", "COMPLEX64", proto(lambda: gemm_with_weight(
    numpy_helper.from_array(np.ones((4, 3), np.complex64), "w"))))
case("initializer-unknown-dtype", "unknown dtype", proto(lambda: gemm_with_weight(
    tensor("w", 999, [4, 3], raw_data=b"\0" * 48))))
case("initializer-sparse", "sparse", proto(lambda: sparse()))

# sizes
case("dims-zero-width-gemm", "zero-sized", proto(lambda: model(
    [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc")], outputs=[vi("y", ["N", 0])],
    inits=[init("w", np.ones((4, 0)))])))
case("dims-zero-input", "zero-sized", proto(lambda: unary("Relu", ["N", 0], ["N", 0])))
case("dims-negative-input", "negative", proto(lambda: unary("Relu", ["N", -3], ["N", 3])))
case("dims-negative-initializer", "negative dimension", proto(lambda: gemm_with_weight(
    tensor("w", F, [-4, -3], float_data=[1.0] * 12))))
case("dims-huge-initializer-without-data", "MAX_TENSOR_ELEMENTS", proto(lambda: gemm_with_weight(
    tensor("w", F, [100000, 100000]))))
case("dims-int64-overflow", "MAX_TENSOR_ELEMENTS", proto(lambda: gemm_with_weight(
    tensor("w", F, [2**62, 2**62, 4]))))
case("dims-huge-constant-node", "MAX_TENSOR_ELEMENTS", proto(lambda: model(
    [helper.make_node("Constant", [], ["w"], name="c", value=tensor("v", F, [100000, 100000])),
     helper.make_node("Gemm", ["x", "w"], ["y"])])))
case("dims-huge-constant-of-shape", "MAX_TENSOR_ELEMENTS", proto(lambda: model(
    [helper.make_node("ConstantOfShape", ["shp"], ["w"], name="cos"),
     helper.make_node("Gemm", ["x", "w"], ["y"])],
    inits=[init("shp", [100000, 100000], np.int64)])))
case("dims-huge-expand", "MAX_TENSOR_ELEMENTS", proto(lambda: model(
    [helper.make_node("Expand", ["one", "shp"], ["w"], name="ex"),
     helper.make_node("Gemm", ["x", "w"], ["y"])],
    inits=[init("one", [1.0]), init("shp", [2**40, 2**40], np.int64)])))
case("dims-huge-activation", "MAX_TENSOR_ELEMENTS", proto(lambda: unary(
    "Relu", ["N", 100000, 100000], ["N", 100000, 100000])))
case("dims-huge-reshape-activation", "cannot reshape", proto(lambda: unary(
    "Reshape", ["N", 4], ["N", 100000, 100000], [init("t", [1, 100000, 100000], np.int64)],
    inputs=("x", "t"))))
case("dims-rank-over-limit", "MAX_RANK", proto(lambda: unary("Relu", ["N"] + [1] * 12,
                                                             ["N"] + [1] * 12)))
case("dims-total-constants", "MAX_TOTAL_CONSTANT_ELEMENTS", proto(lambda: gemm()),
     MAX_TOTAL_CONSTANT_ELEMENTS=10)
case("dims-fold-macs", "MAX_FOLD_MACS", proto(lambda: model(
    [helper.make_node("MatMul", ["a", "a"], ["w0"], name="mm"),
     helper.make_node("Slice", ["w0", "st", "en"], ["w"]),
     helper.make_node("Gemm", ["x", "w"], ["y"])],
    inits=[init("a", np.ones((64, 64))), init("st", [0, 0], np.int64),
           init("en", [4, 3], np.int64)])), MAX_FOLD_MACS=1000)
case("data-raw-length-mismatch", "raw_data", proto(lambda: gemm_with_weight(
    tensor("w", F, [4, 3], raw_data=b"\0" * 47))))
case("data-value-count-mismatch", "holds 5 values", proto(lambda: gemm_with_weight(
    tensor("w", F, [4, 3], float_data=[1.0] * 5))))
case("data-nan-weight", "fc (Gemm): weight 'w' contains NaN",
     proto(lambda: gemm(w=np.full((4, 3), np.nan, np.float32))))
case("data-inf-bias", "'b' contains NaN or Inf",
     proto(lambda: gemm(b=np.array([0, np.inf, 0], np.float32))))
case("data-nan-folded", "contains NaN", proto(lambda: model(
    [helper.make_node("Div", ["z", "z"], ["w"], name="zero_by_zero"),
     helper.make_node("Gemm", ["x", "w"], ["y"])], inits=[init("z", np.zeros((4, 3)))])))
case("constant-string", "STRING", proto(lambda: model(
    [helper.make_node("Constant", [], ["w"], name="c", value_string="abc"),
     helper.make_node("Gemm", ["x", "w"], ["y"])])))
case("constant-two-values", "exactly one value attribute", proto(lambda: model(
    [helper.make_node("Constant", [], ["w"], name="c", value_float=1.0, value_int=2),
     helper.make_node("Gemm", ["x", "w"], ["y"])])))
case("op-cast-to-int", "Cast to INT64", proto(lambda: unary(
    "Cast", ["N", 4], ["N", 4], to=TensorProto.INT64)))
case("attr-function-reference", "function attribute", proto(lambda: ref_attr(gemm())))
case("qdq-block-size", "block_size", proto(lambda: qdq_opset(qdq(block_size=2), 21)))
case("qdq-output-dtype-mismatch", "output_dtype", proto(lambda: qdq_opset(
    qdq(output_dtype=TensorProto.UINT16), 21)))

# ops and attributes
case("op-unsupported", "unsupported op Erf", proto(lambda: unary("Erf", ["N", 4], ["N", 4])))
case("op-custom-domain", "unsupported op acme.Frob", proto(lambda: model(
    [helper.make_node("Frob", ["x"], ["y"], domain="acme")], outputs=[vi("y", ["N", 4])],
    extra=("acme",))))
case("op-control-flow-on-constants", "unsupported op If", proto(lambda: if_on_constant()))
case("op-random-on-constants", "unsupported op RandomUniformLike", proto(lambda: model(
    [helper.make_node("RandomUniformLike", ["w0"], ["w"], name="rnd"),
     helper.make_node("Gemm", ["x", "w"], ["y"])], inits=[init("w0", np.ones((4, 3)))])))
case("op-too-many-inputs", "has 2 inputs", proto(lambda: unary(
    "Relu", ["N", 4], ["N", 4], inputs=("x", "x"))))
case("op-too-few-inputs", "has 1 inputs", proto(lambda: model(
    [helper.make_node("Gemm", ["x"], ["y"], name="fc")])))
case("op-too-many-outputs", "outputs", proto(lambda: model(
    [helper.make_node("Relu", ["x"], ["y", "z"], name="r")], outputs=[vi("y", ["N", 4])])))
case("op-no-output", "has no output", proto(lambda: model(
    [helper.make_node("Relu", ["x"], [], name="r")], outputs=[vi("y", ["N", 4])])))
case("attr-string-for-int", "transB must be of type INT", proto(lambda: gemm(transB="yes")))
case("attr-list-for-float", "alpha must be of type FLOAT", proto(lambda: unary(
    "LeakyRelu", ["N", 4], ["N", 4], alpha=[0.1, 0.2])))
case("attr-float-for-int-axis", "axis must be of type INT", proto(lambda: unary(
    "Softmax", ["N", 4], ["N", 4], axis=1.5)))
case("attr-int-for-ints-perm", "perm must be of type INTS", proto(lambda: unary(
    "Transpose", ["N", 4], ["N", 4], perm=1)))
case("attr-string-for-concat-axis", "axis must be of type INT", proto(lambda: model(
    [helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis="one")],
    outputs=[vi("y", ["N", 8])])))
case("attr-unknown", "unknown attribute", proto(lambda: gemm(colour=3)))
case("attr-required-missing", "required attribute axis", proto(lambda: model(
    [helper.make_node("Concat", ["x", "x"], ["y"], name="cat")], outputs=[vi("y", ["N", 8])])))
case("attr-twice", "given twice", proto(lambda: with_attr(gemm(transB=0), 0, "transB", 1)))
case("attr-not-finite", "finite", proto(lambda: gemm(alpha=float("inf"))))
case("attr-flag-not-boolean", "must be 0 or 1", proto(lambda: gemm(transB=7)))
case("shape-gemm-mismatch", "does not match", proto(lambda: gemm(w=np.ones((5, 3)))))
case("shape-matmul-mismatch", "MatMul needs", proto(lambda: model(
    [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], inits=[init("w", np.ones((5, 3)))])))
case("shape-gemm-bias", "does not broadcast", proto(lambda: gemm(b=np.zeros(7, np.float32))))
case("shape-gemm-3d-weight", "must be 2-D", proto(lambda: gemm(w=np.ones((4, 3, 1)))))
case("shape-binary-broadcast", "does not broadcast", proto(lambda: unary(
    "Add", ["N", 4], ["N", 4], [init("c", np.ones(5))], inputs=("x", "c"))))
case("reshape-impossible", "cannot reshape", proto(lambda: unary(
    "Reshape", ["N", 4], ["N", 5], [init("t", [1, 5], np.int64)], inputs=("x", "t"))))
case("reshape-two-minus-ones", "not a valid Reshape target", proto(lambda: unary(
    "Reshape", ["N", 4], ["N", 2, 2], [init("t", [1, -1, -1], np.int64)], inputs=("x", "t"))))
case("reshape-float-shape", "integer", proto(lambda: unary(
    "Reshape", ["N", 4], ["N", 4], [init("t", [1.0, 4.5])], inputs=("x", "t"))))
case("reshape-copy-missing-dim", "copies (0)", proto(lambda: unary(
    "Reshape", ["N", 4], ["N", 4, 1], [init("t", [1, 4, 0], np.int64)], inputs=("x", "t"))))
case("axis-softmax", "out of range", proto(lambda: unary("Softmax", ["N", 4], ["N", 4], axis=5)))
case("axis-flatten", "out of range", proto(lambda: unary("Flatten", ["N", 4], ["N", 4], axis=9)))
case("axis-transpose-perm", "not a permutation", proto(lambda: unary(
    "Transpose", ["N", 4, 2], ["N", 2, 4], perm=[0, 2, 2])))
case("axis-transpose-perm-range", "not a permutation", proto(lambda: unary(
    "Transpose", ["N", 4, 2], ["N", 2, 4], perm=[0, 2, 7])))
case("axis-concat", "out of range", proto(lambda: model(
    [helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=-7)],
    outputs=[vi("y", ["N", 8])])))
case("axis-gather", "out of range", proto(lambda: unary(
    "Gather", ["N", 4], ["N", 2], [init("i", [0, 1], np.int64)], inputs=("x", "i"), axis=3)))
case("axis-gather-indices", "out of range", proto(lambda: unary(
    "Gather", ["N", 4], ["N", 2], [init("i", [0, 9], np.int64)], inputs=("x", "i"), axis=1)))
case("axis-gather-float-indices", "integers", proto(lambda: unary(
    "Gather", ["N", 4], ["N", 2], [init("i", [0.5, 1.0])], inputs=("x", "i"), axis=1)))
case("axis-squeeze-not-one", "size 1", proto(lambda: unary(
    "Squeeze", ["N", 4, 2], ["N", 2], [init("a", [1], np.int64)], inputs=("x", "a"))))
case("axis-squeeze-range", "out of range", proto(lambda: unary(
    "Squeeze", ["N", 4, 1], ["N", 4], [init("a", [5], np.int64)], inputs=("x", "a"))))
case("axis-unsqueeze-repeated", "repeat", proto(lambda: unary(
    "Unsqueeze", ["N", 4], ["N", 1, 1, 4], [init("a", [1, 1], np.int64)], inputs=("x", "a"))))
case("axis-unsqueeze-not-constant", "must be a constant", proto(lambda: model(
    [helper.make_node("Shape", ["x"], ["s0"]), helper.make_node("Relu", ["x"], ["r"]),
     helper.make_node("Unsqueeze", ["r", "x"], ["y"], name="unsq")], outputs=[vi("y", None)])))
case("dropout-ratio", "ratio", proto(lambda: unary(
    "Dropout", ["N", 4], ["N", 4], [init("r", 1.5)], inputs=("x", "r"))))

# QONNX Quant / BipolarQuant
for kind, bits in (("3.5", 3.5), ("0", 0.0), ("negative", -2.0), ("65", 65.0)):
    case(f"quant-bitwidth-{kind}", "bitwidth", proto(lambda b=bits: quant(bits=b)))
case("quant-bitwidth-not-scalar", "must be a scalar", proto(lambda: quant(bits=[8.0, 8.0])))
case("quant-bitwidth-nan", "bitwidth", proto(lambda: quant(bits=np.nan)))
for kind, sc in (("negative", -0.5), ("zero", 0.0), ("nan", np.nan), ("inf", np.inf)):
    case(f"quant-scale-{kind}", "positive and finite", proto(lambda s=sc: quant(scale=s)))
    case(f"quant-weight-scale-{kind}", "positive and finite",
         proto(lambda s=sc: quant(scale=s, on="weight")))
case("quant-zero-point-fraction", "zero point", proto(lambda: quant(zp=0.5, on="weight")))
case("quant-zero-point-range", "zero point", proto(lambda: quant(zp=300.0)))
case("quant-signed-not-boolean", "signed must be 0 or 1", proto(lambda: quant(signed=2)))
case("quant-narrow-not-boolean", "narrow must be 0 or 1", proto(lambda: quant(narrow=-1)))
case("quant-rounding-unknown", "rounding_mode", proto(lambda: quant(rounding_mode="BANANA")))
case("quant-rounding-wrong-type", "rounding_mode must be of type STRING",
     proto(lambda: quant(rounding_mode=3)))
case("quant-rounding-unsupported-on-activation", "rounding_mode",
     proto(lambda: quant(rounding_mode="CEIL")))
case("quant-scale-not-constant", "must be a constant", proto(lambda: model(
    [helper.make_node("Quant", ["x", "x", "z", "b"], ["y"], name="q0", domain=QD)],
    outputs=[vi("y", ["N", 4])], inits=[init("z", 0.0), init("b", 8.0)], extra=(QD,))))
case("quant-scale-shape", "do not broadcast", proto(lambda: quant(scale=[0.5] * 7, on="weight")))
case("quant-three-inputs", "has 3 inputs", proto(lambda: model(
    [helper.make_node("Quant", ["x", "s", "z"], ["y"], name="q0", domain=QD)],
    outputs=[vi("y", ["N", 4])], inits=[init("s", 0.5), init("z", 0.0)], extra=(QD,))))
case("quant-unknown-attribute", "unknown attribute", proto(lambda: quant(colour=1)))
for kind, sc in (("zero", 0.0), ("negative", -1.0), ("nan", np.nan)):
    case(f"bipolar-scale-{kind}", "positive and finite", proto(lambda s=sc: bipolar(s)))

# ONNX QDQ
case("qdq-scale-zero", "positive and finite", proto(lambda: qdq(scale=0.0)))
case("qdq-scale-negative", "positive and finite", proto(lambda: qdq(scale=-0.0625)))
case("qdq-zero-point-float", "FLOAT32", proto(lambda: qdq(zp_dtype=np.float32)))
case("qdq-zero-point-int32", "INT32", proto(lambda: qdq(zp_dtype=np.int32)))
case("qdq-zero-point-dtypes-differ", "do not match", proto(lambda: qdq(dq_zp_dtype=np.uint8)))
case("qdq-axis-out-of-range", "out of range", proto(lambda: qdq(
    scale=[2.0**-4] * 4, zp=[0] * 4, axis=5)))
case("qdq-scale-length", "has 3 values", proto(lambda: qdq(scale=[2.0**-4] * 3, zp=[0] * 3)))
case("qdq-dequantize-float", "not the output of a QuantizeLinear", proto(lambda: model(
    [helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dq")],
    outputs=[vi("y", ["N", 4])], inits=[init("s", 0.5)])))

# BatchNormalization
case("bn-negative-variance", "negative", proto(lambda: batchnorm(var=(1, -1, 1, 1))))
case("bn-variance-plus-epsilon-zero", "must be positive",
     proto(lambda: batchnorm(var=(0, 0, 1, 1), epsilon=0.0)))
case("bn-nan-mean", "NaN", proto(lambda: batchnorm(mean=(0, np.nan, 0, 0))))
case("bn-negative-epsilon", "epsilon", proto(lambda: batchnorm(epsilon=-1e-3)))
case("bn-wrong-length", "one number per channel", proto(lambda: batchnorm(scale=(1, 1, 1))))
case("bn-training-mode", "training_mode", proto(lambda: batchnorm(training_mode=1)))

# inspect takes the same front door
case("inspect-fifo", "FIFO", fifo, cmd="inspect")
case("inspect-truncated", "truncated", raw(valid_bytes()[:20]), cmd="inspect")
case("inspect-opset-99", "newer", proto(lambda: gemm_opset(99)), cmd="inspect")
case("inspect-quant-bitwidth", "bitwidth", proto(lambda: quant(bits=3.5)), cmd="inspect")
case("inspect-huge-constant", "MAX_TENSOR_ELEMENTS", proto(lambda: gemm_with_weight(
    tensor("w", F, [100000, 100000]))), cmd="inspect")


# -- builders used above --------------------------------------------------------------------


def gemm_opset(opset: int | None) -> onnx.ModelProto:
    m = gemm()
    del m.opset_import[:]
    if opset is not None:
        m.opset_import.append(helper.make_opsetid("", opset))
    return m


def add_opset(m: onnx.ModelProto, domain: str, version: int) -> onnx.ModelProto:
    m.opset_import.append(helper.make_opsetid(domain, version))
    return m


def set_ir(m: onnx.ModelProto, v: int) -> onnx.ModelProto:
    m.ir_version = v
    return m


def relu_chain(n: int) -> onnx.ModelProto:
    names = ["x"] + [f"h{k}" for k in range(n - 1)] + ["y"]
    nodes = [helper.make_node("Relu", [a], [b]) for a, b in zip(names, names[1:], strict=False)]
    return model(nodes, outputs=[vi("y", ["N", 4])])


def external_attribute() -> onnx.ModelProto:
    """ConstantOfShape whose `value` tensor points at /dev/zero as external data."""
    v = tensor("v", F, [1])
    v.data_location = TensorProto.EXTERNAL
    e = v.external_data.add()
    e.key, e.value = "location", "/dev/zero"
    return model([helper.make_node("ConstantOfShape", ["shp"], ["w"], name="cos", value=v),
                  helper.make_node("Gemm", ["x", "w"], ["y"])],
                 inits=[init("shp", [4, 3], np.int64)])


def ref_attr(m: onnx.ModelProto) -> onnx.ModelProto:
    a = onnx.AttributeProto(name="alpha", ref_attr_name="outer_alpha", type=onnx.AttributeProto.FLOAT)
    m.graph.node[0].attribute.append(a)
    return m


def qdq_opset(m: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    m.opset_import[0].version = opset
    return m


def dup_init() -> onnx.ModelProto:
    m = gemm()
    m.graph.initializer.append(init("w", np.ones((4, 3))))
    return m


def sparse() -> onnx.ModelProto:
    m = gemm()
    del m.graph.initializer[0]
    values = init("w", [1.0])
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(
        values, init("w_idx", [0], np.int64), [4, 3]))
    return m


def if_on_constant() -> onnx.ModelProto:
    branch = helper.make_graph([helper.make_node("Identity", ["w0"], ["wb"])], "b", [],
                               [vi("wb", [4, 3])])
    return model([helper.make_node("If", ["cond"], ["w"], name="iff", then_branch=branch,
                                   else_branch=branch),
                  helper.make_node("Gemm", ["x", "w"], ["y"])],
                 inits=[init("cond", True, np.bool_), init("w0", np.ones((4, 3)))])


# -- the test -------------------------------------------------------------------------------


@pytest.mark.parametrize("build,match,cmd,patch", CASES)
def test_hostile_model_is_refused_cleanly(tmp_path, monkeypatch, build, match, cmd, patch):
    for k, v in patch.items():
        monkeypatch.setattr(limits, k, v)
    work = tmp_path / "work"
    work.mkdir()
    made = build(work)
    target = save(made, work / "model.onnx") if isinstance(made, onnx.ModelProto) else made
    before = snapshot(tmp_path)
    argv = [cmd, os.fspath(target)] + (["--out", str(work / "out")] if cmd == "compile" else [])
    res = run_cli(argv, cwd=work)
    line = assert_refused(res, match=match)
    assert line.isprintable(), repr(line)  # no control characters, no lone surrogates
    line.encode("utf-8")
    assert snapshot(tmp_path) == before


def test_at_least_sixty_kinds():
    ids = [p.id for p in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 60


def test_unreadable_file_is_refused(tmp_path, monkeypatch):
    """No read permission (as root every file is readable: the refusal is simulated at the
    one call that opens the file)."""
    p = save(gemm(), tmp_path / "model.onnx")
    real_open = os.open

    def deny(path, flags, *a, **k):
        if os.fspath(path) == str(p):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", deny)
    before = snapshot(tmp_path)
    res = run_cli(["compile", str(p), "--out", str(tmp_path / "out")], cwd=tmp_path)
    assert_refused(res, match="Permission denied")
    assert snapshot(tmp_path) == before


def test_valid_external_data_loads(tmp_path):
    """External data inside the model's folder, of the right size, is read (not refused)."""
    from modelcircuit.frontend.onnx.importer import load_onnx

    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    (tmp_path / "w.bin").write_bytes(b"\0" * 8 + w.tobytes())
    m = external("w.bin", offset="8", length="48")
    g = load_onnx(save(m, tmp_path / "model.onnx"))
    wname = g.nodes[0].inputs[1]
    np.testing.assert_array_equal(g.constants[wname], w)


def test_limits_are_named_and_sane():
    assert limits.MAX_MODEL_BYTES == 2 * 1024**3
    assert limits.MAX_TENSOR_ELEMENTS <= limits.MAX_TOTAL_CONSTANT_ELEMENTS
    assert limits.MAX_NODES >= 1000 and limits.MAX_RANK >= 6
