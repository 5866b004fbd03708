"""The golden model's element-wise loops in C (templates/golden/loops.c), built on first use
with the system C compiler (util/native.py: cached per machine) and called through ctypes.

Why: a prepared golden run (graphs/golden_plan.py) of a small model is mostly numpy calls on
small arrays: the jet tagger at 64 rows spent 40 of its ~100 us in the four Dense layers'
epilogues (bias, rounding, clamp: three passes and three calls each), 25 us in the Softmax's
dozen calls and 13 us quantizing. Each loop here is one pass and one call doing the same IEEE
operations in the same order (the C file's comment says why the results are the same bits).

Where no C compiler is found, the build fails, or MODELCIRCUIT_GOLDEN_NATIVE=0 is set, `loops()`
is None and the golden model runs its numpy steps (the same numbers: tests/graphs/
test_golden_native.py runs both and compares). `status()` says which and why (bench, inspect).
"""

from __future__ import annotations

import ctypes
import os
import threading
from importlib import resources
from typing import Any

import numpy as np

from ..util import native

# -O3 and the machine's vector width; no contraction of a multiply and an add into one FMA
# (two roundings stay two); -fno-trapping-math and -fno-math-errno only let floor and rint
# be vectorised (they concern exception flags and errno, never a value: the tests compare
# every loop with its numpy steps on halves, signed zeros, infinities and the type's ends)
FLAGS = ["-O3", "-march=native", "-std=c11", "-shared", "-fPIC", "-fno-fast-math",
         "-ffp-contract=off", "-fno-trapping-math", "-fno-math-errno", "-w"]
ENV = "MODELCIRCUIT_GOLDEN_NATIVE"

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_INT = ctypes.c_int
_FT = {np.dtype(np.float64): ctypes.c_double, np.dtype(np.float32): ctypes.c_float}
_SFX = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.int64): "i64",
        np.dtype(np.int16): "i16"}
# rounding modes of the C loops
EPI_NONE, EPI_FLOOR, EPI_RINT = 0, 1, 2
# reference.Linear.rounding -> the epilogue's mode
EPI_MODES = {"": EPI_NONE, "floor": EPI_FLOOR, "rint": EPI_RINT}
Q_RINT, Q_FLOOR, Q_HALF_UP = 0, 1, 2
R_TRN, R_RND, R_RND_CONV = 0, 1, 2
A_NONE, A_FLOOR, A_HALF_UP, A_RINT = 0, 1, 2, 3
# mc_program's ops and the types it holds codes in (loops.c)
OP_GEMM, OP_CAST, OP_SOFTMAX, OP_QUANTIZE, OP_GEMM_I16 = 1, 2, 3, 4, 5
DTYPES = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, np.dtype(np.int64): 2,
          np.dtype(np.int16): 3}
# the forms the golden plan holds codes in (a chain's inputs and outputs)
HELD = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.int64))
# the types an int16 GEMM's epilogue writes (the layer's fused float type)
I16_OUT = (np.dtype(np.float64), np.dtype(np.float32))


class _Blas(ctypes.Structure):
    """loops.c's mc_blas."""

    _fields_ = [("dgemm", _P), ("sgemm", _P), ("ints64", _I64), ("get_nt", _P),
                ("set_nt", _P)]


class Op(ctypes.Structure):
    """One step of a native chain (loops.c's mc_op; golden_plan builds them)."""

    _fields_ = ([(f, _I64) for f in ("kind", "dtype", "dtype2", "k", "n", "mode")]
                + [(f, _P) for f in ("x", "y", "w", "b")]
                + [(f, ctypes.c_double) for f in ("lo", "hi", "scale")]
                + [(f, _P) for f in ("z", "acc")]
                + [(f, _P) for f in ("exp_t", "rec_t")]
                + [(f, _I64) for f in ("e_lo", "e_hi", "e_sh", "r_lo", "r_hi", "r_sh",
                                       "s_out", "req_mode", "q_lo", "q_hi")])


# CBLAS GEMM entry points, the symbol names under which the BLAS builds numpy ships with (or
# links) export them, and whether their sizes are 64-bit: numpy's own wheels bundle an ILP64
# OpenBLAS with a scipy_ prefix and 64_ suffix; a system or conda BLAS has plain names
_CBLAS = ((("scipy_cblas_dgemm64_", "scipy_cblas_sgemm64_"), True),
          (("cblas_dgemm64_", "cblas_sgemm64_"), True),
          (("cblas_dgemm", "cblas_sgemm"), False))


