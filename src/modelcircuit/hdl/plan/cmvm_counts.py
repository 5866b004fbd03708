"""The pattern counts of the CMVM optimiser (hdl/plan/cmvm.py): every column's terms and
how often each two-term pattern occurs across the columns, kept up to date in numpy batches
as the optimiser extracts patterns. Its own module because it is the optimiser's hot path
(most of an R = 1 `--strategy da` export's time: bench/cmvm.py) and a data structure with
its own invariants (see `Columns`), checked against a recount in tests/hdl/plan/test_cmvm.py;
cmvm.py keeps the graph, the builder and the algorithm that drives this."""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain, islice

import numpy as np

# A term (node, shift) is the integer node << 8 | shift (shift < 256), so that comparing
# terms compares (node, shift); a pattern of two terms t1 < t2 with signs d1, d2 is the
# integer n1 << 42 | n2 << 20 | (s2 - s1 + 512) << 1 | (d1 == d2).
Key = int
SH = 8
DROPPED = -(1 << 40)


def unkey(k: Key) -> tuple[int, int, int, int]:
    """(node a, node b, shift of b - shift of a, sign a * sign b)."""
    return k >> 42, (k >> 20) & ((1 << 22) - 1), ((k >> 1) & 1023) - 512, 1 if k & 1 else -1


def _pair_keys(t1: np.ndarray, d1: np.ndarray, t2: np.ndarray, d2: np.ndarray) -> np.ndarray:
    """The pattern keys of the term pairs (t1[i], t2[i]), t1 < t2 elementwise (int64)."""
    return ((t1 >> SH) << 42) | ((t2 >> SH) << 20) | (((t2 & 255) - (t1 & 255) + 512) << 1) \
        | (d1 == d2)


def _cross(a: np.ndarray, ad: np.ndarray, ac: np.ndarray, b: np.ndarray, bd: np.ndarray,
           bc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, sizes): the keys of the pairs (a[i], b[k]) of the same column (ac[i] ==
    bc[k]), both sorted by column; the keys of a[i]'s pairs come together, in the order of
    a, sizes[i] of them."""
    lo, hi = np.searchsorted(bc, ac, "left"), np.searchsorted(bc, ac, "right")
    size = hi - lo
    pi = np.repeat(np.arange(len(a)), size)
    qi = np.arange(len(pi)) - np.repeat(np.cumsum(size) - size, size) + np.repeat(lo, size)
    tp, tq, dp, dq = a[pi], b[qi], ad[pi], bd[qi]
    first = tp < tq
    keys = _pair_keys(np.where(first, tp, tq), np.where(first, dp, dq),
                      np.where(first, tq, tp), np.where(first, dq, dp))
    return keys, size


def _within(t: np.ndarray, d: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The keys of the pairs of terms of one column (c: sorted column numbers; each pair
    once). Only the pairs i < k of the terms sorted within their column: half the pairs
    `_cross` of the columns with themselves would make, and no order to compare (the
    terms of a column are distinct)."""
    order = np.lexsort((t, c))
    t, d, c = t[order], d[order], c[order]
    n = len(t)
    after = np.searchsorted(c, c, "right") - np.arange(n) - 1  # partners after each term
    pi = np.repeat(np.arange(n), after)
    qi = pi + 1 + np.arange(len(pi)) - np.repeat(np.cumsum(after) - after, after)
    return _pair_keys(t[pi], d[pi], t[qi], d[qi])


