"""Payload packing (no simulator): element 0 in the low bits, two's complement."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.sim.codes import Port, first_difference, mismatch_report, pack, unpack


@pytest.mark.parametrize("signed,w", [(True, 4), (True, 16), (False, 3), (False, 8), (True, 1)])
def test_pack_roundtrip(signed: bool, w: int) -> None:
    port = Port(5, w, signed, 2, (5,))
    rng = np.random.default_rng(w)
    codes = rng.integers(port.lo, port.hi + 1, size=(20, 5))
    codes[0] = port.lo
    codes[1] = port.hi
    assert np.array_equal(unpack(pack(codes, port), port), codes)


def test_layout_element0_low_bits() -> None:
    port = Port(3, 4, True, 0, (3,))
    assert pack(np.array([[1, -1, 2]]), port) == [0x2F1]


def test_out_of_range_codes_rejected() -> None:
    with pytest.raises(ValueError, match="outside"):
        pack(np.array([[8]]), Port(1, 4, True, 0, (1,)))


def test_mismatch_report_names_element_and_values() -> None:
    port = Port(4, 8, True, 4, (4,))
    exp, act = pack(np.array([[1, 2, 3, 4], [1, 2, -3, 4]]), port)
    assert first_difference(exp, act, port) == 2
    r = mismatch_report(7, exp, act, port)
    assert (r["vector"], r["element"], r["expected"], r["actual"]) == (7, 2, 3, -3)
    assert r["expected_value"] == 3 / 16 and r["actual_value"] == -3 / 16
    assert "vector 7, element 2" in r["message"]
