"""The CMVM optimiser (hdl/plan/cmvm.py) and the Dense adder-graph strategy: exact by
construction, sharing pays, widths and depths are what the circuit needs."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modelcircuit.hdl.plan import cmvm
from modelcircuit.hdl.plan.cmvm_counts import Columns, unkey


@st.composite
def problems(draw):  # noqa: ANN001, ANN201
    """(w, lo, hi, bias, x): a random integer matrix with zero, one and negative weights,
    inputs of 1-16 bits signed or unsigned, and inputs including the range's extremes."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n_in, n_out = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    wb = draw(st.integers(1, 16))
    w = rng.integers(-(1 << (wb - 1)) if wb > 1 else -1, 1 << (wb - 1) if wb > 1 else 2,
                     size=(n_in, n_out))
    # sprinkle the special weights
    special = rng.choice([0, 1, -1, 2, -4, 0], size=w.shape)
    w = np.where(rng.random(w.shape) < 0.3, special, w)
    xb = draw(st.integers(1, 16))
    signed = draw(st.booleans())
    lo = -(1 << (xb - 1)) if signed else 0
    hi = (1 << (xb - 1)) - 1 if signed else (1 << xb) - 1
    bias = (rng.integers(-(1 << 20), 1 << 20, size=n_out).tolist()
            if draw(st.booleans()) else None)
    x = rng.integers(lo, hi + 1, size=(40, n_in))
    x[0], x[1] = lo, hi
    return w, lo, hi, bias, x


@settings(max_examples=60, deadline=None, derandomize=True)
@given(problems(), st.sampled_from([None, 2, 3]), st.booleans())
def test_graph_equals_matrix_product(p, max_depth, cse) -> None:  # noqa: ANN001
    w, lo, hi, bias, x = p
    n_in, n_out = w.shape
    g = cmvm.optimize(w, [lo] * n_in, [hi] * n_in, bias, max_depth=max_depth, cse=cse)
    want = x.astype(object) @ w.astype(object) + (np.array(bias, dtype=object)
                                                  if bias is not None else 0)
    got = g.evaluate(x)
    assert (got.astype(object) == want).all()
    # every node's tracked range holds its values, so its width is enough
    assert all(n.lo <= n.hi for n in g.nodes)


def test_ranges_are_exact_and_tight() -> None:
    # y = 3x - 5z with x in [0, 15], z in [-8, 7]: [-35, 85]
    g = cmvm.optimize(np.array([[3], [-5]]), [0, -8], [15, 7])
    n, s = g.outputs[0]
    lo, hi = g.nodes[n].lo << s, g.nodes[n].hi << s
    assert (lo, hi) == (0 * 3 - 5 * 7, 15 * 3 + 5 * 8)


def test_sharing_reduces_adders() -> None:
    w = np.random.default_rng(5).integers(-128, 128, size=(16, 16))
    shared = cmvm.optimize(w, [0] * 16, [255] * 16)
    plain = cmvm.optimize(w, [0] * 16, [255] * 16, cse=False)
    assert len(shared.adders()) < len(plain.adders())
    assert shared.cost()["ccu2c"] < plain.cost()["ccu2c"]


def test_depth_limit_is_kept() -> None:
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, size=(16, 8))
    g = cmvm.optimize(w, [-128] * 16, [127] * 16, max_depth=2)
    shared = [n for i, n in enumerate(g.nodes) if n.kind == "add"
              and any(o is not None and o[0] == i for o in g.outputs) is False]
    # nodes made by extraction are at most 2 deep; the final sums add the tree on top
    digits = max(sum(len(cmvm.csd(int(v))) for v in w[:, j]) for j in range(8))
    assert g.depth <= 2 + int(np.ceil(np.log2(digits)))
    assert shared


def test_cap_wraps_widths() -> None:
    w = np.array([[32767], [-32768]])
    g = cmvm.optimize(w, [-32768] * 2, [32767] * 2, cap=20)
    assert all(g.node_width(i) <= 20 for i in g.adders())


def test_deterministic() -> None:
    rng = np.random.default_rng(7)
    w = rng.integers(-64, 64, size=(20, 10))
    a = cmvm.optimize(w, [-32] * 20, [31] * 20)
    b = cmvm.optimize(w.copy(), [-32] * 20, [31] * 20)
    assert a.nodes == b.nodes and a.outputs == b.outputs


