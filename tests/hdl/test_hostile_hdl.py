"""Circuits too big to elaborate or to fit, refused up front: each case runs the real CLI
in-process and must exit 2 with one `error:` line naming the layer (or model) and the limit
or budget, no traceback, and the working folder unchanged; no yosys run, no elaboration.
Limits: graphs/limits.py MAX_HDL_* (products, coefficient ROM bits, weights per layer); the fit estimate
of an explicit --reuse: hdl/flow/fit.check_plan."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.hostile import assert_refused, run_cli, snapshot

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "models"


def _gemm(path: Path, n_in: int, n_out: int) -> str:
    """An ONNX model x (1, n_in) -> Gemm -> (1, n_out), layer `fc1`, dense random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.05, (n_in, n_out)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.normal(0, 0.05, (n_out,)).astype(np.float32), "B")
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W", "B"], ["y"], name="fc1")],
                          f"wide{n_in}",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n_in])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n_out])],
                          [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("models")
    return {"w384": _gemm(d / "w384.onnx", 384, 384), "w1024": _gemm(d / "w1024.onnx", 1024, 1024)}


Argv = Callable[[Path, dict[str, str]], list[str]]
# id, argv (tmp folder, models), substrings the error line must hold, environment
CASES: list[tuple[str, Argv, list[str], dict[str, str]]] = [
    # -- export: circuit size limits (hdl/plan/size.py), before elaboration ------------------
    ("verilog-dense-384x384-r1",
     lambda d, m: ["compile", m["w384"], "--target", "verilog", "--reuse", "1", "--out", f"{d}/o"],
     ["layer fc1 (Dense 384x384, reuse 1) would instantiate", "products", "limit of 131,072",
      "--reuse 2"], {}),
    ("verilog-dense-384x384-default-reuse",
     lambda d, m: ["compile", m["w384"], "--target", "verilog", "--out", f"{d}/o"],
     ["layer fc1 (Dense 384x384, reuse 1)", "limit of 131,072"], {}),
    ("verilog-dense-1024x1024-r1",
     lambda d, m: ["compile", m["w1024"], "--target", "verilog", "--reuse", "1", "--out", f"{d}/o"],
     ["layer fc1 (Dense 1024x1024, reuse 1)", "products", "no reuse brings it within"], {}),
    ("verilog-dense-1024x1024-rom",
     lambda d, m: ["compile", m["w1024"], "--target", "verilog", "--reuse", "64", "--out", f"{d}/o"],
     ["layer fc1 (Dense 1024x1024, reuse 64)", "bits of coefficient ROM", "limit of 8,388,608"], {}),
    ("verilog-dense-1024x1024-auto",
     lambda d, m: ["compile", m["w1024"], "--target", "verilog", "--reuse", "auto", "--out", f"{d}/o"],
     ["--reuse auto", "w1024", "limit 131,072", "limit 8,388,608"], {}),
    ("verilog-weights-per-layer",
     lambda d, m: ["compile", "--target", "verilog", "--reuse", "4", "--out", f"{d}/o"],
     ["layer fc1_matmul (Dense 64x32, reuse 4)", "2,048 weights", "limit of 1,000",
      "MODELCIRCUIT_MAX_DENSE_WEIGHTS"], {"MODELCIRCUIT_MAX_DENSE_WEIGHTS": "1000"}),
    ("verilog-weights-per-layer-r1",
     lambda d, m: ["compile", "--target", "verilog", "--reuse", "1", "--out", f"{d}/o"],
     ["layer fc1_matmul (Dense 64x32, reuse 1) would instantiate", "no reuse brings it"],
     {"MODELCIRCUIT_MAX_DENSE_WEIGHTS": "1000", "MODELCIRCUIT_MAX_PRODUCTS": "1000"}),
    ("verilog-model-total",
     lambda d, m: ["compile", "--target", "verilog", "--out", f"{d}/o"],
     ["model digits_mlp would instantiate", "products and element-wise operations",
      "in layer fc1_matmul", "limit of 3,000", "--reuse 2"], {"MODELCIRCUIT_MAX_PRODUCTS": "3000"}),
    ("verilog-model-rom-total",
     lambda d, m: ["compile", "--target", "verilog", "--reuse", "8", "--out", f"{d}/o"],
     ["model digits_mlp would hold", "bits of coefficient ROM", "limit of 25,000", "--reuse 1"],
     {"MODELCIRCUIT_MAX_ROM_BITS": "25000"}),
    ("verilog-limit-env-garbage",
     lambda d, m: ["compile", "--target", "verilog", "--out", f"{d}/o"],
     ["MODELCIRCUIT_MAX_PRODUCTS must be a positive integer", "lots"],
     {"MODELCIRCUIT_MAX_PRODUCTS": "lots"}),
    ("verilog-limit-env-zero",
     lambda d, m: ["compile", "--target", "verilog", "--out", f"{d}/o"],
     ["MODELCIRCUIT_MAX_ROM_BITS must be a positive integer"], {"MODELCIRCUIT_MAX_ROM_BITS": "0"}),
    ("verilog-reuse-over-fan-in",
     lambda d, m: ["compile", "--target", "verilog", "--reuse", "5000", "--out", f"{d}/o"],
     ["reuse factor 5000", "larger than its fan-in product"], {}),
    # -- build: size limits and the fit estimate, before yosys ------------------------------
    ("build-ecp5-25k-digits-r1",
     lambda d, m: ["build", "--device", "ecp5-25k", "--precision", "fixed<6,3>", "--reuse", "1",
                   "--out", f"{d}/b"],
     ["model digits_mlp at reuse 1 needs an estimated", "LUT4", "device ecp5-25k has 24,288",
      "--reuse auto", "larger device"], {}),
    ("build-ecp5-85k-digits-r2",
     lambda d, m: ["build", "--device", "ecp5-85k", "--precision", "fixed<6,3>", "--reuse", "2",
                   "--out", f"{d}/b"],
     ["at reuse 2 needs an estimated", "FF", "device ecp5-85k has 83,640"], {}),
    ("build-up5k-digits-r64",
     lambda d, m: ["build", "--device", "ice40-up5k", "--precision", "fixed<6,3>", "--reuse", "64",
                   "--out", f"{d}/b"],
     ["at reuse 64 needs an estimated", "logic cells", "ice40-up5k has 5,280"], {}),
    ("build-icebreaker-digits-r1",
     lambda d, m: ["build", "--device", "ice40-up5k", "--board", "icebreaker", "--reuse", "1",
                   "--out", f"{d}/b"],
     ["at reuse 1 needs an estimated", "ice40-up5k"], {}),
    ("build-ecp5-85k-jet-r1",
     lambda d, m: ["build", str(SHARED / "three_layer_keras.onnx"), "--device", "ecp5-85k",
                   "--precision", "fixed<16,6>", "--reuse", "1", "--out", f"{d}/b"],
     ["model three_layer_keras at reuse 1 needs an estimated", "ecp5-85k"], {}),
    ("build-auto-nothing-fits",
     lambda d, m: ["build", m["w384"], "--device", "ice40-up5k", "--precision", "fixed<16,6>",
                   "--reuse", "auto", "--out", f"{d}/b"],
     ["does not fit ice40-up5k even at the largest reuse", "budget", "5280"], {}),
    ("build-dense-384x384-r1",
     lambda d, m: ["build", m["w384"], "--device", "ecp5-85k", "--reuse", "1", "--out", f"{d}/b"],
     ["layer fc1 (Dense 384x384, reuse 1) would instantiate", "limit of 131,072"], {}),
    ("build-dense-1024x1024-auto",
     lambda d, m: ["build", m["w1024"], "--device", "ecp5-85k", "--reuse", "auto", "--out", f"{d}/b"],
     ["--reuse auto: no reuse plan", "w1024"], {}),
    ("build-dense-1024x1024-auto-narrow",
     lambda d, m: ["build", m["w1024"], "--device", "ecp5-25k", "--precision", "fixed<4,2>",
                   "--reuse", "auto", "--out", f"{d}/b"],
     ["does not fit ecp5-25k even at the largest reuse", "BRAM"], {}),
    ("build-reuse-over-fan-in",
     lambda d, m: ["build", "--device", "ecp5-85k", "--reuse", "3000", "--out", f"{d}/b"],
     ["reuse factor 3000", "fan-in product"], {}),
    ("build-adder-levels-zero",
     lambda d, m: ["build", "--device", "ecp5-25k", "--reuse", "64", "--adder-levels", "0",
                   "--out", f"{d}/b"],
     ["--adder-levels"], {}),
]


@pytest.mark.parametrize("case_id,argv,matches,env", CASES, ids=[c[0] for c in CASES])
def test_refused_up_front(case_id: str, argv: Argv, matches: list[str], env: dict[str, str],
                          models: dict[str, str], tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    if "three_layer_keras" in " ".join(argv(tmp_path, models)) and not SHARED.is_dir():
        pytest.skip(f"third-party models absent ({SHARED})")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = argv(tmp_path, models)
    before = snapshot(tmp_path)
    res = run_cli(args, cwd=tmp_path)
    line = assert_refused(res, matches[0])
    for m in matches[1:]:
        assert m.lower() in line.lower(), f"{m!r} not in {line!r}"
    assert "[yosys" not in res.err and "[nextpnr" not in res.err  # no tool was run
    assert snapshot(tmp_path) == before, "the refusal changed the folder"


def test_the_corpus() -> None:
    assert len({c[0] for c in CASES}) == len(CASES) >= 20


# -- what must still pass -------------------------------------------------------------------
def _compiled(name: str | None, precision: str | None = None):
    from modelcircuit.api import compile
    from modelcircuit.frontend.onnx.importer import load_onnx

    if name is None:
        path = ROOT / "src" / "modelcircuit" / "data" / "digits_mlp.onnx"
    else:
        path = SHARED / f"{name}.onnx"
        if not path.exists():
            pytest.skip(f"third-party model {path} is absent")
    return compile(load_onnx(path), precision=precision)


@pytest.mark.parametrize("name,precision,products", [
    (None, None, 3_275), ("three_layer_keras", None, 4_244), ("three_layer_keras", "fixed<16,6>", None),
    ("TFC_2W2A", None, 22_355), ("qkeras_jettagging", None, None)])
def test_real_models_fully_parallel_are_within_the_limits(name, precision, products) -> None:
    """The bundled digits MLP, the jet taggers and FINN's TFC (the largest the test suite
    exports, in tests/sim) at R=1: resolved without a refusal, nothing elaborated."""
    from modelcircuit.graphs.limits import MAX_HDL_PRODUCTS
    from modelcircuit.hdl.plan.fold import layer_size
    from modelcircuit.hdl.plan.reuse import resolve_reuse
    from modelcircuit.hdl.plan.size import dense_weights

    c = _compiled(name, precision)
    plan = resolve_reuse(c, 1)
    got = sum(layer_size(w, 1)[0] for w in dense_weights(c.graph).values())
    if products is not None:
        assert got == products
    assert got <= MAX_HDL_PRODUCTS and set(plan.values()) == {1}


def test_limits_are_read_when_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """graphs/limits.py's values are read at each check (a test may lower one), and the
    environment variable wins over them."""
    from modelcircuit.graphs import limits
    from modelcircuit.hdl.errors import HdlError
    from modelcircuit.hdl.plan.reuse import resolve_reuse

    c = _compiled(None)
    monkeypatch.setattr(limits, "MAX_HDL_PRODUCTS", 1000)
    with pytest.raises(HdlError, match=r"layer fc1_matmul \(Dense 64x32, reuse 1\).*limit of 1,000"):
        resolve_reuse(c, 1)
    monkeypatch.setenv("MODELCIRCUIT_MAX_PRODUCTS", "100_000")
    assert set(resolve_reuse(c, 1).values()) == {1}


def test_suggested_reuse_is_accepted(models: dict[str, str]) -> None:
    from modelcircuit.api import compile
    from modelcircuit.frontend.onnx.importer import load_onnx
    from modelcircuit.hdl.errors import HdlError
    from modelcircuit.hdl.plan.reuse import resolve_reuse

    c = compile(load_onnx(models["w384"]))
    with pytest.raises(HdlError, match="--reuse 2 "):
        resolve_reuse(c, 1)
    assert resolve_reuse(c, 2) == {"fc1": 2}


def test_layer_size_is_what_the_circuit_builds() -> None:
    """fold.layer_size counts the products and ROM bits hdl/units/dense.py instantiates (read
    from the units' own figures; build_top constructs, it does not elaborate)."""
    from modelcircuit.hdl import plan_top
    from modelcircuit.hdl.plan.fold import layer_size
    from modelcircuit.hdl.plan.size import dense_weights

    c = _compiled(None, "fixed<6,3>")
    ws = dense_weights(c.graph)
    for r in (1, 3, 16, 64, 100):
        plan = {n: min(r, int(w.size)) for n, w in ws.items()}
        info = plan_top(c, plan)
        for lay in info["layers"]:
            if lay["op"] != "Dense":
                continue
            p, rom = layer_size(ws[lay["node"]], plan[lay["node"]])
            if plan[lay["node"]] == 1:
                assert p == lay["multipliers"] + lay["shifts"] + lay.get("shift_add", 0)
                assert rom == 0
            else:
                f = lay["fold"]["rom"]
                assert p == lay["multipliers"] + lay["shifts"]
                assert rom == f["width"] * f["depth"]


@pytest.mark.parametrize("device,reuse", [("ecp5-25k", 1), ("ecp5-25k", 2), ("ecp5-25k", 4),
                                          ("ecp5-85k", 2), ("ice40-up5k", 1)])
def test_explicit_reuse_the_flow_tests_build_still_fits(device: str, reuse: int) -> None:
    """The explicit reuse factors tests/hdl/test_fpga*.py build (tiny MLP) pass the check."""
    from modelcircuit.hdl.flow import fpga_profile, plan_build

    from .test_fpga import tiny_compiled

    prof = fpga_profile(device)
    plan, est = plan_build(tiny_compiled(profile=device), prof, reuse)
    assert plan.fit is None and set(plan.reuse.values()) == {reuse}
    assert est.estimate["lut"] <= prof["lut"]


def test_digits_auto_plans_are_unchanged() -> None:
    """--reuse auto still finds the plan the flow test measured on an ECP5-25k (R 64/64/16
    since the "fmax" schedule keeps coefficient ROMs under 128 words in LUTs: R 32/32/16
    no longer fits 60 % of the LUTs)."""
    from modelcircuit.hdl.flow import fit_reuse, fpga_profile

    c = _compiled(None, "fixed<6,3>")
    assert fit_reuse(c, fpga_profile("ecp5-25k")).reuse == {
        "fc1_matmul": 64, "fc2_matmul": 64, "fc3_matmul": 16}


def test_candidates_keep_every_fold_shape() -> None:
    """A large layer tries fewer reuse factors, but every fold shape (c, m) still at its
    least reuse factor."""
    from modelcircuit.hdl.flow.fit import FULL_SEARCH_WEIGHTS, candidates
    from modelcircuit.hdl.plan.fold import fold_shape

    for n_in, n_out in [(300, 300), (1000, 70), (70, 1000)]:
        assert n_in * n_out > FULL_SEARCH_WEIGHTS
        full = list(range(1, n_in + 1)) + [n_in * k for k in range(2, n_out + 1)]
        least: dict[tuple[int, int], int] = {}
        for r in full:
            f = fold_shape(n_in, n_out, r)
            least.setdefault((f.c, f.m), r)
        assert sorted(least.values()) == candidates(n_in, n_out)
    assert candidates(8, 4) == list(range(1, 9)) + [16, 24, 32]


def test_csd_digit_count_is_cmvm_csd() -> None:
    from modelcircuit.hdl.flow.layer_cost import csd_digits
    from modelcircuit.hdl.plan.cmvm import csd

    rng = np.random.default_rng(1)
    v = np.concatenate([np.arange(-3000, 3000), rng.integers(-2**40, 2**40, 3000)])
    assert (csd_digits(v) == np.array([len(csd(int(x))) for x in v])).all()


@pytest.mark.parametrize("bits", [0, 3, 17, 40, -1, True, 10.5])
def test_table_bits_out_of_range(bits) -> None:
    from modelcircuit.graphs.ir import GraphError
    from modelcircuit.graphs.passes.tables import build_tables

    c = _compiled(None, "fixed<8,3>")
    with pytest.raises(GraphError, match=r"table_bits must be an integer within 4\.\.16"):
        build_tables(c.graph, bits)
