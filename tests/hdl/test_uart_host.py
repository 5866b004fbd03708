"""cocotb bench (not a pytest module: no test_* functions): the bench plays the host of the
UART-wrapped model. Vectors come in a JSON file named by $UART_BENCH_IN; the answers go to
$UART_BENCH_OUT. Run by tests/hdl/test_uart.py."""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge


async def _send_byte(dut, b: int, div: int) -> None:
    for bit in [0] + [(b >> i) & 1 for i in range(8)] + [1]:
        dut.rx.value = bit
        await ClockCycles(dut.clk, div)


async def _recv_bytes(dut, n: int, div: int, out: list[int]) -> None:
    while len(out) < n:
        await FallingEdge(dut.tx)
        await ClockCycles(dut.clk, div // 2)
        assert int(dut.tx.value) == 0, "start bit glitch"
        v = 0
        for i in range(8):
            await ClockCycles(dut.clk, div)
            v |= int(dut.tx.value) << i
        await ClockCycles(dut.clk, div)
        assert int(dut.tx.value) == 1, f"byte {len(out)}: stop bit is not 1"
        out.append(v)


@cocotb.test()
async def uart_host(dut):
    cfg = json.load(open(os.environ["UART_BENCH_IN"]))
    div, n_in, n_out = cfg["divisor"], cfg["input_bytes"], cfg["output_bytes"]
    dut.rx.value = 1
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 5)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 5)
    got: list[int] = []
    n_ans = int(cfg.get("answers", len(cfg["payloads"])))  # a streamed model: tokens per frame differ
    rx = cocotb.start_soon(_recv_bytes(dut, n_out * n_ans, div, got))
    # a partial frame, then silence longer than the frame timeout: must be dropped
    for b in cfg.get("junk", []):
        await _send_byte(dut, b, div)
    await ClockCycles(dut.clk, cfg["frame_timeout"] + 20)
    for k, p in enumerate(cfg["payloads"]):
        for b in int(p).to_bytes(n_in, "little"):
            await _send_byte(dut, b, div)
        if k % 7 == 3:  # some idle gaps between vectors too
            await ClockCycles(dut.clk, 3 * div)
    for _ in range(200):
        if len(got) >= n_out * n_ans:
            break
        await ClockCycles(dut.clk, 10 * div * n_out)
    await RisingEdge(dut.clk)
    answers = [int.from_bytes(bytes(got[i * n_out:(i + 1) * n_out]), "little")
               for i in range(len(got) // n_out)]
    json.dump({"answers": answers, "bytes": len(got)}, open(os.environ["UART_BENCH_OUT"], "w"))
    rx.cancel()
    assert len(answers) == n_ans, f"{len(answers)} answers, expected {n_ans}"
