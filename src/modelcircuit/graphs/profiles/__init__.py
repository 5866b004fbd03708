"""Hardware profiles as data (gpu.json, fpga.json) and the loader.

fpga.json also holds, under "families", what every device of an FPGA family shares (DSP
widths, soft-multiplier limit, block-RAM geometry, nextpnr cell names, the default register
schedule, and the resource estimate's calibration and margins): `fpga_families()`. That key
is not a profile."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from ..ir import GraphError

FAMILIES = "families"  # the key of fpga.json that holds family data, not a profile


@cache
def _load(f: str) -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(f).read_text())


@cache
def all_profiles() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for f in ("gpu.json", "fpga.json"):
        out.update({k: v for k, v in _load(f).items() if k != FAMILIES})
    return out


def fpga_families() -> dict[str, dict[str, Any]]:
    """FPGA family -> the data its devices share (fpga.json "families")."""
    return _load("fpga.json").get(FAMILIES, {})


def usable_dsp(prof: dict[str, Any]) -> int:
    """The DSP blocks a design may use on the device of FPGA profile `prof`: its "dsp", times
    its family's "dsp_usable" (1 where absent). Nexus (0.5): a MULT18X18 takes one of the
    device's MULT18 sites, but a MULTADDSUB18X18 (a product and the adder after it, which
    yosys lattice_dsp_nexus makes; the GRU's state update) takes two (and an ACC54, one per
    two MULT18s), and which products become MACs is not known before synthesis. Measured on
    a LIFCL-40 (56 MULT18; yosys 0.70 synth_nexus, nextpnr-nexus 0.11, placement): 56
    MULT18X18 place, so do 0 + 28 and 14 + 14 MULTADDSUB18X18; 44 + 12 (the s48 sweep's
    GRU) and 9 + 28 do not ("Unable to find legal placement for ... PREADD9_CORE"; 16 + 20
    ended in an exception of the placer): at half the sites any mix places."""
    fam = fpga_families().get(str(prof.get("family") or ""), {})
    return int(int(prof.get("dsp") or 0) * float(fam.get("dsp_usable", 1.0)))


def get_profile(name: str) -> dict[str, Any]:
    p = all_profiles().get(name)
    if p is None:
        raise GraphError(f"unknown profile {name!r}; known: {', '.join(sorted(all_profiles()))}")
    return {"name": name, **p}


def gpu_profile_for(device_name: str) -> str | None:
    """Map a CUDA device name (e.g. 'NVIDIA H200') to a profile name."""
    for name, p in all_profiles().items():
        if p["kind"] == "gpu" and any(m.lower() in device_name.lower() for m in p["match"]):
            return name
    return None
