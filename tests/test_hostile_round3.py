"""Hostile input, round 3 (issue 30): models with several inputs or outputs are refused up
front by every command; float precisions are refused by every hardware command before any
estimate or file, on every path (plain, reuse given, per-layer file with a float default or
a float entry); a layer that mixes float and fixed types is a compile error, not a crash; a
model whose only op is a BatchNorm compiles and runs in fixed point. Each refusal: exit 2,
one `error:` line, nothing printed before it, the folder unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.hostile import assert_refused, run_cli, snapshot


def _vi(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _save(d: Path, name: str, nodes: list, inputs: list, outputs: list,
          inits: tuple = ()) -> str:
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    p = d / f"{name}.onnx"
    onnx.save(m, p)
    return str(p)


def two_inputs(d: Path) -> str:
    return _save(d, "add2", [helper.make_node("Add", ["a", "b"], ["y"])],
                 [_vi("a", [1, 8]), _vi("b", [1, 8])], [_vi("y", [1, 8])])


def two_outputs(d: Path) -> str:
    return _save(d, "twoout", [helper.make_node("Relu", ["a"], ["y"]),
                               helper.make_node("Sigmoid", ["a"], ["z"])],
                 [_vi("a", [1, 8])], [_vi("y", [1, 8]), _vi("z", [1, 8])])


def _const(name: str, v: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, np.float32), name)


BN = {"s": [1.5, 0.5, 2.0, -1.0], "bb": [0.1, 0.2, -0.3, 0.4], "mean": [0.5, -0.5, 0.0, 1.0],
      "var": [1.0, 2.0, 0.5, 1.0]}
EPS = 1e-5


def batchnorm_only(d: Path, shape: tuple[int, ...] = (4,)) -> str:
    node = helper.make_node("BatchNormalization", ["a", "s", "bb", "mean", "var"], ["y"],
                            epsilon=EPS)
    return _save(d, f"bn{len(shape)}", [node], [_vi("a", [1, *shape])], [_vi("y", [1, *shape])],
                 tuple(_const(k, v) for k, v in BN.items()))


def mul_add(d: Path, shape: tuple[int, ...]) -> str:
    """The same per-channel affine map written by hand: x * k + c, k and c in float64 from the
    BatchNorm's parameters (its definition in the ONNX operator docs)."""
    s, b, m, v = (np.asarray(BN[k], np.float64) for k in ("s", "bb", "mean", "var"))
    k = s / np.sqrt(v + EPS)
    c = b - m * k
    bshape = (4,) + (1,) * (len(shape) - 1)
    nodes = [helper.make_node("Mul", ["a", "k"], ["t"]), helper.make_node("Add", ["t", "c"], ["y"])]
    return _save(d, f"muladd{len(shape)}", nodes, [_vi("a", [1, *shape])],
                 [_vi("y", [1, *shape])], (_const("k", k.reshape(bshape)),
                                           _const("c", c.reshape(bshape))))


def _layers(d: Path, obj: object) -> str:
    p = d / "layers.json"
    p.write_text(json.dumps(obj))
    return str(p)


Argv = Callable[[Path], list[str]]

MULTI_IO: list[tuple[str, Argv, str]] = [
    ("compile-two-inputs", lambda d: ["compile", two_inputs(d), "--out", f"{d}/o"], "2 inputs ('a', 'b')"),
    ("compile-gpu-two-inputs", lambda d: ["compile", two_inputs(d), "--target", "gpu", "--out", f"{d}/o"], "2 inputs"),
    ("compile-verilog-two-inputs", lambda d: ["compile", two_inputs(d), "--target", "verilog", "--out", f"{d}/o"], "2 inputs"),
    ("inspect-two-inputs", lambda d: ["inspect", two_inputs(d)], "2 inputs"),
    ("verify-two-inputs", lambda d: ["verify", two_inputs(d)], "2 inputs"),
    ("build-two-inputs", lambda d: ["build", two_inputs(d), "--device", "ice40-up5k", "--out", f"{d}/o"], "2 inputs"),
    ("sweep-two-inputs", lambda d: ["sweep", two_inputs(d), "--engine", "serial", "--out", f"{d}/o"], "2 inputs"),
    ("compile-two-outputs", lambda d: ["compile", two_outputs(d), "--out", f"{d}/o"], "2 outputs ('y', 'z')"),
    ("verify-two-outputs", lambda d: ["verify", two_outputs(d), "--backends", "golden,gpu-emu"], "2 outputs"),
    ("inspect-two-outputs", lambda d: ["inspect", two_outputs(d)], "2 outputs"),
]

