"""Models as the real exporters write them (tests/exporters/generate.py: brevitas, torch.onnx,
onnx.helper; the FINN/QONNX models of ../shared/models), against the exporters' own runtimes.

Float models: our float32 golden == onnxruntime within the float32 rounding bound of the
computation. QONNX models: every activation quantizer's integer codes and the circuit's output
equal QONNX's execution of the same model in float64 (its exact semantics) exactly, and its
float32 execution except where float32 accumulation moves a value across a rounding boundary
(each such case is checked to be one); the float tail is within its own rounding.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

import modelcircuit as mc
from modelcircuit.graphs import host, reference
from tests.conftest import assert_float32_close, shared_model, tail_error_bound

DATA = Path(__file__).resolve().parents[1] / "data" / "exporters"
MODELS = {m["file"]: m for m in json.loads((DATA / "models.json").read_text())["models"]}
FLOAT = sorted(f for f, m in MODELS.items() if m["kind"] == "float")
QONNX_ALL = sorted(f for f, m in MODELS.items() if m["kind"] == "qonnx")
# the MLPs; the CNNs (channels-first vs channels-last layouts) are checked in tests/graphs/test_cnn.py
QONNX = [f for f in QONNX_ALL if "cnn" not in f]
N = 1000


def _digits(n: int, features: int) -> np.ndarray:
    from sklearn.datasets import load_digits

    x = load_digits().data[:n] / 16.0
    reps = -(-features // x.shape[1])
    return np.tile(x, (1, reps))[:, :features].astype(np.float32)


def _inputs(c, info: dict, n: int = N, seed: int = 0) -> np.ndarray:
    """Real digits where the model reads 64 pixels; on the first quantizer's grid where the
    model has one (so that every input is one the model can tell apart)."""
    shp = host.input_shape(c)
    grid = info.get("input_grid")
    if grid:
        b = grid["bits"]
        lo, hi = (-(2 ** (b - 1)), 2 ** (b - 1) - 1) if grid["signed"] else (0, 2 ** b - 1)
        k = np.random.default_rng(seed).integers(lo, hi + 1, (n, *shp))
        return (np.float32(grid["scale"]) * (k - grid["zero_point"])).astype(np.float32)
    size = int(np.prod(shp))
    if size == 64:
        return _digits(n, 64).reshape((n, *shp))
    return np.random.default_rng(seed).standard_normal((n, *shp)).astype(np.float32)


# -- float models -------------------------------------------------------------------------


def _run_reference_runtime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime (onnx.reference below opset 7, which onnxruntime does not run), in the
    model's own batch: fixed batches are fed in slices of that size."""
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    batch = dim.dim_value or len(x)
    n = (len(x) // batch) * batch
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 7:
        from onnx.reference import ReferenceEvaluator

        sess = ReferenceEvaluator(model)
        run = lambda xb: sess.run(None, {model.graph.input[0].name: xb})[0]  # noqa: E731
    else:
        import onnxruntime as ort

        s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        run = lambda xb: s.run(None, {model.graph.input[0].name: xb})[0]  # noqa: E731
    full = tuple(d.dim_value or 0 for d in model.graph.input[0].type.tensor_type.shape.dim)
    outs = [run(x[i: i + batch].reshape((batch,) + full[1:])) for i in range(0, n, batch)]
    return np.concatenate(outs).reshape(n, -1)


@pytest.mark.parametrize("name", FLOAT)
def test_float_export_pattern_matches_onnxruntime(name):
    info = MODELS[name]
    c = mc.compile(mc.load_onnx(DATA / name), precision="float32")
    x = _inputs(c, info)
    want = _run_reference_runtime(onnx.load(str(DATA / name)), x)
    x = x[: len(want)]
    got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(len(x), -1)
    assert got.shape == want.shape
    assert_float32_close(got, want.astype(np.float64), c, x, f"{name}: ours - runtime")
    # and the same model compiles to fixed point and runs
    cf = mc.compile(mc.load_onnx(DATA / name), precision="fixed<16,6>")
    assert np.all(np.isfinite(mc.run(cf, x[:8])))


# -- QONNX models -------------------------------------------------------------------------


def _qonnx64(model: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    """QONNX's semantics without float32 rounding: every tensor of the model in float64, run
    by onnx.reference with QONNX's own quantizer functions (qonnx.custom_op.general)."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun
    from qonnx.custom_op.general.bipolar_quant import binary_quant
    from qonnx.custom_op.general.intquant import int_quant

    def text(v):
        return v.decode() if isinstance(v, bytes) else v

    ops = []
    for dom in sorted({n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")}):
        class Quant(OpRun):
            op_domain = dom

            def _run(self, x, scale, zeropt, bitwidth, signed=1, narrow=0,
                     rounding_mode="ROUND"):
                return (int_quant(x, scale, zeropt, bitwidth, signed, narrow,
                                  text(rounding_mode)),)

        class BipolarQuant(OpRun):
            op_domain = dom

            def _run(self, x, scale):
                return (binary_quant(x, scale),)

        ops += [Quant, BipolarQuant]

    class BatchNormalization(OpRun):  # inference form at every opset (onnx.reference's
        op_domain = ""                # opset-9 kernel computes the training statistics)

        def _run(self, x, s, b, mean, var, epsilon=1e-5, **_):
            shp = (1, -1) + (1,) * (x.ndim - 2)
            k = s.reshape(shp) / np.sqrt(var.reshape(shp) + epsilon)
            return ((x - mean.reshape(shp)) * k + b.reshape(shp),)

    ops.append(BatchNormalization)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    known = {o.domain for o in m.opset_import}
    for dom in {n.domain for n in g.node} - known:
        m.opset_import.append(onnx.helper.make_opsetid(dom, 1))
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float64), t.name))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
    del g.value_info[:]
    del g.output[:]
    names = [o for n in g.node for o in n.output if o]
    g.output.extend(onnx.helper.make_empty_tensor_value_info(o) for o in names)
    sess = ReferenceEvaluator(m, new_ops=ops)
    feeds = {g.input[0].name: x.astype(np.float64)}
    return dict(zip(names, sess.run(None, feeds), strict=True))


def _qonnx(model: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]
    for v in m.graph.output:
        if v.type.tensor_type.shape.dim:
            v.type.tensor_type.shape.dim[0].dim_param = "N"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = ModelWrapper(m)
        w.set_tensor_shape(m.graph.input[0].name, list(x.shape))
        w = w.transform(InferShapes())
        return execute_onnx(w, {m.graph.input[0].name: x}, return_full_exec_context=True)


def _activation_quantizers(model: onnx.ModelProto) -> list[tuple[str, np.ndarray, np.ndarray, str]]:
    """(output, scale, zero point, op) of every Quant/BipolarQuant on an activation."""
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    const_names, out = set(consts), []
    for n in model.graph.node:
        if n.op_type in ("Quant", "BipolarQuant") and n.input[0] not in const_names:
            z = consts[n.input[2]] if n.op_type == "Quant" else np.zeros(())
            out.append((n.output[0], np.asarray(consts[n.input[1]], np.float64),
                        np.asarray(z, np.float64), n.op_type))
        elif all(i in const_names for i in n.input if i):
            const_names.update(n.output)
    return out


def _codes(v: np.ndarray, s: np.ndarray, z: np.ndarray, op: str) -> np.ndarray:
    """QONNX's integer codes of a quantizer's (dequantized) output values."""
    v = np.asarray(v, dtype=np.float64).reshape(v.shape[0], -1)
    if op == "BipolarQuant":
        return np.sign(v)
    s = s.reshape(-1) if s.size > 1 else s.reshape(())
    z = z.reshape(-1) if z.size > 1 else z.reshape(())
    return np.round(v / s + z)


def _ours(env: dict[str, np.ndarray], name: str, s, z, op) -> np.ndarray | None:
    if name + "__codes" in env:  # a scaled-integer quantizer: its codes are a tensor
        return np.asarray(env[name + "__codes"], dtype=np.float64).reshape(N, -1)
    if name in env:  # a power-of-two quantizer: exact values
        return _codes(env[name], s, z, op)
    return None


def _check_qonnx(path: Path, info: dict) -> dict:
    model = onnx.load(str(path))
    c = mc.compile(mc.load_onnx(path))
    x = _inputs(c, info)
    full = (N,) + tuple(d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim)[1:]
    ctx32 = _qonnx(model, x.reshape(full))
    ctx64 = _qonnx64(model, x.reshape(full))
    env = mc.run(c, x, trace=True)
    quants = _activation_quantizers(model)
    report = {"quantizers": len(quants), "checked": 0, "float32_boundary_cases": 0}
    for name, s, z, op in quants:
        ours = _ours(env, name, s, z, op)
        assert ours is not None, f"{path.name}: quantizer output {name} is not in the trace"
        exact = _codes(ctx64[name], s, z, op)
        assert np.array_equal(ours, exact), (
            f"{path.name}: {name}: {int((ours != exact).sum())} codes differ from QONNX in float64")
        f32 = _codes(ctx32[name], s, z, op)
        diff = f32 != exact
        if diff.any():
            # float32 accumulation moved a value that is within its rounding of a boundary:
            # the float64 value before the quantizer sits that close to a half step
            pre = [n for n in model.graph.node if n.output[0] == name][0].input[0]
            sv = s.reshape(-1) if s.size > 1 else s.reshape(())
            v64 = np.asarray(ctx64[pre], np.float64).reshape(N, -1) / sv
            v32 = np.asarray(ctx32[pre], np.float64).reshape(N, -1) / sv
            dist = np.abs(v64 - np.floor(v64) - 0.5)[diff]
            assert np.all(dist <= np.abs(v32 - v64)[diff] + 1e-9), (
                f"{path.name}: {name}: float32 QONNX differs away from a rounding boundary")
            report["float32_boundary_cases"] += int(diff.sum())
        report["checked"] += 1
    # the circuit's output: exact against float64 QONNX where it is the model's output;
    # through the host tail, within the tail's own float32 rounding
    out = np.asarray(mc.run(c, x), dtype=np.float64).reshape(N, -1)
    want = np.asarray(ctx64[model.graph.output[0].name], dtype=np.float64).reshape(N, -1)
    if c.tail is None:
        assert np.array_equal(out, want)
    else:
        assert np.all(np.abs(out - want) <= tail_error_bound(c, x).reshape(N, -1) + 1e-300)
    report["circuit"] = [str(n.op) for n in c.graph.nodes]
    return report


@pytest.mark.parametrize("name", QONNX)
def test_qonnx_export_pattern_equals_qonnx_execution(name):
    pytest.importorskip("qonnx")
    r = _check_qonnx(DATA / name, MODELS[name])
    assert r["checked"] == r["quantizers"] >= 1
    # circuits compute on integer codes only: no float op is left in them
    assert set(r["circuit"]) <= {"Dense", "Threshold", "Requant", "Bipolar", "Relu"}, r


@pytest.mark.parametrize("name", ["TFC_1W2A", "bnn_model_fc_1layer", "TFC_2W2A"])
def test_shared_qonnx_models_equal_qonnx_execution(name):
    pytest.importorskip("qonnx")
    path = shared_model(name)
    info = {"input_grid": None}
    if name == "bnn_model_fc_1layer":  # BipolarQuant on the input: any sign pattern
        info["input_grid"] = {"bits": 2, "signed": True, "scale": 1.0, "zero_point": 0.0}
    r = _check_qonnx(path, info)
    assert r["checked"] == r["quantizers"] >= 1


def test_scaled_integer_layer_is_integer_in_the_circuit():
    """brevitas' per-channel 8-bit MLP: the circuit holds integer Dense layers and thresholds
    only; the input scale, the weight scales and the float bias are host head/tail or
    thresholds, and inspect names the host parts."""
    c = mc.compile(mc.load_onnx(DATA / "brevitas_pc_w8a8.onnx"))
    assert c.head is not None and [n.op for n in c.head.nodes][-1] == "Requant"
    assert c.tail is not None and {n.op for n in c.tail.nodes} <= {"Mul", "Add"}
    for n in c.graph.nodes:
        if n.op == "Dense":
            for i in n.inputs[1:]:
                t = c.graph.tensor(i).dtype
                assert t.frac == 0, f"{n.name}: {i} is {t}, not integer codes"
    # graph id covers the host parts: a different tail is a different id
    g2 = c.tail.replace(constants={k: v * 2 for k, v in c.tail.constants.items()})
    from modelcircuit.graphs.identity import graph_id

    assert graph_id(c.graph, c.options, c.head, g2) != c.graph_id


def test_verify_scaled_integer_model_bit_exact_rtl_and_gpu_emu():
    """golden == RTL (Verilator, cocotb) == gpu-emu on a brevitas per-tensor non-power-of-two
    model, inputs on its input grid; the accuracy is computed through the host tail."""
    from modelcircuit.sim.verify import verify

    name = "brevitas_pt_w4a4.onnx"
    c = mc.compile(mc.load_onnx(DATA / name))
    x = _inputs(c, MODELS[name], n=64)
    rc, rep = verify(c, x, ["golden", "rtl", "gpu-emu"], out=open("/dev/null", "w"))  # noqa: SIM115
    assert rc == 0 and rep["bit_exact"], rep["pairs"]
    assert all(p["agree"] == 64 for p in rep["pairs"])


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in QONNX_ALL if n != "brevitas_pt_w4a4.onnx"])
def test_verify_every_qonnx_export_bit_exact(name):
    from modelcircuit.sim.verify import verify

    c = mc.compile(mc.load_onnx(DATA / name))
    x = _inputs(c, MODELS[name], n=32)
    rc, rep = verify(c, x, ["golden", "rtl", "gpu-emu"], out=open("/dev/null", "w"))  # noqa: SIM115
    assert rc == 0 and rep["bit_exact"], rep["pairs"]


def test_reference_runtime_helper_sees_a_wrong_weight():
    """The float comparison can fail: one weight changed by 1e-3 of itself is caught."""
    name = "torch_bn_opset13.onnx"
    model = onnx.load(str(DATA / name))
    t = max(model.graph.initializer, key=lambda t: numpy_helper.to_array(t).size)
    w = numpy_helper.to_array(t).copy()
    i = np.unravel_index(np.argmax(np.abs(w)), w.shape)
    w[i] *= 1.001
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    for k, init in enumerate(bad.graph.initializer):
        if init.name == t.name:
            bad.graph.initializer[k].CopyFrom(numpy_helper.from_array(w, t.name))
    c = mc.compile(mc.load_onnx(DATA / name), precision="float32")
    x = _inputs(c, MODELS[name])
    want = _run_reference_runtime(bad, x)
    got = np.asarray(mc.run(c, x), dtype=np.float64).reshape(len(x), -1)
    with pytest.raises(AssertionError):
        assert_float32_close(got, want.astype(np.float64), c, x, "ours - edited model")


def test_host_values_of_a_codes_tensor():
    c = mc.compile(mc.load_onnx(DATA / "brevitas_pt_w4a4.onnx"))
    x = _inputs(c, MODELS["brevitas_pt_w4a4.onnx"], n=4)
    codes = mc.run(c, x, codes=True)
    assert np.array_equal(host.decode(c, codes), mc.run(c, x))
    assert reference.execute(c.graph, [host.encode(c, x)], inputs_are_codes=True)[
        c.graph.outputs[0]].shape == codes.shape


def test_expanded_batchnorm_folds_into_the_dense_in_fixed_point():
    """A float model's BatchNorm written as Add/Mul/Mul/Add after a Gemm folds back into the
    Gemm (one requantization), as a BatchNormalization node does."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((8, 4)), rng.standard_normal(4)
    m_, v_, s_, b2 = (rng.uniform(0.5, 1.5, 4) for _ in range(4))
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w", w), ("b", b), ("m", m_), ("d", np.sqrt(v_ + 1e-5)), ("s", s_), ("b2", b2)]]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"]),
             helper.make_node("Sub", ["g", "m"], ["t1"]), helper.make_node("Div", ["t1", "d"], ["t2"]),
             helper.make_node("Mul", ["t2", "s"], ["t3"]), helper.make_node("Add", ["t3", "b2"], ["y"])]
    gr = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)
    model = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 13)])
    c = mc.compile(mc.frontend.onnx.importer.import_model(model, "expanded"), precision="fixed<16,6>")
    assert [n.op for n in c.graph.nodes] == ["Dense"]
    x = np.random.default_rng(1).uniform(-1, 1, (100, 8)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = mc.run(c, x)
    # fixed<16,6> (lsb 2**-10, truncation): the folded weights' and bias' quantization
    # (8 weights of error < lsb times |x| <= 1, one bias) and one rounding of the result
    assert np.max(np.abs(got - want)) <= 2.0 ** -10 * (8 + 1 + 1)
