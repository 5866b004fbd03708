"""Stream payloads for the cocotb bench: the packing itself and `Port` live in hdl/payload.py
(the circuit's payload format, defined once) and are re-exported here; this module adds the
first-mismatch report.

Payload convention (hdl/vector/top.py): element k (C order) occupies bits [k*W, (k+1)*W), element 0
in the least significant bits; signed types are two's complement, unsigned plain binary.
"""

from __future__ import annotations

from typing import Any

from ..hdl.payload import Port, element, first_difference, pack, unpack

__all__ = ["Port", "element", "first_difference", "mismatch_report", "pack", "unpack"]


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
