"""da4ml (arXiv 2507.04535; `pip install da4ml`) or its successor alkaid (`pip install
alkaid`, 0.8: ternary-adder fusion, LUT packing of 1-bit inputs) on the Dense layers of a
model, run in a separate Python environment that has one of them installed
(bench/hdl_peers.py calls this script with that environment's interpreter:
ALKAID_PYTHON or DA4ML_PYTHON=/path/to/venv/bin/python; neither is ever a dependency of the
project). alkaid is used where it imports, else da4ml (the same framework-free API, renamed).

usage: python da4ml_peer.py SPEC.npz OUT_DIR [LATENCY_CUTOFF [TERNARY_FUSE 0|1]]
SPEC.npz (written by bench/hdl_peers.py from the compiled graph): the input type and, per
Dense layer l, its integer weights `w{l}` / bias `b{l}` with their fraction bits, the output
type (signed, integer bits with the sign, fraction bits) and whether a ReLU is fused. The
same layers, types, rounding (half up) and saturation as modelcircuit's circuit, traced with
da4ml's framework-free API (FixedVariableArrayInput, x @ W + b, quantize/relu), one CMVM
solution per layer, pipelined at LATENCY_CUTOFF (da4ml's own delay units; default 5) and
written as Verilog by its RTLModel (alkaid: with or without its ternary-adder fusion, its
default on). The Softmax is not built (neither has one).
Writes OUT_DIR/rtl/src/*.v and OUT_DIR/da4ml_top.v (every module in one file) and prints
one JSON line: the tool and version, trace + solve seconds, write seconds, pipeline stages
(latency cycles), top module name.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def kif(signed: int, int_bits: int, frac: int) -> tuple[int, int, int]:
    """modelcircuit's (signed, I with the sign, F) as da4ml's (k, i without the sign, f)."""
    return int(signed), int(int_bits) - int(signed), int(frac)


def _api() -> tuple[str, Any, Any, Any, Any, Any]:
    """(tool name and version, RTLModel, the input array class, trace, quantize, relu)."""
    from importlib.metadata import version

    try:
        from alkaid.codegen import RTLModel
        from alkaid.trace import FVArrayInput, trace
        from alkaid.trace.ops import quantize, relu

        return f"alkaid {version('alkaid')}", RTLModel, FVArrayInput, trace, quantize, relu
    except ImportError:
        from da4ml.codegen import RTLModel
        from da4ml.trace import FixedVariableArrayInput, comb_trace
        from da4ml.trace.ops import quantize, relu

        return (f"da4ml {version('da4ml')}", RTLModel, FixedVariableArrayInput, comb_trace,
                quantize, relu)


def main(spec_path: str, out: str, cutoff: float = 5.0, ternary_fuse: bool = True) -> None:
    tool, RTLModel, Input, trace, quantize, relu = _api()
    spec = np.load(spec_path)
    n_layers = int(spec["layers"])
    t0 = time.perf_counter()
    inp = Input((int(spec["n_in"]),))
    x = quantize(inp, *kif(*spec["in_type"]))  # the input type itself (WRAP only)
    for lay in range(n_layers):
        w = spec[f"w{lay}"].astype(np.float64) * 2.0 ** -int(spec[f"wf{lay}"])
        b = spec[f"b{lay}"].astype(np.float64) * 2.0 ** -int(spec[f"bf{lay}"])
        y = x @ w + b
        k, i, f = kif(*spec[f"out{lay}"])
        if int(spec[f"relu{lay}"]):
            # relu's own i wraps; saturate like the circuit does
            x = quantize(relu(y), 0, i, f, overflow_mode="SAT", round_mode="RND")
        else:
            x = quantize(y, k, i, f, overflow_mode="SAT", round_mode="RND")
    comb = trace(inp, x)
    t1 = time.perf_counter()
    o = Path(out)
    if tool.startswith("alkaid"):
        model = RTLModel(comb, o / "rtl", prj_name="da4ml_top", latency_cutoff=cutoff,
                         print_latency=False, ternary_fuse=ternary_fuse)
    else:
        model = RTLModel(comb, "da4ml_top", o / "rtl", latency_cutoff=cutoff,
                         print_latency=False)
    model.write()
    t2 = time.perf_counter()
    # the design's modules, then the static library modules they instantiate (an unused
    # lookup_table would $readmemh a file that does not exist)
    own = [p.read_text() for p in sorted((o / "rtl" / "src").glob("*.v"))
           if "wrapper" not in p.name]
    lib = [p.read_text() for p in sorted((o / "rtl" / "src" / "static").glob("*.v"))
           if any(f"{p.stem} " in t or f"{p.stem}#" in t for t in own)]
    (o / "da4ml_top.v").write_text("\n".join(own + lib))
    if tool.startswith("alkaid"):
        stages = int(model.latency or 0)
    else:
        stages = len(model._pipe.solutions) if model._pipe is not None else 0
    print(json.dumps({"tool": tool, "ternary_fuse": ternary_fuse if "alkaid" in tool else None,
                      "trace_solve_s": round(t1 - t0, 2), "write_s": round(t2 - t1, 2),
                      "latency": stages, "top": "da4ml_top", "cutoff": cutoff}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 5.0,
         sys.argv[4] != "0" if len(sys.argv) > 4 else True)
