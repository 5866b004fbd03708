"""Hardware profiles as data (gpu.json, fpga.json) and the loader."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from ..ir import GraphError


@cache
def all_profiles() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for f in ("gpu.json", "fpga.json"):
        out.update(json.loads(resources.files(__package__).joinpath(f).read_text()))
    return out


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