def test_zero_matrix_and_bias_only() -> None:
    g = cmvm.optimize(np.zeros((3, 2), dtype=np.int64), [0] * 3, [7] * 3, [5, 0])
    x = np.array([[1, 2, 3], [7, 7, 7]])
    assert (g.evaluate(x) == [[5, 0], [5, 0]]).all()
    assert g.adders() == []


@pytest.mark.parametrize("c", [0, 1, -1, 7, -7, 12345, -(1 << 40) + 3])
def test_csd(c: int) -> None:
    d = cmvm.csd(c)
    assert sum(s << k for s, k in d) == c
    ks = [k for _, k in d]
    assert all(b - a >= 2 for a, b in zip(ks, ks[1:], strict=False))  # non-adjacent


# -- the Dense strategy -----------------------------------------------------------------


@functools.cache
def _digits():  # noqa: ANN202
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.frontend.onnx.importer import load_onnx
    from tests.conftest import DATA

    return mc_compile(load_onnx(str(DATA / "digits_mlp.onnx")), precision="fixed<8,3>",
                      strategy="da")


def test_digits_layers_as_adder_graphs_match_golden_sums() -> None:
    """Each Dense of the digits MLP as the "da" circuit builds it: the graph's outputs are
    the golden model's exact sums (x @ W + b at the sum's binary point) on every input."""
    from modelcircuit.hdl.vector.lower import Options, lower_dense

    c = _digits()
    g = c.graph
    rng = np.random.default_rng(0)
    for node in [n for n in g.nodes if n.op == "Dense"]:
        unit = lower_dense(g, node, Options({}, 4, strategy="da"))
        assert unit.strategy == "da" and unit.multipliers == 0
        t = g.tensor(node.inputs[0]).dtype
        x = rng.integers(t.qmin, t.qmax + 1, size=(64, unit.n_in))
        w = np.asarray(g.constants[node.inputs[1]], dtype=np.int64)
        want = (x @ w) << unit.p_shift
        half = (1 << (unit.frac - unit.tout.frac - 1)) if unit.round_trn else 0
        want = want + np.array(unit.bias) + half
        got = unit.graph.evaluate(x).astype(np.int64)
        assert (got == want).all()
        # the circuit's latency: a register every adder_levels levels, then the output
        assert unit.latency == sum(unit.stage_regs) + 1
        assert unit.describe()["adder_graph"]["adders"] == len(unit.graph.adders())


def test_strategy_option_in_graph_id_only_when_not_mult() -> None:
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.frontend.builder import GraphBuilder

    b = GraphBuilder("t")
    b.output(b.dense(b.input("x", 3), np.eye(3)))
    g = b.build()
    m = mc_compile(g, precision="fixed<8,3>")
    assert "strategy" not in m.options
    assert mc_compile(g, precision="fixed<8,3>", strategy="mult").graph_id == m.graph_id
    assert mc_compile(g, precision="fixed<8,3>", strategy="da").graph_id != m.graph_id