def _terms(cols: list[dict[int, int]], js: list[int],
           skip: dict[int, dict[int, int]] | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The terms of columns js (sorted) one after the other: (terms, signs, column).
    `skip`: leave out the last len(skip[j]) terms of column j (the ones an extraction put
    in: a dict keeps insertion order, and `Columns.insert` adds each at the end)."""
    skip = skip or {}
    n = [len(cols[j]) - len(skip.get(j, ())) for j in js]
    jn = list(zip(js, n, strict=True))
    t = np.fromiter(chain.from_iterable(islice(cols[j].keys(), k) for j, k in jn),
                    np.int64, sum(n))
    d = np.fromiter(chain.from_iterable(islice(cols[j].values(), k) for j, k in jn),
                    np.int64, sum(n))
    return t, d, np.repeat(np.asarray(js, dtype=np.int64), n)


def _flat(log: dict[int, dict[int, int]]
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """A change log {column: {term: sign}} (a few terms per column) as `_terms` does it, and
    the keys of the pairs within each column's terms (Python: a handful)."""
    t: list[int] = []
    d: list[int] = []
    c: list[int] = []
    within: list[int] = []
    for j in sorted(log):
        items = sorted(log[j].items())
        for i, (t1, d1) in enumerate(items):
            t.append(t1)
            d.append(d1)
            c.append(j)
            n1, s1 = t1 >> SH, t1 & 255
            for t2, d2 in items[i + 1:]:
                within.append((n1 << 42) | ((t2 >> SH) << 20)
                              | (((t2 & 255) - s1 + 512) << 1) | (d1 == d2))
    return (np.array(t, dtype=np.int64), np.array(d, dtype=np.int64),
            np.array(c, dtype=np.int64), within)


class Columns:
    """The columns' terms {term: sign} (per column node -> shifts; per node the columns
    holding it), and the count of every pattern that occurred at least twice when it was
    first counted, over all pairs of terms within a column: sorted int64 `keys` and their
    `counts` (numpy; new patterns first in a small sorted `tail`, merged into `keys` now and
    then), the most frequent pattern by argmax (ties: the smallest key, deterministic; a
    dropped pattern's count is -2**40).

    Why only those: after the initial count, a pattern only gains pairs when an extraction
    puts in the terms of its new node, and every pattern of that node is counted then, in
    one batch, once; a pattern seen once at birth can only lose pairs (the node's terms come
    in once; the others' only leave). The counts change in one numpy batch per extraction,
    from its log of the terms it took out (`out`: as they were) and put in (`into`): the
    pairs lost are those of `out` with the columns as they were (the terms now, less
    `into`, plus `out`), the pairs made those of `into` with the columns now. Before, each
    removed or inserted term walked its column in Python to move each pair between count
    buckets: ~70 % of the export time of a 16-bit jet tagger (bench/cmvm.py)."""

    TAIL = 4096  # new patterns kept apart until there are this many

    def __init__(self, n_out: int):
        self.cols: list[dict[int, int]] = [{} for _ in range(n_out)]
        self.idx: list[dict[int, set[int]]] = [{} for _ in range(n_out)]
        self.where: dict[int, set[int]] = {}
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.tkeys = np.zeros(0, dtype=np.int64)
        self.tcounts = np.zeros(0, dtype=np.int64)
        self.out: dict[int, dict[int, int]] = {}
        self.into: dict[int, dict[int, int]] = {}

    def build_counts(self) -> None:
        t, d, c = _terms(self.cols, list(range(len(self.cols))))
        u, n = np.unique(_within(t, d, c), return_counts=True)
        many = n > 1
        self.keys, self.counts = u[many], n[many].astype(np.int64)
        self.out, self.into = {}, {}

    def _add(self, k: np.ndarray, by: np.ndarray | int, new: np.ndarray | None = None
             ) -> None:
        """counts[k] += by for the known keys k; unknown ones: added with count `by` where
        `new` says so (k sorted and unique then)."""
        for keys, counts in ((self.keys, self.counts), (self.tkeys, self.tcounts)):
            pos = np.searchsorted(keys, k)
            found = pos < len(keys)
            found[found] = keys[pos[found]] == k[found]
            np.add.at(counts, pos[found], by if np.isscalar(by) else by[found])
            if new is not None:
                new = new & ~found
        if new is not None and new.any():
            pos = np.searchsorted(self.tkeys, k[new])
            self.tkeys = np.insert(self.tkeys, pos, k[new])
            self.tcounts = np.insert(self.tcounts, pos, by[new])
            if len(self.tkeys) > self.TAIL:
                pos = np.searchsorted(self.keys, self.tkeys)
                self.keys = np.insert(self.keys, pos, self.tkeys)
                self.counts = np.insert(self.counts, pos, self.tcounts)
                self.tkeys, self.tcounts = self.tkeys[:0], self.tcounts[:0]

    def update(self, fresh: bool) -> None:
        """Count the change the log holds (and clear it); fresh: the extraction made a new
        node (else its patterns were counted before)."""
        js = sorted(set(self.out) | set(self.into))
        if not js:
            return
        ot, od, oc, o_within = _flat(self.out)
        it, id_, ic, i_within = _flat(self.into)
        # the terms now that the extraction did not put in: same in both states
        nt, nd, nc = _terms(self.cols, js, self.into)
        # the pairs of the terms taken out (lost) and put in (made) with those, in one batch
        a = np.concatenate([ot, it])
        ac = np.concatenate([oc, ic])
        order = np.argsort(ac, kind="stable")
        cross, size = _cross(a[order], np.concatenate([od, id_])[order], ac[order], nt, nd, nc)
        made_pair = np.repeat(order >= len(ot), size)
        self.out, self.into = {}, {}
        made = np.concatenate([cross[made_pair], np.array(i_within, dtype=np.int64)])
        u, c = np.unique(made, return_counts=True)
        gone = np.concatenate([cross[~made_pair], np.array(o_within, dtype=np.int64)])
        # one count update: -1 a lost pair; new patterns kept when seen twice (a fresh
        # node's patterns are all here); both sorted, so the new ones stay sorted
        self._add(np.concatenate([gone, u]),
                  np.concatenate([np.full(len(gone), -1, dtype=np.int64), c]),
                  np.concatenate([np.zeros(len(gone), dtype=bool), (c > 1) | (not fresh)]))

    def remove(self, j: int, t: int) -> None:
        d = self.cols[j].pop(t)
        into = self.into.get(j)
        if into and t in into:  # put in by this extraction: no change
            del into[t]
        else:
            self.out.setdefault(j, {})[t] = d
        n = t >> SH
        sh = self.idx[j][n]
        sh.discard(t & 255)
        if not sh:
            del self.idx[j][n]
            self.where[n].discard(j)

    def insert(self, j: int, t: int, d: int) -> None:
        col = self.cols[j]
        while t in col:  # the same node and shift twice: 2x (a shift) or 0
            d0 = col[t]
            self.remove(j, t)
            if d0 != d:
                return
            t += 1
        col[t] = d
        self.into.setdefault(j, {})[t] = d
        n = t >> SH
        self.idx[j].setdefault(n, set()).add(t & 255)
        self.where.setdefault(n, set()).add(j)

    def drop(self, k: Key) -> None:
        """Never pick k again (too deep, or no occurrence left)."""
        for keys, counts in ((self.keys, self.counts), (self.tkeys, self.tcounts)):
            i = int(np.searchsorted(keys, k))
            if i < len(keys) and keys[i] == k:
                counts[i] = DROPPED

    def best(self, ok: Callable[[Key], bool]) -> Key | None:
        """The most frequent pattern (count >= 2) that `ok` accepts. (Ties by the narrowest
        new node instead of the smallest key: chain bits -1.2 to -1.4 % on the jet taggers,
        but the tied keys are thousands once counts reach 2, and finding and ordering them
        doubled the optimiser's time: not taken.)"""
        while True:
            c, k = 1, 0
            for keys, counts in ((self.keys, self.counts), (self.tkeys, self.tcounts)):
                if len(counts):
                    i = int(np.argmax(counts))
                    ci, ki = int(counts[i]), int(keys[i])
                    if ci > c or ci == c > 1 and ki < k:
                        c, k = ci, ki
            if c < 2:
                return None
            if ok(k):
                return k
            self.drop(k)
