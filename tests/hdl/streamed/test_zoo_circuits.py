"""The 8-bit zoo CNNs (tests/data/exporters/zoo: brevitas ResNet-8 and DS-CNN) as streamed
circuits. Fast: their plans use the folded Threshold (hdl/streamed/threshold.py: the search,
or the product where the thresholds are affine) and,
for DS-CNN, the depthwise units (hdl/streamed/depthwise.py), within the HDL size limits
(DS-CNN was refused by the product limit with 255 comparators per channel). Slow: the whole
models through `modelcircuit verify --backends golden,rtl,gpu-emu --reuse auto`, bit-exact,
with the simulated latency and II equal to the compile-time report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import modelcircuit as mc
from modelcircuit.api import compile
from modelcircuit.hdl import plan_top

ZOO = Path(__file__).resolve().parents[2] / "data" / "exporters" / "zoo"
ROOT = Path(__file__).resolve().parents[3]


def _kinds(info: dict) -> list[str]:
    """Per layer: its inner unit's kind (a window's), else its own; and the kind of the unit
    chained after a window's inner unit (a quantizer that alone reads a Conv)."""
    out = []
    for lay in info["layers"]:
        out.append(str(lay.get("inner", {}).get("kind") or lay.get("kind", "")))
        if "then" in lay:
            out.append(str(lay["then"]["kind"]))
    return out


@pytest.mark.parametrize("name,reuse", [("dscnn_q8", 9), ("resnet8_q8", 36)])
def test_zoo_plans_stream_with_searches(name, reuse) -> None:
    c = compile(mc.load_onnx(str(ZOO / f"{name}.onnx")))
    info = plan_top(c, reuse)
    kinds = _kinds(info)
    n_thr = sum(1 for n in c.graph.nodes if str(n.op) == "Threshold")
    assert sum(k.startswith(("threshold search", "threshold multiply")) for k in kinds) == n_thr
    # the quantizers after a convolution are affine in their wide accumulators: products
    wide = sum(1 for n in c.graph.nodes if str(n.op) == "Threshold"
               and c.graph.tensor(n.inputs[0]).dtype.width >= 16)
    assert wide == 9 and sum(k.startswith("threshold multiply") for k in kinds) >= wide
    if name == "dscnn_q8":  # 4 depthwise 3x3 layers and the global one (the average pool)
        assert kinds.count("depthwise") == 4 and kinds.count("global depthwise") == 1
    assert info["ii"] >= 1 and info["latency"] > 0


@pytest.mark.parametrize("name", ["dscnn_q8", "resnet8_q8"])
def test_zoo_quantizers_chain_into_folded_convs(name) -> None:
    """A quantizer no slower than the folded Conv it alone reads runs in that Conv's window
    unit (ChainUnit): no stream unit and no FIFO of accumulator tokens between them."""
    c = compile(mc.load_onnx(str(ZOO / f"{name}.onnx")))
    info = plan_top(c, 288)
    n_thr = sum(1 for n in c.graph.nodes if str(n.op) == "Threshold")
    kinds = _kinds(info)
    assert sum(k.startswith(("threshold search", "threshold multiply")) for k in kinds) == n_thr
    chained = [lay for lay in info["layers"] if "then" in lay]
    assert chained and all(lay["inner"]["then"]["ii"] <= lay["inner"]["ii"] for lay in chained)
    fed = {lay["node"] for lay in info["layers"]}
    assert not fed & {lay["then"]["node"] for lay in chained}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dscnn_q8", "resnet8_q8"])
def test_zoo_verify_rtl_bit_exact(name, tmp_path) -> None:
    out = tmp_path / "v.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, "-m", "modelcircuit.cli", "verify",
                        str(ZOO / f"{name}.onnx"), "--backends", "golden,rtl,gpu-emu",
                        "--reuse", "auto", "--vectors", "1", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=3600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["bit_exact"] and r["timing_ok"], r["pairs"]
    assert {(p["a"], p["b"]) for p in r["pairs"] if p["bit_exact"]} == {
        ("golden", "rtl"), ("golden", "gpu-emu"), ("rtl", "gpu-emu")}
    rtl = r["notes"]["rtl"]  # simulated latency and II equal the compile-time report
    assert rtl["complete"] and rtl["latency_ok"] and rtl["ii_ok"], rtl
    assert (rtl["latency"], rtl["ii"]) == (rtl["latency_expected"], rtl["ii_expected"])


@pytest.mark.parametrize("name,plan", [("resnet8_q8", 16), ("resnet8_q8", 64),
                                       ("resnet8_q8", 2304), ("dscnn_q8", 64),
                                       ("dscnn_q8", 288)])
def test_estimate_knows_which_quantizers_read_in_place(name, plan) -> None:
    """hdl/flow/threshold_cost.reads_in_place (the estimate: no copy of the C inputs) says
    what the built chain says (ChainUnit.b_in_place), quantizer by quantizer; the global
    depthwise's products are the unit's (a pooling sum of ones has none)."""
    from modelcircuit.hdl.flow.layer_cost import dense_layers, depthwise_cost
    from modelcircuit.hdl.flow.stream_time import busy_fn, frame_time
    from modelcircuit.hdl.flow.threshold_cost import reads_in_place, threshold_layers

    c = compile(mc.load_onnx(str(ZOO / f"{name}.onnx")))
    g = c.graph
    layers = dense_layers(c)
    reuse = {lay["node"]: min(plan, int(lay["w"].size)) for lay in layers}
    info = plan_top(c, reuse)
    built = {lay["then"]["node"]: lay["inner"]["then"]["reads_in_place"]
             for lay in info["layers"] if "then" in lay}
    assert built
    nodes = {n.name: n for n in g.nodes}
    busy = {lay["node"]: busy_fn(g, nodes[lay["node"]], lay) for lay in layers}
    t = frame_time(busy, reuse)
    est = {lay["node"]: reads_in_place(lay, reuse, t) for lay in threshold_layers(c)}
    assert {n: est[n] for n in built} == built
    assert not any(v for n, v in est.items() if n not in built)
    for lay in layers:
        if lay.get("depthwise") and lay["depthwise"][2]:
            unit = [x for x in info["layers"] if x.get("node") == lay["node"]][0]
            assert depthwise_cost(lay, 2).multipliers == unit["multipliers"]


def test_auto_plan_fits_with_its_fifos() -> None:
    """--reuse auto for the 8-bit ResNet-8 on an ECP5-85k: the plan the search takes fits
    with everything its design has, FIFOs included (the search's own glue has none: it once
    took a plan ~8k flip-flops over and build refused it), LUT and FF within the margin."""
    from modelcircuit.hdl.flow import plan_circuit
    from modelcircuit.hdl.flow.devices import fpga_profile

    c = compile(mc.load_onnx(str(ZOO / "resnet8_q8.onnx")), profile="ecp5-85k")
    fit = plan_circuit(c, "auto").fit
    blk, est, prof = fit["stream"], fit["estimate"], fpga_profile("ecp5-85k")
    assert blk["logic_fits"] and blk["over"] == {}, blk["over"]
    assert est["lut"] <= 0.6 * prof["lut"] and est["ff"] <= 0.6 * prof["ff"]
    glue = [lay for lay in fit["layers"] if lay["node"].startswith("<stream")][0]
    assert glue["ff"] > 0 and blk["bram"]["fifos"] > 0
    # the Dense after the global pool folds its 64 channels (one product, not 64)
    assert fit["reuse"]["node_linear"] == 640
