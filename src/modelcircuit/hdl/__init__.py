"""HDL backend: the compiled graph as Amaranth circuits, exported to Verilog.

Two parts. The circuit imports `modelcircuit.graphs` (and util) only:

    plan/      decided before elaboration: schedule, reuse, fold geometry, sizes, adder graphs
    units/     one circuit family per file (Dense, element-wise, Softmax …)
    vector/    the whole-vector model style (lower.py, top.py)
    streamed/  the pixel-stream model style (lower.py, units.py, dense.py, top.py)
    export.py  Verilog / RTLIL / JSON; uart.py, payload.py, names.py, errors.py
`build_top` gives the model as one `wiring.Component` with an input and an output
`amaranth.lib.stream` interface; `export_verilog` writes Verilog, RTLIL and a JSON
description of ports, packing, latency and II. Both take a resolved reuse plan.

The flow (`hdl/flow/`: the tool runner, yosys and nextpnr, reports, boards, the resource
estimate and `--reuse auto`) imports the circuit, never the reverse: it resolves
`--reuse auto` to a circuit plan (`flow.plan_circuit`, `flow.plan_build`) and hands it to
the circuit: hdl/plan/circuit.py `resolve_plan` is the one place a plan is resolved.
"""

from __future__ import annotations

from .errors import HdlError
from .export import export_verilog, register_bits
from .plan.circuit import CircuitPlan, resolve_plan
from .plan.reuse import ReusePlan
from .vector.lower import LOWERING, REFUSED
from .vector.top import DEFAULT_ADDER_LEVELS, ModelTop, build_top, plan_top

__all__ = ["DEFAULT_ADDER_LEVELS", "LOWERING", "REFUSED", "CircuitPlan", "HdlError", "ModelTop",
           "ReusePlan", "build_top", "export_verilog", "plan_top", "register_bits",
           "resolve_plan"]