# OpenBLAS's thread setting under the same naming schemes (get, set; both take/return int)
_THREADS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
            ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
            ("openblas_get_num_threads", "openblas_set_num_threads"))


def _numpy_blas() -> tuple[int, int, bool, int, int] | None:
    """(dgemm, sgemm, 64-bit sizes, get threads, set threads: 0 where not OpenBLAS) of the
    BLAS numpy's matmul calls, or None. numpy's own:
    the same kernels as the numpy steps (products are exact either way, the plan proves it;
    the same library also keeps one thread setting, graphs/threads.py, for both paths)."""
    try:
        from threadpoolctl import ThreadpoolController

        libs = ThreadpoolController().select(user_api="blas").lib_controllers
    except Exception:  # noqa: BLE001 - no thread control: no chain, the numpy steps run
        return None
    npdir = os.path.dirname(os.path.dirname(np.__file__))
    # numpy's bundled library first (numpy.libs beside the package), then any other
    for c in sorted(libs, key=lambda c: not str(c.filepath).startswith(npdir)):
        try:
            lib = ctypes.CDLL(str(c.filepath))
        except OSError:
            continue
        for (d, s), ints64 in _CBLAS:
            fd, fs = getattr(lib, d, None), getattr(lib, s, None)
            if fd is not None and fs is not None:
                if not ints64 and _openblas_ilp64(lib):  # an ILP64 build without suffixes
                    ints64 = True
                nt = next(((getattr(lib, g), getattr(lib, t)) for g, t in _THREADS
                           if hasattr(lib, g) and hasattr(lib, t)), None)
                return (_addr(fd), _addr(fs), ints64, _addr(nt[0]) if nt else 0,
                        _addr(nt[1]) if nt else 0)
    return None


def _addr(f: Any) -> int:
    return ctypes.cast(f, _P).value or 0


def _openblas_ilp64(lib: ctypes.CDLL) -> bool:
    f = getattr(lib, "openblas_get_config", None)
    if f is None:
        return False
    f.restype = ctypes.c_char_p
    f.argtypes = []
    return b"USE64BITINT" in (f() or b"")


def _chain_works(loops: Loops) -> bool:
    """One small product through the chain equals numpy's (a BLAS whose sizes were taken
    for the wrong width would not: the chain is then not used)."""
    rng = np.random.default_rng(0)
    for dt in (np.float64, np.float32):
        x = rng.integers(-9, 9, (3, 5)).astype(dt)
        w = rng.integers(-9, 9, (5, 4)).astype(dt)
        y = np.zeros((3, 4), dt)
        ops = (Op * 1)(Op(kind=OP_GEMM, dtype=DTYPES[np.dtype(dt)], k=5, n=4,
                          mode=EPI_NONE, x=x.ctypes.data, y=y.ctypes.data, w=w.ctypes.data,
                          b=None, lo=-np.inf, hi=np.inf))
        loops.run(ops, 1, 3)
        if not np.array_equal(y, x @ w):
            return False
    return True


