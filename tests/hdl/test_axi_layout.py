"""The AXI IP's TDATA packing (hdl/axi.py StreamLayout), checked against byte layouts written
out here by hand, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.hdl.axi import AxiLayout, StreamLayout, dma_beat_bytes, graph_id_words, lane_bits
from modelcircuit.hdl.errors import HdlError


def test_lanes_and_beats() -> None:
    assert [lane_bits(w) for w in (1, 8, 9, 16, 17, 33, 64)] == [8, 8, 16, 16, 32, 64, 64]
    with pytest.raises(HdlError):
        lane_bits(65)
    assert [dma_beat_bytes(n) for n in (64, 10, 5, 12, 24)] == [8, 2, 1, 4, 8]


def test_pack_byte_layout_by_hand() -> None:
    # 3 signed 6-bit elements in 8-bit lanes, 2-byte beats: a token of 3 bytes -> 2 beats,
    # padded with one zero byte
    s = StreamLayout(elements=3, width=6, signed=True, tokens=1, beat_bytes=2)
    assert (s.lane, s.token_bytes, s.beats, s.keep) == (8, 3, 2, True)
    assert s.pack([[-1, 5, -32], [31, 0, 1]]) == bytes([0xFF, 0x05, 0xE0, 0, 0x1F, 0, 1, 0])
    back = s.unpack(s.pack([[-1, 5, -32], [31, 0, 1]]), 2)
    assert back.tolist() == [[-1, 5, -32], [31, 0, 1]]
    # unsigned 12-bit elements: 16-bit lanes, little-endian, zero-extended
    u = StreamLayout(elements=2, width=12, signed=False, tokens=1, beat_bytes=4)
    assert u.pack([[0xABC, 1]]) == bytes([0xBC, 0x0A, 0x01, 0x00]) and not u.keep
    with pytest.raises(HdlError):
        u.pack([[4096, 0]])
    with pytest.raises(HdlError):
        s.pack([[32, 0, 0]])


def test_streamed_frames_and_roundtrip() -> None:
    rng = np.random.default_rng(1)
    s = StreamLayout(elements=5, width=16, signed=True, tokens=4, beat_bytes=4)
    codes = rng.integers(-(1 << 15), 1 << 15, size=(3, 4 * 5))
    data = s.pack(codes)
    assert len(data) == 3 * 4 * s.beats * 4 == 3 * 4 * 12
    np.testing.assert_array_equal(s.unpack(data, 3), codes)
    with pytest.raises(HdlError):
        s.unpack(data[:-1], 3)


def test_layout_from_info_and_graph_id() -> None:
    info = {"input": {"elements": 64, "element_width": 8, "signed": True},
            "output": {"elements": 10, "element_width": 8, "signed": True}}
    lay = AxiLayout.from_info(info, "dma")
    assert (lay.input.beat_bytes, lay.output.beat_bytes) == (8, 2)
    assert AxiLayout.from_info(info).output.beat_bytes == 10  # one token per beat
    with pytest.raises(HdlError):
        AxiLayout.from_info(info, 0)
    assert graph_id_words("0123456789abcdef" * 4) == [0x01234567, 0x89ABCDEF] * 2
    with pytest.raises(HdlError):
        graph_id_words("xyz")
