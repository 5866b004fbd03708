"""HDL backend: the compiled graph as Amaranth circuits, exported to Verilog.

Imports `modelcircuit.graphs` only. `build_top` gives the model as one `wiring.Component`
with an input and an output `amaranth.lib.stream` interface; `export_verilog` writes
Verilog, RTLIL and a JSON description of ports, packing, latency and II.
"""

from __future__ import annotations

from .arith import HdlError
from .export import export_verilog, register_bits
from .lower import LOWERING
from .top import DEFAULT_ADDER_LEVELS, ModelTop, build_top

__all__ = ["DEFAULT_ADDER_LEVELS", "LOWERING", "HdlError", "ModelTop", "build_top",
           "export_verilog", "register_bits"]
