"""Run a top-level model component in Amaranth's simulator on a batch of input codes.

Drives the input stream (optionally with random gaps: valid held low for a while, and once
high held until accepted) and the output ready (optionally random backpressure); collects
every output transfer. Returns output codes plus the cycle at which each input was accepted
and each output delivered, so tests can check latency and II as well as numbers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..hdl.payload import pack_words, unpack_words


def pack(codes: np.ndarray, width: int) -> int:
    """One vector of codes -> one payload (hdl/payload.py: element 0 in the least
    significant bits, two's complement codes)."""
    return pack_words(np.asarray(codes, dtype=np.int64).reshape(1, -1), width)[0]


def unpack(value: int, width: int, n: int, signed: bool) -> np.ndarray:
    """One payload -> its n codes (hdl/payload.py)."""
    return unpack_words([value], width, n, signed)[0]


@dataclass
class SimResult:
    outputs: np.ndarray  # (batch, n_out) codes
    accepted: list[int]  # cycle of each input handshake
    delivered: list[int]  # cycle of each output handshake
    cycles: int


def simulate(top: Any, info: dict[str, Any], codes: np.ndarray, gap: float = 0.0,
             backpressure: float = 0.0, seed: int = 0, max_cycles: int | None = None,
             n_out: int | None = None) -> SimResult:
    """Feed `codes` (batch, n_in) through `top`; gap / backpressure are probabilities that
    the input withholds valid / the output withholds ready on a given cycle. A streamed
    model takes one token per row (a sequence of T tokens, a frame of pixels) and may emit
    a different number of tokens: `n_out` outputs are awaited (default one per row)."""
    from amaranth.sim import Simulator

    codes = np.asarray(codes, dtype=np.int64).reshape(len(codes), -1)
    ii, oi = info["input"], info["output"]
    words = pack_words(codes, ii["element_width"])
    rng = random.Random(seed)
    want = len(words) if n_out is None else int(n_out)
    budget = max_cycles or (info["latency"] + 8 + len(words) * info["ii"]) * 4 + 200
    res = SimResult(np.zeros((0, oi["elements"]), dtype=np.int64), [], [], 0)
    outs: list[np.ndarray] = []

    async def bench(ctx: Any) -> None:
        sent, cycle, valid = 0, 0, False
        while len(outs) < want and cycle < budget:
            if sent < len(words) and not valid:
                valid = rng.random() >= gap
            ctx.set(top.i.valid, int(valid))
            ctx.set(top.i.payload, words[sent] if valid else 0)
            ctx.set(top.o.ready, int(rng.random() >= backpressure))
            _, _, iv, ir, ov, orr, op = await ctx.tick().sample(
                top.i.valid, top.i.ready, top.o.valid, top.o.ready, top.o.payload)
            if iv and ir:
                res.accepted.append(cycle)
                sent += 1
                valid = False
            if ov and orr:
                res.delivered.append(cycle)
                outs.append(unpack(op, oi["element_width"], oi["elements"], oi["signed"]))
            cycle += 1
        res.cycles = cycle

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    if outs:
        res.outputs = np.stack(outs)
    return res