def test_bad_strategy_is_one_line_error(capsys) -> None:  # noqa: ANN001
    from modelcircuit.cli import main

    assert main(["compile", "--strategy", "fast", "--target", "verilog"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--strategy" in err and err.count("\n") == 1
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.frontend.builder import GraphBuilder
    from modelcircuit.graphs.ir import GraphError

    b = GraphBuilder("t")
    b.output(b.dense(b.input("x", 2), np.eye(2)))
    with pytest.raises(GraphError, match="strategy must be one of"):
        mc_compile(b.build(), precision="fixed<8,3>", strategy="fast")


def test_auto_strategy_spends_free_dsps_first() -> None:
    """`auto` on an FPGA profile: layers at R=1 take DSP blocks while the device has them
    to spare; with no DSPs every layer is an adder graph."""
    from modelcircuit.hdl.flow.devices import fpga_profile
    from modelcircuit.hdl.flow.fit import choose_strategy

    c = _digits()
    names = [n.name for n in c.graph.nodes if n.op == "Dense"]
    plan = {n: 1 for n in names}
    prof = fpga_profile("ecp5-85k")
    none = choose_strategy(c, dict(prof, dsp=0), plan)
    assert set(none.values()) == {"da"}
    rich = choose_strategy(c, dict(prof, dsp=1 << 20), plan)
    folded = choose_strategy(c, prof, {n: 4 for n in names})
    assert set(folded.values()) == {"mult"}  # folded layers keep their multipliers
    assert set(rich) == set(names)


def test_small_mlp_da_rtl_bit_exact(tmp_path) -> None:  # noqa: ANN001
    """A two-layer MLP with zero, one and negative weights, as adder graphs, simulated:
    bit-exact against the golden model, latency as planned."""
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.frontend.builder import GraphBuilder
    from modelcircuit.sim import rtl

    rng = np.random.default_rng(4)
    w1 = rng.normal(0, 0.8, size=(6, 5))
    w1[0, :] = 0
    w1[1, 0], w1[2, 1] = 1.0, -1.0
    b = GraphBuilder("da2")
    h = b.relu(b.dense(b.input("x", 6), w1, rng.normal(0, 0.3, size=5)))
    b.output(b.dense(h, rng.normal(0, 0.8, size=(5, 3))))
    c = mc_compile(b.build(), precision="fixed<10,4,RND>", strategy="da")
    t = c.graph.tensor(c.graph.inputs[0]).dtype
    x = rng.integers(t.qmin, t.qmax + 1, size=(40, 6))
    x[0], x[1] = t.qmin, t.qmax
    r = rtl.execute(c, x, cache_dir=tmp_path)
    assert r["checks"]["bit_exact"], r["checks"]["first_mismatch"]
    assert r["checks"]["latency_ok"] and r["ok"]


def test_da_export_is_byte_deterministic() -> None:
    """Same model and options -> the same Verilog, byte for byte, and no multiplier in it."""
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.frontend.builder import GraphBuilder
    from modelcircuit.hdl.export import convert

    rng = np.random.default_rng(9)
    b = GraphBuilder("det")
    b.output(b.relu(b.dense(b.input("x", 5), rng.normal(0, 1, size=(5, 4)),
                            rng.normal(0, 0.3, size=4))))
    c = mc_compile(b.build(), precision="fixed<8,3>", strategy="da")
    v1, il1, info1 = convert(c)
    v2, il2, _ = convert(mc_compile(b.build(), precision="fixed<8,3>", strategy="da"))
    assert v1 == v2 and il1 == il2
    assert info1["multipliers"] == 0 and "$mul" not in il1
    assert info1["layers"][0]["strategy"] == "da"


SHARED_MLPS = [("three_layer_keras", "fixed<16,6>"), ("three_layer_keras", "fixed<8,3>"),
               ("two_layer_keras", "fixed<16,6>"), ("two_layer_keras", "fixed<8,3>"),
               ("three_layer_pytorch", "fixed<16,6>"), ("three_layer_pytorch", "fixed<8,3>"),
               ("qkeras_jettagging", None), ("TFC_2W2A", None), ("TFC_1W2A", None),
               ("bnn_model_fc_1layer", None), ("digits", None)]


@pytest.mark.slow
@pytest.mark.parametrize("name,precision", SHARED_MLPS)
def test_verify_da_shared_mlps(name: str, precision: str | None, tmp_path) -> None:  # noqa: ANN001
    """`verify --backends golden,rtl --strategy da` on every shared MLP, R=1."""
    import json

    from modelcircuit.cli import main
    from tests.conftest import shared_model

    args = ["verify"] + ([] if name == "digits" else [str(shared_model(name))])
    args += ["--backends", "golden,rtl", "--strategy", "da", "--vectors", "40",
             "--json", str(tmp_path / "v.json")]
    if precision:
        args += ["--precision", precision]
    assert main(args) == 0
    rep = json.loads((tmp_path / "v.json").read_text())
    assert "rtl" in json.dumps(rep)


@pytest.mark.slow
@pytest.mark.parametrize("family,device", [("ecp5", "ecp5-25k"), ("ice40", "ice40-up5k")])
def test_cost_model_against_yosys(family: str, device: str, tmp_path) -> None:  # noqa: ANN001
    """The adder cost (AdderGraph.cost) against the carry cells yosys makes of the same
    graph (a Dense unit, "da", no requantization beyond a plain truncation): within 25 %."""
    import os

    from amaranth.back import rtlil

    from modelcircuit.graphs.types import parse_type
    from modelcircuit.hdl.flow.devices import fpga_profile
    from modelcircuit.hdl.flow.tools import Runner
    from modelcircuit.hdl.flow.yosys import synthesize
    from modelcircuit.hdl.units.base import circuit
    from modelcircuit.hdl.units.dense import Dense

    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    w = np.random.default_rng(11).integers(-31, 32, size=(8, 6))
    tx = parse_type("fixed<8,0,WRAP>")
    acc = parse_type("fixed<24,24>")
    unit = Dense(tx, w, parse_type("fixed<6,0>"), None, None, parse_type("fixed<24,24,WRAP>"),
                 acc, False, strategy="da")
    (tmp_path / "top.il").write_text(rtlil.convert(circuit(unit), name="top"))
    st = synthesize(tmp_path / "top.il", fpga_profile(device), tmp_path, Runner(tmp_path / "logs"))
    model = unit.graph.cost(family)
    got = st["carry"]
    want = model["ccu2c"] if family == "ecp5" else model["carry"]
    want_lut, got_lut = model["lut4"], st["lut"]
    assert 0.75 * want_lut <= got_lut <= 1.25 * want_lut, (got_lut, want_lut)
    assert st["dsp"] == 0
    print(family, "synth carry cells", got, "model", want, st["cells"])
    assert 0.75 * want <= got <= 1.25 * want, (got, want, st["cells"])


def _recount(cols: Columns) -> dict[int, int]:
    """Every pattern's count over all pairs of terms within a column, from scratch (pure
    Python, no numpy): what the incremental counts must equal."""
    out: dict[int, int] = {}
    for col in cols.cols:
        items = sorted(col.items())
        for i, (t1, d1) in enumerate(items):
            for t2, d2 in items[i + 1:]:
                k = ((t1 >> 8) << 42) | ((t2 >> 8) << 20) | (((t2 & 255) - (t1 & 255) + 512)
                                                            << 1) | (d1 == d2)
                out[k] = out.get(k, 0) + 1
    return out


# Columns' paths: the default; a sort (not a bincount) to find the patterns seen twice,
# np.unique for the first count; a bincount always, no free place at the first count (every
# column grows)
PATHS = {"default": {}, "sort": {"DENSE": -(1 << 40)},
         "tight": {"DENSE": 1 << 40, "MARGIN": 0}}


def _check_slots(cols: Columns) -> None:
    """The pair slots' invariant: every pair of terms of a column has the slot of its
    pattern when that is counted (and living), else one that counts nothing; a free place
    pairs with nothing and reads as empty."""
    tracked = cols.slots.tracked()
    for j, col in enumerate(cols.cols):
        place = cols.place[j]
        assert set(place) == set(col)
        free = set(cols.free[j])
        assert not free & set(place.values())
        for q in free:
            assert not cols.ps[j, q].any() and not cols.ps[j, :, q].any()
            assert (cols.a01[:, j, q] < 0).all()
        for t1, q1 in place.items():
            for t2, q2 in place.items():
                if t1 < t2:
                    k = ((t1 >> 8) << 42) | ((t2 >> 8) << 20) \
                        | (((t2 & 255) - (t1 & 255) + 512) << 1) | (col[t1] == col[t2])
                    s = int(cols.ps[j, q1, q2])
                    assert s == cols.ps[j, q2, q1]
                    assert (s and int(cols.slots.ks[s]) == k) if k in tracked else s == 0, (k, s)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("seed", range(6))
def test_incremental_pattern_counts_equal_a_recount(seed: int, path: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The counts kept per extraction (the slots of the pairs taken out subtracted, the
    new node's pairs counted) keep every tracked pattern's count equal to a recount from
    scratch, every pattern seen twice tracked, and every pair's slot its pattern's; the
    pick is the most frequent pattern, ties the smallest key. To the end, on every path."""
    for name, value in PATHS[path].items():
        monkeypatch.setattr(Columns, name, value)
    rng = np.random.default_rng(seed)
    n_in, top = (10, 41) if seed % 2 else (12, 256)
    w = rng.integers(-top + 1, top, size=(n_in, 8))
    cols = Columns(8)
    for j in range(8):
        for i in range(n_in):
            for d, k in cmvm.csd(int(w[i, j])):
                cols.insert(j, (i << 8) | k, d)
    cols.build_counts()
    nxt, steps = n_in, 0
    while True:
        full = _recount(cols)
        tracked = cols.slots.tracked()
        assert all(full.get(k, 0) == c for k, c in tracked.items())
        # every pattern seen twice or more now is counted (none lost)
        assert all(k in tracked for k, c in full.items() if c > 1)
        _check_slots(cols)
        best = max(full.values(), default=0)
        k = cols.slots.best(lambda _k: True)
        if best < 2:
            assert k is None
            break
        assert k == min(x for x, c in full.items() if c == best)
        # extract it by hand as optimize does: a fresh node per extraction
        a, b, ds, sg = unkey(k)
        for j in range(8):
            col = cols.cols[j]
            for s in sorted(cols.idx[j].get(a, ())):
                t1, t2 = (a << 8) | s, (b << 8) | (s + ds)
                if 0 <= s + ds < 256 and t1 in col and t2 in col and col[t1] * col[t2] == sg:
                    d = col[t1]
                    if steps % 2:  # both ways of taking terms out and putting one in
                        cols.replace(j, t1, t2, (nxt << 8) | min(s, s + ds), d)
                    else:
                        cols.remove(j, t1)
                        cols.remove(j, t2)
                        cols.insert(j, (nxt << 8) | min(s, s + ds), d)
        cols.update()
        nxt += 1
        steps += 1
    assert steps > 5


@pytest.mark.parametrize("path", ["sort", "tight"])
def test_every_path_makes_the_same_graph(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counts' paths (sort or bincount, growth of the places) are speed, not choice:
    the graph is the default path's, node for node."""
    rng = np.random.default_rng(11)
    problems = [(rng.integers(-(1 << 11), 1 << 11, size=(12, 10)), -128, 127),
                (rng.integers(-100, 100, size=(6, 24)), 0, 255)]
    want = [cmvm.optimize(w, [lo] * len(w), [hi] * len(w)) for w, lo, hi in problems]
    for name, value in PATHS[path].items():
        monkeypatch.setattr(Columns, name, value)
    for (w, lo, hi), g in zip(problems, want, strict=True):
        got = cmvm.optimize(w, [lo] * len(w), [hi] * len(w))
        assert got.nodes == g.nodes and got.outputs == g.outputs


def test_terms_put_in_must_be_of_a_new_node() -> None:
    """An update whose terms put in are of an old node is refused (its patterns may have
    been counted before: the counts would be wrong)."""
    cols = Columns(2)
    for j in range(2):
        cols.insert(j, 0 << 8, 1)
        cols.insert(j, 1 << 8, 1)
    cols.build_counts()
    cols.replace(0, 0 << 8, 1 << 8, (1 << 8) | 3, 1)
    with pytest.raises(ValueError, match="new node"):
        cols.update()


def test_csd_columns_match_csd() -> None:
    """The weights' digits in numpy are `csd`'s, and an input fixed at 0 has none."""
    rng = np.random.default_rng(4)
    w = rng.integers(-(1 << 40), 1 << 40, size=(7, 5))
    w[0, 0], w[1, 1], w[2, 2] = 0, -1, 1 << 39
    lo, hi = [-3, 0, 0, -1, 0, -5, 0], [3, 7, 0, 1, 9, 5, 1]
    cols = cmvm._csd_columns(w, lo, hi)
    for j in range(5):
        want = {(i << 8) | k: d for i in range(7) if not lo[i] == hi[i] == 0
                for d, k in cmvm.csd(int(w[i, j]))}
        assert cols[j] == want


@pytest.mark.parametrize("size", [1, 3, 8])
def test_clustered_graph_equals_product_and_shares_nothing_across_clusters(size: int) -> None:
    """cmvm.clustered: y = x @ w + bias exactly; every adder reads inputs or nodes of its own
    cluster only, and column j's output is a node of cluster j // size."""
    rng = np.random.default_rng(size)
    w = rng.integers(-40, 40, size=(9, 13))
    w[:, 4] = 0  # an all-zero column
    bias = [int(v) for v in rng.integers(-200, 200, size=13)]
    g, cluster = cmvm.clustered(w, [-32] * 9, [31] * 9, bias, None, size)
    x = rng.integers(-32, 32, size=(64, 9))
    assert np.array_equal(g.evaluate(x), x @ w + np.array(bias))
    assert len(cluster) == len(g.nodes) and max(cluster) == (13 - 1) // size
    for i, nd in enumerate(g.nodes):
        for j in ((nd.a, nd.b) if nd.kind == "add" else (nd.a,) if nd.kind == "neg" else ()):
            assert j < g.n_in or cluster[j] == cluster[i], (i, j)
    for j, o in enumerate(g.outputs):
        if o is not None and o[0] >= g.n_in:
            assert cluster[o[0]] == j // size


def _cluster_mlp():  # noqa: ANN202
    from modelcircuit.frontend.builder import GraphBuilder

    rng = np.random.default_rng(11)
    b = GraphBuilder("da_clusters")
    h = b.relu(b.dense(b.input("x", 6), rng.normal(0, 0.8, size=(6, 12)),
                       rng.normal(0, 0.3, size=12)))
    b.output(b.dense(h, rng.normal(0, 0.8, size=(12, 3))))
    return b.build()


def test_clustered_graph_rtl_bit_exact(tmp_path) -> None:  # noqa: ANN001
    """The "fmax" schedule (an ECP5 profile) builds a 12-column layer as two clusters with
    their own input copies: bit-exact against the golden model, latency as planned (one
    cycle more than one shared graph)."""
    import dataclasses

    from modelcircuit.api import compile as mc_compile
    from modelcircuit.graphs.types import FixedType
    from modelcircuit.hdl.plan.schedule import SCHEDULES
    from modelcircuit.hdl.units.dense import Dense
    from modelcircuit.sim import rtl

    c = mc_compile(_cluster_mlp(), precision="fixed<10,4,RND>", strategy="da",
                   profile="ecp5-85k")
    sched = SCHEDULES["fmax"]
    assert sched.graph_cluster == 8
    t = c.graph.tensor(c.graph.inputs[0]).dtype
    rng = np.random.default_rng(3)
    x = rng.integers(t.qmin, t.qmax + 1, size=(40, 6))
    x[0], x[1] = t.qmin, t.qmax
    r = rtl.execute(c, x, cache_dir=tmp_path)
    assert r["checks"]["bit_exact"], r["checks"]["first_mismatch"]
    assert r["checks"]["latency_ok"] and r["ok"]
    w = np.arange(-36, 36).reshape(6, 12)
    tx, tw, acc = FixedType(8, 4, True), FixedType(8, 2, True), FixedType(24, 12, True)
    one, two = (Dense(tx, w, tw, None, None, tx, acc, True, strategy="da",
                      schedule=dataclasses.replace(sched, graph_cluster=k)) for k in (0, 6))
    assert (one.clusters, two.clusters) == (0, 2) and two.latency == one.latency + 1


def test_cluster_copies_survive_synthesis(tmp_path) -> None:  # noqa: ANN001
    """prep.ys keeps the per-cluster input copies apart (opt_merge would fold them into one
    set: same D, clock and enable): after synth_ecp5 the second cluster's copy is there."""
    import json

    from modelcircuit.api import compile as mc_compile
    from modelcircuit.hdl.export import convert
    from modelcircuit.hdl.flow.devices import fpga_profile
    from modelcircuit.hdl.flow.tools import Runner
    from modelcircuit.hdl.flow.yosys import synthesize

    c = mc_compile(_cluster_mlp(), precision="fixed<10,4,RND>", strategy="da",
                   profile="ecp5-85k")
    v, _, _ = convert(c, pipeline="fmax")
    (tmp_path / "top.v").write_text(v)
    synthesize(tmp_path / "top.v", fpga_profile("ecp5-85k"), tmp_path, Runner(tmp_path / "logs"))
    cells = json.loads((tmp_path / "synth.json").read_text())["modules"]["top"]["cells"]
    ffs = [n for n, cell in cells.items() if cell["type"] == "TRELLIS_FF"]
    for k in (0, 1):
        assert any(f"c{k}_xdup" in n for n in ffs), k
