"""The CMVM adder graphs (hdl/plan/cmvm.py, `--strategy da`) of the jet taggers: per Dense
layer the optimiser's CPU time, adders, carry-chain bits and adder depth, as the export
builds them (the graphs the Verilog holds), and the whole ONNX -> Verilog export's time.

CPU seconds (time.process_time), not wall time: the machine is shared, and a loaded machine
stretches wall time but not the CPU time of one single-threaded process (it still slows it
somewhat: caches; the load average is written beside the rows). The optimiser's time is
taken around each call the export makes (`cmvm.optimize` is looked up at call time), so the
same script measures any version of the module (run it from another checkout's src/).

Run: PYTHONPATH=src .venv/bin/python bench/cmvm.py [--models qkeras,jet16,jet8]
     [--repeat 2] [--json FILE]
Prints a table and writes JSON (bench/results/cmvm.json by default).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchio import write_json

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "models"
MODELS = {  # name -> (file, precision: None = the model's own types)
    "qkeras": (SHARED / "qkeras_jettagging.onnx", None),
    "jet16": (SHARED / "three_layer_keras.onnx", "fixed<16,6>"),
    "jet8": (SHARED / "three_layer_keras.onnx", "fixed<8,3>"),
}


def run_model(name: str) -> tuple[list[dict[str, Any]], float]:
    """(per layer rows, export CPU seconds) of one model at R = 1, strategy "da"."""
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.data import load_model
    from modelcircuit.hdl.export import convert
    from modelcircuit.hdl.plan import cmvm

    path, prec = MODELS[name]
    c = mc_compile(load_model(str(path)), precision=prec, strategy="da")
    rows: list[dict[str, Any]] = []
    real = cmvm.optimize

    def timed(w: Any, *a: Any, **kw: Any) -> Any:
        t0 = time.process_time()
        g = real(w, *a, **kw)
        rows.append({"model": name, "layer": len(rows), "shape": "x".join(map(str, w.shape)),
                     "cmvm_s": round(time.process_time() - t0, 3),
                     "adders": len(g.adders()),
                     "chain_bits": sum(g.chain_bits(i) for i in g.adders()),
                     "depth": g.depth})
        return g

    cmvm.optimize = timed
    try:
        t0 = time.process_time()
        convert(c, pipeline="latency")
        export_s = time.process_time() - t0
    finally:
        cmvm.optimize = real
    return rows, export_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qkeras,jet16,jet8")
    ap.add_argument("--repeat", type=int, default=2, help="runs per model; the fastest kept")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "cmvm.json"))
    args = ap.parse_args()
    import modelcircuit

    layers: list[dict[str, Any]] = []
    totals: list[dict[str, Any]] = []
    for name in args.models.split(","):
        if name not in MODELS:
            print(f"error: unknown model {name!r} (known: {', '.join(MODELS)})", file=sys.stderr)
            return 2
        best: tuple[list[dict[str, Any]], float] | None = None
        for _ in range(max(1, args.repeat)):
            rows, export_s = run_model(name)
            if best is None or export_s < best[1]:
                best = (rows, export_s)
        assert best is not None
        rows, export_s = best
        layers += rows
        totals.append({"model": name, "export_s": round(export_s, 2),
                       "cmvm_s": round(sum(r["cmvm_s"] for r in rows), 2),
                       "adders": sum(r["adders"] for r in rows),
                       "chain_bits": sum(r["chain_bits"] for r in rows)})
    print(f"{'model':8} {'layer':>5} {'shape':>7} {'cmvm_s':>7} {'adders':>7} {'bits':>7} depth")
    for r in layers:
        print(f"{r['model']:8} {r['layer']:5} {r['shape']:>7} {r['cmvm_s']:7.3f} "
              f"{r['adders']:7} {r['chain_bits']:7} {r['depth']:5}")
    print(f"{'model':8} {'export_s':>8} {'cmvm_s':>7} {'adders':>7} {'bits':>7}")
    for t in totals:
        print(f"{t['model']:8} {t['export_s']:8.2f} {t['cmvm_s']:7.2f} {t['adders']:7} "
              f"{t['chain_bits']:7}")
    write_json(args.json, {"bench": "cmvm", "source": str(Path(modelcircuit.__file__).parent),
                           "layers": layers, "totals": totals})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