# Every hardware command, every way a float type can reach it (the bundled digits MLP).
FLOAT_HW: list[tuple[str, Argv]] = [
    ("build-float32", lambda d: ["build", "--device", "ice40-up5k", "--precision", "float32", "--out", f"{d}/o"]),
    ("build-float32-reuse-4", lambda d: ["build", "--device", "ice40-up5k", "--precision", "float32", "--reuse", "4", "--out", f"{d}/o"]),
    ("build-float32-reuse-auto-ecp5", lambda d: ["build", "--device", "ecp5-25k", "--precision", "float32", "--reuse", "auto", "--out", f"{d}/o"]),
    ("build-float32-strategy-auto", lambda d: ["build", "--device", "ice40-up5k", "--precision", "float32", "--strategy", "auto", "--out", f"{d}/o"]),
    ("build-layers-float-default", lambda d: ["build", "--device", "ice40-up5k", "--precision", _layers(d, {"default": "float32"}), "--out", f"{d}/o"]),
    ("build-layers-float-default-fixed-layer", lambda d: ["build", "--device", "ice40-up5k", "--precision", _layers(d, {"default": "float32", "fc1_matmul": "fixed<8,3>"}), "--out", f"{d}/o"]),
    ("build-layers-float-weight", lambda d: ["build", "--device", "ice40-up5k", "--precision", _layers(d, {"fc1_matmul": {"weight": "float32"}}), "--out", f"{d}/o"]),
    ("build-layers-float-layer", lambda d: ["build", "--device", "ice40-up5k", "--precision", _layers(d, {"default": "fixed<8,3>", "fc2_matmul": "float32"}), "--out", f"{d}/o"]),
    ("build-layers-float-input", lambda d: ["build", "--device", "ice40-up5k", "--precision", _layers(d, {"pixels": "float32"}), "--out", f"{d}/o"]),
    ("compile-verilog-float32", lambda d: ["compile", "--target", "verilog", "--precision", "float32", "--out", f"{d}/o"]),
    ("compile-verilog-float32-reuse-auto", lambda d: ["compile", "--target", "verilog", "--precision", "float32", "--reuse", "auto", "--out", f"{d}/o"]),
    ("compile-verilog-layers-float-bias", lambda d: ["compile", "--target", "verilog", "--precision", _layers(d, {"fc3_matmul": {"bias": "float32"}}), "--out", f"{d}/o"]),
    ("compile-fpga-float32", lambda d: ["compile", "--target", "fpga", "--profile", "ice40-up5k", "--precision", "float32", "--out", f"{d}/o"]),
    ("verify-rtl-float32", lambda d: ["verify", "--backends", "rtl", "--precision", "float32"]),
    ("verify-rtl-layers-float-default", lambda d: ["verify", "--backends", "golden,rtl", "--precision", _layers(d, {"default": "float32"})]),
    ("sweep-layers-float-default", lambda d: ["sweep", "--precision", _layers(d, {"default": "float32"}), "--engine", "serial", "--no-calibrate", "--out", f"{d}/o"]),
    ("sweep-layers-float-layer", lambda d: ["sweep", "--precision", _layers(d, {"default": "fixed<8,3>", "fc2_matmul": "float32"}), "--engine", "serial", "--no-calibrate", "--out", f"{d}/o"]),
    ("sweep-layers-float-weight", lambda d: ["sweep", "--precision", _layers(d, {"fc1_matmul": {"weight": "float32"}}), "--engine", "serial", "--out", f"{d}/o"]),
    ("sweep-float32", lambda d: ["sweep", "--precision", "float32", "--engine", "serial", "--out", f"{d}/o"]),
]


def _refused_first(argv: list[str], d: Path, match: str) -> str:
    before = snapshot(d)
    res = run_cli(argv, cwd=d)
    line = assert_refused(res, match)
    assert res.err.strip() == line, f"work was done (or printed) before the refusal:\n{res.err}"
    assert snapshot(d) == before, "the refusal changed the folder"
    return line


@pytest.mark.parametrize("case_id,argv,match", MULTI_IO, ids=[c[0] for c in MULTI_IO])
def test_several_inputs_or_outputs_refused_up_front(case_id: str, argv: Argv, match: str,
                                                    tmp_path: Path) -> None:
    args = argv(tmp_path)
    _refused_first(args, tmp_path, match)


@pytest.mark.parametrize("case_id,argv", FLOAT_HW, ids=[c[0] for c in FLOAT_HW])
def test_float_types_refused_by_hardware_commands_before_work(case_id: str, argv: Argv,
                                                              tmp_path: Path) -> None:
    line = _refused_first(argv(tmp_path), tmp_path, "fixed")
    assert "float32" in line or "--precision float32" in line, line