class Loops:
    """The loaded library's entry points; each method returns False where its arrays are not
    what the loop takes (the caller then runs its numpy steps)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.epi = {}
        for dt, ct in _FT.items():
            f = getattr(lib, f"mc_epilogue_{_SFX[dt]}")
            f.argtypes = [_P, _P, _I64, _I64, _INT, ct, ct]
            f.restype = None
            self.epi[dt] = f
        self.quant = {}
        for ti, to in ((np.float32, np.float32), (np.float32, np.float64),
                       (np.float64, np.float64)):
            f = getattr(lib, f"mc_quantize_{_SFX[np.dtype(ti)]}_{_SFX[np.dtype(to)]}")
            ct = _FT[np.dtype(to)]
            f.argtypes = [_P, _P, _I64, ct, _INT, ct, ct]
            f.restype = _INT  # nonzero: a NaN or an infinity in x
            self.quant[(np.dtype(ti), np.dtype(to))] = f
        self.smax = {}
        for dt in (np.float64, np.float32, np.int64):
            f = getattr(lib, f"mc_softmax_{_SFX[np.dtype(dt)]}")
            f.argtypes = [_P, _P, _I64, _I64, _P, _I64, _I64, _I64, _P, _I64, _I64, _I64]
            f.restype = None
            self.smax[np.dtype(dt)] = f
        self.adds = {}
        for ta in (np.float64, np.float32, np.int64):
            for tb in (np.float64, np.float32, np.int64):
                f = getattr(lib, f"mc_add_{_SFX[np.dtype(ta)]}_{_SFX[np.dtype(tb)]}")
                f.argtypes = [_P, _P, _P, _I64, ctypes.c_double, ctypes.c_double, _INT,
                              ctypes.c_double, ctypes.c_double]
                f.restype = None
                self.adds[(np.dtype(ta), np.dtype(tb))] = f
        self.im2col = {}
        for ti in (np.float32, np.float64, np.int64):
            for to in (np.float32, np.float64, np.int16):
                f = getattr(lib, f"mc_im2col_{_SFX[np.dtype(ti)]}_{_SFX[np.dtype(to)]}")
                f.argtypes = [_P, _P] + [_I64] * 13
                f.restype = None
                self.im2col[(np.dtype(ti), np.dtype(to))] = f
        self.dwconv = {}
        for ti in (np.float32, np.float64, np.int64):
            for to in (np.float32, np.float64):
                f = getattr(lib, f"mc_dwconv_{_SFX[np.dtype(ti)]}_{_SFX[np.dtype(to)]}")
                f.argtypes = [_P, _P, _P] + [_I64] * 13
                f.restype = None
                self.dwconv[(np.dtype(ti), np.dtype(to))] = f
        self.thresh = {}
        for dt in (np.float64, np.float32, np.int64):
            f = getattr(lib, f"mc_threshold_{_SFX[np.dtype(dt)]}")
            f.argtypes = [_P, _P, _I64, _I64, _P, _I64, _P, _P]
            f.restype = None
            self.thresh[np.dtype(dt)] = f
        self.thresh_lut = {}
        for dt in (np.float64, np.float32, np.int64):
            f = getattr(lib, f"mc_threshold_lut_{_SFX[np.dtype(dt)]}")
            f.argtypes = [_P, _P, _I64, _I64, _P, _I64, _I64]
            f.restype = None
            self.thresh_lut[np.dtype(dt)] = f
        self.req = lib.mc_requantize_sat_i64
        self.req.argtypes = [_P, _I64, _INT, _INT, _I64, _I64]
        self.req.restype = None
        # the chain: where numpy's BLAS cannot be called from C, None (the steps run)
        self.program = None
        blas = _numpy_blas()
        if blas is not None and blas[0] and blas[1]:
            f = lib.mc_program
            f.argtypes = [_P, _I64, _I64, _P, _INT]
            f.restype = _INT  # nonzero: a NaN or an infinity quantized
            self.program = f
            self.gemm = blas
            self._blas = _Blas(dgemm=blas[0], sgemm=blas[1], ints64=int(blas[2]),
                               get_nt=blas[3] or None, set_nt=blas[4] or None)
            self._blas_p = ctypes.addressof(self._blas)
            if not _chain_works(self):
                self.program = None
        # the int16 GEMM's kernel (0: plain loops, not used; 1: AVX2; 2: AVX-512 VNNI)
        lib.mc_i16_level.restype = _INT
        self.i16 = int(lib.mc_i16_level()) if self.program is not None else 0

    def run(self, ops: ctypes.Array | int, n_ops: int, rows: int,
            one_thread: bool = False) -> None:
        """Run a native chain (an array of Op, or its address) on `rows` rows; one_thread:
        its products on one BLAS thread (set and restored in C where the BLAS is OpenBLAS:
        ~0.1 us against ~10 us through threadpoolctl; see sets_threads)."""
        assert self.program is not None
        if self.program(ops, n_ops, rows, self._blas_p, one_thread):
            raise ValueError("cannot quantize NaN or Inf")

    @property
    def sets_threads(self) -> bool:
        """run(one_thread=True) sets the BLAS's threads itself."""
        return bool(self.program is not None and self.gemm[3] and self.gemm[4])

    def epilogue(self, y: np.ndarray, b: np.ndarray | None, mode: int, lo: float,
                 hi: float) -> bool:
        """y = clamp(round(y + b), lo, hi) in place, y (rows, n) C-contiguous."""
        f = self.epi.get(y.dtype)
        if (f is None or y.ndim != 2 or not y.flags.c_contiguous
                or (b is not None and (b.dtype != y.dtype or b.shape != (y.shape[1],)
                                       or not b.flags.c_contiguous))):
            return False
        f(y.ctypes.data, None if b is None else b.ctypes.data, y.shape[0], y.shape[1], mode,
          lo, hi)
        return True

    def quantize(self, x: np.ndarray, out: np.ndarray, scale: float, mode: int, lo: float,
                 hi: float) -> bool:
        f = self.quant.get((x.dtype, out.dtype))
        if (f is None or x.shape != out.shape or not x.flags.c_contiguous
                or not out.flags.c_contiguous):
            return False
        if f(x.ctypes.data, out.ctypes.data, x.size, scale, mode, lo, hi):
            raise ValueError("cannot quantize NaN or Inf")
        return True

    def softmax(self, x: np.ndarray, out: np.ndarray, exp_t: np.ndarray, e: tuple[int, ...],
                rec_t: np.ndarray, r: tuple[int, ...]) -> bool:
        """out = exp_t[index(x - rowmax)] * rec_t[index(rowsum)] (int64; see loops.c)."""
        f = self.smax.get(x.dtype)
        if (f is None or not x.flags.c_contiguous or out.dtype != np.int64
                or out.shape != x.shape or not out.flags.c_contiguous or x.shape[-1] < 1):
            return False
        n = x.shape[-1]
        f(x.ctypes.data, out.ctypes.data, x.size // n, n, exp_t.ctypes.data, *e,
          rec_t.ctypes.data, *r)
        return True

    def add(self, a: np.ndarray, b: np.ndarray, y: np.ndarray, ka: float, kb: float,
            mode: int, lo: float, hi: float) -> bool:
        """y = clamp(round(a * ka + b * kb), lo, hi) in float64 (see loops.c)."""
        f = self.adds.get((a.dtype, b.dtype))  # looked up per call (tests count the calls)
        if (f is None or y.dtype != np.float64 or a.shape != y.shape or b.shape != y.shape
                or not (a.flags.c_contiguous and b.flags.c_contiguous
                        and y.flags.c_contiguous)):
            return False
        f(a.ctypes.data, b.ctypes.data, y.ctypes.data, y.size, ka, kb, mode, lo, hi)
        return True

    def requantize_sat(self, q: np.ndarray, s: int, mode: int, lo: int, hi: int) -> bool:
        if q.dtype != np.int64 or not q.flags.c_contiguous or not 0 < s < 63:
            return False
        self.req(q.ctypes.data, q.size, s, mode, lo, hi)
        return True


