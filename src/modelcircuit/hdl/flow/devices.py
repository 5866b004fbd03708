"""FPGA devices as the flow sees them: a device's profile (graphs/profiles/fpga.json) and the
data its family shares ("families" there: DSP widths, the soft-multiplier limit, block-RAM
geometry, nextpnr's cell names, the resource estimate's calibration and margins). No device
number lives in code."""

from __future__ import annotations

from typing import Any

from ...graphs.profiles import all_profiles, fpga_families
from .tools import FlowError


def fpga_profile(name: str | None) -> dict[str, Any]:
    """The profile of a device the open flow can build for (with its name under "name")."""
    profs = all_profiles()
    fp = sorted(k for k, p in profs.items() if p.get("kind") == "fpga" and not p.get("estimate_only"))
    if not name:
        raise FlowError(f"the FPGA flow needs a device: one of {', '.join(fp)}")
    p = profs.get(name)
    if p is None or p.get("kind") != "fpga":
        raise FlowError(f"unknown FPGA device {name!r}; known: {', '.join(fp)}")
    if p.get("estimate_only") or not p.get("nextpnr"):
        raise FlowError(f"device {name!r} ({p['title']}) has no open-source flow; it is for "
                        f"estimates only. Devices with a flow: {', '.join(fp)}")
    return dict(p, name=name)


def family(name: str | None) -> dict[str, Any]:
    """The data a family's devices share (fpga.json "families"); FlowError for a family
    that has none."""
    fams = fpga_families()
    data = fams.get(name or "")
    if data is None:
        raise FlowError(f"FPGA family {name!r} has no entry under \"families\" in "
                        f"graphs/profiles/fpga.json; known: {', '.join(sorted(fams))}")
    return data


def soft_max_width(family_name: str | None) -> int:
    """Products whose operands are all at most this wide are built in logic, not DSPs."""
    return int(family(family_name).get("soft_multiplier_max_width", 0))


def dsp_blocks(mul: dict[str, Any], family_name: str) -> int:
    """DSP blocks mul2dsp would use for one $mul (0 when below the minimum widths)."""
    fam = family(family_name)
    amin, bmin, ymin = fam["dsp_min_widths"]
    if mul["a"] < amin or mul["b"] < bmin or mul["y"] < ymin:
        return 0
    mx = fam["dsp_max_width"]
    return -(-mul["a"] // mx) * -(-mul["b"] // mx)
