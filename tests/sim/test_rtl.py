"""Real simulations: cocotb bench + Verilator on the generated Verilog (and on stand-ins)."""

from __future__ import annotations

import numpy as np
import pytest

from modelcircuit.api import compile as mc_compile
from modelcircuit.api import load_onnx
from modelcircuit.frontend.builder import GraphBuilder
from modelcircuit.graphs import reference
from modelcircuit.sim import rtl
from modelcircuit.sim.errors import SimError

from .designs import RegisteredRelu, spec, write_verilog

pytestmark = pytest.mark.xdist_group("sim")


def test_digits_bit_exact_on_verilator(digits_compiled, digits_codes, sim_cache) -> None:
    """The bundled model, its whole test split, random gaps and backpressure."""
    r = rtl.execute(digits_compiled, digits_codes, cache_dir=sim_cache, seed=1)
    c = r["checks"]
    assert c["bit_exact"] and c["complete"] and r["ok"], c
    assert r["outputs"].shape == (len(digits_codes), 10)
    # observed latency and II equal the compile-time figures
    assert c["latency_ok"] and c["ii_ok"]
    assert (r["latency"], r["ii"]) == (r["latency_expected"], r["ii_expected"])
    # the second run finds the build folder unchanged and reuses it
    r2 = rtl.execute(digits_compiled, digits_codes[:20], cache_dir=sim_cache, seed=2)
    assert not r2["built"] and r2["ok"]


def test_mutated_expected_bit_fails_naming_vector_and_element(
        digits_compiled, digits_codes, sim_cache) -> None:
    """A verification that cannot fail is worthless: flip one expected bit."""
    x = digits_codes[:40]
    exp = rtl.golden_codes(digits_compiled, x).copy()
    exp[17, 3] ^= 1 << 2
    r = rtl.execute(digits_compiled, x, expected=exp, cache_dir=sim_cache)
    c = r["checks"]
    assert not r["ok"] and not c["bit_exact"] and c["mismatches"] == 1
    f = c["first_mismatch"]
    assert (f["vector"], f["element"], f["expected"]) == (17, 3, int(exp[17, 3]))
    assert f["actual"] == int(exp[17, 3] ^ (1 << 2))
    assert "vector 17, element 3" in f["message"]


def test_backpressure_no_loss_duplication_or_reorder(
        digits_compiled, digits_codes, sim_cache) -> None:
    x = digits_codes[:120]
    r = rtl.execute(digits_compiled, x, cache_dir=sim_cache, seed=7, gaps=0.3,
                    backpressure=0.5)
    assert r["stalled_fraction"] >= 0.30
    c = r["checks"]
    assert c["complete"] and c["lost"] == 0 and c["extra"] == 0
    assert len(r["out_cycles"]) == len(x) == len(r["in_cycles"])
    assert np.array_equal(r["outputs"], rtl.golden_codes(digits_compiled, x))  # in order
    assert r["ok"]


def test_bench_catches_a_design_that_drops_under_backpressure(tmp_path) -> None:
    n, w = 3, 8
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, size=(60, n))
    want = np.maximum(x, 0)
    good = write_verilog(RegisteredRelu(n, w, 2), tmp_path / "good")
    r = rtl.simulate_verilog(good, spec(n, w, 2), x, want, tmp_path / "good", backpressure=0.4)
    assert r["ok"], r["checks"]
    bad = write_verilog(RegisteredRelu(n, w, 2, bug="ignore_ready"), tmp_path / "bad")
    r = rtl.simulate_verilog(bad, spec(n, w, 2), x, want, tmp_path / "bad", backpressure=0.4)
    assert not r["ok"] and not r["checks"]["bit_exact"]
    assert r["checks"]["first_mismatch"] is not None


