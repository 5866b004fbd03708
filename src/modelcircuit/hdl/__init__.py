"""HDL backend: the compiled graph as Amaranth circuits, exported to Verilog.

Two parts. The circuit (this package: arith, component/units/dense, fold, size, reuse,
schedule, lower, top, export, uart, names, simulate) imports `modelcircuit.graphs` only.
`build_top` gives the model as one `wiring.Component` with an input and an output
`amaranth.lib.stream` interface; `export_verilog` writes Verilog, RTLIL and a JSON
description of ports, packing, latency and II. Both take a resolved reuse plan.

The flow (`hdl/flow/`: the tool runner, yosys and nextpnr, reports, boards, the resource
estimate and `--reuse auto`) imports the circuit, never the reverse: it resolves
`--reuse auto` to a plan (`flow.plan_reuse`) and hands it to the circuit.
"""

from __future__ import annotations

from .errors import HdlError
from .export import export_verilog, register_bits
from .lower import LOWERING, REFUSED
from .reuse import ReusePlan
from .top import DEFAULT_ADDER_LEVELS, ModelTop, build_top

__all__ = ["DEFAULT_ADDER_LEVELS", "LOWERING", "REFUSED", "HdlError", "ModelTop", "ReusePlan",
           "build_top", "export_verilog", "register_bits"]
