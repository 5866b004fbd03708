"""`modelcircuit export --vendor vivado|quartus` (hdl/flow/vendor.py) without the vendor tools:
the folder's files are well-formed, edalize wrote its project from them, the IP-XACT file
parses and describes the Verilog's ports, the driver packs as the golden packing does, and
bad input is one line and exit 2 with nothing written."""

from __future__ import annotations

import importlib.util
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from modelcircuit.api import compile as mc_compile
from modelcircuit.api import load_onnx
from modelcircuit.api import run as mc_run
from modelcircuit.graphs import reference
from modelcircuit.hdl.axi import AxiLayout

from ..test_fpga import DIGITS, cli

SPIRIT = "{http://www.spiritconsortium.org/XMLSchema/SPIRIT/1685-2009}"


def _verilog_ports(v: str, top: str) -> dict[str, tuple[str, int]]:
    """name -> (direction, width), read from the Verilog text itself."""
    body = v[v.index(f"module {top}("):]
    body = body[: body.index("endmodule")]
    out = {}
    for d, rng, name in re.findall(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(\[\d+:0\]\s+)?"
                                   r"(\w+)\s*;", body, re.M):
        w = int(re.match(r"\[(\d+)", rng).group(1)) + 1 if rng else 1
        out[name] = ("in" if d == "input" else "out", w)
    return out


@pytest.fixture(scope="module")
def vivado_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exp") / "viv"
    r = cli("export", str(DIGITS), "--vendor", "vivado", "--part", "xczu3eg-sbva484-1-e",
            "--precision", "fixed<8,3>", "--reuse", "16", "--clock-mhz", "250", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "64-bit in, 16-bit out" in r.stdout
    return out


def test_vivado_project(vivado_dir: Path) -> None:
    d = vivado_dir
    rep = json.loads((d / "export.json").read_text())
    assert rep["vendor"] == "vivado" and rep["part"] == "xczu3eg-sbva484-1-e"
    tcl = (d / "modelcircuit_axi.tcl").read_text()  # edalize's project script
    assert "set_property part xczu3eg-sbva484-1-e" in tcl
    for f in ("hdl/modelcircuit_axi.v", "constraints/modelcircuit_axi.xdc", "ooc.tcl"):
        assert f in tcl and (d / f).is_file()
    assert "modelcircuit_axi.tcl" in (d / "Makefile").read_text()
    xdc = (d / "constraints/modelcircuit_axi.xdc").read_text()
    assert "create_clock -name aclk -period 4.000 [get_ports aclk]" in xdc  # 250 MHz
    assert (d / "ip/hdl/modelcircuit_axi.v").read_bytes() == (d / "hdl/modelcircuit_axi.v").read_bytes()


def test_ipxact_matches_verilog(vivado_dir: Path) -> None:
    root = ET.parse(vivado_dir / "ip/component.xml").getroot()
    assert root.tag == f"{SPIRIT}component"
    assert root.find(f"{SPIRIT}name").text == "modelcircuit_axi"
    ports = {}
    for p in root.iter(f"{SPIRIT}port"):
        left = p.find(f"{SPIRIT}wire/{SPIRIT}vector/{SPIRIT}left")
        ports[p.find(f"{SPIRIT}name").text] = (p.find(f"{SPIRIT}wire/{SPIRIT}direction").text,
                                               int(left.text) + 1 if left is not None else 1)
    v = (vivado_dir / "hdl/modelcircuit_axi.v").read_text()
    assert ports == _verilog_ports(v, "modelcircuit_axi")
    buses = {b.find(f"{SPIRIT}name").text: b for b in root.iter(f"{SPIRIT}busInterface")}
    assert set(buses) == {"s_axis", "m_axis", "s_axil", "aclk", "aresetn"}
    mapped = {pm.find(f"{SPIRIT}physicalPort/{SPIRIT}name").text
              for b in buses.values() for pm in b.iter(f"{SPIRIT}portMap")}
    assert mapped == set(ports)  # every port belongs to one bus interface
    assert buses["m_axis"].find(f"{SPIRIT}master") is not None
    regs = {r.find(f"{SPIRIT}name").text: int(r.find(f"{SPIRIT}addressOffset").text, 16)
            for r in root.iter(f"{SPIRIT}register")}
    assert regs["GRAPH_ID0"] == 0 and regs["PACKET_FRAMES"] == 0x24 and len(regs) == 12


def test_driver_packs_as_golden(vivado_dir: Path, digits_test) -> None:
    spec = importlib.util.spec_from_file_location(
        "drv", vivado_dir / "driver/modelcircuit_axi_driver.py")
    drv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drv)  # numpy only: pynq is imported inside Model.run
    c = mc_compile(load_onnx(DIGITS), precision="fixed<8,3>", reuse=16)
    assert drv.GRAPH_ID == c.graph_id
    x = reference.quantize_inputs(c.graph, [digits_test[0][:20]])[0]
    y = reference.execute(c.graph, [x], inputs_are_codes=True)[c.graph.outputs[0]]
    info = json.loads((vivado_dir / "hdl/modelcircuit_axi.json").read_text())
    lay = AxiLayout.from_info(info, "dma")
    assert drv.pack(x).tobytes() == lay.input.pack(x)
    # what the IP sends back for the golden outputs, unpacked by the driver
    np.testing.assert_array_equal(drv.unpack(np.frombuffer(lay.output.pack(y), np.uint8), 20),
                                  np.asarray(y).reshape(20, -1))
    np.testing.assert_allclose(drv.to_values(np.asarray(y)),
                               np.asarray(y) * 2.0 ** -info["output"]["frac_bits"])


