"""Synthesis and out-of-context place-and-route of a model at a given per-layer reuse plan:
the real LUT/FF/DSP/BRAM, RAM LUTs and post-route Fmax of a plan that `build --reuse auto`
may refuse on its estimate (what calibrates that estimate; issue 29's ResNet-8 and DS-CNN).

The plan: a JSON file holding either {"plan": {node: R}} or what `modelcircuit compile MODEL
--target verilog --reuse auto --profile P --out D` writes to D/hdl/top.json (its fit.reuse).

Run: .venv/bin/python bench/place_plan.py MODEL.onnx PLAN.json --profile ecp5-85k --out DIR
     [--precision fixed<8,3>] [--seed 1]
Writes DIR/result.json (the flow's report plus plan, latency, II, wall seconds) and prints
its summary; the tools' logs are under DIR/logs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import modelcircuit as mc
from modelcircuit.api import compile as mc_compile
from modelcircuit.hdl.flow import plan_circuit
from modelcircuit.hdl.flow.build import build_top, run_component
from modelcircuit.hdl.flow.devices import fpga_profile
from modelcircuit.hdl.flow.tools import Runner


def die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_plan(path: Path) -> dict[str, int]:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        die(f"plan {path}: {e}")
    plan = (d.get("plan") or (d.get("fit") or {}).get("reuse")) if isinstance(d, dict) else None
    if not isinstance(plan, dict) or not plan:
        die(f"plan {path}: no 'plan' or 'fit.reuse' object")
    assert isinstance(plan, dict)
    return {str(k): int(v) for k, v in plan.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("plan")
    ap.add_argument("--profile", default="ecp5-85k")
    ap.add_argument("--out", required=True)
    ap.add_argument("--precision", default=None)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    out = Path(a.out)
    reuse = read_plan(Path(a.plan))
    try:
        c = mc_compile(mc.load_onnx(a.model), a.precision, profile=a.profile)
    except (mc.GraphError, ValueError) as e:
        die(f"{a.model}: {e}")
    plan = plan_circuit(c, reuse)
    out.mkdir(parents=True, exist_ok=True)
    t = time.time()
    core, info = build_top(c, plan)
    print(f"latency {info.get('latency')} ii {info.get('ii')}", flush=True)
    rep = run_component(core, fpga_profile(a.profile), out,
                        Runner(out / "logs", lambda s: print(" ", s, flush=True)),
                        Path(a.model).stem, seed=a.seed)
    rep.update(plan=reuse, latency=info.get("latency"), ii=info.get("ii"),
               wall_s=round(time.time() - t))
    (out / "result.json").write_text(json.dumps(rep, indent=1, default=str))
    print(json.dumps({k: rep.get(k) for k in ("fmax_mhz", "lut", "ff", "dsp", "bram",
                                               "wall_s")}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
