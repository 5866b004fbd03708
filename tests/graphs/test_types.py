"""Number types (types.py)."""

from __future__ import annotations

from modelcircuit.graphs.types import parse_type


def test_parse_type_roundtrip():
    for s in ["fixed<16,6>", "ufixed<8,0>", "fixed<8,-2>", "fixed<4,9>", "fixed<8,3,RND_CONV,WRAP>"]:
        assert str(parse_type(str(parse_type(s)))) == str(parse_type(s))

