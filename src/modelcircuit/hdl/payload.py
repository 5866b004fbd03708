"""The stream payload format, defined once: fixed-point codes packed into one integer.

Element k (C order) occupies bits [k*W, (k+1)*W), element 0 in the least significant bits;
signed types are two's complement, unsigned plain binary (hdl/vector/top.py writes the same rule
into each port's "order"). Used by the Amaranth simulator helper (sim/amaranth_sim.py) and the
cocotb bench (sim/codes.py, sim/bench.py). Pure Python + numpy; element widths up to 64 bits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np


def _bits(codes: np.ndarray, width: int) -> np.ndarray:
    """(N, n) int64 codes -> (N, n*width) bits, least significant first (two's complement)."""
    n8 = np.ascontiguousarray(codes, dtype="<i8").view(np.uint8)  # 8 bytes per code
    bits = np.unpackbits(n8.reshape(*codes.shape, 8), axis=2, bitorder="little")
    return bits[:, :, :width].reshape(codes.shape[0], -1)


def pack_words(codes: Any, width: int) -> list[int]:
    """(N, n) integer codes -> N payload integers; each code is taken modulo 2**width (two's
    complement for negative codes), element 0 in the least significant bits."""
    c = np.asarray(codes, dtype=np.int64)
    rows = np.packbits(_bits(c.reshape(c.shape[0], -1), width), axis=1, bitorder="little")
    return [int.from_bytes(r.tobytes(), "little") for r in rows]


def unpack_words(payloads: Iterable[Any], width: int, n: int, signed: bool) -> np.ndarray:
    """N payload integers -> (N, n) int64 codes (bits above n*width are ignored)."""
    total = n * width
    nbytes, mask = (total + 7) // 8, (1 << total) - 1
    words = [int(p) & mask for p in payloads]
    buf = b"".join(p.to_bytes(nbytes, "little") for p in words)
    rows = np.frombuffer(buf, dtype=np.uint8).reshape(len(words), nbytes)
    bits = np.unpackbits(rows, axis=1, count=total, bitorder="little").reshape(len(words), n, width)
    wide = np.zeros((len(words), n, 64), dtype=np.uint8)  # each code widened to 64 bits
    wide[:, :, :width] = bits
    if signed and width:
        wide[:, :, width:] = bits[:, :, width - 1:]  # sign extension
    return np.packbits(wide, axis=2, bitorder="little").view("<i8").reshape(len(words), n)


@dataclass(frozen=True)
class Port:
    """One stream port's packing: `elements` codes of `width` bits each."""

    elements: int
    width: int
    signed: bool
    frac: int
    shape: tuple[int, ...]

    @classmethod
    def from_info(cls, d: dict[str, Any]) -> Port:
        return cls(int(d["elements"]), int(d["element_width"]), bool(d["signed"]),
                   int(d["frac_bits"]), tuple(int(s) for s in d.get("shape", [d["elements"]])))

    def as_dict(self) -> dict[str, Any]:
        return {"elements": self.elements, "element_width": self.width, "signed": self.signed,
                "frac_bits": self.frac, "shape": list(self.shape)}

    @property
    def lo(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1

    def value(self, code: int) -> float:
        return float(code) * 2.0 ** -self.frac


def pack(codes: np.ndarray, port: Port) -> list[int]:
    """(N, elements) integer codes -> N payload integers (unsigned, port.width*elements bits);
    codes outside the port's range are refused."""
    c = np.asarray(codes).reshape(len(codes), -1)
    if c.shape[1] != port.elements:
        raise ValueError(f"{c.shape[1]} codes per vector, the port packs {port.elements}")
    if c.size and (int(c.min()) < port.lo or int(c.max()) > port.hi):
        raise ValueError(f"codes outside [{port.lo}, {port.hi}] for {port.width}-bit "
                         f"{'signed' if port.signed else 'unsigned'} elements")
    return pack_words(c, port.width)


def unpack(payloads: list[int], port: Port) -> np.ndarray:
    """N payload integers -> (N, elements) int64 codes."""
    return unpack_words(payloads, port.width, port.elements, port.signed)


def element(payload: int, k: int, port: Port) -> int:
    """Code of element k of one payload."""
    return int(unpack_words([int(payload) >> (k * port.width)], port.width, 1, port.signed)[0, 0])


def first_difference(expected: int, actual: int, port: Port) -> int | None:
    """Index of the first element (lowest k) where two payloads differ, None if equal."""
    diff = int(expected) ^ int(actual)
    if diff == 0:
        return None
    low = (diff & -diff).bit_length() - 1
    return low // port.width
