"""The fast export path (hdl/units/netlist_text.py): R = 1 Dense cores written as Verilog text.

The text cores must be the Amaranth cores' circuit: the same value shapes (checked op by op
against Amaranth), the same flip-flops and latency (checked against the pure Amaranth
export), and the same outputs as the golden model in a real simulator (Verilator through the
cocotb bench) for random layers: signed and unsigned inputs of 1-16 bits, zero, one and
negative weights, biases, both strategies, every register schedule (the "fmax" one has
shift-add leaves), every rounding and overflow mode."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Fragment, Module, Value

from modelcircuit.graphs.ir import Node
from modelcircuit.hdl import HdlError
from modelcircuit.hdl.export import convert, export_verilog, register_bits
from modelcircuit.hdl.plan.reuse import ReusePlan
from modelcircuit.hdl.units import netlist_text
from modelcircuit.hdl.units.dense import _AmaranthOps

from .helpers import T, compiled_from, extremes, golden

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

ROUND = ["TRN", "RND", "RND_CONV"]


def _type(rng: np.random.Generator, lo_w: int = 1, hi_w: int = 16, signed: bool | None = None,
          modes: bool = False) -> str:
    w = int(rng.integers(lo_w, hi_w + 1))
    s = bool(rng.integers(0, 2)) if signed is None else signed
    i = int(rng.integers(-2, w + 3))
    t = f"{'fixed' if s else 'ufixed'}<{w},{i}"
    if modes:
        t += f",{ROUND[int(rng.integers(0, 3))]},{'SAT' if rng.random() < 0.6 else 'WRAP'}"
        if s and rng.random() < 0.3:
            t += ",NARROW"
    return t + ">"


def _weights(rng: np.random.Generator, tw: str, n_in: int, n_out: int) -> np.ndarray:
    t = T(tw)
    w = rng.integers(t.qmin, t.qmax + 1, size=(n_in, n_out))
    mask = rng.random(w.shape)
    w[mask < 0.2] = 0
    w[(mask >= 0.2) & (mask < 0.3)] = min(1, t.qmax) if t.qmax >= 1 else t.qmin
    w[(mask >= 0.3) & (mask < 0.4)] = max(-1, t.qmin)
    w[0, 0] = t.qmin
    return w


def chain_case(seed: int, n_layers: int = 3):
    """A random chain of Dense layers (random types, bias or not, ReLU or not), the
    per-layer strategy, and input codes (extremes included)."""
    rng = np.random.default_rng(seed)
    n = [int(rng.integers(1, 9)) for _ in range(n_layers + 1)]
    tx = _type(rng, 1, 16)
    tensors = {"x": ((n[0],), tx)}
    consts, nodes, strategy = {}, [], {}
    prev = "x"
    for k in range(n_layers):
        tw = _type(rng, 1, 12, signed=True)
        out = "y" if k == n_layers - 1 else f"h{k}"
        tensors[f"w{k}"] = ((n[k], n[k + 1]), tw)
        consts[f"w{k}"] = _weights(rng, tw, n[k], n[k + 1])
        ins = [prev, f"w{k}"]
        if rng.random() < 0.7:
            tb = _type(rng, 2, 16, signed=True)
            tensors[f"b{k}"] = ((n[k + 1],), tb)
            consts[f"b{k}"] = rng.integers(T(tb).qmin, T(tb).qmax + 1, size=n[k + 1])
            ins.append(f"b{k}")
        tensors[out] = ((n[k + 1],), _type(rng, 2, 16, modes=True))
        nodes.append(Node.make(f"fc{k}", "Dense", ins, [out], relu=bool(rng.random() < 0.4)))
        strategy[f"fc{k}"] = "da" if rng.random() < 0.5 else "mult"
        prev = out
    c = compiled_from(nodes, tensors, consts, ["x"], ["y"], f"chain{seed}")
    plan = ReusePlan({nd.name: 1 for nd in nodes}, strategy=strategy)
    return c, plan, extremes(T(tx), n[0], rng, k=40)


# -- shapes: TextOps gives every value Amaranth's shape -------------------------------------
def test_text_ops_shapes_match_amaranth() -> None:
    """Random expressions of the core's operations: the same width and signedness in text
    as in Amaranth, and wraps/nodes/registers of the same widths."""
    from modelcircuit.hdl.units.base import circuit
    from modelcircuit.hdl.units.dense import Dense

    rng = np.random.default_rng(3)
    unit = Dense(T("fixed<8,3>"), np.ones((1, 1)), T("fixed<8,3>"), None, None,
                 T("fixed<8,3>"), T("fixed<20,10>"), False)
    m = Module()
    cu = circuit(unit)  # binds the unit's ports (x0, en) that the operations read
    a_ops, t_ops = _AmaranthOps(unit, m), netlist_text.TextOps(8)
    for _ in range(300):
        w, s = int(rng.integers(1, 17)), bool(rng.integers(0, 2))
        pool = [(a_ops.fit(Value.cast(unit.x0)[:w], w, s), t_ops.input(0, w, s))]
        for c in (0, 1, -1, 5, -6, 1 << 9, -(1 << 12)):
            if c:
                pool.append((a_ops.const(c), t_ops.const(c)))
        for _ in range(6):
            (a1, t1), (a2, t2) = (pool[int(rng.integers(len(pool)))] for _ in range(2))
            op = int(rng.integers(0, 7))
            k = int(rng.integers(0, 6))
            if op == 0:
                r = a_ops.shl(a1, k), t_ops.shl(t1, k)
            elif op == 1:
                r = a_ops.neg(a1), t_ops.neg(t1)
            elif op == 2:
                r = a_ops.add(a1, a2), t_ops.add(t1, t2)
            elif op == 3:
                r = a_ops.sub(a1, a2), t_ops.sub(t1, t2)
            elif op == 4:
                c = int(rng.integers(-300, 300)) or 3
                r = a_ops.mul(a1, c), t_ops.mul(t1, c)
            elif op == 5:
                r = a_ops.fit(a1, k + 1, bool(k & 1)), t_ops.fit(t1, k + 1, bool(k & 1))
            else:
                r = a_ops.regs([a1], f"r{len(t_ops.names)}_")[0], t_ops.regs([t1], f"r{len(t_ops.names)}_")[0]
            assert a_ops.shape(r[0]) == t_ops.shape(r[1]), (op, k, a_ops.shape(r[0]))
            assert r[1].bits <= r[1].width
            pool.append(r)
    Fragment.get(m, None), Fragment.get(cu, None)  # both are real, elaborable designs


# -- the same circuit as the Amaranth export, deterministic --------------------------------
@pytest.mark.parametrize("seed,pipeline", [(2, "fmax"), pytest.param(1, "latency", marks=pytest.mark.slow)])
def test_text_export_has_amaranth_registers_and_schedule(seed: int, pipeline: str) -> None:
    """Flip-flops (the RTLIL's, cores included), latency, II and per-layer figures as the
    pure Amaranth export's."""
    c, plan, _ = chain_case(seed)
    v_t, il_t, info_t = convert(c, plan, pipeline=pipeline)
    v_a, _, info_a = convert(c, plan, pipeline=pipeline, cores="amaranth")
    assert info_t["text_cores"]["modules"] == 3
    assert "text_cores" not in info_a
    for k in ("register_bits", "latency", "ii", "layers", "multipliers", "shifts"):
        assert info_t[k] == info_a[k], k
    cores_il = il_t[il_t.index("module \\top__core0"):]
    assert register_bits(cores_il) == info_t["text_cores"]["register_bits"] > 0
    assert "module top__core0" in v_t and "top__core0 core" in v_t
    assert "module top__core" not in v_a


def _constant_registers(v: str) -> list[str]:
    """The registers of the text cores in Verilog `v` whose next value depends on no input
    bit and no register: a constant, which yosys merges across layers into one flip-flop."""
    import re

    ident = re.compile(r"(?<!')\b[A-Za-z_]\w*\b")
    out = []
    for core in re.split(r"(?=module top__core)", v)[1:]:
        defs = dict(re.findall(r"assign (\w+) = (.*);", core))
        regs = dict(re.findall(r"(\w+) <= (.*);", core))
        data = {"x", *regs}
        changed = True
        while changed:
            changed = False
            for w, e in defs.items():
                if w not in data and data & set(ident.findall(e)):
                    data.add(w)
                    changed = True
        out += [r for r, e in regs.items() if not data & set(ident.findall(e))]
    assert "module top__core" in v
    return sorted(out)


@pytest.mark.parametrize("pipeline", ["latency", "fmax"])
def test_no_register_holds_a_constant(pipeline: str) -> None:
    """A bias is added to a product at the first adder level, never registered on its own
    (both strategies): registers of equal constants with the same enable are merged by yosys
    into one flip-flop whose net crossed the die (the jet taggers' critical paths)."""
    for seed in range(6):
        c, plan, _ = chain_case(seed)
        for strategy in ("mult", "da"):
            p = ReusePlan(plan.layers, strategy=dict.fromkeys(plan.layers, strategy))
            v, _, _ = convert(c, p, pipeline=pipeline)
            assert not _constant_registers(v), (seed, strategy, _constant_registers(v)[:5])


def test_text_export_is_byte_deterministic(tmp_path) -> None:  # noqa: ANN001
    c, plan, _ = chain_case(5)
    a = export_verilog(c, tmp_path / "a", plan, pipeline="fmax")
    b = export_verilog(chain_case(5)[0], tmp_path / "b", plan, pipeline="fmax")
    assert a["register_bits"] == b["register_bits"]
    for f in ("top.v", "top.il", "top.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_il_cores_equal_verilog_cores(tmp_path) -> None:  # noqa: ANN001
    """<top>.il carries the same cores as <top>.v: yosys proves every core module written
    as RTLIL equivalent to the same module written as Verilog (and reads the whole .il)."""
    import subprocess

    from modelcircuit.hdl.flow.tools import tool_env, tool_path, warm_tool

    c, plan, _ = chain_case(6, n_layers=2)
    assert set(plan.strategy.values()) == {"mult", "da"}
    v, il, _ = convert(c, plan, pipeline="fmax")
    assert "module top__tail0(" in v and "module \\top__tail0" in il  # the cores' tails
    (tmp_path / "c.v").write_text(v)
    (tmp_path / "c.il").write_text(il)
    script = ["read_rtlil c.il", "hierarchy -check -top top", "design -reset"]
    for k in range(2):
        name = f"top__core{k}"  # with the tails it instantiates (flattened into it)
        prep = [f"hierarchy -check -top {name}", "proc", "flatten", "wreduce", "opt_clean"]
        script += ["design -reset", "read_verilog c.v", *prep, f"rename {name} gold",
                   "design -stash gold", "read_rtlil c.il", *prep, f"rename {name} gate",
                   "design -stash gate", "design -copy-from gold -as gold gold",
                   "design -copy-from gate -as gate gate", "equiv_make gold gate equiv",
                   "hierarchy -top equiv", "equiv_simple", "equiv_induct",
                   "equiv_status -assert"]
    (tmp_path / "s.ys").write_text("\n".join(script) + "\n")
    warm_tool("yosys")  # an empty cache is compiled under the lock, not beside a build's yosys
    r = subprocess.run([tool_path("yosys"), "-q", "-s", "s.ys"], cwd=tmp_path, env=tool_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]


def test_unknown_cores_option_is_refused() -> None:
    c, plan, _ = chain_case(1, 1)
    with pytest.raises(HdlError, match="cores must be one of"):
        convert(c, plan, cores="rtlil")


def test_text_cores_are_off_outside_an_export() -> None:
    """amaranth.sim and the FPGA flow elaborate outside `text_cores`: pure Amaranth."""
    assert netlist_text.active() is None
    with netlist_text.text_cores("t") as cs:
        assert netlist_text.active() is cs
    assert netlist_text.active() is None


# -- simulated: the text cores compute what the golden model computes ----------------------
def _simulate(c, plan, x, pipeline: str, folder):  # noqa: ANN001, ANN202
    from modelcircuit.sim import rtl

    if not rtl.available("verilator"):
        pytest.skip("verilator not available")
    info = export_verilog(c, folder / "hdl", plan, pipeline=pipeline)
    assert info["text_cores"]["modules"] == len(c.graph.nodes)
    r = rtl.simulate_verilog(folder / "hdl" / "top.v", rtl.spec_from_info(info), x,
                             golden(c, x), folder, gaps=0.2, backpressure=0.3)
    assert r["checks"]["bit_exact"], r["checks"]["first_mismatch"]
    assert r["ok"], r["checks"]


def test_text_cores_rtl_bit_exact(tmp_path) -> None:  # noqa: ANN001
    """One design, four layers of random types, both strategies, the "fmax" schedule
    (shift-add leaves, registers between adder levels)."""
    c, plan, x = chain_case(11, n_layers=4)
    assert set(plan.strategy.values()) == {"mult", "da"}
    _simulate(c, plan, x, "fmax", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["latency", "fmax", "area"])
@pytest.mark.parametrize("seed", [21, 22, 23, 24])
def test_text_cores_rtl_bit_exact_matrix(seed: int, pipeline: str, tmp_path) -> None:  # noqa: ANN001
    c, plan, x = chain_case(seed, n_layers=4)
    _simulate(c, plan, x, pipeline, tmp_path)


def test_register_bits_counts_every_instance() -> None:
    """A module instantiated n times (the cores' tails) holds n times its flip-flops."""
    leaf = ("module \\leaf\n  wire width 3 input 1 \\d\n  wire width 3 output 2 \\q\n"
            "  cell $dff $1\n    parameter \\WIDTH 3\n    connect \\D \\d\n    connect \\Q \\q\n"
            "  end\nend\n")
    top = ("module \\top\n" + "".join(f"  cell \\leaf \\u{i}\n  end\n" for i in range(4))
           + "  cell $dffe $9\n    parameter \\WIDTH 2\n  end\nend\n")
    assert register_bits(top + leaf) == 4 * 3 + 2
    assert register_bits(leaf) == 3


def _repeated_case(seed: int, t_act: str, t_w: str, n: int, strategies: list[str], relu: bool):
    """A chain of Dense layers n -> n with one activation type and one weight type: every
    layer's tails have the same key where the strategy's rounding agrees (they share one
    tail module), and a layer without ReLU (the last) differs."""
    rng = np.random.default_rng(seed)
    tensors = {"x": ((n,), t_act)}
    consts, nodes, strategy = {}, [], {}
    prev = "x"
    for k, st in enumerate(strategies):
        out = "y" if k == len(strategies) - 1 else f"h{k}"
        tensors[f"w{k}"] = ((n, n), t_w)
        consts[f"w{k}"] = _weights(rng, t_w, n, n)
        tensors[out] = ((n,), t_act)
        nodes.append(Node.make(f"fc{k}", "Dense", [prev, f"w{k}"], [out],
                               relu=relu and k < len(strategies) - 1))
        strategy[f"fc{k}"] = st
        prev = out
    c = compiled_from(nodes, tensors, consts, ["x"], ["y"], f"rep{seed}")
    plan = ReusePlan({nd.name: 1 for nd in nodes}, strategy=strategy)
    return c, plan, extremes(T(t_act), n, rng, k=40)


@pytest.mark.parametrize("t_act", ["fixed<8,3,RND,SAT>", "ufixed<6,2,RND_CONV,WRAP>"])
def test_shared_tails_are_each_layers_circuit(t_act: str, tmp_path) -> None:  # noqa: ANN001
    """Layers whose tails share one module compute what each layer's own tail computes: the
    same flip-flops as the pure Amaranth export (each output's own tail), and the golden
    model's outputs in Verilator. Fails if a tail were shared between layers that need
    different ones (the key missing something the tail reads)."""
    c, plan, x = _repeated_case(3, t_act, "fixed<6,2>", 6, ["mult", "mult", "da", "mult"],
                                relu=True)
    v, il, info = convert(c, plan, pipeline="fmax")
    _, _, info_a = convert(c, plan, pipeline="fmax", cores="amaranth")
    assert info["register_bits"] == info_a["register_bits"]
    uses = [v.count(f"top__tail{k} t") for k in range(4)]
    assert uses[0] >= 2 * 6, uses  # the two first (ReLU, mult) layers share a tail
    assert v.count("module top__tail") == sum(u > 0 for u in uses) < 4
    _simulate(c, plan, x, "fmax", tmp_path)
