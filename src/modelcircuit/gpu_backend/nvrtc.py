"""Compile kernel source to PTX for a given arch: `nvcc -ptx` when on PATH, else NVRTC
(cupy.cuda.nvrtc low-level calls, or libnvrtc through ctypes). Neither needs a GPU."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .kernel import GpuError

OPTIONS = ("-std=c++17",)


def available() -> list[str]:
    """Which compilers are usable here, in the order compile_ptx tries them."""
    out = []
    if shutil.which("nvcc"):
        out.append("nvcc")
    try:
        from cupy.cuda import nvrtc  # noqa: F401

        out.append("cupy-nvrtc")
    except Exception:  # noqa: BLE001 - cupy absent or broken: not usable
        pass
    if _libnvrtc_path():
        out.append("libnvrtc")
    return out


def compile_ptx(source: str, arch: str = "sm_90", backend: str | None = None) -> bytes:
    """Source -> PTX bytes. GpuError (one line, first compiler message) on failure or when no
    compiler is available."""
    arch = arch if arch.startswith(("sm_", "compute_")) else f"sm_{arch}"
    have = available()
    if backend is not None and backend not in have:
        raise GpuError(f"CUDA compiler {backend!r} is not available here (have: {have or 'none'})")
    choice = backend or (have[0] if have else None)
    if choice is None:
        raise GpuError("cannot compile CUDA kernels: neither nvcc nor NVRTC is available "
                       "(install the CUDA toolkit or nvidia-cuda-nvrtc-cu12)")
    if choice == "nvcc":
        return _nvcc(source, arch)
    if choice == "cupy-nvrtc":
        return _cupy_nvrtc(source, arch)
    return _ctypes_nvrtc(source, arch)


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error" in line:
            return line.strip()
    return (text.strip().splitlines() or ["unknown error"])[0]


def _nvcc(source: str, arch: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.cu", Path(tmp) / "k.ptx"
        src.write_text(source)
        r = subprocess.run(["nvcc", "-ptx", f"-arch={arch}", *OPTIONS, str(src), "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise GpuError(f"nvcc failed: {_first_error(r.stderr)}")
        return out.read_bytes()


def _cupy_nvrtc(source: str, arch: str) -> bytes:
    from cupy.cuda import nvrtc

    opts = (f"--gpu-architecture={arch.replace('sm_', 'compute_')}", *OPTIONS)
    prog = nvrtc.createProgram(source, "kernels.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            raise GpuError(f"NVRTC failed: {_first_error(nvrtc.getProgramLog(prog))}") from None
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return ptx if isinstance(ptx, bytes) else ptx.encode()


def _libnvrtc_path() -> str | None:
    cands = []
    for d in sys.path:
        cands += glob.glob(os.path.join(d, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*"))
        cands += glob.glob(os.path.join(d, "nvidia", "cu1*", "lib", "libnvrtc.so*"))
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cands += glob.glob(os.path.join(root, "lib64", "libnvrtc.so*"))
    found = ctypes.util.find_library("nvrtc")
    if found:
        cands.append(found)
    cands = [c for c in cands if "builtins" not in c and "alt" not in os.path.basename(c)]
    return sorted(cands)[0] if cands else None


def _ctypes_nvrtc(source: str, arch: str) -> bytes:
    lib = ctypes.CDLL(_libnvrtc_path())
    prog = ctypes.c_void_p()
    chk = _checker(lib)
    chk(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernels.cu", 0, None, None),
        "create")
    try:
        opts = [f"--gpu-architecture={arch.replace('sm_', 'compute_')}".encode(),
                *(o.encode() for o in OPTIONS)]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        if rc != 0:
            n = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetProgramLog(prog, buf)
            raise GpuError(f"NVRTC failed: {_first_error(buf.value.decode(errors='replace'))}")
        n = ctypes.c_size_t()
        chk(lib.nvrtcGetPTXSize(prog, ctypes.byref(n)), "ptx size")
        buf = ctypes.create_string_buffer(n.value)
        chk(lib.nvrtcGetPTX(prog, buf), "ptx")
        return buf.raw.rstrip(b"\0")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _checker(lib: ctypes.CDLL):
    def chk(rc: int, what: str) -> None:
        if rc != 0:
            raise GpuError(f"NVRTC {what} failed with code {rc}")
    return chk
