"""What lowering produces: kernels (name, node, launch width, parameters, source) gathered
into one Program (the CUDA module, the arena plan, the streams and the weights blob).
Plain data, shared by the code generator, the CPU emulator, the CuPy runtime and the
artifact writer."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

BLOCK = 128  # threads per block of every launch


class GpuError(ValueError):
    """The GPU backend cannot do what was asked (user input or machine, exit 2)."""


@dataclass(frozen=True)
class Param:
    name: str  # C parameter name
    ctype: str
    const: bool  # lives in the weights blob (else in the arena)
    tensor: str  # tensor or constant name
    offset: int = 0  # byte offset (per sample for the arena)


@dataclass
class Kernel:
    kname: str
    node: str
    op: str
    per_sample: int  # threads per sample
    params: list[Param]
    source: str


@dataclass
class Program:
    source: str
    kernels: list[Kernel]
    plan: dict[str, Any]
    streams: dict[str, Any]
    weights: dict[str, dict[str, Any]]  # name -> {offset, bytes, dtype, shape}
    weights_blob: bytes
    inputs: list[str]
    outputs: list[str]
    is_float: dict[str, bool] = field(default_factory=dict)

    @property
    def source_sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()
