"""Verilog/RTLIL export: deterministic text, the documented ports, the JSON description,
and clear errors for bad input with nothing written."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest

from modelcircuit.graphs.ir import Node
from modelcircuit.hdl import HdlError, build_top, export_verilog
from tests.conftest import shared_model

from .helpers import compiled_from
from .units.test_components import dense_case

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

PORTS = ["clk", "rst", "i__payload", "i__valid", "i__ready", "o__payload", "o__valid",
         "o__ready"]


@pytest.fixture(scope="module")
def small():
    c, _ = dense_case("fixed<8,3>", "fixed<6,1>", "fixed<12,2>", "fixed<8,4>", 5, 3, True)
    return c


def test_export_files_ports_and_json(small, tmp_path):
    info = export_verilog(small, tmp_path, reuse=2, top_name="mlp")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.il", "mlp.json", "mlp.v"]
    v = (tmp_path / "mlp.v").read_text()
    header = v[v.index("module mlp("):].split(";")[0]
    assert sorted(header[header.index("(") + 1:header.index(")")].replace(" ", "").split(",")) \
        == sorted(PORTS)
    assert "input [39:0] i__payload" in v and "output [23:0] o__payload" in v
    j = json.loads((tmp_path / "mlp.json").read_text())
    assert j["ii"] == 2 and j["latency"] == info["latency"] and j["ports"] == PORTS
    assert j["input"]["element_width"] == 8 and j["input"]["elements"] == 5
    assert j["register_bits"] > 0 and j["verilog_lines"] == v.count("\n")


def test_export_byte_identical(small, tmp_path):
    export_verilog(small, tmp_path / "a")
    export_verilog(small, tmp_path / "b")
    for f in ("top.v", "top.il", "top.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


@pytest.mark.slow
def test_jet_verilog_identical_across_processes(tmp_path):
    model = shared_model("three_layer_keras")
    code = ("import sys, modelcircuit as mc; from modelcircuit.hdl import export_verilog; "
            "c = mc.compile(mc.load_onnx(sys.argv[1]), precision='fixed<16,6>'); "
            "export_verilog(c, sys.argv[2])")
    for d in ("a", "b"):
        subprocess.run([sys.executable, "-c", code, str(model), str(tmp_path / d)], check=True)
    assert (tmp_path / "a" / "top.v").read_bytes() == (tmp_path / "b" / "top.v").read_bytes()


def test_sanitised_names(tmp_path):
    """Node names that are Verilog keywords or hold illegal characters cannot break it."""
    nodes = [Node.make("module", "Relu", ["x"], ["a"]),
             Node.make("a b/c;`define", "Relu", ["a"], ["y"])]
    c = compiled_from(nodes, {"x": ((3,), "fixed<8,3>"), "a": ((3,), "fixed<8,3>"),
                              "y": ((3,), "fixed<8,3>")}, {}, ["x"], ["y"], "names")
    export_verilog(c, tmp_path)
    v = (tmp_path / "top.v").read_text()
    assert "`define" not in v and "u0_module_" in v


# -- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("reuse", [0, -1, 16, 2.5, "x", True])
def test_bad_reuse(small, reuse, tmp_path):
    with pytest.raises(HdlError, match="reuse"):
        export_verilog(small, tmp_path / "out", reuse=reuse)
    assert not (tmp_path / "out").exists()


def test_reuse_unknown_node(small):
    with pytest.raises(HdlError, match="not a Dense node"):
        build_top(small, {"nope": 2})


def test_unsupported_op(tmp_path):
    nodes = [Node.make("bn0", "BatchNorm", ["x"], ["y"])]
    c = compiled_from(nodes, {"x": ((3,), "fixed<8,3>"), "y": ((3,), "fixed<8,3>")}, {},
                      ["x"], ["y"], "bad")
    with pytest.raises(HdlError, match=r"bn0.*BatchNorm.*supported: .*Dense"):
        export_verilog(c, tmp_path / "out")


def test_yosys_started_early_ends_with_a_failed_build(monkeypatch, tmp_path):
    """The export starts yosys before it builds the design (its start overlaps the build):
    a build that fails leaves no yosys process behind, and one that succeeds used it."""
    from modelcircuit.hdl import export

    started = []
    real = export.yosys_started

    @contextlib.contextmanager
    def spy():
        with real() as p:
            started.append(p)
            yield p

    monkeypatch.setattr(export, "yosys_started", spy)
    nodes = [Node.make("bn0", "BatchNorm", ["x"], ["y"])]
    c = compiled_from(nodes, {"x": ((3,), "fixed<8,3>"), "y": ((3,), "fixed<8,3>")}, {},
                      ["x"], ["y"], "bad")
    with pytest.raises(HdlError, match="BatchNorm"):
        export_verilog(c, tmp_path / "out")
    assert len(started) == 1 and started[0].poll() is not None  # ended, not left running
    small = dense_case("fixed<8,3>", "fixed<6,1>", "fixed<12,2>", "fixed<8,4>", 5, 3, True)[0]
    export_verilog(small, tmp_path / "ok")
    assert len(started) == 2 and started[1].returncode == 0  # its Verilog came from it
    assert "module top" in (tmp_path / "ok" / "top.v").read_text()
    assert not (tmp_path / "out").exists()


def test_float_model_refused():
    import modelcircuit as mc

    p = shared_model("two_layer_keras")
    c = mc.compile(mc.load_onnx(str(p)), precision="float32")
    with pytest.raises(HdlError, match="not fixed point"):
        build_top(c)


def test_bad_top_name_and_out_path(small, tmp_path):
    for name in ("module", "1abc", "a-b", ""):
        with pytest.raises(HdlError, match="module name"):
            export_verilog(small, tmp_path / "o", top_name=name)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(HdlError, match="is a file"):
        export_verilog(small, f)
    assert not (tmp_path / "o").exists()


def test_bad_adder_levels(small):
    with pytest.raises(HdlError, match="adder_levels"):
        build_top(small, 1, adder_levels=0)


def test_too_wide_type_is_a_compile_error():
    """A type too wide for a 64-bit accumulator is refused before lowering."""
    import modelcircuit as mc
    from modelcircuit.graphs.ir import GraphError

    p = shared_model("two_layer_keras")
    # graphs/ owns this check; the HDL backend never sees such a graph
    with pytest.raises(GraphError, match="64"):
        mc.compile(mc.load_onnx(str(p)), precision="fixed<40,20>")


def test_mul_of_two_activations_is_refused_clearly():
    import numpy as np

    import modelcircuit as mc
    from modelcircuit.frontend.builder import GraphBuilder
    from modelcircuit.hdl import HdlError, build_top

    b = GraphBuilder("mm")
    x = b.input("x", 4)
    h = b.dense(x, np.eye(4), None, name="d")
    y = b._node("Mul", [x, h], (4,), "prod")
    b.output(y)
    c = mc.compile(b.build(), precision="fixed<8,3>")
    with pytest.raises(HdlError, match="prod.*constants only"):
        build_top(c)
