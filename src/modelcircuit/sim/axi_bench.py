"""cocotb bench for the AXI IP (hdl/axi.py), driven by cocotbext-axi: an AxiStreamSource on
`s_axis`, an AxiStreamSink on `m_axis` and an AxiLiteMaster on `s_axil`, each with a random
pause generator (TVALID gaps on the input, TREADY low on the output; seeded).

Runs inside the simulator (started by sim/axi.py). Reads `axi_in.json` in its working
directory: the input packets as hex strings (the bytes the host sends: sim/axi.py packs them
with hdl.axi.StreamLayout), the number of output packets to collect, PACKET_FRAMES, seed and
stall rates. Writes `axi_out.json`: the output packets (hex, TKEEP-null bytes removed, as
the sink gives them), the registers read before and after, and the framing-error check
(one packet closed early must set ERROR bit 0; writing 1 clears it). The comparison with
the golden model is the caller's (sim/axi.py): the bench only moves bytes.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import (
    AxiLiteBus,
    AxiLiteMaster,
    AxiStreamBus,
    AxiStreamFrame,
    AxiStreamSink,
    AxiStreamSource,
)

from ..hdl.axi import REGISTERS

IN_FILE, OUT_FILE = "axi_in.json", "axi_out.json"


def pauses(rng: random.Random, rate: float) -> Iterator[bool]:
    """True = pause this cycle, with probability `rate`, in random bursts of 1-4 cycles."""
    while True:
        if rate and rng.random() < rate:
            yield from itertools.repeat(True, rng.randint(1, 4))
        else:
            yield False


async def read_all(axil: AxiLiteMaster) -> dict[str, int]:
    return {name: await axil.read_dword(addr) for name, addr in REGISTERS.items()}


@cocotb.test()
async def axi_bench(dut: Any) -> None:
    cfg = json.loads(Path(IN_FILE).read_text())
    rng = random.Random(int(cfg.get("seed", 0)))
    Clock(dut.aclk, 10, unit="ns").start()
    dut.aresetn.value = 0
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.aclk, dut.aresetn,
                          reset_active_level=False)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.aclk, dut.aresetn,
                         reset_active_level=False)
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.aclk, dut.aresetn,
                         reset_active_level=False)
    await ClockCycles(dut.aclk, 4)
    dut.aresetn.value = 1
    await RisingEdge(dut.aclk)
    before = await read_all(axil)
    await axil.write_dword(REGISTERS["PACKET_FRAMES"], int(cfg["packet_frames"]))
    src.set_pause_generator(pauses(random.Random(rng.getrandbits(64)), float(cfg["stall_in"])))
    sink.set_pause_generator(pauses(random.Random(rng.getrandbits(64)), float(cfg["stall_out"])))
    for pkt in cfg["packets"]:
        src.send_nowait(AxiStreamFrame(bytes.fromhex(pkt)))
    out: list[str] = []
    timeout_ns = int(cfg["timeout_cycles"]) * 10
    for _ in range(int(cfg["out_packets"])):
        frame = await with_timeout(sink.recv(), timeout_ns, "ns")
        out.append(bytes(frame.tdata).hex())
    await src.wait()
    await ClockCycles(dut.aclk, 8)
    extra = not sink.empty()
    after = await read_all(axil)
    # framing: a packet of one frame while two are due closes early (ERROR bit 0)
    src.set_pause_generator(None)  # leaves `pause` as the generator last set it
    sink.set_pause_generator(None)
    src.pause = sink.pause = False
    await axil.write_dword(REGISTERS["PACKET_FRAMES"], 2)
    src.send_nowait(AxiStreamFrame(bytes.fromhex(cfg["packets"][0])[: int(cfg["frame_bytes"])]))
    await src.wait()
    await ClockCycles(dut.aclk, 4)
    err_set = await axil.read_dword(REGISTERS["ERROR"])
    await axil.write_dword(REGISTERS["ERROR"], err_set)
    err_cleared = await axil.read_dword(REGISTERS["ERROR"])
    Path(OUT_FILE).write_text(json.dumps({
        "outputs": out, "extra": extra, "before": before, "after": after,
        "error_after_early_tlast": err_set, "error_after_clear": err_cleared}))
