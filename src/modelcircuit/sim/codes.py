"""Packing fixed-point codes into stream payloads and back (pure Python + numpy).

Payload convention (hdl/top.py): element k (C order) occupies bits [k*W, (k+1)*W), element 0
in the least significant bits; signed types are two's complement, unsigned plain binary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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
    """(N, elements) integer codes -> N payload integers (unsigned, port.width*elements bits)."""
    c = np.asarray(codes).reshape(len(codes), -1)
    if c.shape[1] != port.elements:
        raise ValueError(f"{c.shape[1]} codes per vector, the port packs {port.elements}")
    if c.size and (int(c.min()) < port.lo or int(c.max()) > port.hi):
        raise ValueError(f"codes outside [{port.lo}, {port.hi}] for {port.width}-bit "
                         f"{'signed' if port.signed else 'unsigned'} elements")
    mask = (1 << port.width) - 1
    out = []
    for row in c.tolist():
        v = 0
        for k in range(len(row) - 1, -1, -1):
            v = (v << port.width) | (int(row[k]) & mask)
        out.append(v)
    return out


def element(payload: int, k: int, port: Port) -> int:
    """Code of element k of one payload."""
    v = (int(payload) >> (k * port.width)) & ((1 << port.width) - 1)
    if port.signed and v >> (port.width - 1):
        v -= 1 << port.width
    return v


def unpack(payloads: list[int], port: Port) -> np.ndarray:
    """N payload integers -> (N, elements) int64 codes."""
    out = np.zeros((len(payloads), port.elements), dtype=np.int64)
    for i, p in enumerate(payloads):
        out[i] = [element(p, k, port) for k in range(port.elements)]
    return out


def first_difference(expected: int, actual: int, port: Port) -> int | None:
    """Index of the first element (lowest k) where two payloads differ, None if equal."""
    diff = int(expected) ^ int(actual)
    if diff == 0:
        return None
    low = (diff & -diff).bit_length() - 1
    return low // port.width


def mismatch_report(index: int, expected: int, actual: int | None, port: Port) -> dict[str, Any]:
    """First-mismatch record: vector index, element, codes as integers and values."""
    if actual is None:
        return {"vector": index, "element": None, "expected": None, "actual": None,
                "message": f"vector {index}: no output (lost)"}
    k = first_difference(expected, actual, port)
    assert k is not None
    e, a = element(expected, k, port), element(actual, k, port)
    return {"vector": index, "element": k, "expected": e, "actual": a,
            "expected_value": port.value(e), "actual_value": port.value(a),
            "message": f"vector {index}, element {k}: expected code {e} "
                       f"({port.value(e):g}), got {a} ({port.value(a):g})"}
