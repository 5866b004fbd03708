"""The FPGA flow: from a compiled model to resource/timing reports and bitstreams, with the
open yosys/nextpnr tools from PyPI; and `--reuse auto`, which it resolves to a plan before
the circuit (hdl/) is built. The flow imports the circuit; the circuit never imports the
flow (tests/test_layering.py).

    tools.py     running the tools: where they are, logs, progress, FlowError
    devices.py   a device's profile and its family's data (graphs/profiles/fpga.json)
    yosys.py     synthesis (templates/yosys/*.ys.j2)
    nextpnr.py   place and route, and what its failures mean
    reports.py   reading the tools' output; the report and its text table
    estimate.py  the resource estimate on a family (calibrated), before synthesis
    layer_cost.py each layer's cost as the circuit builds it (LayerCost)
    fit.py       --reuse auto (fit_reuse, plan_circuit) and the check of an explicit reuse
    boards.py    board builds (amaranth-boards platforms, the UART wrapper)
    build.py     the model-level entry points: build, run_flow, plan_build
    families.py  Gowin and Nexus: nextpnr arguments, pins of the wrapped run
    gowin.py     a Gowin board's place, route and pack (gowin_pack)
    vendor.py    Vivado/Quartus projects of the AXI IP (edalize, IP-XACT, PYNQ driver)
"""

from __future__ import annotations

from .boards import BOARDS, board_for
from .build import build, plan_build, run_flow, run_model
from .devices import fpga_profile
from .fit import FitError, FitPlan, check_plan, fit_reuse, plan_circuit
from .reports import text_table
from .tools import DoesNotFit, FlowError, ToolError

__all__ = ["BOARDS", "DoesNotFit", "FitError", "FitPlan", "FlowError", "ToolError", "board_for",
           "build", "check_plan", "fit_reuse", "fpga_profile", "plan_build", "plan_circuit",
           "run_flow", "run_model", "text_table"]
