"""Every generated kernel compiles for sm_90 (nvcc -ptx or NVRTC). No compiler is a failure."""

from __future__ import annotations

import re

import pytest

from modelcircuit import gpu_backend as gb
from modelcircuit.gpu_backend import nvrtc

from .conftest import FIXED_CASES, FLOAT_CASES, compiled

CASES = FIXED_CASES + [(n, "float32") for n in FLOAT_CASES] + [
    ("digits_mlp", "fixed<16,6>"), ("digits_mlp", "float32"),
    ("digits_cnn", "fixed<16,6>"), ("digits_cnn", "float32")]


def test_a_cuda_compiler_is_available():
    assert nvrtc.available(), "neither nvcc nor NVRTC is available: kernels cannot be checked"


@pytest.mark.parametrize("name,precision", CASES, ids=[f"{n}-{p or 'model'}" for n, p in CASES])
def test_every_kernel_compiles_for_sm90(name, precision):
    prog = gb.lower(compiled(name, precision))
    ptx = gb.compile_ptx(prog.source, arch="sm_90").decode()
    assert ".target sm_90" in ptx
    entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
    assert entries == {k.kname for k in prog.kernels}
    assert "__syncthreads" not in prog.source and "__shared__" not in prog.source


def test_compile_error_is_one_line():
    with pytest.raises(gb.GpuError) as e:
        gb.compile_ptx('extern "C" __global__ void k() { undefined_thing(); }')
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("backend", ["cupy-nvrtc", "libnvrtc"])
def test_nvrtc_fallback(backend):
    if backend not in nvrtc.available():
        pytest.skip(f"{backend} not installed here (nvcc is used)")
    prog = gb.lower(compiled("qkeras_jettagging", None))
    assert b".entry" in gb.compile_ptx(prog.source, backend=backend)


def test_no_compiler_fails_clearly(monkeypatch):
    monkeypatch.setattr(nvrtc, "available", lambda: [])
    with pytest.raises(gb.GpuError, match="neither nvcc nor NVRTC"):
        gb.compile_ptx("")
