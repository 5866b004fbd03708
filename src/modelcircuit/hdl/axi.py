"""The model as AXI IP: AXI4-Stream data ports and an AXI4-Lite control/status block around
the model's top (hdl/vector/top.py or hdl/streamed/top.py), for Vivado/Quartus block designs
and a DMA (hdl/flow/vendor.py writes the project, the IP-XACT file and a PYNQ driver).

Ports (Verilog): `aclk`, `aresetn` (synchronous, active low: the AXI convention), the input
stream `s_axis_t{data,valid,ready,last[,keep]}`, the output stream
`m_axis_t{data,valid,ready,last[,keep]}`, and the AXI4-Lite slave `s_axil_*` (32-bit data,
`ADDR_BITS` address bits; write and read responses are always OKAY).

TDATA packing (`AxiLayout`): a token is what the core takes per handshake (a whole vector;
for a streamed model one pixel or time step, all channels). Element k of a token sits in
lane k: lane width L = the least of 8, 16, 32, 64 bits that holds the element type, so the
host side is a plain numpy array of int8/int16/int32/int64 (uint* for unsigned types), and
a token is n * L / 8 bytes, element 0 first (little-endian within a lane). On input only the
low W bits of a lane are read; on output a lane holds the code sign-extended (signed types)
or zero-extended. A token travels as ceil(token bytes / B) beats of B = `beat_bytes` bytes
(default: the whole token in one beat), lowest bytes first; its last beat's unused bytes are
padding: TKEEP (present only when a token does not fill its last beat) marks them null on
output and they are ignored on input. Note that a Xilinx AXI DMA honours TKEEP on a packet's
last beat only: pick `beat_bytes` dividing the token size (or one beat per token) for it.

TLAST closes a packet of PACKET_FRAMES frames (register, default 1: one packet per vector, or
per frame of a streamed model: its last pixel's last beat). On input the same framing is
expected; a TLAST where none is due, or none where one is due, sets a sticky bit in ERROR
(the data are taken by count all the same). Register map (byte addresses, 32-bit words):

    0x00-0x0C  GRAPH_ID0..3   the first 128 bits of the graph id (sha256), word 0 = its first
                              8 hex digits
    0x10       LATENCY        cycles from the first input beat's handshake at the core to the
                              last output token (compile time; per frame for streamed models)
    0x14       II             cycles between inputs to the core (per pixel when streamed)
    0x18       FRAMES_IN      frames (vectors) accepted, wraps at 2**32
    0x1C       FRAMES_OUT     frames (vectors) sent
    0x20       ERROR          bit 0: TLAST before the packet's end, bit 1: no TLAST at its
                              end; sticky, write 1 to clear
    0x24       PACKET_FRAMES  frames per TLAST packet, read/write, 0 counts as 1
    0x28       LAYOUT         beat bytes [7:0], input lane bits [15:8], output lane bits
                              [23:16]
    0x2C       TOKENS         input tokens per frame [15:0], output tokens per frame [31:16]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from amaranth.hdl import Cat, ClockDomain, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..graphs.compiled import CompiledGraph
from .errors import HdlError
from .names import check_top_name
from .plan.circuit import resolve_plan
from .plan.reuse import Reuse
from .vector.top import build_top, plan_top

ADDR_BITS = 6
REGISTERS = {"GRAPH_ID0": 0x00, "GRAPH_ID1": 0x04, "GRAPH_ID2": 0x08, "GRAPH_ID3": 0x0C,
             "LATENCY": 0x10, "II": 0x14, "FRAMES_IN": 0x18, "FRAMES_OUT": 0x1C,
             "ERROR": 0x20, "PACKET_FRAMES": 0x24, "LAYOUT": 0x28, "TOKENS": 0x2C}
ERROR_TLAST_EARLY, ERROR_TLAST_MISSING = 1, 2
LANES = (8, 16, 32, 64)


def lane_bits(width: int) -> int:
    for lane in LANES:
        if width <= lane:
            return lane
    raise HdlError(f"an element of {width} bits does not fit a 64-bit AXI-Stream lane")


@dataclass(frozen=True)
class StreamLayout:
    """One direction's TDATA packing (module docstring)."""

    elements: int  # per token
    width: int  # bits per element
    signed: bool
    tokens: int  # tokens per frame
    beat_bytes: int

    @property
    def lane(self) -> int:
        return lane_bits(self.width)

    @property
    def token_bytes(self) -> int:
        return self.elements * self.lane // 8

    @property
    def beats(self) -> int:
        return -(-self.token_bytes // self.beat_bytes)

    @property
    def keep(self) -> bool:
        """Whether TKEEP is needed: a token does not fill its last beat."""
        return self.token_bytes % self.beat_bytes != 0

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(f"<{'i' if self.signed else 'u'}{self.lane // 8}")

    def pack(self, codes: Any) -> bytes:
        """(frames, tokens * elements) codes -> the bytes of those frames on the stream, each
        token padded with zero bytes to whole beats."""
        c = np.asarray(codes, dtype=np.int64).reshape(-1, self.elements)
        lo, hi = ((-(1 << (self.width - 1)), (1 << (self.width - 1)) - 1) if self.signed
                  else (0, (1 << self.width) - 1))
        if c.size and (int(c.min()) < lo or int(c.max()) > hi):
            raise HdlError(f"codes outside [{lo}, {hi}] of a {self.width}-bit element")
        raw = c.astype(self.dtype).view(np.uint8).reshape(len(c), self.token_bytes)
        out = np.zeros((len(c), self.beats * self.beat_bytes), dtype=np.uint8)
        out[:, : self.token_bytes] = raw
        return out.tobytes()

    def unpack(self, data: bytes, frames: int) -> np.ndarray:
        """Stream bytes (padding included, as `pack` writes them) -> (frames, tokens *
        elements) int64 codes."""
        n = frames * self.tokens
        buf = np.frombuffer(data, dtype=np.uint8)
        if buf.size != n * self.beats * self.beat_bytes:
            raise HdlError(f"{buf.size} bytes for {n} tokens of {self.beats} x "
                           f"{self.beat_bytes} bytes")
        rows = buf.reshape(n, -1)[:, : self.token_bytes].copy()
        return rows.view(self.dtype).astype(np.int64).reshape(frames, -1)

    def as_dict(self) -> dict[str, Any]:
        return {"elements": self.elements, "element_width": self.width, "signed": self.signed,
                "tokens_per_frame": self.tokens, "lane_bits": self.lane,
                "token_bytes": self.token_bytes, "beat_bytes": self.beat_bytes,
                "beats_per_token": self.beats, "tkeep": self.keep, "numpy_dtype": self.dtype.str}


@dataclass(frozen=True)
class AxiLayout:
    input: StreamLayout
    output: StreamLayout

    @classmethod
    def from_info(cls, info: dict[str, Any], beat_bytes: int | str | None = None,
                  out_beat_bytes: int | str | None = None) -> AxiLayout:
        """From a model top's info (build_top). beat_bytes: TDATA bytes of the input stream
        (None: one token per beat; "dma": dma_beat_bytes, no padding); out_beat_bytes: of
        the output (None: as beat_bytes)."""
        def side(d: dict[str, Any], key: str, bb: int | str | None) -> StreamLayout:
            tokens = int(d.get("frame", {}).get("tokens", 1)) if info.get("streamed") else 1
            n, w = int(d["elements"]), int(d["element_width"])
            tb = n * lane_bits(w) // 8
            b = tb if bb is None else dma_beat_bytes(tb) if bb == "dma" else int(bb)
            if b < 1 or b > 128:
                raise HdlError(f"AXI-Stream beat of {b} bytes ({key}): need 1 to 128")
            return StreamLayout(n, w, bool(d["signed"]), tokens, b)

        return cls(side(info["input"], "input", beat_bytes),
                   side(info["output"], "output",
                        out_beat_bytes if out_beat_bytes is not None else beat_bytes))


MAX_DMA_BYTES = 8


def dma_beat_bytes(token_bytes: int) -> int:
    """The largest power of two <= MAX_DMA_BYTES dividing a token's bytes: a stream width an
    AXI DMA takes, with no TKEEP and no padding."""
    b = MAX_DMA_BYTES
    while token_bytes % b:
        b //= 2
    return b


def graph_id_words(graph_id: str) -> list[int]:
    """GRAPH_ID0..3: the first 32 hex digits of the graph id as four 32-bit words."""
    h = (graph_id or "").ljust(32, "0")[:32]
    try:
        return [int(h[i:i + 8], 16) for i in range(0, 32, 8)]
    except ValueError:
        raise HdlError(f"graph id {graph_id!r} is not hexadecimal") from None


class AxiModel(wiring.Component):
    """The model core behind AXI4-Stream ports and an AXI4-Lite register block (module
    docstring). `core`: a component with `i`/`o` amaranth.lib.stream members; `info`: its
    build_top info; `graph_id`: the compiled graph's id."""

    def __init__(self, core: Any, info: dict[str, Any], graph_id: str, layout: AxiLayout):
        self.core, self.info, self.layout = core, info, layout
        self.id_words = graph_id_words(graph_id)
        li, lo = layout.input, layout.output
        members: dict[str, Any] = {
            "aclk": In(1), "aresetn": In(1),
            "s_axis_tdata": In(8 * li.beat_bytes), "s_axis_tvalid": In(1),
            "s_axis_tready": Out(1), "s_axis_tlast": In(1),
            "m_axis_tdata": Out(8 * lo.beat_bytes), "m_axis_tvalid": Out(1),
            "m_axis_tready": In(1), "m_axis_tlast": Out(1),
            "s_axil_awaddr": In(ADDR_BITS), "s_axil_awprot": In(3), "s_axil_awvalid": In(1),
            "s_axil_awready": Out(1), "s_axil_wdata": In(32), "s_axil_wstrb": In(4),
            "s_axil_wvalid": In(1), "s_axil_wready": Out(1), "s_axil_bresp": Out(2),
            "s_axil_bvalid": Out(1), "s_axil_bready": In(1), "s_axil_araddr": In(ADDR_BITS),
            "s_axil_arprot": In(3), "s_axil_arvalid": In(1), "s_axil_arready": Out(1),
            "s_axil_rdata": Out(32), "s_axil_rresp": Out(2), "s_axil_rvalid": Out(1),
            "s_axil_rready": In(1)}
        if li.keep:
            members["s_axis_tkeep"] = In(li.beat_bytes)
        if lo.keep:
            members["m_axis_tkeep"] = Out(lo.beat_bytes)
        super().__init__(members)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.domains.sync = cd = ClockDomain("sync")
        m.d.comb += [cd.clk.eq(self.aclk), cd.rst.eq(~self.aresetn)]
        m.submodules.core = core = self.core
        packet = Signal(32, init=1, name="packet_frames")
        frames_in, frames_out = Signal(32, name="frames_in"), Signal(32, name="frames_out")
        error = Signal(2, name="error")
        sets = self._input(m, core, packet, frames_in)
        self._output(m, core, packet, frames_out)
        clear = self._registers(m, packet, frames_in, frames_out, error)
        m.d.sync += error.eq((error & ~clear) | sets)  # a new error wins over its clear
        return m

    def _input(self, m: Module, core: Any, packet: Signal, frames: Signal) -> Signal:
        """Beats -> tokens (shift register), tokens -> the core; frame and packet counters
        for FRAMES_IN and the TLAST check. Returns the ERROR bits this cycle sets."""
        li = self.layout.input
        bb = 8 * li.beat_bytes
        full = Signal(name="in_full")  # a whole token waits in `hold` for the core
        hold = Signal(li.beats * bb, name="in_hold", reset_less=True)
        take = full & core.i.ready
        beat = Signal(range(max(2, li.beats)), name="in_beat")
        last_beat = beat == li.beats - 1
        m.d.comb += self.s_axis_tready.eq(~last_beat | ~full | take)
        acc = self.s_axis_tvalid & self.s_axis_tready
        with m.If(take):
            m.d.sync += full.eq(0)
        # beats before the last shift into `part` (the token in `hold` may still wait for
        # the core meanwhile); the last beat completes the token into `hold`
        part = Signal(max(1, (li.beats - 1) * bb), name="in_part", reset_less=True)
        with m.If(acc):
            with m.If(last_beat):
                m.d.sync += [beat.eq(0), full.eq(1),
                             hold.eq(Cat(part, self.s_axis_tdata) if li.beats > 1
                                     else self.s_axis_tdata)]
            with m.Else():
                m.d.sync += [beat.eq(beat + 1),
                             part.eq(Cat(part[bb:], self.s_axis_tdata) if li.beats > 2
                                     else self.s_axis_tdata)]
        lane, w = li.lane, li.width
        m.d.comb += [core.i.valid.eq(full),
                     core.i.payload.eq(Cat(*[hold[k * lane:k * lane + w]
                                             for k in range(li.elements)]))]
        end_frame, end_packet = self._framing(m, "in", li.tokens, packet, acc & last_beat)
        with m.If(acc & last_beat & end_frame):
            m.d.sync += frames.eq(frames + 1)
        due = last_beat & end_packet
        sets = Signal(2, name="error_set")
        m.d.comb += sets.eq(Cat(acc & self.s_axis_tlast & ~due, acc & ~self.s_axis_tlast & due))
        return sets

    def _framing(self, m: Module, name: str, tokens: int, packet: Signal,
                 step: Any) -> tuple[Any, Any]:
        """Token and frame counters advanced by `step` (a token done): (this token ends a
        frame, it ends a packet of PACKET_FRAMES frames)."""
        tok = Signal(range(max(2, tokens)), name=f"{name}_token")
        frm = Signal(32, name=f"{name}_frame")
        end_frame = tok == tokens - 1
        end_packet = end_frame & ((frm + 1 >= packet) | (packet == 0))
        with m.If(step):
            m.d.sync += tok.eq(Mux(end_frame, 0, tok + 1))
            with m.If(end_frame):
                m.d.sync += frm.eq(Mux(end_packet, 0, frm + 1))
        return end_frame, end_packet

    def _output(self, m: Module, core: Any, packet: Signal, frames: Signal) -> None:
        """Tokens from the core -> lanes (sign- or zero-extended) -> beats; TLAST, TKEEP."""
        lo = self.layout.output
        bb = 8 * lo.beat_bytes
        lanes = []
        for k in range(lo.elements):
            e = core.o.payload[k * lo.width:(k + 1) * lo.width]
            ext = (Cat(e, e[-1].replicate(lo.lane - lo.width)) if lo.signed
                   else Cat(e, Const(0, lo.lane - lo.width))) if lo.lane > lo.width else e
            lanes.append(ext)
        expanded = Cat(*lanes)
        obuf = Signal(lo.beats * bb, name="out_buf", reset_less=True)
        left = Signal(range(lo.beats + 1), name="out_left")
        adv = self.m_axis_tvalid & self.m_axis_tready
        m.d.comb += [self.m_axis_tvalid.eq(left != 0), self.m_axis_tdata.eq(obuf[:bb]),
                     core.o.ready.eq((left == 0) | ((left == 1) & self.m_axis_tready))]
        load = core.o.valid & core.o.ready
        with m.If(load):
            m.d.sync += [obuf.eq(expanded), left.eq(lo.beats)]
        with m.Elif(adv):
            m.d.sync += [obuf.eq(obuf >> bb), left.eq(left - 1)]
        end_frame, end_packet = self._framing(m, "out", lo.tokens, packet, adv & (left == 1))
        m.d.comb += self.m_axis_tlast.eq((left == 1) & end_packet)
        with m.If(adv & (left == 1) & end_frame):
            m.d.sync += frames.eq(frames + 1)
        if lo.keep:
            tail = lo.token_bytes - (lo.beats - 1) * lo.beat_bytes
            m.d.comb += self.m_axis_tkeep.eq(Mux(left == 1, (1 << tail) - 1,
                                                 (1 << lo.beat_bytes) - 1))

    def _registers(self, m: Module, packet: Signal, frames_in: Signal, frames_out: Signal,
                   error: Signal) -> Signal:
        """The AXI4-Lite slave: a write takes address and data together (both valid), one
        at a time; a read answers the cycle after its address. Returns the ERROR bits a
        write clears this cycle."""
        li, lo = self.layout.input, self.layout.output
        consts = {"LATENCY": int(self.info.get("latency") or 0),
                  "II": int(self.info.get("ii") or 1),
                  "LAYOUT": li.beat_bytes | (li.lane << 8) | (lo.lane << 16),
                  "TOKENS": (li.tokens & 0xFFFF) | ((lo.tokens & 0xFFFF) << 16)}
        consts.update({f"GRAPH_ID{i}": w for i, w in enumerate(self.id_words)})
        # write channel
        bvalid = Signal(name="axil_bvalid")
        do_write = self.s_axil_awvalid & self.s_axil_wvalid & ~bvalid
        m.d.comb += [self.s_axil_awready.eq(do_write), self.s_axil_wready.eq(do_write),
                     self.s_axil_bvalid.eq(bvalid), self.s_axil_bresp.eq(0)]
        with m.If(bvalid & self.s_axil_bready):
            m.d.sync += bvalid.eq(0)
        waddr = self.s_axil_awaddr[2:]
        with m.If(do_write):
            m.d.sync += bvalid.eq(1)
            with m.If((waddr == REGISTERS["PACKET_FRAMES"] >> 2) & self.s_axil_wstrb.all()):
                m.d.sync += packet.eq(self.s_axil_wdata)
        clear = Signal(2, name="error_clear")
        with m.If(do_write & (waddr == REGISTERS["ERROR"] >> 2) & self.s_axil_wstrb[0]):
            m.d.comb += clear.eq(self.s_axil_wdata[:2])
        # read channel
        rvalid = Signal(name="axil_rvalid")
        rdata = Signal(32, name="axil_rdata")
        m.d.comb += [self.s_axil_arready.eq(~rvalid), self.s_axil_rvalid.eq(rvalid),
                     self.s_axil_rdata.eq(rdata), self.s_axil_rresp.eq(0)]
        with m.If(rvalid & self.s_axil_rready):
            m.d.sync += rvalid.eq(0)
        with m.If(self.s_axil_arvalid & ~rvalid):
            m.d.sync += rvalid.eq(1)
            with m.Switch(self.s_axil_araddr[2:]):
                for name, addr in REGISTERS.items():
                    with m.Case(addr >> 2):
                        if name in consts:
                            m.d.sync += rdata.eq(consts[name])
                        else:
                            sig = {"FRAMES_IN": frames_in, "FRAMES_OUT": frames_out,
                                   "ERROR": error, "PACKET_FRAMES": packet}[name]
                            m.d.sync += rdata.eq(sig)
                with m.Default():
                    m.d.sync += rdata.eq(0)
        return clear


def axi_top(compiled: CompiledGraph, reuse: Reuse | str | None = None,
            beat_bytes: int | str | None = None, adder_levels: int | str | None = None,
            pipeline: str | None = None, out_beat_bytes: int | str | None = None
            ) -> tuple[AxiModel, dict[str, Any]]:
    """The model (build_top) inside AxiModel; its info gains "axi" (layout, register map,
    ports). Beat widths: AxiLayout.from_info."""
    plan = resolve_plan(compiled, reuse, pipeline, adder_levels)
    # the beat widths are checked on the plan's figures, before any component is built
    layout = AxiLayout.from_info(plan_top(compiled, plan), beat_bytes, out_beat_bytes)
    core, info = build_top(compiled, plan)
    top = AxiModel(core, info, compiled.graph_id, layout)
    info = dict(info, axi=axi_info(top))
    return top, info


def axi_info(top: AxiModel) -> dict[str, Any]:
    return {"input": top.layout.input.as_dict(), "output": top.layout.output.as_dict(),
            "registers": dict(REGISTERS), "address_bits": ADDR_BITS,
            "graph_id_words": top.id_words,
            "error_bits": {"tlast_early": ERROR_TLAST_EARLY,
                           "tlast_missing": ERROR_TLAST_MISSING},
            "ports": sorted(top.signature.members.keys()),
            "doc": "modelcircuit.hdl.axi (module docstring)"}


def convert_axi(compiled: CompiledGraph, reuse: Reuse | str | None = None,
                top_name: str = "modelcircuit_axi", beat_bytes: int | str | None = None,
                adder_levels: int | None = None, pipeline: str | None = None,
                out_beat_bytes: int | str | None = None) -> tuple[str, dict[str, Any]]:
    """(Verilog of the AXI IP, info), deterministic: the R = 1 Dense cores as text modules
    (hdl/units/netlist_text.py), as hdl/export.convert does."""
    from .export import to_text

    check_top_name(top_name)
    os.environ["AMARANTH_USE_YOSYS"] = "builtin"
    top, info = axi_top(compiled, reuse, beat_bytes, adder_levels, pipeline, out_beat_bytes)
    v, _, _ = to_text(top, top_name)
    return v, {"top": top_name, **info, "graph_id": compiled.graph_id}
