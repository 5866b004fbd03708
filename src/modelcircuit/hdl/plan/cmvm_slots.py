"""The pattern counts of the CMVM optimiser (hdl/plan/cmvm.py), one slot each, and the pick of
the most frequent: what cmvm_counts.Columns adds to and subtracts from (its pair slots hold
these slot numbers) and what the optimiser asks for its next pattern. Its own module because
it is a data structure with its own invariant (counts only fall after a pattern's birth, so
the places at the top count stay valid until none is at it: `best`), apart from the columns'
terms and places.

A slot is a place in `kc` (the counts) and `ks` (the keys): the first count's patterns at
1.. in key order, those born after them in order of birth (slot 0, SINK, takes what is
subtracted from no pattern; its count stays negative; a dropped pattern's count is DROPPED)."""

from __future__ import annotations

import bisect
from collections.abc import Callable

import numpy as np

Key = int
DROPPED = -(1 << 40)
SINK = 0  # the slot of every pair whose pattern is not counted (and of empty places)


class Slots:
    """The counted patterns' keys and counts by slot, and the ties at the top count."""

    def __init__(self, keys: np.ndarray, counts: np.ndarray) -> None:
        """The first count's patterns (sorted keys, their counts) at slots 1.., none born."""
        m = len(keys) + 1
        self.kc = np.zeros(max(16, 2 * m), dtype=np.int64)
        self.ks = np.zeros(len(self.kc), dtype=np.int64)
        self.kc[0] = DROPPED
        self.kc[1:m], self.ks[1:m] = counts, keys
        self.ns = self.ne = m  # slots [1, ns) in key order, [ns, ne) born since
        self.tie_pos: list[int] = []  # see best
        self.tie_key: list[int] = []
        self.tie_c = self.tie_i = 0
        self.last: tuple[int, int] = (-1, SINK)  # (key, slot) of the latest pick

    def born(self, keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Slots for these new patterns with these counts."""
        m, ne = len(keys), self.ne
        if ne + m > len(self.kc):
            grow = ne + m + 1024
            self.kc = np.concatenate([self.kc, np.zeros(grow, dtype=np.int64)])
            self.ks = np.concatenate([self.ks, np.zeros(grow, dtype=np.int64)])
        if m <= 4:  # (a few: item by item beats slice copies)
            kc, ks = self.kc, self.ks
            for e, (k, c) in enumerate(zip(keys.tolist(), counts.tolist(), strict=True)):
                kc[ne + e], ks[ne + e] = c, k
        else:
            self.kc[ne:ne + m] = counts
            self.ks[ne:ne + m] = keys
        self.ne = ne + m
        top = int(counts.max())
        if top > self.tie_c:  # (not from optimize: a node's patterns are as many as its
            self.tie_pos, self.tie_key, self.tie_i = [], [], 0  # terms at most) scan again
        elif top == self.tie_c:  # born at the top count: into the ties, in key order
            for p in np.flatnonzero(counts == top).tolist():
                k = int(keys[p])
                at = bisect.bisect_left(self.tie_key, k, self.tie_i)
                self.tie_key.insert(at, k)
                self.tie_pos.insert(at, ne + p)
        return np.arange(ne, ne + m)

    def tracked(self) -> dict[Key, int]:
        """Every pattern counted and not dropped: key -> count."""
        live = self.kc[1:self.ne] > DROPPED // 2
        return dict(zip(self.ks[1:self.ne][live].tolist(), self.kc[1:self.ne][live].tolist(),
                        strict=True))

    def drop(self, k: Key) -> None:
        """Never pick k again (too deep, or no occurrence left)."""
        if self.last[0] == k:
            self.kc[self.last[1]] = DROPPED
            return
        for p in np.flatnonzero(self.ks[1:self.ne] == k):
            self.kc[p + 1] = DROPPED

    def best(self, ok: Callable[[Key], bool]) -> Key | None:
        """The most frequent pattern (count >= 2) that `ok` accepts. (Ties by the narrowest
        new node instead of the smallest key: chain bits -1.2 to -1.4 % on the jet taggers,
        but the tied keys are thousands once counts reach 2, and finding and ordering them
        doubled the optimiser's time: not taken.)

        The places in `kc` that had the top count at the last scan are kept in key order
        (`tie_pos`, `tie_key`; those born at that count since, put in their place): counts
        only fall, so the first of them still at it is the answer, until none is."""
        kc = self.kc
        while True:
            pos, c = self.tie_pos, self.tie_c
            while self.tie_i < len(pos) and kc[pos[self.tie_i]] != c:
                self.tie_i += 1
            if self.tie_i == len(pos):
                if not self._scan():
                    return None
                continue
            i = pos[self.tie_i]
            k = self.tie_key[self.tie_i]
            if ok(k):
                self.last = (k, i)
                return k
            kc[i] = DROPPED

    def _scan(self) -> bool:
        """The places of the top count, in key order (False: no count of 2 or more)."""
        kc = self.kc[:self.ne]
        c = int(kc.max())
        if c < 2:
            self.tie_pos, self.tie_key, self.tie_c, self.tie_i = [], [], c, 0
            return False
        pos = np.flatnonzero(kc == c)
        if pos[-1] >= self.ns:  # some born since the first count: in key order too
            pos = pos[np.argsort(self.ks[pos], kind="stable")]
        self.tie_pos, self.tie_key = pos.tolist(), self.ks[pos].tolist()
        self.tie_c, self.tie_i = c, 0
        return True


__all__ = ["DROPPED", "SINK", "Key", "Slots"]
