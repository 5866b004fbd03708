"""Every lowered op, every rounding and overflow mode, on a hand-built graph: gpu-emu equals
the golden model bit for bit (and the float path within float32 rounding)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from modelcircuit import gpu_backend as gb
from modelcircuit.graphs import reference
from modelcircuit.graphs.compiled import CompiledGraph
from modelcircuit.graphs.ir import Graph, GraphError, Node, Tensor
from modelcircuit.graphs.types import FLOAT32, parse_type

from .conftest import compiled

REQUANT_TYPES = ["fixed<6,2,RND_CONV,WRAP>", "ufixed<5,1,RND,SAT>", "fixed<7,3,TRN,WRAP,NARROW>",
                 "fixed<4,6,RND,SAT>", "fixed<12,-1,RND_CONV,SAT>", "ufixed<3,3,TRN,WRAP>",
                 "fixed<9,9,RND,WRAP>", "fixed<2,2,RND_CONV,SAT,NARROW>"]


def _graph(rt: str) -> Graph:
    T = parse_type
    types = {"x": "fixed<12,4>", "xt": "fixed<12,4>", "xr": "fixed<12,4>", "r1": rt,
             "s1": "fixed<10,3,RND,WRAP>", "s2": "fixed<9,4>", "m1": "fixed<8,3,RND_CONV,SAT>",
             "l1": "fixed<10,4,RND>", "rl": "fixed<6,2,TRN,WRAP>", "lt": "fixed<8,1>",
             "bp": "fixed<2,2>", "c": "fixed<8,3>", "k": "fixed<8,2>", "alpha": "fixed<8,0>",
             "table": "fixed<8,1>"}
    shapes = {"x": (2, 3), "xt": (3, 2), "k": (), "alpha": (1,), "table": (64,)}
    rng = np.random.default_rng(7)
    consts = {"c": rng.integers(-128, 128, 6), "k": np.array(-97), "alpha": np.array([26]),
              "table": rng.integers(-128, 128, 64)}
    nodes = (
        Node.make("tr", "Transpose", ["x"], ["xt"], perm=[1, 0]),
        Node.make("rs", "Reshape", ["xt"], ["xr"], shape=[6]),
        Node.make("rq", "Requant", ["xr"], ["r1"]),
        Node.make("add", "Add", ["r1", "xr"], ["s1"]),
        Node.make("sub", "Sub", ["s1", "c"], ["s2"]),
        Node.make("mul", "Mul", ["s2", "k"], ["m1"]),
        Node.make("lk", "LeakyRelu", ["m1", "alpha"], ["l1"], alpha=0.1),
        Node.make("relu", "Relu", ["l1"], ["rl"]),
        Node.make("lut", "Lut", ["m1", "table"], ["lt"], func="sigmoid", lo=-128, shift=2,
                  size=64),
        Node.make("bip", "Bipolar", ["s1"], ["bp"]),
    )
    tensors = {n: Tensor(n, shapes.get(n, (6,)), T(t)) for n, t in types.items()}
    return Graph("ops", ("x",), ("rl", "lt", "bp", "s2"), nodes, tensors,
                 {k: np.asarray(v, np.int64) for k, v in consts.items()})


def _compiled(g: Graph) -> CompiledGraph:
    return CompiledGraph(g, {}, (), f"test-{g.name}")


@pytest.mark.parametrize("rt", REQUANT_TYPES)
def test_every_op_bit_exact(rt):
    g = _graph(rt)
    t = g.tensor("x").dtype
    rng = np.random.default_rng(1)
    x = rng.integers(t.qmin, t.qmax + 1, size=(500, 2, 3))
    x[0], x[1], x[2], x[3] = t.qmin, t.qmax, 0, -1
    want = reference.execute(g, [x], inputs_are_codes=True)
    got = gb.execute(_compiled(g), [x], emulate=True)
    for o in g.outputs:
        np.testing.assert_array_equal(got[o], want[o], err_msg=o)


def test_float_ops_match_reference():
    g = _graph("fixed<6,2>")
    ts = {k: Tensor(v.name, v.shape, FLOAT32) for k, v in g.tensors.items()}
    consts = {"c": np.linspace(-2, 2, 6), "k": np.array(-0.75)}
    nodes = tuple(n for n in g.nodes if n.op not in ("Requant", "Lut"))
    nodes = (Node.make("rq", "Requant", ["xr"], ["r1"], quant_type="fixed<6,2,RND_CONV,SAT>"),
             *nodes[:2], *nodes[2:], Node.make("lut", "Lut", ["m1"], ["lt"], func="tanh"))
    nodes = tuple(sorted(nodes, key=lambda n: [m.name for m in g.nodes].index(n.name)))
    nodes = tuple(Node.make("lk", "LeakyRelu", ["m1"], ["l1"], alpha=0.1) if n.name == "lk"
                  else n for n in nodes)
    fg = g.replace(tensors=ts, constants=consts, nodes=nodes)
    x = np.random.default_rng(2).normal(0, 3, size=(300, 2, 3)).astype(np.float32)
    want = reference.execute(fg, [x], inputs_are_codes=True)
    got = gb.execute(_compiled(fg), [x], emulate=True)
    for o in fg.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-6, atol=1e-6, err_msg=o)


def test_unsupported_op_names_op_node_and_list(tmp_path, monkeypatch, capsys):
    from modelcircuit import artifact, cli

    g = _graph("fixed<6,2>")
    bad = tuple(Node.make("weird", "Einsum", list(n.inputs), list(n.outputs))
                if n.name == "relu" else n for n in g.nodes)
    with pytest.raises(gb.GpuError, match=r"node weird: op Einsum has no GPU kernel; supported: .*Dense"):
        gb.generate(g.replace(nodes=bad))
    # a user error like GraphError: a ValueError of modelcircuit, so the CLI says `error: …`
    # and exits 2 (not 70, "internal error … a bug")
    assert issubclass(gb.GpuError, ValueError) and issubclass(GraphError, ValueError)

    def write_compiled(*args, **kwargs):  # the GPU backend refuses the graph while compiling
        gb.generate(g.replace(nodes=bad))

    monkeypatch.setattr(artifact, "write_compiled", write_compiled)
    capsys.readouterr()
    rc = cli.main(["compile", "--target", "gpu", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("error: node weird: op Einsum has no GPU kernel") and err.count("\n") == 1, err


def test_refused_op_says_why():
    g = _graph("fixed<6,2>")
    bad = tuple(Node.make("dv", "Div", ["l1", "l1"], list(n.outputs))
                if n.name == "relu" else n for n in g.nodes)
    with pytest.raises(gb.GpuError, match=r"node dv: op Div has no GPU kernel \(division of "
                       r"two activations.*\); supported: .*Dense"):
        gb.generate(g.replace(nodes=bad))


def test_tables_are_keyed_by_the_vocabulary():
    from modelcircuit.graphs.ops import Op

    assert all(isinstance(op, Op) for op in (*gb.LOWERING, *gb.REFUSED))
    assert not set(gb.LOWERING) & set(gb.REFUSED)
    assert all(why.strip() for why in gb.REFUSED.values())


def test_artifact_is_deterministic(tmp_path):
    from modelcircuit.gpu_backend import codegen

    c = compiled("qkeras_jettagging", None)
    p1 = gb.export(c, tmp_path / "a")
    codegen._PROGRAMS.clear()  # the second export lowers again
    p2 = gb.write_artifact(c, tmp_path / "b")
    assert p1 == p2
    for f in ("kernels.cu", "plan.json", "weights.bin", "emu_shim.h"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    plan = json.loads((tmp_path / "a" / "plan.json").read_text())
    assert plan["graph_id"] == c.graph_id
    assert plan["memory"]["arena_bytes_per_sample"] <= plan["memory"]["naive_bytes_per_sample"]
    assert [x["kernel"] for x in plan["launches"]] == [k.kname for k in gb.lower(c).kernels]
    assert gb.program is gb.lower and gb.write_artifact is gb.export  # the names before
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(gb.GpuError, match="is a file"):
        gb.write_artifact(c, f)


def test_templates_are_strict():
    import jinja2

    from modelcircuit.gpu_backend.codegen import render

    with pytest.raises(jinja2.UndefinedError):
        render("threshold.cu.j2", kname="k", node="n", params=[])


def test_product_of_two_activations_bit_exact():
    """Mul of two activations (LSTMCell/GRUCell loops: gate * state), one of them broadcast
    (a Gather of one row): the exact product of the codes, one requantization, as golden."""
    T = parse_type
    types = {"x": "fixed<12,4>", "r": "fixed<8,3,RND>", "m": "fixed<10,4,RND_CONV,SAT>",
             "b": "fixed<9,5,TRN,WRAP>"}
    shapes = {"x": (2, 3), "r": (1, 3), "m": (2, 3), "b": (2, 3)}
    nodes = (Node.make("row", "Gather", ["x"], ["r"], axis=0, indices=[1], indices_shape=[1]),
             Node.make("mul", "Mul", ["x", "r"], ["m"]),
             Node.make("sq", "Mul", ["m", "m"], ["b"]))
    g = Graph("mul2", ("x",), ("m", "b"), nodes,
              {n: Tensor(n, shapes[n], T(t)) for n, t in types.items()}, {})
    t = g.tensor("x").dtype
    x = np.random.default_rng(3).integers(t.qmin, t.qmax + 1, size=(400, 2, 3))
    x[0], x[1] = t.qmin, t.qmax
    want = reference.execute(g, [x], inputs_are_codes=True)
    got = gb.execute(_compiled(g), [x], emulate=True)
    for o in ("m", "b"):
        np.testing.assert_array_equal(got[o], want[o], err_msg=o)
