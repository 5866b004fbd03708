"""Board builds on amaranth-boards platforms: the model behind a UART (hdl/uart.py), pins
and clock from the platform, a bitstream at the end.

Boards: `icebreaker` (iCEBreaker, iCE40 UP5K, 12 MHz, UART on the FTDI's second port),
`ulx3s-85f` (ULX3S, ECP5 LFE5U-85F, 25 MHz, UART through the FTDI) and `tang-nano-9k`
(Tang Nano 9K, Gowin GW1NR-9, 27 MHz, UART through the BL702 on pins 17/18; placed and
packed by gowin.gowin_board: nextpnr himbaechel, apycula's gowin_pack). The platform writes the
design (top.il, with the vendor IO buffers), pin constraints (top.pcf / top.lpf, clock
frequency included) and its build script; the tools are the yowasp ones through Amaranth's
env vars (YOSYS, NEXTPNR_ICE40, ICEPACK, NEXTPNR_ECP5, ECPPACK; OPENFPGALOADER is set too,
since the ULX3S platform requires it even when not programming — see tools.tool_env). The
commands are the platform's own (device, package, speed grade and packer flags are read from
its build script), run through tools.Runner for logs, progress and timings, with the same
synthesis as the out-of-context flow (DSP budget respected, `stat -json` for the report).
"""

from __future__ import annotations

import importlib
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from amaranth.hdl import Elaboratable, Module

from .nextpnr import run_nextpnr
from .reports import report
from .tools import FlowError, Runner, ToolError
from .yosys import check_fit, synthesize

BOARDS: dict[str, dict[str, Any]] = {
    "icebreaker": {"device": "ice40-up5k", "platform": "amaranth_boards.icebreaker:ICEBreakerPlatform",
                   "title": "1BitSquared iCEBreaker (iCE40 UP5K)", "bitstream": "top.bin"},
    "ulx3s-85f": {"device": "ecp5-85k", "platform": "amaranth_boards.ulx3s:ULX3S_85F_Platform",
                  "title": "Radiona ULX3S 85F (ECP5 LFE5U-85F)", "bitstream": "top.bit"},
    "tang-nano-9k": {"device": "gw1nr-9",
                     "platform": "amaranth_boards.tang_nano_9k:TangNano9kPlatform",
                     "title": "Sipeed Tang Nano 9K (Gowin GW1NR-9)", "bitstream": "top.fs",
                     "platform_args": {"toolchain": "Apicula"}},
}
BAUD = 115200


def board_for(board: str, prof: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = BOARDS.get(board)
    if spec is None:
        raise FlowError(f"unknown board {board!r}; known: "
                        + ", ".join(f"{k} ({v['device']})" for k, v in BOARDS.items()))
    if prof is not None and prof.get("name") != spec["device"]:
        raise FlowError(f"board {board!r} carries {spec['device']}, not --device {prof.get('name')}")
    return spec


def platform(board: str) -> Any:
    spec = board_for(board)
    mod, cls = spec["platform"].split(":")
    return getattr(importlib.import_module(mod), cls)(**spec.get("platform_args", {}))


class BoardTop(Elaboratable):
    """The UART wrapper on the board's `uart` resource."""

    def __init__(self, wrapper: Any):
        self.wrapper = wrapper

    def elaborate(self, plat: Any) -> Module:
        m = Module()
        m.submodules.uart_model = w = self.wrapper
        u = plat.request("uart", 0)
        m.d.comb += [w.rx.eq(u.rx.i), u.tx.o.eq(w.tx)]
        return m


def _script_commands(script: str) -> dict[str, list[str]]:
    """The tool invocations of an Amaranth build script: {"$YOSYS": argv, ...}."""
    out = {}
    for line in script.splitlines():
        line = line.strip()
        if line.startswith('"$'):
            argv = shlex.split(line)
            out[argv[0]] = argv[1:]
    return out


def _nextpnr_argv(argv: list[str]) -> list[str]:
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--quiet":
            continue
        if a == "--log":
            skip = True
            continue
        if a == "--json" and i + 1 < len(argv):
            out += ["--json", "synth.json"]
            skip = True
            continue
        out.append(a)
    return out + ["--timing-allow-fail", "--seed", "1", "--report", "nextpnr-report.json"]


def build_board(core: Any, info: dict[str, Any], prof: dict[str, Any], board: str, out: Path,
                runner: Runner, what: str = "design", dsp_budget: int | None = None
                ) -> dict[str, Any]:
    from ..uart import UartWrapper

    spec = board_for(board, prof)
    plat = platform(board)
    clk_hz = float(plat.default_clk_frequency)
    wrapper = UartWrapper(core, in_bits=len(core.i.payload), out_bits=len(core.o.payload),
                          divisor=round(clk_hz / BAUD), frame_timeout=int(clk_hz // 10),
                          ii=int(info.get("ii") or 1))
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    runner.say(f"[platform] elaborating {what} for {spec['title']}")
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    plan = plat.prepare(BoardTop(wrapper), name="top")
    plan.extract(work)
    cmds = _script_commands(plan.files["build_top.sh"])
    st = synthesize(work / "top.il", prof, work, runner, dsp_budget)
    check_fit(st, prof, what)
    fam = prof["family"]
    if fam == "gowin":  # nextpnr himbaechel and gowin_pack (gowin.py)
        from .gowin import gowin_board

        pnr = gowin_board(plat, prof, work, runner, what, cmds)
        return _finish(spec, work, out, prof, st, pnr, runner, board, wrapper, clk_hz)
    pnr_key = "$NEXTPNR_ICE40" if fam == "ice40" else "$NEXTPNR_ECP5"
    pack_key = "$ICEPACK" if fam == "ice40" else "$ECPPACK"
    if pnr_key not in cmds or pack_key not in cmds:
        raise FlowError(f"the {board} platform's build script has no {pnr_key}/{pack_key} step")
    pnr = run_nextpnr(runner, fam, _nextpnr_argv(cmds[pnr_key]), work, prof, what)
    runner.run("pack", "icepack" if fam == "ice40" else "ecppack", cmds[pack_key], work)
    return _finish(spec, work, out, prof, st, pnr, runner, board, wrapper, clk_hz)


def _finish(spec: dict[str, Any], work: Path, out: Path, prof: dict[str, Any],
            st: dict[str, Any], pnr: dict[str, Any], runner: Runner, board: str,
            wrapper: Any, clk_hz: float) -> dict[str, Any]:
    bit = spec["bitstream"]
    if not (work / bit).exists():
        raise ToolError(f"the packer wrote no {bit}")
    shutil.move(str(work / bit), out / bit)
    rep = report(prof, st, pnr, runner, ooc=False, board=board, files={"bitstream": bit})
    rep["uart"] = dict(wrapper.protocol(), baud=BAUD, clk_hz=clk_hz,
                       doc="modelcircuit.hdl.uart (module docstring)")
    return rep
