"""The reused work arrays of a golden plan, per thread and batch size (golden_plan.Plan),
and the native chains' ops that point into them (golden_chain.Chain)."""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray

# work arrays kept between calls, per plan, thread and batch size: at most this many bytes
# (memory stays bounded; beyond it arrays are fresh each call, and for work that large their
# page faults are a small part of the time)
KEEP_BYTES = 64 << 20


class Work:
    """The reused arrays of one plan, thread and batch size."""

    def __init__(self) -> None:
        self.arrays: dict[Any, Array] = {}
        self.kept = 0  # bytes
        # the kept arrays' addresses for the C loops, by id (an array stays in `arrays`, so
        # alive and its id its own, until replaced; then its entry goes): a.ctypes.data
        # costs ~1-2 us a call, a tenth of a small layer's step
        self.ptrs: dict[int, int] = {}
        # native chains' ops by chain (golden_chain.Chain), while their arrays are kept
        self.chains: dict[Any, Any] = {}
        self.fresh = 0  # arrays handed out but not kept (over KEEP_BYTES)

    def get(self, key: Any, shape: tuple[int, ...], dtype: Any) -> Array:
        dtype = np.dtype(dtype)
        a = self.arrays.get(key)
        if a is not None and a.shape == shape and a.dtype == dtype:
            return a
        a = np.empty(shape, dtype=dtype)
        if self.kept + a.nbytes <= KEEP_BYTES:
            old = self.arrays.get(key)
            self.kept += a.nbytes - (0 if old is None else old.nbytes)
            if old is not None:
                self.ptrs.pop(id(old), None)
            self.arrays[key] = a
            self.ptrs[id(a)] = a.ctypes.data
        else:
            self.fresh += 1
        return a

    def ptr(self, a: Array) -> int:
        p = self.ptrs.get(id(a))
        return a.ctypes.data if p is None else p
