"""Attention FPGA benchmark (slow: place and route of a transformer encoder, tens of minutes on
a loaded machine).

The small builder encoder of tests/graphs/test_attention_types.py (8 tokens, d 16, 2 heads,
FFN 32, 5 classes: Q/K/V token-wise Dense, Attention, Dense, residual Add, LayerNorm, FFN,
Add, LayerNorm, mean over tokens, classifier) at fixed<16,6> on ecp5-85k with --reuse auto:
the fit's estimate (before any tool runs), the compile-time II / latency per sequence, and,
unless --estimate-only, `build` out of context: LUT/FF/DSP/BRAM and Fmax from nextpnr. Prints
a table and writes JSON (bench/results/attention_fpga.json by default).

Run: .venv/bin/python bench/attention_fpga.py [--device ecp5-85k] [--tokens 8 --d 16
     --heads 2 --ffn 32] [--estimate-only] [--reuse auto|'{"layer": R, ...}'] [--keep DIR]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from tests.graphs.test_attention_types import encoder

    from modelcircuit.api import compile
    from modelcircuit.hdl import plan_top
    from modelcircuit.hdl.flow import FlowError, build
    from modelcircuit.hdl.flow.fit import plan_circuit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="ecp5-85k")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=32)
    ap.add_argument("--precision", default="fixed<16,6>")
    ap.add_argument("--estimate-only", action="store_true")
    ap.add_argument("--reuse", default="auto",
                    help="auto, or a JSON object {layer: R} given to the flow as is (checked "
                         "against the whole device, not the fit's routing margin)")
    ap.add_argument("--keep", help="keep the build directory here")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "attention_fpga.json"))
    a = ap.parse_args(argv)
    g = encoder(tokens=a.tokens, d=a.d, heads=a.heads, ffn=a.ffn, classes=5)
    t0 = time.perf_counter()
    reuse = a.reuse if a.reuse == "auto" else json.loads(a.reuse)
    c = compile(g, precision=a.precision, profile=a.device, reuse=reuse)
    plan = plan_circuit(c, reuse)
    info = plan_top(c, plan)
    est = (plan.fit or {}).get("estimate")
    if est is None:  # an explicit plan: the flow's check of it (fit.check_plan)
        from modelcircuit.hdl.flow.devices import fpga_profile
        from modelcircuit.hdl.flow.fit import check_plan

        try:
            est = check_plan(c, fpga_profile(a.device), dict(plan.reuse)).estimate
        except FlowError as e:
            est = {"refused": str(e).splitlines()[0]}
    row: dict = {"model": g.name, "device": a.device, "precision": a.precision,
                 "reuse_option": a.reuse, "reuse": dict(plan.reuse), "ii_per_token": info["ii"],
                 "sequence_cycles": info["frame_cycles"], "latency_cycles": info["latency"],
                 "estimate": est,
                 "plan_s": round(time.perf_counter() - t0, 2)}
    print(f"{g.name}: reuse {row['reuse']}")
    print(f"compile time: II {row['ii_per_token']} cycles per token, "
          f"{row['sequence_cycles']} per sequence, latency {row['latency_cycles']} cycles")
    print(f"estimate ({a.device}): {row['estimate']}")
    if not a.estimate_only:
        out = (Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-attn-"))) / \
            f"{g.name}-{a.device}"
        t1 = time.perf_counter()
        try:
            rep = build(c, a.device, out, reuse=reuse,
                        progress=lambda s: print(f"  {s}", file=sys.stderr, flush=True))
            m = rep["model"]
            row.update({"fmax_mhz": rep["fmax_mhz"], "latency_ns": m["latency_ns"],
                        **rep["resources"], "tool_wall_s": rep["tool_wall_s"],
                        "critical_path": rep["critical_path"][-6:], "out": str(out)})
        except FlowError as e:
            row["error"] = str(e).splitlines()[0]
        row["build_s"] = round(time.perf_counter() - t1, 1)
        hdr = f"{'model':28s} {'II/tok':>6s} {'seq':>5s} {'lat':>5s} {'Fmax':>7s} {'LUT':>7s} " \
              f"{'FF':>7s} {'DSP':>4s} {'BRAM':>4s}"
        print(hdr)
        if "error" in row:
            print(f"{row['model']:28s} error: {row['error']}")
        else:
            print(f"{row['model']:28s} {row['ii_per_token']:>6} {row['sequence_cycles']:>5} "
                  f"{row['latency_cycles']:>5} {row['fmax_mhz']:>7.1f} {row['lut']:>7} "
                  f"{row['ff']:>7} {row['dsp']:>4} {row['bram']:>4}")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(row, indent=1, default=str) + "\n")
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
