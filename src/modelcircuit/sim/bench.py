"""cocotb 2.x bench for a model's stream interface: driver, monitor, scoreboard.

Runs inside the simulator (started by sim/rtl.py). Everything it needs comes from the file
`bench_in.json` in its working directory (payloads as integers, expected payloads, port
packing, compile-time latency and II, seed, gap and backpressure rates); everything it
measures goes to `bench_out.json` beside it. No environment variables.

Timing model: a cycle is the interval between two rising edges of `clk`. One loop serves
driver and monitor (two triggers per cycle, for speed): both sample the handshake in the
ReadOnly phase of cycle c (the values the next edge will see), then, after the edge, drive
new values for cycle c+1. A transfer happens in cycle c
when valid and ready are both high. Latency of vector i = out cycle − in cycle; II = the
spacing of accepted inputs when nothing stalls.

Phases: the first `timing_vectors` vectors are driven back to back with o__ready held high
(they measure latency and II against the compile-time figures); after they have come out,
the rest are driven with random valid gaps and random o__ready backpressure (seeded). After
the last output the bench keeps o__ready high for a while and fails on any extra output.

Streamed models (hdl/streamed/units.py): a frame is `in_per_frame` input tokens (pixels) and
`out_per_frame` output tokens; the timing phase is the first `timing_vectors` frames; the
latency of frame f = the cycle of its last output - the cycle of its first input, compared
with the compile-time `latency_frames`; II = the spacing of accepted input pixels.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from .codes import Port, mismatch_report

IN_FILE, OUT_FILE = "bench_in.json", "bench_out.json"


class Driver:
    """Drives i__payload/i__valid; holds a vector until it is accepted (stream rule)."""

    def __init__(self, dut: Any, payloads: list[int], n_timing: int, gaps: float,
                 rng: random.Random):
        self.dut, self.payloads, self.n_timing = dut, payloads, n_timing
        self.gaps, self.rng = gaps, rng
        self.in_cycles: list[int] = []
        self.next = 0  # index of the next vector to offer
        self.shown = False  # a vector is offered and not yet accepted
        self.driven = True  # i__valid as last written (the test starts it at 0; write once)

    @property
    def done(self) -> bool:
        return self.next >= len(self.payloads)

    def drive(self) -> None:
        """After an edge: unless a vector waits for acceptance, choose this cycle's
        i__valid: a gap (probability `gaps`, never in the timing phase) or the next vector."""
        if self.shown:
            return
        if not self.done and (self.next < self.n_timing or self.rng.random() >= self.gaps):
            self.dut.i__payload.value = self.payloads[self.next]
            self.dut.i__valid.value = 1
            self.shown = self.driven = True
        elif self.driven:
            self.dut.i__valid.value = 0
            self.driven = False

    def sample(self, cycle: int) -> None:
        """In ReadOnly: a transfer happens at the coming edge if valid and ready."""
        if self.shown and self.dut.i__ready.value:
            self.in_cycles.append(cycle)
            self.next += 1
            self.shown = False


class Scoreboard:
    """Compares each output payload bit-exact with the golden model's, in order."""

    def __init__(self, expected: list[int] | None, port: Port):
        self.expected, self.port = expected, port
        self.mismatches = 0
        self.first: dict[str, Any] | None = None

    def check(self, index: int, actual: int) -> None:
        if self.expected is None:
            return
        if index >= len(self.expected):
            self.mismatches += 1
            if self.first is None:
                self.first = {"vector": index, "element": None, "expected": None,
                              "actual": None, "message": f"extra output {index} (duplicated?)"}
            return
        if actual != self.expected[index]:
            self.mismatches += 1
            if self.first is None:
                self.first = mismatch_report(index, self.expected[index], actual, self.port)


class Monitor:
    """Collects o__payload on every transfer (to the scoreboard); drives o__ready with
    random backpressure, high while the timing vectors come out and after the last one."""

    def __init__(self, dut: Any, n: int, n_timing: int, backpressure: float,
                 rng: random.Random, board: Scoreboard):
        self.dut, self.n, self.n_timing = dut, n, n_timing
        self.bp, self.rng, self.board = backpressure, rng, board
        self.outputs: list[int] = []
        self.out_cycles: list[int] = []
        self.stalled_cycles = 0  # o__ready low
        self.extra = 0
        self.ready = 1
        self.done_at: int | None = None
        self.done_wall = 0.0

    def sample(self, cycle: int) -> None:
        if self.ready and self.dut.o__valid.value:
            payload = int(self.dut.o__payload.value)
            if len(self.outputs) >= self.n:
                self.extra += 1
            self.board.check(len(self.outputs), payload)
            self.outputs.append(payload)
            self.out_cycles.append(cycle)
            if len(self.outputs) == self.n:
                self.done_at = cycle
                self.done_wall = time.perf_counter()
        if not self.ready:
            self.stalled_cycles += 1

    def after_edge(self) -> None:
        warm = len(self.outputs) < self.n_timing or self.done_at is not None
        new = 1 if warm or self.bp == 0 or self.rng.random() >= self.bp else 0
        if new != self.ready:
            self.ready = new
            self.dut.o__ready.value = new