def test_wrong_latency_claim_is_reported(tmp_path) -> None:
    n, w = 2, 6
    x = np.arange(-10, 10).reshape(10, 2)
    v = write_verilog(RegisteredRelu(n, w, 3), tmp_path / "d")
    r = rtl.simulate_verilog(v, spec(n, w, 2), x, np.maximum(x, 0), tmp_path / "d")
    assert r["checks"]["bit_exact"] and r["latency"] == 3
    assert r["checks"]["latency_ok"] is False and not r["ok"]


def _small_mlp(seed: int):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("mlp_r4")
    h = b.input("x", 6)
    h = b.relu(b.dense(h, rng.normal(size=(6, 5)), rng.normal(size=5)))
    b.output(b.dense(h, rng.normal(size=(5, 3)), rng.normal(size=3)))
    return b.build()


def test_reuse_4_latency_and_ii(sim_cache) -> None:
    c = mc_compile(_small_mlp(3), precision="fixed<10,4>", reuse=4)
    rng = np.random.default_rng(3)
    x = rng.integers(-512, 512, size=(40, 6))
    r = rtl.execute(c, x, cache_dir=sim_cache, seed=3)
    assert r["ii_expected"] == 4 and r["ii"] == 4
    assert r["latency"] == r["latency_expected"]
    assert r["ok"], r["checks"]


def test_bad_input_codes(digits_compiled, digits_codes, sim_cache) -> None:
    with pytest.raises(SimError, match="integer"):
        rtl.execute(digits_compiled, digits_codes[:4].astype(np.float32), cache_dir=sim_cache)
    with pytest.raises(SimError, match="do not match"):
        rtl.execute(digits_compiled, digits_codes[:4, :10], cache_dir=sim_cache)
    with pytest.raises(SimError, match="outside"):
        rtl.execute(digits_compiled, digits_codes[:4] + 10**6, cache_dir=sim_cache)


@pytest.mark.skipif(rtl.available("icarus"), reason="iverilog is installed here")
def test_icarus_missing_is_a_clear_error() -> None:
    with pytest.raises(SimError, match="icarus.*not installed"):
        rtl.check_simulator("icarus")


@pytest.mark.skipif(not rtl.available("icarus"), reason="iverilog is not installed")
def test_digits_bit_exact_on_icarus(digits_compiled, digits_codes, sim_cache) -> None:
    r = rtl.execute(digits_compiled, digits_codes[:60], simulator="icarus", cache_dir=sim_cache)
    assert r["ok"], r["checks"]


def test_area_schedule_of_the_up5k_plan(digits_model, digits_test, sim_cache) -> None:
    """The iCE40 build: digits at fixed<6,3> (calibrated), `--reuse auto` for the UP5K, the
    "area" schedule (lean folds that load on the input handshake, long valid chains as
    down-counters): bit-exact with gaps and backpressure, latency and II as compiled."""
    from modelcircuit.hdl.export import convert
    from modelcircuit.hdl.flow import plan_circuit

    x, _ = digits_test
    c = mc_compile(load_onnx(digits_model), precision="fixed<6,3>", calibrate=x,
                   profile="ice40-up5k", reuse="auto")
    v, _, info = convert(c, plan_circuit(c, "auto"))
    assert info["pipeline"] == "area" and info["ii"] >= 128
    assert "_wp" in v  # at least one valid delay is counters, not a register chain
    codes = reference.quantize_inputs(c.graph, [x[:24]])[0]
    r = rtl.execute(c, codes, cache_dir=sim_cache, seed=11, gaps=0.3, backpressure=0.4)
    assert r["ok"], r["checks"]
    assert (r["latency"], r["ii"]) == (info["latency"], info["ii"])


def test_build_key_names_where_cocotb_is_installed() -> None:
    """A Verilator model links cocotb's libraries by absolute path: a simulation cache in
    one HOME shared by two checkouts (two venvs) must rebuild for each, not hand one the
    other's binary (whose libraries may be gone: exit 127)."""
    from pathlib import Path

    import cocotb

    from modelcircuit.sim import rtl

    where = str(Path(cocotb.__file__).resolve().parent)
    assert where in rtl._tool_versions("verilator")
