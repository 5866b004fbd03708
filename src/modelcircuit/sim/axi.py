"""Simulate the AXI IP (hdl/axi.py) under the cocotbext-axi bench (sim/axi_bench.py) and check
it bit-exact against the golden model.

`execute_axi(compiled, input_codes)` exports the AXI wrapper's Verilog (hdl.axi.convert_axi),
builds it with Verilator as sim/rtl.py does (one build folder per graph id, reuse and beat
width under the same cache; rebuilt only when the Verilog or the tools change), packs the
inputs into stream bytes (hdl.axi.StreamLayout: byte-aligned lanes, tokens padded to whole
beats), runs the bench with random TVALID gaps and TREADY stalls, unpacks what came out and
compares it with the golden model's codes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import rtl
from .errors import SimError

TOP = "modelcircuit_axi"


def axi_folder(compiled: Any, reuse: Any, beat_bytes: int | None, simulator: str,
               cache_dir: str | os.PathLike | None = None) -> Path:
    tag = f"{compiled.graph_id[:16]}-r{rtl._reuse_tag(reuse)}-axi{beat_bytes or 'tok'}"
    return rtl.cache_root(cache_dir) / f"{tag}-{simulator}"


def export_axi(compiled: Any, reuse: Any, beat_bytes: int | None, folder: Path
               ) -> tuple[Path, dict[str, Any]]:
    """The AXI IP's Verilog and info, regenerated only on change (caller holds the lock)."""
    from ..hdl.axi import convert_axi
    from ..hdl.flow import plan_circuit

    hdl_dir = folder / "hdl"
    key = rtl._sha(compiled.graph_id, rtl._reuse_tag(reuse), str(beat_bytes),
                   rtl.hdl_fingerprint())
    stamp, v, js = hdl_dir / "stamp", hdl_dir / f"{TOP}.v", hdl_dir / f"{TOP}.json"
    if not (stamp.exists() and stamp.read_text() == key and v.exists() and js.exists()):
        if hdl_dir.exists():
            shutil.rmtree(hdl_dir)
        hdl_dir.mkdir(parents=True)
        text, info = convert_axi(compiled, plan_circuit(compiled, reuse), TOP, beat_bytes)
        v.write_text(text)
        js.write_text(json.dumps(info, sort_keys=True, default=str))
        stamp.write_text(key)
    return v, json.loads(js.read_text())


def execute_axi(compiled: Any, input_codes: Any, reuse: Any = None,
                beat_bytes: int | None = None, packet_frames: int = 1, seed: int = 0,
                stall_in: float = 0.3, stall_out: float = 0.3, simulator: str = "verilator",
                cache_dir: str | os.PathLike | None = None, keep: bool = False
                ) -> dict[str, Any]:
    """Run `input_codes` (frames of input codes) through the AXI IP. Returns {"outputs":
    (frames, ...) codes, "bit_exact", "mismatched_frames", "registers_before",
    "registers_after", "error_after_early_tlast", "error_after_clear", "info", ...}."""
    from ..hdl.axi import AxiLayout

    if simulator != "verilator":
        raise SimError("the AXI bench runs on Verilator only")
    if not (0 <= stall_in < 1 and 0 <= stall_out < 1):
        raise SimError(f"stall rates must be within [0, 1), got {stall_in}, {stall_out}")
    rtl.check_simulator(simulator)
    folder = axi_folder(compiled, reuse, beat_bytes, simulator, cache_dir)
    with rtl._locked(folder):
        verilog, info = export_axi(compiled, reuse, beat_bytes, folder)
        built, build_s = rtl.build(verilog, folder, simulator, TOP)
    spec = rtl.spec_from_info(info)
    x = rtl.check_input_codes(compiled, input_codes, rtl.frame_port(spec, "input"))
    frames = len(x)
    if packet_frames < 1 or frames % packet_frames:
        raise SimError(f"{frames} frames do not make whole packets of {packet_frames}")
    layout = AxiLayout.from_info(info, beat_bytes)
    li, lo = layout.input, layout.output
    want = np.asarray(rtl.golden_codes(compiled, x)).reshape(frames, -1).astype(np.int64)
    in_bytes = li.pack(x)
    per_packet = len(in_bytes) // frames * packet_frames
    packets = [in_bytes[i:i + per_packet].hex() for i in range(0, len(in_bytes), per_packet)]
    per = int(spec["frame"]["frame_cycles"]) if spec.get("frame") else int(spec.get("ii") or 1)
    beats = max(li.beats * li.tokens, lo.beats * lo.tokens)
    slack = 1.0 / (1 - stall_in) / (1 - stall_out)
    cfg = {"packets": packets, "out_packets": frames // packet_frames,
           "packet_frames": packet_frames, "seed": int(seed), "stall_in": stall_in,
           "stall_out": stall_out, "frame_bytes": len(in_bytes) // frames,
           "timeout_cycles": int(4 * slack * frames * max(per, beats)
                                 + 4 * (int(spec.get("latency") or 0) + 100))}
    run_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=_mk(folder / "runs")))
    from .axi_bench import IN_FILE, OUT_FILE

    (run_dir / IN_FILE).write_text(json.dumps(cfg))
    log = run_dir / "sim.log"
    t0 = time.perf_counter()
    try:
        with rtl._no_pytest():
            rtl._runner(simulator).test(
                test_module="modelcircuit.sim.axi_bench", hdl_toplevel=TOP,
                hdl_toplevel_lang="verilog", build_dir=folder / "build", test_dir=run_dir,
                seed=int(seed), log_file=log, results_xml=str(run_dir / "results.xml"))
    except SystemExit:
        pass
    sim_s = time.perf_counter() - t0
    out_file = run_dir / OUT_FILE
    if not out_file.exists():
        raise rtl.SimFailure(f"AXI simulation produced no result; log {log}:\n{rtl._tail(log)}")
    res = json.loads(out_file.read_text())
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    got_bytes = b"".join(bytes.fromhex(p) for p in res["outputs"])
    # the sink drops TKEEP-null bytes: what is left is the tokens' bytes back to back
    unpadded = type(lo)(lo.elements, lo.width, lo.signed, lo.tokens, lo.token_bytes)
    complete = len(got_bytes) == frames * lo.tokens * lo.token_bytes
    got = unpadded.unpack(got_bytes, frames) if complete else np.zeros_like(want)
    bad = np.argwhere(got != want)
    return {"outputs": got.reshape((frames,) + tuple(np.asarray(want).shape[1:])),
            "expected": want, "bit_exact": bool(complete and not len(bad)),
            "complete": complete, "extra_outputs": bool(res["extra"]),
            "mismatched_frames": int(len(np.unique(bad[:, 0]))) if len(bad) else 0,
            "registers_before": res["before"], "registers_after": res["after"],
            "error_after_early_tlast": res["error_after_early_tlast"],
            "error_after_clear": res["error_after_clear"], "info": info,
            "layout": {"input": li.as_dict(), "output": lo.as_dict()},
            "built": built, "build_s": build_s, "sim_s": sim_s, "folder": str(folder),
            "log": str(log) if keep else None}


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p
