"""One sweep point, start to end, in whichever process runs it (a Ray worker or the
driver): compile, score against the float model on the data, estimate, and at the later
stages verify (golden == RTL) or place and route. Everything it returns is deterministic
for the same inputs (no wall times), so a Ray run and a serial run give equal records."""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..graphs.host import golden
from ..util.userio import one_line
from .common import compile_model

# test hooks (documented in tests/sweep): a crash in the worker running one point on its
# first attempt, and a delay per point (so a test can interrupt a sweep in the middle)
CRASH_ENV = "MODELCIRCUIT_SWEEP_TEST_CRASH"   # "<point index>:<flag file>"
DELAY_ENV = "MODELCIRCUIT_SWEEP_TEST_DELAY"   # seconds each point sleeps before its work


@dataclass
class Job:
    """What a worker needs for one point (picklable: the graph travels, not a file path)."""

    index: int
    key: str
    graph_id: str
    precision: str
    default: str | None
    per_layer: dict[str, Any] | None
    reuse: int | str
    device: str
    stage: str
    vectors: int
    calibrated: bool = True  # calibrate on the data (the auto point's map is explicit)
    crash_flag: str | None = None  # the crash hook's flag file, for this point only
    delay_s: float = 0.0


@dataclass
class Data:
    """The data every point is scored on: inputs, labels (or None), the float model's
    argmax, and the calibration samples (or None: no calibration)."""

    x: np.ndarray
    labels: np.ndarray | None
    float_argmax: np.ndarray
    calibrate: np.ndarray | None


def compile_point(graph: Any, precision: str | None, per_layer: dict[str, Any] | None,
                  reuse: int | str, device: str, calibrate: np.ndarray | None) -> Any:
    """The point's compiled graph: the device is its profile, so the graph id names it."""
    return compile_model(graph, precision=precision, per_layer=per_layer, calibrate=calibrate,
                      reuse=reuse, profile=device)


def scores(compiled: Any, data: Data) -> dict[str, Any]:
    """Argmax agreement with the float model on the data, and accuracy with labels."""
    out = golden(compiled, data.x)
    pred = out.reshape(out.shape[0], -1).argmax(axis=1)
    s: dict[str, Any] = {"agreement": float(np.mean(pred == data.float_argmax)),
                         "samples": int(len(pred))}
    if data.labels is not None:
        s["accuracy"] = float(np.mean(pred == data.labels.reshape(-1)))
        s["float_accuracy"] = float(np.mean(data.float_argmax == data.labels.reshape(-1)))
    return s


def type_bits(compiled: Any) -> dict[str, Any]:
    """Bits of the design: weight bits (count x width over the Dense weights) and the
    per-tensor types."""
    from ..graphs.ops import LINEAR

    g = compiled.graph
    wbits = 0
    for n in g.nodes:
        if n.op in LINEAR and n.inputs[1] in g.constants:
            t = g.tensor(n.inputs[1]).dtype
            wbits += int(np.asarray(g.constants[n.inputs[1]]).size) * int(getattr(t, "width", 32))
    return {"weight_bits": wbits,
            "types": {k: (None if t.dtype is None else str(t.dtype))
                      for k, t in sorted(g.tensors.items())}}


def estimate_point(compiled: Any, device: str, reuse: int | str) -> dict[str, Any]:
    """Resources (the flow's estimate), latency in cycles and II of the planned circuit.
    A design over the device raises the flow's FitError (the point fails with its text)."""
    from ..hdl import plan_top
    from ..hdl.flow import fpga_profile, plan_build

    prof = fpga_profile(device)
    plan, fp = plan_build(compiled, prof, reuse)
    info = plan_top(compiled, plan)  # the schedule as data: nothing is built
    est = dict(fp.estimate)
    return {"reuse_plan": dict(plan.reuse), "ii": int(info["ii"]), "latency_cycles": int(info["latency"]),
            "lut_unit": fp.lut_unit, "lut": int(est["lut"]), "ff": int(est["ff"]),
            "dsp": int(est["dsp"]), "bram": int(est.get("bram", 0)),
            "device_lut": int(prof["lut"]), "pipeline": info.get("pipeline")}


def verify_point(compiled: Any, data: Data, vectors: int) -> dict[str, Any]:
    from ..sim.verify import verify

    x = data.x[:vectors]
    rc, rep = verify(compiled, x, ["golden", "rtl"], out=io.StringIO())
    rtl = rep["notes"].get("rtl", {})
    pair = rep["pairs"][0] if rep["pairs"] else {}
    return {"bit_exact": bool(rep["bit_exact"]), "vectors": int(len(x)),
            "agree": int(pair.get("agree", 0)), "rtl_latency": rtl.get("latency"),
            "rtl_ii": rtl.get("ii"), "timing_ok": bool(rep["timing_ok"])}


def build_point(compiled: Any, device: str, reuse: int | str) -> dict[str, Any]:
    from ..hdl.flow import build

    with tempfile.TemporaryDirectory(prefix="mc-sweep-build-") as tmp:
        rep = build(compiled, device, Path(tmp) / "fpga", reuse=reuse)
    res = rep.get("resources", {})
    model = rep.get("model", {})
    return {"lut": res.get("lut"), "ff": res.get("ff"), "dsp": res.get("dsp"),
            "bram": res.get("bram"), "fmax_mhz": rep.get("fmax_mhz"),
            "latency_cycles": model.get("latency_cycles"), "ii": model.get("ii"),
            "latency_ns": model.get("latency_ns"),
            "throughput_mvps": model.get("throughput_mvps")}


def _hooks(job: Job) -> None:
    if job.delay_s > 0:
        import time

        time.sleep(job.delay_s)
    if job.crash_flag:
        flag = Path(job.crash_flag)
        try:
            fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # the retry: run normally
        os.close(fd)
        os._exit(17)  # the worker process dies without a word, as a killed one does


def evaluate(graph: Any, job: Job, data: Data) -> dict[str, Any]:
    """The record of one point. A failure of the point itself (does not fit, a tool error)
    is recorded with its one-line error; nothing else is raised."""
    _hooks(job)
    rec: dict[str, Any] = {"key": job.key, "index": job.index, "precision": job.precision,
                           "reuse": job.reuse, "device": job.device, "stage": job.stage,
                           "graph_id": job.graph_id, "status": "done", "error": None}
    try:
        c = compile_point(graph, job.default, job.per_layer, job.reuse, job.device,
                          data.calibrate if job.calibrated else None)
        if c.graph_id != job.graph_id:  # the driver planned this point: same inputs, same id
            raise RuntimeError(f"graph id {c.graph_id[:16]} differs from the planned "
                               f"{job.graph_id[:16]}: compilation is not deterministic")
        rec.update(scores(c, data))
        rec.update(type_bits(c))
        rec["estimate"] = estimate_point(c, job.device, job.reuse)
        if job.stage == "verify":
            rec["verify"] = verify_point(c, data, job.vectors)
            if not rec["verify"]["bit_exact"]:
                rec["status"] = "failed"
                rec["error"] = (f"RTL differs from golden ({rec['verify']['agree']}/"
                                f"{rec['verify']['vectors']} vectors agree, timing ok: "
                                f"{rec['verify']['timing_ok']})")
        elif job.stage == "build":
            rec["build"] = build_point(c, job.device, job.reuse)
    except Exception as e:  # noqa: BLE001 - a point's failure is data, not a crash
        rec["status"] = "failed"
        rec["error"] = one_line(f"{type(e).__name__}: {e}")
    return rec