_lock = threading.Lock()
_state: dict[str, object] = {}


def loops() -> Loops | None:
    """The loops, built and loaded once per process; None where they cannot be (status())."""
    if os.environ.get(ENV, "").strip() == "0":
        return None
    if "loops" in _state:
        return _state["loops"]  # type: ignore[return-value]
    with _lock:
        if "loops" not in _state:
            lp, why = None, "built"
            try:
                src = resources.files("modelcircuit").joinpath(
                    "templates/golden/loops.c").read_text()
                path = native.shared_library(src, cc=native.compiler("CC", "gcc", "cc"),
                                             flags=FLAGS, kind="golden")
                lp = Loops(ctypes.CDLL(str(path)))
            except (native.BuildError, OSError, AttributeError) as e:
                why = f"numpy steps only: {e}"
            _state["why"] = why
            _state["loops"] = lp
    return _state["loops"]  # type: ignore[return-value]


def status() -> str:
    """'native loops and chains', 'native loops (no chains ...)' or why not."""
    if os.environ.get(ENV, "").strip() == "0":
        return f"numpy steps only: {ENV}=0"
    lp = loops()
    if lp is None:
        return str(_state.get("why"))
    return ("native loops and chains" if lp.program is not None else
            "native loops (no chains: numpy's BLAS is not callable from C here)")
