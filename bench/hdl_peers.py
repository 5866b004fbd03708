"""Fully parallel (R = 1) Dense circuits against a peer: LUT4 / CCU2C / FF / DSP after the
project's yosys `synth_ecp5`, per model and `--strategy` (mult: a product per weight; da:
shared adder graphs, hdl/plan/cmvm.py, and no DSP block anywhere), plus the export time and
latency; the peer on the same models' Dense layers: alkaid 0.8 (da4ml's successor, the
distributed-arithmetic compiler hls4ml uses, arXiv 2507.04535), with its ternary-adder
fusion off and on, or da4ml, traced by bench/da4ml_peer.py in its own environment
(ALKAID_PYTHON or DA4ML_PYTHON=/path/to/venv/bin/python; skipped with the reason otherwise)
and synthesized with the same yosys script. `--logits`: our circuits without the model's
final Softmax too (the peer has none), so that both sides are the same network. With --pnr,
designs that fit the device are also placed and routed out of context for their Fmax and
latency in ns (slow: tens of minutes each on a loaded machine).

Area is printed as LUT4 + CCU2C and as LUT4 + 2 CCU2C (a CCU2C is two LUT4s with carry:
counting it once flatters carry-heavy designs).

Run: [ALKAID_PYTHON=...] .venv/bin/python bench/hdl_peers.py [--models qkeras,jet16]
     [--strategies da,mult] [--device ecp5-85k] [--pipeline latency] [--logits]
     [--peer-fusion off,on] [--pnr] [--json FILE]
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


def logits_model(path: Path, work: Path) -> Path:
    """The model without its final Softmax (the graph output becomes the Softmax's input):
    the network the peer builds. The model itself where it ends otherwise."""
    import onnx

    m = onnx.load(str(path))
    g = m.graph
    last = [n for n in g.node if g.output[0].name in n.output]
    if not last or last[0].op_type != "Softmax":
        return path
    g.node.remove(last[0])
    g.output[0].name = last[0].input[0]
    out = work / f"{path.stem}_logits.onnx"
    onnx.save(m, str(out))
    return out


def synth_row(model: str, strategy: str, device: str, pnr: bool = False,
              pipeline: str = "latency", logits: bool = False) -> dict[str, Any]:
    """Export (timed) and synthesize one model with one strategy (`logits`: without its
    final Softmax); optionally place and route. Returns the row."""
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.data import load_model
    from modelcircuit.hdl.export import convert
    from modelcircuit.hdl.flow.devices import fpga_profile
    from modelcircuit.hdl.flow.yosys import dsp_budget_for

    path, prec = MODELS[model]
    with tempfile.TemporaryDirectory(prefix="bench-logits-") as d:
        src = logits_model(path, Path(d)) if logits else path
        c = mc_compile(load_model(str(src)), precision=prec, strategy=strategy)
    t0 = time.perf_counter()
    v, _, info = convert(c, pipeline=pipeline)
    export_s = time.perf_counter() - t0
    prof = fpga_profile(device)
    row: dict[str, Any] = {"model": model + (" logits" if logits else ""),
                           "tool": f"modelcircuit --strategy {strategy}", "pipeline": pipeline, "export_s": round(export_s, 2),
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
    row["lut4_plus_2ccu2c"] = row["lut4"] + 2 * row["ccu2c"]
    if row.get("fmax_mhz") and row.get("latency") is not None:
        row["latency_ns"] = round(row["latency"] * 1000 / row["fmax_mhz"], 1)


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


def peer_python() -> tuple[str | None, str]:
    """(the peer environment's interpreter, which variable named it): ALKAID_PYTHON first."""
    for var in ("ALKAID_PYTHON", "DA4ML_PYTHON"):
        py = os.environ.get(var)
        if py and Path(py).exists():
            return py, var
    return None, ""


def da4ml_row(model: str, device: str, pnr: bool = False, cutoff: float = 5.0,
              ternary_fuse: bool = True) -> dict[str, Any]:
    """The peer (alkaid, else da4ml: bench/da4ml_peer.py in ALKAID_PYTHON's or DA4ML_PYTHON's
    environment) on the same model's Dense layers, synthesized with the same yosys flow; a
    skip with the reason when neither is available."""
    import numpy as np

    from modelcircuit.api import compile as mc_compile
    from modelcircuit.data import load_model
    from modelcircuit.hdl.flow.devices import fpga_profile

    py, _ = peer_python()
    row: dict[str, Any] = {"model": model, "tool": "alkaid/da4ml"}
    if py is None:
        return dict(row, skipped="neither ALKAID_PYTHON nor DA4ML_PYTHON names a Python with "
                                 "alkaid or da4ml (python3.11 -m venv V && V/bin/pip install "
                                 "alkaid numpy)")
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
                            str(work), str(cutoff), "1" if ternary_fuse else "0"],
                           capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:]
            return dict(row, skipped=f"the peer failed: {tail}")
        info = json.loads(r.stdout.strip().splitlines()[-1])
        tool = info.get("tool", "da4ml")
        if info.get("ternary_fuse") is not None:
            tool += f" (ternary fusion {'on' if info['ternary_fuse'] else 'off'})"
        row.update(tool=tool, export_s=round(time.perf_counter() - t0, 2),
                   latency=info["latency"], pipeline=f"latency_cutoff {info['cutoff']:g}",
                   note="Dense layers only (the peer has no Softmax)")
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
    ap.add_argument("--logits", action="store_true",
                    help="our circuits without the model's final Softmax (like the peer)")
    ap.add_argument("--peer-fusion", default="off,on",
                    help="alkaid's ternary-adder fusion: off, on or both (da4ml: ignored)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "hdl_peers.json"))
    a = ap.parse_args()
    fusions = [f for f in a.peer_fusion.split(",") if f]
    if any(f not in ("off", "on") for f in fusions):
        print(f"error: --peer-fusion takes off, on or both, got {a.peer_fusion!r}",
              file=sys.stderr)
        return 2
    if peer_python()[1] != "ALKAID_PYTHON":
        fusions = fusions[:1]  # da4ml has no such switch: one row
    rows = []
    for m in a.models.split(","):
        if m not in MODELS:
            print(f"error: unknown model {m!r}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        if not MODELS[m][0].exists():
            rows.append({"model": m, "tool": "-", "skipped": f"{MODELS[m][0]} absent"})
            continue
        for s in [s for s in a.strategies.split(",") if s]:  # "" : the peer's rows only
            rows.append(synth_row(m, s, a.device, a.pnr, a.pipeline, a.logits))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        for f in fusions:
            rows.append(da4ml_row(m, a.device, a.pnr, a.da4ml_cutoff, f == "on"))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    cols = ["model", "tool", "lut4", "ccu2c", "lut4_plus_ccu2c", "lut4_plus_2ccu2c", "ff",
            "dsp", "latency", "fmax_mhz", "latency_ns", "export_s", "synth_s", "pnr_s"]
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
