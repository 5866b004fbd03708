"""The graph builder (builder.py)."""

from __future__ import annotations

import pytest

from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.graphs.ir import GraphError


def test_unsupported_builder_activation():
    b = GraphBuilder("bad")
    x = b.input("x", 2)
    with pytest.raises(GraphError, match="unknown activation"):
        b.activation(x, "swish")  # gelu is a table since issue 25

