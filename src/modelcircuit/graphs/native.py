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
_SFX = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.int64): "i64"}
# rounding modes of the C loops
EPI_NONE, EPI_FLOOR, EPI_RINT = 0, 1, 2
# reference.Linear.rounding -> the epilogue's mode
EPI_MODES = {"": EPI_NONE, "floor": EPI_FLOOR, "rint": EPI_RINT}
Q_RINT, Q_FLOOR, Q_HALF_UP = 0, 1, 2
R_TRN, R_RND, R_RND_CONV = 0, 1, 2
A_NONE, A_FLOOR, A_HALF_UP, A_RINT = 0, 1, 2, 3


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
            for to in (np.float32, np.float64):
                f = getattr(lib, f"mc_im2col_{_SFX[np.dtype(ti)]}_{_SFX[np.dtype(to)]}")
                f.argtypes = [_P, _P] + [_I64] * 13
                f.restype = None
                self.im2col[(np.dtype(ti), np.dtype(to))] = f
        self.req = lib.mc_requantize_sat_i64
        self.req.argtypes = [_P, _I64, _INT, _INT, _I64, _I64]
        self.req.restype = None

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
    """'native loops' or why not."""
    if os.environ.get(ENV, "").strip() == "0":
        return f"numpy steps only: {ENV}=0"
    return "native loops" if loops() is not None else str(_state.get("why"))