async def run_cycles(dut: Any, driver: Driver, monitor: Monitor, max_cycles: int,
                     drain: int) -> tuple[int, bool]:
    """One loop for both ends (two triggers per cycle): sample in ReadOnly, then drive after
    the edge. Ends `drain` cycles after the last output, or at max_cycles (timed out)."""
    ro, edge = ReadOnly(), RisingEdge(dut.clk)
    cycle = 0
    dut.o__ready.value = monitor.ready
    driver.drive()
    while True:
        await ro
        driver.sample(cycle)
        monitor.sample(cycle)
        await edge
        cycle += 1
        if monitor.done_at is not None and cycle > monitor.done_at + drain:
            return cycle, False
        if cycle >= max_cycles:
            return cycle, True
        driver.drive()
        monitor.after_edge()


def _timing(in_cycles: list[int], out_cycles: list[int], n_timing: int, pin: int = 1,
            pout: int = 1) -> dict[str, Any]:
    """Latency per frame (pin input tokens, pout output tokens; 1 and 1 for vectors), over
    the first n_timing frames and all; input spacing within the timing frames."""
    n = min(len(in_cycles) // pin, len(out_cycles) // pout)
    lat = [out_cycles[(i + 1) * pout - 1] - in_cycles[i * pin] for i in range(n)]
    t_lat = lat[:n_timing]
    n_in = min(n_timing * pin, len(in_cycles))
    # within frames (a streamed model may idle between frames: "frame_spacing")
    spacing = [in_cycles[i + 1] - in_cycles[i] for i in range(n_in - 1)
               if pin == 1 or (i + 1) % pin]
    frame_spacing = [in_cycles[(f + 1) * pin] - in_cycles[f * pin]
                     for f in range(n_in // pin - 1)] if pin > 1 else []
    out_spacing = [] if (pin, pout) != (1, 1) else [
        out_cycles[i + 1] - out_cycles[i] for i in range(min(n_timing, len(out_cycles)) - 1)]
    return {"latency": min(t_lat) if t_lat else None, "latency_frames": t_lat,
            "frame_spacing": frame_spacing,
            "latency_max_timing": max(t_lat) if t_lat else None,
            "latency_min_all": min(lat) if lat else None,
            "ii": max(spacing) if spacing else None,
            "ii_min": min(spacing) if spacing else None,
            "ii_out": max(out_spacing) if out_spacing else None,
            "ii_out_min": min(out_spacing) if out_spacing else None}


@cocotb.test()
async def stream_bench(dut: Any) -> None:
    cfg = json.loads(Path(IN_FILE).read_text())
    payloads: list[int] = cfg["inputs"]
    expected: list[int] | None = cfg.get("expected")
    out_port = Port.from_info(cfg["output"])
    pin, pout = int(cfg.get("in_per_frame") or 1), int(cfg.get("out_per_frame") or 1)
    frames = len(payloads) // pin
    n, lat_c, ii_c = frames * pout, cfg.get("latency"), cfg.get("ii")
    n_timing = min(frames, int(cfg.get("timing_vectors", 8)))  # frames
    gaps, bp = float(cfg.get("gaps", 0.0)), float(cfg.get("backpressure", 0.0))
    rng = random.Random(int(cfg.get("seed", 0)))
    ii_guess = max(1, int(ii_c or 1))
    slack = 1.0 / max(1e-3, (1 - gaps)) / max(1e-3, (1 - bp))
    max_cycles = int(cfg.get("max_cycles") or (
        4 * ((lat_c or 0) + 16) + int(4 * frames * pin * ii_guess * slack) + 1000))
    drain = int(cfg.get("drain") or 2 * ((lat_c or 0) + ii_guess) + 8)

    Clock(dut.clk, 10, unit="ns").start()
    dut.i__valid.value = 0
    dut.i__payload.value = 0
    dut.o__ready.value = 0
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    board = Scoreboard(expected, out_port)
    driver = Driver(dut, payloads, n_timing * pin, gaps, random.Random(rng.getrandbits(64)))
    monitor = Monitor(dut, n, n_timing * pout, bp, random.Random(rng.getrandbits(64)), board)
    t0 = time.perf_counter()
    cycles, timed_out = await run_cycles(dut, driver, monitor, max_cycles, drain)
    wall = time.perf_counter() - t0

    timing = _timing(driver.in_cycles, monitor.out_cycles, n_timing, pin, pout)
    lost = n - min(len(monitor.outputs), n)
    if lost and expected is not None and board.first is None:
        board.first = mismatch_report(len(monitor.outputs), 0, None, out_port)
    result = {
        "outputs": monitor.outputs[:n], "in_cycles": driver.in_cycles,
        "out_cycles": monitor.out_cycles, "cycles": cycles,
        "accepted": len(driver.in_cycles), "received": len(monitor.outputs),
        "lost": lost, "extra": monitor.extra, "timed_out": timed_out,
        "stalled_fraction": monitor.stalled_cycles / max(1, cycles),
        "mismatches": board.mismatches + lost, "first_mismatch": board.first,
        "checked": expected is not None, "timing_vectors": n_timing,
        "latency_expected": lat_c, "ii_expected": ii_c,
        "latency_frames_expected": cfg.get("latency_frames"),
        "frame_cycles_expected": cfg.get("frame_cycles"), **timing,
        "wall_s": wall, "stream_wall_s": max(0.0, monitor.done_wall - t0) if monitor.done_at is not None else 0.0,
    }
    Path(OUT_FILE).write_text(json.dumps(result))
    assert not timed_out, f"timed out after {cycles} cycles: " \
        f"{len(driver.in_cycles)}/{n} vectors accepted, {len(monitor.outputs)} received"
    assert monitor.extra == 0, f"{monitor.extra} extra outputs after the last vector"
    assert board.first is None, f"mismatch: {board.first['message']}"
