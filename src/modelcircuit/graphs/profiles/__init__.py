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
