"""A UART wrapper around a model's stream interface, for board builds.

Byte protocol (8N1, default 115200 baud; the line idles high):

* The host sends one input vector as ceil(Wi / 8) bytes, where Wi is the width of the
  model's input payload (elements x element width): the payload as a little-endian integer,
  i.e. byte 0 carries payload bits 0..7, so element 0's low bits come first. Unused high bits
  of the last byte are ignored.
* The device answers each vector with ceil(Wo / 8) bytes of the output payload, in the same
  little-endian order; unused high bits of the last byte are zero. Answers come in the order
  of the vectors.
* Framing is by count. A frame left incomplete for `frame_timeout` clock cycles (default
  ~0.1 s on a board) is dropped, so a host that lost sync waits that long and starts again.
* The host may send the next vector while the previous one is computing; when the answers
  cannot be sent as fast as vectors arrive, the model stalls through its stream
  backpressure and a vector whose bytes arrive while the previous one still waits for the
  model is dropped whole (framing is kept). With `buffered` (the default when an answer is
  longer than a question, or the model's II is longer than a frame) one more whole vector
  is held, so only a host running more than one vector ahead loses one. Without it the
  model takes each vector as it completes (its II has passed since the last one, a frame
  earlier), so a host streaming vectors back to back never loses one either. A stop-and-wait host (send a vector, read
  its answer) never loses data.

Ports: `rx` In(1), `tx` Out(1). The model core is any `wiring.Component` with members `i`
(In, amaranth.lib.stream) and `o` (Out, stream).

Streamed models (a CNN, hdl/streamed/units.py): the payload is one token, a pixel of all channels,
so the host sends a frame as its pixels in raster order, each as ceil(Wi / 8) bytes, and
reads the answer tokens (one whole vector after a Flatten into a Dense, else the output
pixels in raster order); `protocol()` says how many tokens make a frame each way
("tokens_in_per_frame", "tokens_out_per_frame").
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .streamed.top import StreamTop


def frame_bytes(bits: int) -> int:
    return max(1, (int(bits) + 7) // 8)


def _load(cnt: Signal, zero: Signal, v: int) -> list[Any]:
    """Load a down-counter and its `== 0` flip-flop (UartRx, UartTx)."""
    return [cnt.eq(v), zero.eq(v == 0)]


def _count_down(cnt: Signal, zero: Signal) -> list[Any]:
    """One step down; `zero` says what cnt == 0 will say next cycle."""
    return [cnt.eq(cnt - 1), zero.eq(cnt == 1)]


class UartRx(wiring.Component):
    """8N1 receiver: `data`/`valid` pulse for one cycle per byte (2-FF synchronised rx)."""

    def __init__(self, divisor: int):
        if divisor < 4:
            raise ValueError(f"UART divisor must be >= 4 clocks per bit, got {divisor}")
        self.divisor = int(divisor)
        super().__init__({"rx": In(1, init=1), "data": Out(8), "valid": Out(1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        s1 = Signal(init=1)
        s2 = Signal(init=1)
        m.d.sync += [s1.eq(self.rx), s2.eq(s1)]
        cnt = Signal(range(self.divisor * 3 // 2 + 1))
        # cnt == 0 as a flip-flop of its own, set as cnt counts down to 0 (every load is
        # >= 2): the state machine reads one register, not the count's compare LUT tree
        # (in the iCE40 digits build, that tree and the FSM next to it set the clock)
        zero = Signal(init=1)
        bits = Signal(4)
        sh = Signal(8)

        m.d.sync += self.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~s2):
                    m.d.sync += [*_load(cnt, zero, self.divisor // 2), bits.eq(0)]
                    m.next = "START"
            with m.State("START"):  # re-check the start bit at its middle
                with m.If(zero):
                    with m.If(s2):
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += _load(cnt, zero, self.divisor - 1)
                        m.next = "DATA"
                with m.Else():
                    m.d.sync += _count_down(cnt, zero)
            with m.State("DATA"):
                with m.If(zero):
                    m.d.sync += [sh.eq(Cat(sh[1:], s2)), bits.eq(bits + 1),
                                 *_load(cnt, zero, self.divisor - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += _count_down(cnt, zero)
            with m.State("STOP"):
                with m.If(zero):
                    with m.If(s2):  # a framing error (low stop bit) drops the byte
                        m.d.sync += [self.data.eq(sh), self.valid.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += _count_down(cnt, zero)
        return m


class UartTx(wiring.Component):
    """8N1 transmitter: takes `data` when `valid & ready`."""

    def __init__(self, divisor: int):
        self.divisor = int(divisor)
        super().__init__({"data": In(8), "valid": In(1), "ready": Out(1), "tx": Out(1, init=1)})

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        # the bit counter's zero and `ready` (left == 0) are flip-flops of their own, as in
        # UartRx: `ready` gates the wrapper's output shift register, whose enable a
        # global buffer carries to every bit (the iCE40 digits build's clock once the
        # receiver's was fixed)
        cnt = Signal(range(self.divisor))
        zero = Signal(init=1)
        sh = Signal(10, init=0x3FF)
        left = Signal(4)
        idle = Signal(init=1)
        m.d.comb += self.ready.eq(idle)
        m.d.comb += self.tx.eq(sh[0])
        bit = _load(cnt, zero, self.divisor - 1)
        with m.If(idle):
            with m.If(self.valid):
                m.d.sync += [sh.eq(Cat(Const(0, 1), self.data, Const(1, 1))), left.eq(10),
                             idle.eq(0), *bit]
        with m.Elif(zero):
            m.d.sync += [sh.eq(Cat(sh[1:], Const(1, 1))), left.eq(left - 1),
                         idle.eq(left == 1), *bit]
        with m.Else():
            m.d.sync += _count_down(cnt, zero)
        return m


def check_divisor(divisor: int) -> int:
    """Clocks per bit: at least 4 (the receiver samples mid-bit from a half-bit count)."""
    if divisor < 4:
        raise ValueError(f"UART divisor must be >= 4 clocks per bit, got {divisor}")
    return int(divisor)


class UartWrapper(wiring.Component):
    """The model core behind a UART (see the module docstring for the byte protocol)."""

    def __init__(self, core: Any, in_bits: int, out_bits: int, divisor: int,
                 frame_timeout: int | None = None, buffered: bool | None = None,
                 ii: int = 1):
        check_divisor(divisor)  # refused here, before any part of the design is built
        self.core = core
        self.in_bits, self.out_bits = int(in_bits), int(out_bits)
        self.n_in, self.n_out = frame_bytes(in_bits), frame_bytes(out_bits)
        self.divisor = int(divisor)
        # a second input buffer costs a register per payload bit (on an iCE40 a logic cell
        # each): only where the model could not keep up with the line without it. It takes
        # a vector at most II cycles after the last one, which came a whole frame earlier
        self.buffered = bool(buffered if buffered is not None else
                             self.n_out > self.n_in or int(ii) > 10 * self.divisor * self.n_in)
        # default: ~ 1000 byte times (~0.1 s at 115200 baud)
        self.frame_timeout = int(frame_timeout if frame_timeout is not None
                                 else self.divisor * 10 * 1000)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1)})

    def protocol(self) -> dict[str, Any]:
        p = {"format": "8N1", "divisor": self.divisor, "input_bytes": self.n_in,
             "output_bytes": self.n_out, "byte_order": "little-endian payload",
             "frame_timeout_cycles": self.frame_timeout, "buffered": self.buffered}
        if isinstance(self.core, StreamTop):  # a streamed core: tokens per frame
            design = self.core.design
            p.update(streamed=True, tokens_in_per_frame=design.input.per_frame,
                     tokens_out_per_frame=design.output.per_frame)
        return p

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.urx = urx = UartRx(self.divisor)
        m.submodules.utx = utx = UartTx(self.divisor)
        m.d.comb += [urx.rx.eq(self.rx), self.tx.eq(utx.tx)]

        # receive: bytes shift in from the top, so after n_in bytes byte 0 is lowest
        nb = self.n_in * 8
        acc = Signal(nb)
        cnt = Signal(range(self.n_in + 1))
        idle = Signal(range(self.frame_timeout + 1))
        # idle == frame_timeout as a register of its own (kept beside every write of idle):
        # the wide compare feeds one flip-flop instead of the frame counter's enables
        timed_out = Signal(init=self.frame_timeout == 0)
        full = Signal()
        take = full & core.i.ready
        with m.If(take):
            m.d.sync += full.eq(0)
        new = Cat(acc[8:], urx.data) if self.n_in > 1 else urx.data
        if self.buffered:
            hold = Signal(nb)
            with m.If(urx.valid):
                with m.If(cnt == self.n_in - 1):
                    with m.If(~full | take):  # else the host ran a whole vector ahead
                        m.d.sync += [hold.eq(new), full.eq(1)]
                with m.Else():
                    m.d.sync += acc.eq(new)
        else:
            hold = acc
            lost = Signal()  # a byte of this frame came while the last vector waited
            with m.If(urx.valid):
                with m.If(~full | take):
                    m.d.sync += acc.eq(new)
                with m.Else():
                    m.d.sync += lost.eq(1)
                with m.If(cnt == self.n_in - 1):
                    m.d.sync += [full.eq(~(lost | (full & ~take))), lost.eq(0)]
            with m.Elif((cnt != 0) & timed_out):
                m.d.sync += lost.eq(0)
        idle_zero = [idle.eq(0), timed_out.eq(self.frame_timeout == 0)]
        with m.If(urx.valid):
            m.d.sync += idle_zero
            with m.If(cnt == self.n_in - 1):
                m.d.sync += cnt.eq(0)
            with m.Else():
                m.d.sync += cnt.eq(cnt + 1)
        with m.Elif(cnt != 0):
            with m.If(timed_out):
                m.d.sync += [cnt.eq(0), *idle_zero]
            with m.Else():
                m.d.sync += [idle.eq(idle + 1), timed_out.eq(idle == self.frame_timeout - 1)]
        m.d.comb += [core.i.valid.eq(full), core.i.payload.eq(hold[:self.in_bits])]
        # send: capture an output payload, then n_out bytes, lowest first
        ob = self.n_out * 8
        osh = Signal(ob)
        oleft = Signal(range(self.n_out + 1))
        oempty = Signal(init=1)  # oleft == 0, registered: osh's enable is one LUT
        m.d.comb += core.o.ready.eq(oempty)
        with m.If(core.o.valid & oempty):
            m.d.sync += [osh.eq(core.o.payload), oleft.eq(self.n_out), oempty.eq(0)]
        m.d.comb += [utx.data.eq(osh[:8]), utx.valid.eq(~oempty)]
        with m.If(utx.valid & utx.ready):
            m.d.sync += [osh.eq(osh >> 8), oleft.eq(oleft - 1), oempty.eq(oleft == 1)]
        return m


# -- host side (for tests and for a real host with pyserial) -------------------------------
def encode_vector(payload: int, in_bits: int) -> bytes:
    return int(payload & ((1 << in_bits) - 1)).to_bytes(frame_bytes(in_bits), "little")


def decode_vector(data: bytes, out_bits: int) -> int:
    return int.from_bytes(data, "little") & ((1 << out_bits) - 1)