@pytest.mark.parametrize("layers,match", [
    ({"fc1_matmul": {"weight": "float32"}}, "its weight has type float32"),
    ({"fc1_matmul": {"bias": "float32"}}, "its bias has type float32"),
    ({"default": "fixed<8,3>", "fc2_matmul": "float32"}, "input 'fc2' is float32"),
    ({"pixels": "float32"}, "input 'pixels' is float32"),
])
def test_float_inside_a_fixed_model_is_a_compile_error(layers: dict, match: str,
                                                       tmp_path: Path) -> None:
    """Was an AttributeError (exit 70) in the accumulator pass or the golden model."""
    _refused_first(["compile", "--precision", _layers(tmp_path, layers), "--out",
                    f"{tmp_path}/o"], tmp_path, match)


def test_python_api_refuses_several_inputs_where_it_carries_one(tmp_path: Path) -> None:
    import modelcircuit as mc
    from modelcircuit.artifact import write_compiled
    from modelcircuit.graphs import reference

    c = mc.compile(mc.load_onnx(two_inputs(tmp_path)))  # the compiler itself handles both
    a, b = np.ones((2, 8), np.float32), np.full((2, 8), 2.0, np.float32)
    np.testing.assert_array_equal(reference.to_values(c.graph, "y", reference.execute(
        c.graph, [a, b])["y"]), a + b)
    with pytest.raises(mc.GraphError, match="2 inputs"):
        mc.run(c, a)
    with pytest.raises(mc.GraphError, match="2 inputs"):
        write_compiled(c, tmp_path / "o")
    assert not (tmp_path / "o").exists()


# -- a BatchNorm with nothing to fold into ---------------------------------------------------
@pytest.mark.parametrize("shape", [(4,), (4, 3, 2)])
def test_lone_batchnorm_runs_in_fixed_point(shape: tuple[int, ...], tmp_path: Path) -> None:
    """It becomes x * k + c: bit for bit what the same map written by hand as Mul and Add
    computes (a path verified against RTL and GPU elsewhere), and within the fixed-point
    error of the float BatchNorm, from the compiled types (each quantization or rounding
    errs by under one lsb, 2**-F at F fraction bits): |x| ulp(k) + |k| ulp(x) for the
    product's operands, then ulp(x * k) + ulp(c) + ulp(y) for the roundings after it."""
    import onnxruntime as ort

    import modelcircuit as mc

    bn, ma = batchnorm_only(tmp_path, shape), mul_add(tmp_path, shape)
    cb, cm = mc.compile(mc.load_onnx(bn)), mc.compile(mc.load_onnx(ma))
    g = cb.graph
    mul, add = (next(n for n in g.nodes if str(n.op) == op) for op in ("Mul", "Add"))
    assert [str(n.op) for n in g.nodes] == ["Mul", "Add"]
    x = (np.random.default_rng(0).standard_normal((64, *shape)) * 2).astype(np.float32)  # no SAT
    yb, ym = mc.run(cb, x), mc.run(cm, x)
    np.testing.assert_array_equal(yb, ym)
    sess = ort.InferenceSession(bn)
    want = np.concatenate([sess.run(None, {"a": x[i:i + 1]})[0] for i in range(len(x))])

    def ulp(name: str) -> float:
        return 2.0 ** -g.tensor(name).dtype.frac

    k = np.abs(np.asarray(BN["s"]) / np.sqrt(np.asarray(BN["var"]) + EPS))
    k = k.reshape((1, 4) + (1,) * (len(shape) - 1))
    bound = (np.abs(x) * ulp(mul.inputs[1]) + k * ulp(mul.inputs[0]) + ulp(mul.outputs[0])
             + ulp(add.inputs[1]) + ulp(add.outputs[0]))
    err = np.abs(yb.reshape(want.shape) - want)
    assert np.all(err <= bound), float((err - bound).max())
    assert err.max() > 0  # fixed point, not float: the check above can fail


def test_lone_batchnorm_cli_compile_then_verify(tmp_path: Path) -> None:
    bn = batchnorm_only(tmp_path)
    res = run_cli(["compile", bn, "--out", f"{tmp_path}/o"], cwd=tmp_path)
    assert res.rc == 0, res.err
    res = run_cli(["verify", bn, "--backends", "golden,gpu-emu", "--vectors", "20"], cwd=tmp_path)
    assert res.rc == 0, res.err + res.out
    assert "bit-exact: yes" in res.out
