"""A Gowin board build's place, route and pack (boards.build_board calls it): nextpnr
himbaechel on the platform's pins (top.cst), then apycula's gowin_pack with the platform's
options. Why not the platform's own script: families.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .nextpnr import nextpnr_args, run_nextpnr
from .tools import FlowError, Runner


def gowin_board(plat: Any, prof: dict[str, Any], work: Path, runner: Runner, what: str,
                cmds: dict[str, list[str]]) -> dict[str, Any]:
    """Place, route and pack a Gowin board design already in `work` (synth.json from the
    platform's top.il, its top.cst beside it). `cmds`: the platform's build script's
    commands (boards._script_commands); its `gowin_pack` line gives the packer's options
    (the Tang Nano 9K's free the SPI pins for user IO). Returns nextpnr's parsed output;
    the bitstream is work/top.fs."""
    chipdb = getattr(plat, "_chipdb_device", None)
    if chipdb != prof["chipdb"] or plat.part != prof["device"]:
        raise FlowError(f"the board's part {plat.part} ({chipdb}) is not {prof['name']}'s "
                        f"{prof['device']} ({prof['chipdb']})")
    pack = cmds.get("$GOWIN_PACK")
    if not (work / "top.cst").exists() or pack is None:
        raise FlowError("the Gowin platform wrote no top.cst or no gowin_pack step")
    args = nextpnr_args(prof, float(plat.default_clk_frequency) / 1e6, ooc=False)
    pnr = run_nextpnr(runner, prof["nextpnr"], args, work, prof, what)
    # the platform's pack line names its own netlist (top.pnr.json): ours is pnr.json
    pack = ["pnr.json" if a.endswith(".pnr.json") else a for a in pack]
    runner.run("pack", "gowin_pack", pack, work)
    return pnr
