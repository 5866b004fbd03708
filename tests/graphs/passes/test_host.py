"""passes/host.py + graphs/host.py: the float head and tail of a quantized model run on the
host, travel with the artifact, and are named by inspect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import modelcircuit as mc
from modelcircuit.graphs import host, reference
from tests.hostile import assert_refused, run_cli

DATA = Path(__file__).resolve().parents[2] / "data" / "exporters"
W4A4 = DATA / "brevitas_pt_w4a4.onnx"
PRE = DATA / "float_pre_mulsub.onnx"


def test_head_is_preprocessing_and_first_quantizer():
    c = mc.compile(mc.load_onnx(PRE))
    assert [n.op for n in c.head.nodes][-1] == "Requant"
    assert {n.op for n in c.head.nodes[:-1]} <= {"Mul", "Add", "Sub", "Div", "Reshape"}
    assert c.graph.inputs[0] == c.head.outputs[0]  # the circuit starts from the codes
    # the head runs in float32 like the model: the circuit's input codes equal quantizing the
    # pre-processed float32 input with the model's own rule
    x = np.random.default_rng(0).uniform(0, 1, (200, 64)).astype(np.float32)
    codes = host.encode(c, x)
    env = reference.execute(c.head, [x], trace=True)
    q = c.head.nodes[-1]
    assert np.array_equal(codes, env[q.outputs[0]])


def test_no_host_parts_in_float_mode_or_plain_models():
    assert mc.compile(mc.load_onnx(W4A4), precision="float32").head is None
    c = mc.compile(mc.load_onnx(DATA / "torch_bn_opset13.onnx"), precision="fixed<16,6>")
    assert c.head is None and c.tail is None


def test_artifact_carries_host_parts_and_refuses_a_tampered_tail(tmp_path):
    out = tmp_path / "a"
    r = run_cli(["compile", str(W4A4), "--target", "golden", "--out", str(out)])
    assert r.rc == 0, r.err
    m = json.loads((out / "manifest.json").read_text())
    assert m["host"]["head"] and m["host"]["tail"]
    r = run_cli(["inspect", str(out)])
    assert r.rc == 0 and "host head (float32" in r.out and "host tail (float32" in r.out
    # same model and options -> byte-identical host files
    out2 = tmp_path / "b"
    assert run_cli(["compile", str(W4A4), "--target", "golden", "--out", str(out2)]).rc == 0
    for f in ("host.json", "host.npz", "graph.json", "weights.npz", "manifest.json"):
        assert (out / f).read_bytes() == (out2 / f).read_bytes(), f
    # a changed tail constant is a changed artifact: refused, whatever the manifest says
    h = json.loads((out / "host.json").read_text())
    h["tail"]["nodes"][0]["name"] = "renamed"
    (out / "host.json").write_text(json.dumps(h))
    assert_refused(run_cli(["inspect", str(out)]), "host.json")
