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
