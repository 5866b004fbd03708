"""The graph id (identity.py)."""

from __future__ import annotations

import modelcircuit as mc
from tests.graphs.helpers import mlp


def test_graph_id_changes_with_weights_and_options():
    ids = {mc.compile(mlp(0), precision="fixed<16,6>").graph_id,
           mc.compile(mlp(1), precision="fixed<16,6>").graph_id,
           mc.compile(mlp(0), precision="fixed<16,7>").graph_id,
           mc.compile(mlp(0), precision="fixed<16,6>", table_bits=8).graph_id}
    assert len(ids) == 4
    assert mc.compile(mlp(0), precision="fixed<16,6>").graph_id == mc.compile(
        mlp(0), precision="fixed<16,6>").graph_id

