"""Fully parallel (R = 1) Dense circuits against a peer: LUT4 / CCU2C / FF / DSP after the
project's yosys `synth_ecp5`, per model and `--strategy` (mult: a product per weight; da:
shared adder graphs, hdl/plan/cmvm.py, and no DSP block anywhere), plus the export time and
latency; da4ml (the distributed-arithmetic compiler hls4ml uses, arXiv 2507.04535) on the
same models' Dense layers, traced by bench/da4ml_peer.py in its own environment
(DA4ML_PYTHON=/path/to/venv/bin/python with da4ml installed; skipped with the reason
otherwise) and synthesized with the same yosys script. With --pnr, designs that fit an
ecp5-85k are also placed and routed out of context for their Fmax (slow: tens of minutes
each on a loaded machine).

Run: [DA4ML_PYTHON=...] .venv/bin/python bench/hdl_peers.py [--models qkeras,jet16]
     [--strategies da,mult] [--device ecp5-85k] [--pipeline latency] [--pnr] [--json FILE]
Prints a table and writes JSON (bench/results/hdl_peers.json by default).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "models"
MODELS = {  # name -> (file, precision: None = the model's own types)
    "qkeras": (SHARED / "qkeras_jettagging.onnx", None),
    "jet16": (SHARED / "three_layer_keras.onnx", "fixed<16,6>"),
    "jet8": (SHARED / "three_layer_keras.onnx", "fixed<8,3>"),
}


def synth_row(model: str, strategy: str, device: str, pnr: bool = False,
              pipeline: str = "latency") -> dict[str, Any]:
    """Export (timed) and synthesize one model with one strategy; optionally place and
    route. Returns the row."""
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.data import load_model
    from modelcircuit.hdl.export import convert
    from modelcircuit.hdl.flow.devices import fpga_profile
    from modelcircuit.hdl.flow.yosys import dsp_budget_for

    path, prec = MODELS[model]
    c = mc_compile(load_model(str(path)), precision=prec, strategy=strategy)
    t0 = time.perf_counter()
    v, _, info = convert(c, pipeline=pipeline)
    export_s = time.perf_counter() - t0
    prof = fpga_profile(device)
    row: dict[str, Any] = {"model": model, "tool": f"modelcircuit --strategy {strategy}",
                           "pipeline": pipeline, "export_s": round(export_s, 2),
                           "latency": info["latency"], "ii": info["ii"]}
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        # the Verilog: with the export's text cores (hdl/units/netlist_text.py) the RTLIL holds the
        # rest of the design only
        (work / "top.v").write_text(v)
        _synth_row(row, work / "top.v", prof, work, pnr, dsp_budget=dsp_budget_for(c))
    return row


def _synth_row(row: dict[str, Any], design: Path, prof: dict[str, Any], work: Path, pnr: bool,
               **kw: Any) -> None:
    """Synthesis numbers (and, with pnr, post-route Fmax) of one design into `row`: the same
    yosys for our strategies and for da4ml."""
    from modelcircuit.hdl.flow.tools import Runner
    from modelcircuit.hdl.flow.yosys import synthesize

    t0 = time.perf_counter()
    st = synthesize(design, prof, work, Runner(work / "logs"), **kw)
    row.update({"lut4": st["lut"], "ccu2c": st["carry"], "ff": st["ff"], "dsp": st["dsp"],
                "synth_s": round(time.perf_counter() - t0, 1)})
    if pnr:
        _fits_then_pnr(row, st, work, prof)
    row["lut4_plus_ccu2c"] = row["lut4"] + row["ccu2c"]


def _fits_then_pnr(row: dict[str, Any], st: dict[str, Any], work: Path,
                   prof: dict[str, Any]) -> None:
    """Post-route Fmax (and nextpnr's wall time) into `row` when synthesis fits the device;
    else the reason."""
    from modelcircuit.hdl.flow.tools import FlowError
    from modelcircuit.hdl.flow.yosys import check_fit

    try:
        check_fit(st, prof, row["tool"])
    except FlowError as e:
        row["pnr_skipped"] = str(e).splitlines()[0]
        return
    t0 = time.perf_counter()
    row["fmax_mhz"] = _pnr(work, prof)
    row["pnr_s"] = round(time.perf_counter() - t0, 1)


ROUTER = "router2"  # nextpnr's faster router; these designs use at most half an 85k


def _pnr(work: Path, prof: dict[str, Any]) -> float | None:
    """Out-of-context place and route of work/synth.json (the project's nextpnr step, at
    150 MHz, with ROUTER); the post-route Fmax."""
    from modelcircuit.hdl.flow.nextpnr import place_and_route
    from modelcircuit.hdl.flow.tools import Runner

    rep = place_and_route(prof, work, Runner(work / "logs"), True, 150.0, "model", ROUTER)
    return rep.get("fmax_mhz")


def dense_spec(c: Any) -> dict[str, Any]:
    """The compiled model's Dense chain as bench/da4ml_peer.py reads it: the input type and,
    per Dense, integer weights and bias with their fraction bits, the output type, the
    fused ReLU. Raises ValueError for a graph that is not a chain of Dense layers (an
    optional Softmax at the end is left out: da4ml has none)."""
    from modelcircuit.graphs.ops import DenseAttrs, Op

    g = c.graph
    dense = [n for n in g.nodes if n.op == Op.DENSE]
    other = [n.op for n in g.nodes if n.op not in (Op.DENSE, Op.SOFTMAX)]
    if not dense or other:
        raise ValueError(f"not a Dense chain (also {sorted(set(map(str, other)))})")
    t_in = g.tensor(dense[0].inputs[0]).dtype
    spec: dict[str, Any] = {"layers": len(dense), "n_in": g.tensor(dense[0].inputs[0]).size,
                            "in_type": [int(t_in.signed), t_in.int_bits, t_in.frac]}
    for k, n in enumerate(dense):
        tw, to = g.tensor(n.inputs[1]).dtype, g.tensor(n.outputs[0]).dtype
        spec[f"w{k}"], spec[f"wf{k}"] = g.constants[n.inputs[1]], tw.frac
        if len(n.inputs) > 2 and n.inputs[2]:
            spec[f"b{k}"], spec[f"bf{k}"] = g.constants[n.inputs[2]], g.tensor(n.inputs[2]).dtype.frac
        else:
            spec[f"b{k}"], spec[f"bf{k}"] = [0] * g.tensor(n.outputs[0]).size, 0
        spec[f"out{k}"] = [int(to.signed), to.int_bits, to.frac]
        spec[f"relu{k}"] = int(DenseAttrs.of(n).relu)
    return spec


def da4ml_row(model: str, device: str, pnr: bool = False, cutoff: float = 5.0
              ) -> dict[str, Any]:
    """da4ml on the same model's Dense layers (bench/da4ml_peer.py in DA4ML_PYTHON's
    environment), synthesized with the same yosys flow; a skip with the reason when da4ml
    is not available."""
    import numpy as np

    from modelcircuit.api import compile as mc_compile
    from modelcircuit.data import load_model
    from modelcircuit.hdl.flow.devices import fpga_profile

    py = os.environ.get("DA4ML_PYTHON")
    row: dict[str, Any] = {"model": model, "tool": "da4ml"}
    if not py or not Path(py).exists():
        return dict(row, skipped="DA4ML_PYTHON is not set to a Python with da4ml installed "
                                 "(python3.11 -m venv V && V/bin/pip install da4ml numpy)")
    path, prec = MODELS[model]
    c = mc_compile(load_model(str(path)), precision=prec)
    try:
        spec = dense_spec(c)
    except ValueError as e:
        return dict(row, skipped=str(e))
    prof = fpga_profile(device)
    with tempfile.TemporaryDirectory(prefix="bench-da4ml-") as d:
        work = Path(d)
        np.savez(work / "spec.npz", **{k: np.asarray(v) for k, v in spec.items()})
        t0 = time.perf_counter()
        r = subprocess.run([py, str(ROOT / "bench" / "da4ml_peer.py"), str(work / "spec.npz"),
                            str(work), str(cutoff)], capture_output=True, text=True,
                           timeout=3600)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:]
            return dict(row, skipped=f"da4ml failed: {tail}")
        info = json.loads(r.stdout.strip().splitlines()[-1])
        row.update(export_s=round(time.perf_counter() - t0, 2), latency=info["latency"],
                   pipeline=f"latency_cutoff {info['cutoff']:g}", note="Dense layers only "
                   "(da4ml has no Softmax)")
        _synth_row(row, work / "da4ml_top.v", prof, work, pnr, top=info["top"])
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qkeras,jet16")
    ap.add_argument("--strategies", default="da,mult")
    ap.add_argument("--device", default="ecp5-85k")
    ap.add_argument("--pipeline", default="latency")
    ap.add_argument("--pnr", action="store_true")
    ap.add_argument("--da4ml-cutoff", type=float, default=5.0,
                    help="da4ml's latency_cutoff (pipeline registers), its own delay units")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "hdl_peers.json"))
    a = ap.parse_args()
    rows = []
    for m in a.models.split(","):
        if m not in MODELS:
            print(f"error: unknown model {m!r}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        if not MODELS[m][0].exists():
            rows.append({"model": m, "tool": "-", "skipped": f"{MODELS[m][0]} absent"})
            continue
        for s in [s for s in a.strategies.split(",") if s]:  # "" : the peer's rows only
            rows.append(synth_row(m, s, a.device, a.pnr, a.pipeline))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        rows.append(da4ml_row(m, a.device, a.pnr, a.da4ml_cutoff))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    cols = ["model", "tool", "lut4", "ccu2c", "lut4_plus_ccu2c", "ff", "dsp", "latency",
            "export_s", "synth_s", "fmax_mhz", "pnr_s"]
    print(" | ".join(cols))
    for r in rows:
        if "skipped" in r:
            print(f"{r['model']} | {r['tool']} | skipped: {r['skipped']}")
        else:
            print(" | ".join(str(r.get(k, "")) for k in cols))
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"device": a.device, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
