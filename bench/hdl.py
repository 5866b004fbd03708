"""HDL backend benchmark: per reuse factor, the schedule and the size of the circuit.

For each model, register schedule (--pipeline: "latency" = fewest cycles, the default without
an FPGA profile; "fmax" = the FPGA flow's default, aiming at >= 100 MHz on ECP5) and R:
latency (cycles), II, real multipliers (zero weights and powers of two
excluded), register bits (flip-flops in the RTLIL netlist and the text cores), Verilog lines, and the time to
lower and convert (Amaranth elaboration + builtin yosys). With --sim, also checks a few
vectors bit-exact in amaranth.sim and reports the simulated latency.
With --strategy mult,da (Dense at R=1 as products, or as shared adder graphs: hdl/plan/cmvm.py)
and --cores text,amaranth (the export's R=1 Dense cores written as Verilog text,
hdl/units/netlist_text.py, the default; or the old path, the whole netlist through Amaranth) each
row is timed --repeat times (median; the repeats interleaved, so that every configuration
sees the same load on a shared machine); "ratio" is the time over the first strategy's with
the same cores, "vs old" over the same strategy's with --cores amaranth, in the same run.
--sim checks the pure Amaranth circuit in amaranth.sim (the text cores are checked in
Verilator: tests/hdl/test_export_fast.py and every `verify --backends rtl`).
Prints a table and writes JSON (bench/results/hdl.json by default).
--model qdq8: an int8 QDQ MLP written by write_qdq8 (64-32-16-10; 255 thresholds per channel
after each Gemm, 127 after each Relu), the threshold-heavy export (`--reuse 1 --pipeline
latency` times it alone; its precision is the model's, --precision is ignored).
Run: .venv/bin/python bench/hdl.py [--reuse 1,2,4,8] [--model jet|digits|qdq8|all]
     [--pipeline latency,fmax] [--strategy mult,da] [--cores text,amaranth] [--repeat 3]
     [--sim] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np

import modelcircuit as mc
from modelcircuit.graphs import reference
from modelcircuit.hdl import build_top, export_verilog
from modelcircuit.sim.amaranth_sim import simulate

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "jet": ROOT.parent / "shared" / "models" / "three_layer_keras.onnx",
    "digits": Path(str(resources.files("modelcircuit") / "data" / "digits_mlp.onnx")),
    "qdq8": Path(tempfile.gettempdir()) / "modelcircuit_bench_qdq8_mlp.onnx",  # written here
}
QDQ8_SIZES = (64, 32, 16, 10)


def write_qdq8(path: Path, sizes: tuple[int, ...] = QDQ8_SIZES) -> Path:
    """An int8 QDQ MLP as ONNX Runtime's quantizer writes one (x -> Q/DQ -> [Gemm -> Q/DQ ->
    Relu -> Q/DQ]* -> Gemm -> Q/DQ): every quantizer after a Gemm is a Threshold of 255
    thresholds per channel on the accumulator, each after a Relu one of 127 on an 8-bit
    code (the threshold-heavy export: it took minutes before hdl/units/threshold.py)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name: str, v, dt=np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(v, dtype=dt), name))
        return name

    def qdq(x: str, out: str, scale: float) -> str:
        s, z = const(f"{out}_s", scale), const(f"{out}_z", 0, np.int8)
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{out}_q"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"{out}_q", s, z], [out]))
        return out

    h = qdq("x", "xq", 1 / 64)
    for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False)):
        w = const(f"w{i}", rng.integers(-127, 128, size=(b, a)), np.int8)
        ws, wz = const(f"w{i}_s", 0.4 / 127 / np.sqrt(a)), const(f"w{i}_z", 0, np.int8)
        nodes.append(helper.make_node("DequantizeLinear", [w, ws, wz], [f"w{i}_f"]))
        bias = const(f"b{i}", rng.normal(0, 0.1, size=b))
        nodes.append(helper.make_node("Gemm", [h, f"w{i}_f", bias], [f"g{i}"], transB=1))
        h = qdq(f"g{i}", f"g{i}q", 1 / 32)
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [h], [f"r{i}"]))
            h = qdq(f"r{i}", f"r{i}q", 1 / 32)
    nodes.append(helper.make_node("Identity", [h], ["y"]))
    g = helper.make_graph(nodes, "qdq8_mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, sizes[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, sizes[-1]])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.save(m, str(path))
    return path


def sim_check(c: mc.CompiledGraph, reuse: int, pipeline: str, n: int = 4) -> dict:
    g = c.graph
    t = g.tensor(g.inputs[0]).dtype
    x = np.random.default_rng(0).integers(t.qmin, t.qmax + 1, size=(n, g.tensor(g.inputs[0]).size))
    top, info = build_top(c, reuse, pipeline=pipeline)
    t0 = time.perf_counter()
    res = simulate(top, info, x)
    want = reference.execute(g, [x], inputs_are_codes=True)[g.outputs[0]].reshape(n, -1)
    return {"sim_bit_exact": bool((res.outputs == want).all()),
            "sim_latency": res.delivered[0] - res.accepted[0],
            "sim_ii": int(np.diff(res.accepted).min()) if n > 1 else None,
            "sim_s": round(time.perf_counter() - t0, 2)}


def _time_export(path: Path, precision: str, strat: str, r: int, pipe: str,
                 cores: str) -> tuple[float, dict, mc.CompiledGraph]:
    """ONNX -> Verilog once: load, compile, export (seconds, export info, compiled)."""
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        g = mc.load_onnx(str(path))
        quantized = path == MODELS["qdq8"]  # its precision is the model's
        c = mc.compile(g, strategy=strat) if quantized else mc.compile(
            g, precision=precision, strategy=strat)
        info = export_verilog(c, d, reuse=r, pipeline=pipe, cores=cores)
        return time.perf_counter() - t0, info, c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reuse", default="1,2,4,8")
    ap.add_argument("--model", default="jet", choices=["jet", "digits", "qdq8", "all"])
    ap.add_argument("--precision", default="fixed<16,6>")
    ap.add_argument("--pipeline", default="latency,fmax")
    ap.add_argument("--sim", action="store_true")
    ap.add_argument("--strategy", default="mult")
    ap.add_argument("--cores", default="text",
                    help="text,amaranth: R=1 Dense cores as Verilog text (the export's "
                         "default) and/or the old pure-Amaranth path, timed side by side")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "hdl.json"))
    a = ap.parse_args()
    rows = []
    models = list(MODELS) if a.model == "all" else [a.model]
    hdr = f"{'model':8} {'strategy':8} {'cores':8} {'pipeline':8} {'L':>2} {'R':>3} " \
          f"{'latency':>7} {'II':>3} {'mults':>6} {'reg bits':>8} {'v lines':>8} " \
          f"{'compile s':>9} {'ratio':>6} {'vs old':>6}"
    print(hdr)
    print("-" * len(hdr))
    for name in models:
        if name == "qdq8":
            write_qdq8(MODELS[name])
        if not MODELS[name].exists():
            print(f"{name}: model missing, skipped")
            continue
        configs = [(s, cr, p, int(v)) for s in a.strategy.split(",")
                   for cr in a.cores.split(",") for p in a.pipeline.split(",")
                   for v in a.reuse.split(",")]
        times: dict[tuple, list[float]] = {k: [] for k in configs}
        last: dict[tuple, tuple[dict, mc.CompiledGraph]] = {}
        # repeats interleaved: on a shared machine every configuration sees the same load
        for _ in range(max(1, a.repeat)):
            for k in configs:
                dt, info, c = _time_export(MODELS[name], a.precision, k[0], k[3], k[2], k[1])
                times[k].append(dt)
                last[k] = (info, c)
        med = {k: float(np.median(v)) for k, v in times.items()}
        for k in configs:
            strat, cores, pipe, r = k
            info, c = last[k]
            dt = med[k]
            first = med[(configs[0][0], cores, pipe, r)]  # the first strategy, same cores
            old = med.get((strat, "amaranth", pipe, r))  # the same strategy, old path
            row = {"model": name, "precision": a.precision, "pipeline": pipe, "strategy": strat,
                   "cores": cores, "compile_s_all": [round(t, 2) for t in times[k]],
                   "ratio_to_first_strategy": round(dt / first, 3),
                   "ratio_to_amaranth_cores": round(dt / old, 3) if old else None,
                   "adder_levels": info["adder_levels"], "reuse": r,
                   "latency": info["latency"], "ii": info["ii"],
                   "multipliers": info["multipliers"], "shifts": info["shifts"],
                   "register_bits": info["register_bits"], "verilog_lines": info["verilog_lines"],
                   "compile_s": round(dt, 2),
                   "layers": [{k: lay[k] for k in ("node", "op", "latency", "ii", "reuse",
                                                   "multipliers")} for lay in info["layers"]]}
            if a.sim:
                row.update(sim_check(c, r, pipe))
            rows.append(row)
            vs_old = f"{row['ratio_to_amaranth_cores']:>6.2f}" if old else f"{'-':>6}"
            print(f"{name:8} {strat:8} {cores:8} {pipe:8} {row['adder_levels']:>2} {r:>3} "
                  f"{row['latency']:>7} {row['ii']:>3} {row['multipliers']:>6} "
                  f"{row['register_bits']:>8} {row['verilog_lines']:>8} {dt:>9.2f} "
                  f"{row['ratio_to_first_strategy']:>6.2f} {vs_old}"
                  + (f"  sim: exact={row['sim_bit_exact']} lat={row['sim_latency']}"
                     if a.sim else ""))
            sys.stdout.flush()
    out = Path(a.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
