"""Streaming CNN circuits (hdl/streamed/units.py, hdl/streamed/lower.py): bit-exact against the golden model
(graphs/reference.py) under Verilator with random input gaps and output backpressure;
simulated per-frame latency and II equal to the compile-time event model; FIFO sizing on a
skip connection; refusals.

Two small graphs cover the units: a 2-D net (asymmetric pads, stride 2, depthwise, a
concat skip connection, MaxPool with padding, nearest Resize, AvgPool, a folded Conv,
Flatten into a Dense) and a 1-D net whose output stays a pixel stream (Conv1D with stride
and uneven pads, LeakyRelu, MaxPool, Resize, an Add of two streams). One Verilator build
each (cached across the tests of the session)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from modelcircuit.graphs import reference
from modelcircuit.graphs.ir import Graph, Node, Tensor
from modelcircuit.graphs.pipeline import compile_graph
from modelcircuit.hdl import build_top, plan_top
from modelcircuit.hdl.errors import HdlError
from modelcircuit.sim import rtl

pytestmark = pytest.mark.xdist_group("sim")


class _G:
    """A tiny hand-written graph (Conv & co. have no GraphBuilder methods)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.t: dict[str, Tensor] = {}
        self.c: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []

    def tensor(self, name: str, shape: tuple[int, ...]) -> str:
        self.t[name] = Tensor(name, tuple(shape))
        return name

    def const(self, name: str, v: np.ndarray) -> str:
        self.c[name] = np.asarray(v, dtype=np.float64)
        self.t[name] = Tensor(name, self.c[name].shape)
        return name

    def node(self, op: str, name: str, ins: list[str], oshape: tuple[int, ...], **attrs) -> str:
        out = self.tensor(name + "_y", oshape)
        self.nodes.append(Node.make(name, op, ins, [out], **attrs))
        return out

    def conv(self, name: str, x: str, k: tuple[int, ...], cout: int, shape: tuple[int, ...],
             strides: tuple[int, ...], pads: tuple[int, ...], group: int = 1) -> str:
        cin = self.t[x].shape[-1]
        w = self.const(name + "_w", self.rng.normal(0, 0.5, (*k, cin // group, cout)))
        b = self.const(name + "_b", self.rng.normal(0, 0.3, (cout,)))
        return self.node("Conv", name, [x, w, b], shape, kernel=k, strides=strides, pads=pads,
                         group=group)

    def graph(self, name: str, x: str, y: str) -> Graph:
        return Graph(name, (x,), (y,), tuple(self.nodes), self.t, self.c)


def graph_2d() -> Graph:
    g = _G(0)
    x = g.tensor("x", (6, 5, 2))
    # pads (top, left, bottom, right) = (1, 0, 0, 1): 7x6 padded -> 5x4
    c1 = g.conv("c1", x, (3, 3), 2, (5, 4, 2), (1, 1), (1, 0, 0, 1))
    r1 = g.node("Relu", "r1", [c1], (5, 4, 2))
    d1 = g.conv("d1", r1, (3, 3), 2, (5, 4, 2), (1, 1), (1, 1, 1, 1), group=2)  # depthwise
    cat = g.node("Concat", "cat", [r1, d1], (5, 4, 4), axis=2)  # the skip connection
    p1 = g.node("MaxPool", "p1", [cat], (3, 2, 4), kernel=(2, 2), strides=(2, 2),
                pads=(0, 0, 1, 0))
    up = g.node("Resize", "up", [p1], (6, 4, 4), scales=(2, 2))
    a1 = g.node("AvgPool", "a1", [up], (3, 2, 4), kernel=(2, 2), strides=(2, 2),
                pads=(0, 0, 0, 0))
    c2 = g.conv("c2", a1, (3, 3), 2, (2, 1, 2), (2, 2), (1, 1, 1, 1))  # stride 2
    fl = g.node("Reshape", "fl", [c2], (4,), shape=(4,))
    w = g.const("fc_w", g.rng.normal(0, 0.5, (4, 3)))
    y = g.node("Dense", "fc", [fl, w], (3,))
    return g.graph("cnn2d", x, y)


def graph_1d() -> Graph:
    g = _G(1)
    x = g.tensor("x", (12, 3))
    c1 = g.conv("c1", x, (3,), 4, (7, 4), (2,), (1, 2))  # (12 + 3 - 3) // 2 + 1 = 7
    lr = g.node("LeakyRelu", "lr", [c1], (7, 4), alpha=0.25)
    p1 = g.node("MaxPool", "p1", [lr], (3, 4), kernel=(2,), strides=(2,), pads=(0, 0))
    up = g.node("Resize", "up", [p1], (6, 4), scales=(2,))
    r = g.node("Relu", "r", [up], (6, 4))
    y = g.node("Add", "add", [up, r], (6, 4))  # two streams joined per pixel
    return g.graph("cnn1d", x, y)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("streamcache")


@pytest.fixture(scope="module")
def cnn2d():
    return compile_graph(graph_2d(), precision="fixed<12,5>")


@pytest.fixture(scope="module")
def cnn1d():
    return compile_graph(graph_1d(), precision="fixed<8,3>")


def _codes(cg, n: int, seed: int) -> np.ndarray:
    t = cg.graph.tensor(cg.graph.inputs[0])
    rng = np.random.default_rng(seed)
    return rng.integers(t.dtype.qmin, t.dtype.qmax + 1, (n, *t.shape))


REUSE_2D = {"c2": 9, "fc": 6}  # the last Conv folded (II 9 per window); the Dense after the
# Flatten at reuse 6 = 2 pixels x 3 cycles per pixel (one output per cycle)


def test_2d_bit_exact_with_gaps_and_backpressure(cnn2d, cache) -> None:
    x = _codes(cnn2d, 12, 0)
    r = rtl.execute(cnn2d, x, reuse=REUSE_2D, cache_dir=cache, seed=3, gaps=0.3,
                    backpressure=0.4)
    c = r["checks"]
    assert c["bit_exact"] and c["complete"] and r["ok"], c
    assert c["lost"] == 0 and c["extra"] == 0
    assert r["outputs"].shape == (12, 3)
    # the golden model's answer, independently: what the bench compared against
    exp = reference.execute(cnn2d.graph, [x], inputs_are_codes=True)[cnn2d.graph.outputs[0]]
    assert np.array_equal(r["outputs"], exp)
    # simulated latency per frame and II per pixel equal the compile-time figures
    info = plan_top(cnn2d, REUSE_2D)
    assert c["latency_ok"] and c["ii_ok"]
    assert r["latency_frames"] == info["latency_frames"][:len(r["latency_frames"])]
    assert (r["latency"], r["ii"]) == (info["latency"], info["ii"])
    fold = [lay for lay in info["layers"] if lay.get("node") == "c2"][0]
    assert fold["inner"]["ii"] == 9 and fold["inner"]["reuse"] == 9
    fc = [lay for lay in info["layers"] if lay.get("node") == "fc"][0]
    assert fc["cycles_per_pixel"] == 3 and fc["multipliers"] == 2  # C = 2 lanes, one output


def test_corrupted_expected_bit_fails(cnn2d, cache) -> None:
    x = _codes(cnn2d, 4, 1)
    exp = rtl.golden_codes(cnn2d, x).copy()
    exp[2, 1] ^= 1 << 3
    rtl.prepare(cnn2d, reuse=REUSE_2D, cache_dir=cache)  # built here when this test runs alone
    # or on another worker than the test above (CI once ran it so)
    r = rtl.execute(cnn2d, x, reuse=REUSE_2D, expected=exp, cache_dir=cache)
    assert not r["built"]  # the cached build is reused
    assert not r["ok"] and not r["checks"]["bit_exact"]
    assert r["checks"]["first_mismatch"]["vector"] == 2
    assert r["checks"]["first_mismatch"]["element"] == 1


def test_1d_stream_output_bit_exact(cnn1d, cache) -> None:
    x = _codes(cnn1d, 10, 2)
    r = rtl.execute(cnn1d, x, cache_dir=cache, seed=5, gaps=0.4, backpressure=0.5)
    c = r["checks"]
    assert c["bit_exact"] and c["complete"] and c["latency_ok"] and c["ii_ok"], c
    assert r["outputs"].shape == (10, 6, 4)
    exp = reference.execute(cnn1d.graph, [x], inputs_are_codes=True)[cnn1d.graph.outputs[0]]
    assert np.array_equal(r["outputs"], exp)


def test_schedule_sizes_the_skip_fifo(cnn2d) -> None:
    """The concat's FIFO on the short path (r1 -> cat) must hold what the depthwise Conv on
    the long path still needs before its first output: with a 3x3 window and one pixel of
    padding, the pixels of one row and two more (W + 2 = 6) of its 4-wide input."""
    info = plan_top(cnn2d, REUSE_2D)
    cat = [lay for lay in info["layers"] if lay.get("node") == "cat"][0]
    short = cat["fifo_depths"][0]
    assert short >= 4 + 2 + 1, cat
    # the busiest unit sets the frame period: pixels paced at ceil(busiest / pixels), or
    # (here: a 6x5 frame, the first Conv steps over 7x6 padded positions) back to back and
    # then idle until the period is over, whichever wastes fewer cycles
    busiest = max(lay["cycles_per_frame"] for lay in info["layers"])
    assert busiest == 7 * 6
    assert (info["ii"], info["frame_cycles"]) == (1, busiest)
    assert info["input"]["frame"] == {"shape": [6, 5, 2], "tokens": 30}
    assert info["output"]["frame"] == {"shape": [3], "tokens": 1}
    assert info["streamed"] is True


def test_pixel_transpose_is_refused(cnn1d) -> None:
    g = cnn1d.graph
    y = g.outputs[0]
    t = Tensor("yt", (4, 6), g.tensor(y).dtype)
    node = Node.make("tr", "Transpose", [y], ["yt"], perm=(1, 0))
    bad = g.replace(nodes=g.nodes + (node,), tensors={**g.tensors, "yt": t}, outputs=("yt",))
    cg = dataclasses.replace(cnn1d, graph=bad)
    with pytest.raises(HdlError, match="node tr \\(Transpose\\).*no streaming circuit"):
        build_top(cg)


def graph_collect() -> Graph:
    """A Flatten not followed by a Dense: the frame is collected into one vector."""
    g = _G(2)
    x = g.tensor("x", (3, 4, 2))
    p = g.node("MaxPool", "p", [x], (3, 2, 2), kernel=(1, 2), strides=(1, 2), pads=(0, 0, 0, 0))
    fl = g.node("Reshape", "fl", [p], (12,), shape=(12,))
    r = g.node("Relu", "r", [fl], (12,))
    w = g.const("fc_w", g.rng.normal(0, 0.5, (12, 2)))
    y = g.node("Dense", "fc", [r, w], (2,))
    return g.graph("collect", x, y)


@pytest.mark.parametrize("bram_fifos", [False, True])
def test_collect_in_amaranth_sim(bram_fifos, monkeypatch) -> None:
    """CollectUnit and a whole-vector tail, in Amaranth's simulator (no build): bit-exact
    with gaps and backpressure, latency per frame as compiled when nothing stalls; with
    every FIFO a block-RAM one (SyncFIFOBuffered, 2 cycles: the model follows)."""
    from modelcircuit.hdl.streamed import top as stream_top
    from modelcircuit.sim.amaranth_sim import simulate

    if bram_fifos:
        monkeypatch.setattr(stream_top, "BUFFERED_MIN_DEPTH", 2)

    cg = compile_graph(graph_collect(), precision="fixed<8,3>", reuse=4)
    top, info = build_top(cg)
    kinds = [lay.get("kind") for lay in info["layers"]]
    assert "Flatten (collect the frame)" in kinds
    assert all(all(lay["fifo_block_ram"]) == bram_fifos for lay in info["layers"])
    x = _codes(cg, 5, 4)
    exp = reference.execute(cg.graph, [x], inputs_are_codes=True)[cg.graph.outputs[0]]
    res = simulate(top, info, x.reshape(-1, 2), gap=0.3, backpressure=0.5, seed=1)
    assert np.array_equal(res.outputs.reshape(exp.shape), exp)
    top, info = build_top(cg)
    clean = simulate(top, info, x.reshape(-1, 2))
    assert np.array_equal(clean.outputs.reshape(exp.shape), exp)
    lat = [clean.delivered[f] - clean.accepted[f * 12] for f in range(3)]
    assert lat == info["latency_frames"]
    assert all(b - a == info["ii"] for a, b in zip(clean.accepted, clean.accepted[1:], strict=False))


def _simulates_as_planned(cg, x: np.ndarray, reuse: dict, info: dict, cache, seed: int,
                          backpressure: float) -> None:
    """Under input gaps and output backpressure: complete, bit-exact against the golden
    model, and the simulated latency and II equal to the plan's (info: plan_top)."""
    r = rtl.execute(cg, x, reuse=reuse, cache_dir=cache, seed=seed, gaps=0.3,
                    backpressure=backpressure)
    c = r["checks"]
    assert c["bit_exact"] and c["complete"] and c["latency_ok"] and c["ii_ok"], c
    exp = reference.execute(cg.graph, [x], inputs_are_codes=True)[cg.graph.outputs[0]]
    assert np.array_equal(r["outputs"], exp)
    assert (r["latency"], r["ii"]) == (info["latency"], info["ii"])


def graph_flat_chunks() -> Graph:
    """Flatten -> Dense of 4 pixels x 3 channels into 2 outputs: at more than 2 cycles a
    pixel the channels are folded too (plan/fold.FlatFold)."""
    g = _G(4)
    x = g.tensor("x", (4, 3))
    c = g.conv("c", x, (1,), 3, (4, 3), (1,), (0, 0))  # a pixel stream
    fl = g.node("Reshape", "fl", [c], (12,), shape=(12,))
    w = g.const("fc_w", g.rng.normal(0, 0.5, (12, 2)))
    b = g.const("fc_b", g.rng.normal(0, 0.3, (2,)))
    y = g.node("Dense", "fc", [fl, w, b], (2,))
    return g.graph("flatchunks", x, y)


@pytest.mark.parametrize("d,chunks,mults", [(2, 1, 3), (4, 2, 2), (6, 3, 1)])
def test_flat_dense_folds_channels(cache, d: int, chunks: int, mults: int) -> None:
    """d = 4: two chunks of 2 channels (the last one padded), d = 6: one channel a cycle;
    bit-exact against the golden model and the compile-time latency and II."""
    cg = compile_graph(graph_flat_chunks(), precision="fixed<8,3>")
    reuse = {"fc": 4 * d}
    info = plan_top(cg, reuse)
    fc = [lay for lay in info["layers"] if lay.get("node") == "fc"][0]
    assert (fc["cycles_per_pixel"], fc.get("channel_chunks", 1), fc["multipliers"]) == \
        (d, chunks, mults)
    x = _codes(cg, 9, d)
    _simulates_as_planned(cg, x, reuse, info, cache, d, 0.3)


@pytest.mark.parametrize("net,reuse,per", [("2d", {"c2": 18, "fc": 6}, 2),
                                           ("2d", {"c2": 72, "fc": 6}, 4),
                                           ("1d", {"c1": 9}, 3),
                                           ("2d", {"d1": 18, "c2": 9, "fc": 6}, 0),
                                           ("2d", {"d1": 36, "c2": 9, "fc": 6}, 0)])
def test_window_memory_bit_exact(cnn2d, cnn1d, cache, net, reuse, per) -> None:
    """A folded Conv whose chunks are parts of one pixel keeps its window in a memory of kh
    rows (WindowUnit, Dense.read_window): chunks of half a pixel (stride 2, pads), one code
    a step with the outputs folded too (R > N_in), a 1-D window, and a folded depthwise
    window (per = 0: a whole pixel a tap, its lanes select their channels); under gaps and
    backpressure, bit-exact, latency and II as planned."""
    cg = cnn2d if net == "2d" else cnn1d
    node = next(iter(reuse))
    info = plan_top(cg, reuse)
    lay = [x for x in info["layers"] if x.get("node") == node][0]
    assert lay["line_buffers"]["window"] == "memory"
    frame = lay["window"]["frame"]
    assert lay["line_buffers"]["depth"] == lay["window"]["kernel"][0] * (
        frame[1] + lay["window"]["pads"][1] + lay["window"]["pads"][3])
    if per:
        assert frame[2] // lay["inner"]["fold"]["c"] == per
    else:
        assert lay["inner"]["kind"] == "depthwise fold"
    x = _codes(cg, 8, per + len(reuse))
    _simulates_as_planned(cg, x, reuse, info, cache, per + 7, 0.4)


def graph_one_pixel() -> Graph:
    """A Conv over the whole 4-pixel frame (one output pixel of 5 channels), flattened into
    a Dense of 3 outputs: the Dense after a global pool."""
    g = _G(5)
    x = g.tensor("x", (4, 3))
    c = g.conv("c", x, (4,), 5, (1, 5), (1,), (0, 0))
    fl = g.node("Reshape", "fl", [c], (5,), shape=(5,))
    w = g.const("fc_w", g.rng.normal(0, 0.5, (5, 3)))
    b = g.const("fc_b", g.rng.normal(0, 0.3, (3,)))
    y = g.node("Dense", "fc", [fl, w, b], (3,))
    return g.graph("onepixel", x, y)


@pytest.mark.parametrize("d,chunks,mults", [(6, 2, 3), (15, 5, 1)])
def test_flat_dense_one_pixel_group_major(cache, d: int, chunks: int, mults: int) -> None:
    """One pixel with its channels folded: an output at a time over all its chunks (one
    accumulator), bit-exact under gaps and backpressure, latency and II as planned."""
    cg = compile_graph(graph_one_pixel(), precision="fixed<8,3>")
    reuse = {"fc": d}
    info = plan_top(cg, reuse)
    fc = [lay for lay in info["layers"] if lay.get("node") == "fc"][0]
    assert (fc["cycles_per_pixel"], fc["channel_chunks"], fc["multipliers"]) == \
        (d, chunks, mults)
    x = _codes(cg, 9, d)
    _simulates_as_planned(cg, x, reuse, info, cache, d, 0.3)