def _load_driver(folder: Path):
    spec = importlib.util.spec_from_file_location(
        "drv_" + folder.name, folder / "driver/modelcircuit_axi_driver.py")
    drv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drv)
    return drv


def test_driver_names_the_host_tail(tmp_path: Path) -> None:
    """A QDQ output with a scale of no power of two leaves a float tail (Mul) on the host:
    the driver's to_values gave the circuit's codes * 2**-frac as if they were the model's
    outputs (frac 0 here: the raw int8 codes). It names the tail and refuses that."""
    import onnx
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh

    from modelcircuit.graphs import host

    inits = [numpy_helper.from_array(np.random.default_rng(1).normal(0, 0.3, (4, 3))
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.013, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["m"]),
                       oh.make_node("QuantizeLinear", ["m", "s", "z"], ["q"]),
                       oh.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "qdq_out",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], inits)
    model = tmp_path / "qdq_out.onnx"
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)]), str(model))
    out = tmp_path / "viv"
    r = cli("export", str(model), "--vendor", "vivado", "--part", "xczu3eg-sbva484-1-e",
            "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    c = mc_compile(load_onnx(str(model)))
    tail = [f"{n.op}({n.name})" for n in c.tail.nodes]
    assert tail == ["Mul(mul_3)"]
    drv = _load_driver(out)
    assert drv.HOST_TAIL == tail and drv.HOST_HEAD == []
    assert json.loads((out / "export.json").read_text())["host"] == {"head": [], "tail": tail}
    x = np.random.default_rng(2).normal(0, 1, (6, 4)).astype(np.float32)
    y = np.asarray(mc_run(c, x, codes=True))
    with pytest.raises(ValueError, match=r"host tail \['Mul\(mul_3\)'\]"):
        drv.to_values(y)
    vals = drv.to_values(y, circuit=True)
    np.testing.assert_array_equal(host.decode(c, y), mc_run(c, x))
    np.testing.assert_array_equal(vals, y * 2.0 ** -drv.OUTPUT_FRAC_BITS)


def test_quartus_project(tmp_path: Path) -> None:
    out = tmp_path / "q"
    r = cli("export", str(DIGITS), "--vendor", "quartus", "--part", "5CSEMA5F31C6",
            "--precision", "fixed<8,3>", "--reuse", "16", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    tcl = (out / "modelcircuit_axi.tcl").read_text()
    assert 'set_global_assignment -name FAMILY "Cyclone V"' in tcl
    assert "set_global_assignment -name DEVICE 5CSEMA5F31C6" in tcl
    assert "SDC_FILE constraints/modelcircuit_axi.sdc" in tcl
    assert "period 5.000" in (out / "constraints/modelcircuit_axi.sdc").read_text()
    assert not (out / "ip").exists()


@pytest.mark.parametrize("args, msg", [
    (["--vendor", "lattice", "--part", "x"], "unknown --vendor 'lattice'"),
    (["--vendor", "vivado", "--part", "5CSEMA5F31C6"], "is not an AMD part number"),
    (["--vendor", "quartus", "--part", "ZZ123456"], "unknown Intel family"),
    (["--vendor", "quartus", "--part", "5CS-E"], "is not an Intel part number"),
    (["--vendor", "vivado", "--part", "xc7z020clg400-1", "--clock-mhz", "nan"], "--clock-mhz"),
    (["--vendor", "vivado", "--part", "xc7z020clg400-1", "--clock-mhz", "0"], "--clock-mhz"),
])
def test_bad_input(tmp_path: Path, args: list[str], msg: str) -> None:
    out = tmp_path / "o"
    r = cli("export", *args, "--out", str(out))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and msg in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_out_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    r = cli("export", "--vendor", "vivado", "--part", "xc7z020clg400-1", "--out", str(f))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and f.read_text() == "x"
    assert len(r.stderr.strip().splitlines()) == 1
