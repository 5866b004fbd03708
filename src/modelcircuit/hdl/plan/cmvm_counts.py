"""The pattern counts of the CMVM optimiser (hdl/plan/cmvm.py): every column's terms and
how often each two-term pattern occurs across the columns, kept up to date as the optimiser
extracts patterns. Its own module because it is the optimiser's hot path (most of an R = 1
`--strategy da` export's time: bench/cmvm.py) and a data structure with its own invariants
(see `Columns`), checked against a recount in tests/hdl/plan/test_cmvm.py; the counts by
slot and the pick are cmvm_slots.py's; cmvm.py keeps the graph, the builder and the
algorithm that drives this."""

from __future__ import annotations

import numpy as np

from .cmvm_slots import SINK, Key, Slots

# A term (node, shift) is the integer node << 8 | shift (shift < 256), so that comparing
# terms compares (node, shift); a pattern of two terms t1 < t2 with signs d1, d2 is the
# integer n1 << 42 | n2 << 20 | (s2 - s1 + 512) << 1 | (d1 == d2).
SH = 8
_M20, _M22 = (1 << 20) - 1, (1 << 22) - 1
_OUT = -(1 << 62) - 1 - (np.arange(4096, dtype=np.int64) << 10)  # see Columns._made


def unkey(k: Key) -> tuple[int, int, int, int]:
    """(node a, node b, shift of b - shift of a, sign a * sign b)."""
    return k >> 42, (k >> 20) & _M22, ((k >> 1) & 1023) - 512, 1 if k & 1 else -1


def _pair_key(t1: int, d1: int, t2: int, d2: int) -> int:
    if t1 > t2:
        t1, d1, t2, d2 = t2, d2, t1, d1
    return (t1 >> SH) << 42 | (t2 >> SH) << 20 | ((t2 & 255) - (t1 & 255) + 512) << 1 \
        | (d1 == d2)


# The key of terms t1 < t2 is the sum of a part of each: first = (n1 << 42) - (s1 << 1) +
# 1024 + (d1 == d2), second = (n2 << 20) + (s2 << 1) (Columns.a01 keeps every place's first
# part, for a positive and for a negative second term).


class Columns:
    """The columns' terms {term: sign} (per column node -> shifts; per node the columns
    holding it), and the count of every pattern that occurred at least twice when it was
    first counted, over all pairs of terms within a column, kept in `slots`
    (cmvm_slots.Slots, which also picks the most frequent: ties by the smallest key).

    Why only those: after the initial count, a pattern only gains pairs when an extraction
    puts in the terms of its new node, and every pattern of that node is counted then, in
    one batch, once; a pattern seen once at birth can only lose pairs (the node's terms come
    in once; the others' only leave). So every count only falls after its birth, and a
    pattern under 2 is dead for good.

    Why pair slots: every pattern counted has a slot (slot 0, SINK, takes the rest), and
    every pair of terms of a column keeps the slot of its pattern: each term of column j
    has a place q there, `ps[j, q, r]` is the slot of the pair of the terms at places q and
    r (SINK: not counted, or no term). Taking terms out is then their rows of `ps`
    subtracted from the counts, no pattern key computed or searched; only the terms an
    extraction puts in (all of its new node, after every other term) have keys computed,
    as `a01[sign][j, r] + second(term)`: the first part of the key of the term at r,
    stored per place (an empty place holds a distinct negative number, which never pairs).
    Before, every extraction computed, sorted and searched (searchsorted in ~150,000 keys)
    the keys of all the pairs it took out and put in, ~2,000 on average over the ~900
    extractions of a 16-bit jet tagger's 64 x 32 layer: half the optimiser's time there is
    gone (bench/cmvm.py). The price is memory: `ps` is columns x places squared int32
    (that layer: 32 x 238**2, 7 MB; the first count of all pairs it replaces took as much).
    """

    DENSE = 4096  # a bincount of up to twice the keys + this many bins (else a sort)
    MARGIN = 8  # free places per column at the first count (more: `_grow`)

    def __init__(self, n_out: int):
        self.cols: list[dict[int, int]] = [{} for _ in range(n_out)]
        self.idx: list[dict[int, set[int]]] = [{} for _ in range(n_out)]
        self.where: dict[int, set[int]] = {}
        self.built = False
        self.top = -1  # the newest node
        self.maxsh = 0  # the largest shift
        self.place: list[dict[int, int]] = [{} for _ in range(n_out)]  # term -> place
        self.free: list[list[int]] = [[] for _ in range(n_out)]
        self.out: list[tuple[int, int]] = []  # (column, place) of the terms taken out
        self.into: dict[int, dict[int, int]] = {}  # column -> {term: sign} put in
        self.freed: list[tuple[int, int]] = []  # places free after the next update
        self.gone: dict[int, list[int]] = {}  # column -> places of the terms taken out
        self.twice_i: list[int] = []  # (out index, place): a pair of two terms out of
        self.twice_q: list[int] = []  # one column, counted in the row of the first
        self.width = 0
        self.ps = np.zeros((n_out, 0, 0), dtype=np.int32)
        self.a01 = np.zeros((2, n_out, 0), dtype=np.int64)
        self.slots = Slots(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))

    # -- the terms ----------------------------------------------------------------------

    def insert(self, j: int, t: int, d: int) -> None:
        col = self.cols[j]
        while t in col:  # the same node and shift twice: 2x (a shift) or 0
            d0 = col[t]
            self.remove(j, t)
            if d0 != d:
                return
            t += 1
        col[t] = d
        n = t >> SH
        if t & 255 > self.maxsh:
            self.maxsh = t & 255
        self.idx[j].setdefault(n, set()).add(t & 255)
        self.where.setdefault(n, set()).add(j)
        if not self.built:
            self.top = max(self.top, n)
            return
        self.into.setdefault(j, {})[t] = d
        free = self.free[j]
        if not free:
            self._grow()
        self.place[j][t] = free.pop()  # its a01 is still that of an empty place

    def fill(self, j: int, terms: dict[int, int]) -> None:
        """Column j's first terms {term: sign} (before the first count; distinct)."""
        self.cols[j] = terms
        idx = self.idx[j]
        where = self.where
        for t in terms:
            n, s = t >> SH, t & 255
            sh = idx.get(n)
            if sh is None:
                idx[n] = {s}
                where.setdefault(n, set()).add(j)
            else:
                sh.add(s)
            if n > self.top:
                self.top = n
            if s > self.maxsh:
                self.maxsh = s

    def remove(self, j: int, t: int) -> None:
        self.cols[j].pop(t)
        n = t >> SH
        sh = self.idx[j][n]
        sh.discard(t & 255)
        if not sh:
            del self.idx[j][n]
            self.where[n].discard(j)
        if not self.built:
            return
        q = self.place[j].pop(t)
        into = self.into.get(j)
        if into and t in into:  # put in by this extraction: its pairs were never counted
            del into[t]
        else:
            gone = self.gone.setdefault(j, [])
            self.twice_i.extend([len(self.out)] * len(gone))
            self.twice_q.extend(gone)
            gone.append(q)
            self.out.append((j, q))
        self.freed.append((j, q))

    def replace(self, j: int, t1: int, t2: int, t: int, d: int) -> None:
        """remove(j, t1), remove(j, t2), insert(j, t, d) after the first count, where t1
        and t2 are not of the node of t (an extraction: one call per occurrence)."""
        col, idx, place = self.cols[j], self.idx[j], self.place[j]
        gone = self.gone.get(j)
        if gone is None:
            gone = self.gone[j] = []
        for t0 in (t1, t2):
            del col[t0]
            n = t0 >> SH
            sh = idx[n]
            sh.discard(t0 & 255)
            if not sh:
                del idx[n]
                self.where[n].discard(j)
            q = place.pop(t0)
            i = len(self.out)
            for q0 in gone:  # the pair of two terms out of one column: counted once
                self.twice_i.append(i)
                self.twice_q.append(q0)
            gone.append(q)
            self.out.append((j, q))
            self.freed.append((j, q))
        if t in col:
            self.insert(j, t, d)
            return
        col[t] = d
        n = t >> SH
        if t & 255 > self.maxsh:
            self.maxsh = t & 255
        sh = idx.get(n)
        if sh is None:
            idx[n] = {t & 255}
            self.where.setdefault(n, set()).add(j)
        else:
            sh.add(t & 255)
        into = self.into.get(j)
        if into is None:
            self.into[j] = {t: d}
        else:
            into[t] = d
        free = self.free[j]
        if not free:
            self._grow()
        place[t] = free.pop()

    def _empty(self, j: np.ndarray | int, q: np.ndarray | int) -> np.ndarray | int:
        """The a01 of an empty place: negative, and apart from every other's by more
        than any two terms' second parts (< 2**9 apart: one node), so it never pairs."""
        return -(1 << 62) + ((q * len(self.cols) + j) << 10)

    def _grow(self) -> None:
        """More places per column (an extraction puts terms in before the places of the
        ones it took out are free)."""
        n_cols, w = len(self.cols), self.width
        w2 = w + max(8, w // 4)
        ps = np.zeros((n_cols, w2, w2), dtype=np.int32)
        ps[:, :w, :w] = self.ps
        a01 = np.empty((2, n_cols, w2), dtype=np.int64)
        a01[:] = self._empty(np.arange(n_cols)[:, None], np.arange(w2)[None, :])
        a01[:, :, :w] = self.a01
        self.ps, self.a01, self.width = ps, a01, w2
        for f in self.free:
            f[:0] = range(w2 - 1, w - 1, -1)

    # -- the counts ---------------------------------------------------------------------

    def build_counts(self) -> None:
        """The first count, over the terms inserted so far (then every change is logged).
        Each column's terms take its first places in term order."""
        n_cols = len(self.cols)
        lengths = [len(c) for c in self.cols]
        longest = max(lengths + [1])
        self.width = w = longest + max(self.MARGIN, longest // 8)
        tt = np.zeros((n_cols, w), dtype=np.int64)
        neg = np.zeros((n_cols, w), dtype=bool)
        for j, col in enumerate(self.cols):
            terms = sorted(col)
            tt[j, :len(terms)] = terms
            neg[j, :len(terms)] = [col[t] < 0 for t in terms]
            self.place[j] = {t: q for q, t in enumerate(terms)}
            self.free[j] = list(range(w - 1, len(terms) - 1, -1))
        used = np.arange(w)[None, :] < np.array(lengths)[:, None]
        self.a01 = np.empty((2, n_cols, w), dtype=np.int64)
        self.a01[:] = self._empty(np.arange(n_cols)[:, None], np.arange(w)[None, :])
        first = ((tt >> SH) << 42) - ((tt & 255) << 1) + 1024
        self.a01[0] = np.where(used, first + ~neg, self.a01[0])  # with a positive term
        self.a01[1] = np.where(used, first + neg, self.a01[1])  # with a negative one
        self.ps = np.zeros((n_cols, w, w), dtype=np.int32)
        self.built = True
        self.out, self.into, self.freed = [], {}, []
        self.gone, self.twice_i, self.twice_q = {}, [], []
        self._count_all(tt, neg, lengths)

    def _count_all(self, tt: np.ndarray, neg: np.ndarray, lengths: list[int]) -> None:
        """Count every pair of terms (each column's sorted, in its first places): the
        patterns seen twice get slots, in key order. Where the nodes and shifts are few
        (a 16-bit jet tagger's first count: 64 inputs, shifts within +-25), a bincount
        over (node, node, shift difference, signs) instead of np.unique's sort."""
        node, sh = tt >> SH, tt & 255
        n_nodes = int(node.max()) + 1 if tt.size else 1
        span = 2 * 2 * int(sh.max() if tt.size else 0) + 2  # (s2 - s1 + 512) << 1 | same
        low = 2 * (512 - (span // 4)) if span > 2 else 1024
        n_pairs = sum(n * (n - 1) // 2 for n in lengths)
        dense = n_nodes * n_nodes * span <= 4 * n_pairs + 16 * self.DENSE
        if dense:  # code = (n1 * n_nodes + n2) * span + the key's low bits - low
            c1 = node * (n_nodes * span) - 2 * sh + 1024 - low
            c2 = node * span + 2 * sh
            if n_nodes * n_nodes * span < 1 << 31:  # half the bytes to move
                c1, c2 = c1.astype(np.int32), c2.astype(np.int32)
        else:  # code = the key
            c1 = (node << 42) - 2 * sh + 1024
            c2 = (node << 20) + 2 * sh
        # per column (a block that stays in cache): the code of the pair (q, r), q < r
        blocks = []
        for j, n in enumerate(lengths):
            blk = c1[j, :n, None] + c2[j, None, :n] + (neg[j, :n, None] == neg[j, None, :n])
            blocks.append(blk)
        upper = {n: np.triu(np.ones((n, n), dtype=bool), 1) for n in set(lengths)}
        codes = np.concatenate([blk[upper[len(blk)]] for blk in blocks] + [c1[:0, 0]])
        if dense:
            n = np.bincount(codes, minlength=n_nodes * n_nodes * span)
            many = n > 1
            slot = np.where(many, np.cumsum(many), SINK).astype(np.int32)
            bins = np.flatnonzero(many)
            keys = (bins // span // n_nodes) << 42 | (bins // span % n_nodes) << 20 \
                | (bins % span + low)
            counts = n[bins]
            for j, blk in enumerate(blocks):
                s = slot[np.where(upper[len(blk)], blk, blk.T)]
                np.fill_diagonal(s, SINK)
                self.ps[j, :len(blk), :len(blk)] = s
        else:
            u, inv, n = np.unique(codes, return_inverse=True, return_counts=True)
            many = n > 1
            s = np.where(many, np.cumsum(many), SINK).astype(np.int32)[inv.reshape(-1)]
            keys, counts = u[many], n[many]
            at = 0
            for j, blk in enumerate(blocks):
                m = len(blk)
                half = np.zeros((m, m), dtype=np.int32)
                half[upper[m]] = s[at:at + m * (m - 1) // 2]
                at += m * (m - 1) // 2
                self.ps[j, :m, :m] = half + half.T
        self.slots = Slots(keys, counts)

    def update(self) -> None:
        """Count the change the log holds (and clear it). The terms put in must all be of
        one node newer than every other (an extraction's new node: each pattern is
        extracted once, so its node is always new)."""
        out, into, freed, gone = self.out, self.into, self.freed, self.gone
        twice_i, twice_q = self.twice_i, self.twice_q
        self.out, self.into, self.freed, self.gone = [], {}, [], {}
        self.twice_i, self.twice_q = [], []
        ps = self.ps
        n_cols = len(self.cols)
        # the places whose a01 changes: those emptied, then those of the terms put in
        aj = [j for j, _ in out]
        aq = [q for _, q in out]
        av = [-(1 << 62) + ((q * n_cols + j) << 10) for j, q in out]  # as _empty
        if out:
            # the pairs lost: each term out with the terms it was with (those put in
            # have SINK rows yet); two terms out of one column: their pair counted once
            oj, oq = np.array(out).T
            rows = ps[oj, oq]
            if twice_i:  # (index arrays: lists index 4x slower)
                tw = np.array((twice_i, twice_q))
                rows[tw[0], tw[1]] = SINK
            np.add.at(self.slots.kc, rows.reshape(-1), -1)
            ps[oj, oq] = SINK
            ps[oj, :, oq] = SINK
        av1 = av[:]
        if into:
            self._made(into, gone, aj, aq, av, av1)
        if aj:
            a = np.array((aj, aq, av, av1), dtype=np.int64)
            self.a01[:, a[0], a[1]] = a[2:]
        for j, q in freed:
            self.free[j].append(q)

    def _made(self, into: dict[int, dict[int, int]], gone: dict[int, list[int]],
              aj: list[int], aq: list[int], av: list[int], av1: list[int]) -> None:
        """Count the pairs made: each term in with the terms now (less the others put
        in: their places still read as empty, and less those taken out: read as empty
        here), and the pairs among the terms in of one column; the patterns seen twice
        are born. The places of the terms in and their a01 go to aj, aq, av, av1."""
        ij: list[int] = []
        iq: list[int] = []
        ig: list[int] = []
        sec: list[int] = []
        wj: list[int] = []
        wq1: list[int] = []
        wq2: list[int] = []
        wk: list[int] = []
        xi: list[int] = []  # (row, place) of a term taken out, in that row's column
        xq: list[int] = []
        node = -1
        for j, terms in into.items():  # (any order: the counts are the same)
            items = list(terms.items())
            place = self.place[j]
            places = [place[t] for t in terms]
            out = gone.get(j, ())
            for a, (t1, d1) in enumerate(items):
                node = t1 >> SH if node < 0 else node
                if t1 >> SH != node or node <= self.top:
                    raise ValueError("Columns.update: the terms put in are not all of "
                                     "one new node")
                if out:
                    xi.extend([len(ij)] * len(out))
                    xq.extend(out)
                ij.append(j)
                iq.append(places[a])
                ig.append(d1 < 0)
                sh = (t1 & 255) << 1
                sec.append(((t1 >> SH) << 20) + sh)  # its second part, and its first
                first = ((t1 >> SH) << 42) - sh + 1024
                aj.append(j)
                aq.append(places[a])
                av.append(first + (d1 > 0))
                av1.append(first + (d1 < 0))
                for b in range(a + 1, len(items)):
                    t2, d2 = items[b]
                    wj.append(j)
                    wq1.append(places[a])
                    wq2.append(places[b])
                    wk.append(_pair_key(t1, d1, t2, d2))
        self.top = node
        rows = np.array((ij, iq, ig, sec), dtype=np.int64)
        ja, qa = rows[0], rows[1]
        keys = self.a01[rows[2], ja] + rows[3][:, None]
        if xi:  # no key where a term was taken out: distinct negatives (odd: never
            x = np.array((xi, xq))
            keys[x[0], x[1]] = _OUT[:len(xi)] if len(xi) <= len(_OUT) \
                else -(1 << 62) - 1 - (np.arange(len(xi)) << 10)  # an empty place's)
        wk_ = np.array(wk, dtype=np.int64)
        # every key here is (node x, the new node, the low bits): with few x and shifts,
        # a bincount over (x, low bits) finds the ones seen twice, else a sort
        span = 4 * self.maxsh + 2
        lo = 1024 - 2 * self.maxsh
        bins = (node + 1) * span
        if bins <= 2 * keys.size + self.DENSE:
            code = np.where(keys >= 0, (keys >> 42) * span + (keys & _M20) - lo, bins)
            wcode = (wk_ >> 42) * span + (wk_ & _M20) - lo
            n = np.bincount(code.reshape(-1), minlength=bins + 1)
            if len(wcode):
                n += np.bincount(wcode, minlength=bins + 1)
            n[bins] = 0
            ub = np.flatnonzero(n > 1)
            if not len(ub):
                return
            table = np.zeros(bins + 1, dtype=np.int32)
            table[ub] = self.slots.born((ub // span) << 42 | node << 20 | (ub % span + lo), n[ub])
            m, sw = table[code], table[wcode]
        else:
            kf = keys.reshape(-1)  # (the empty places' never meet: each is distinct)
            sk = np.sort(np.concatenate([kf, wk_]) if wk else kf, kind="stable")
            dup = sk[1:] == sk[:-1]
            if not dup.any():
                return
            uv = sk[1:][dup]  # a key seen c times is here c - 1 times
            if len(uv) > 1 and not (uv[1:] != uv[:-1]).all():
                uv, c = np.unique(uv, return_counts=True)
                su = self.slots.born(uv, c + 1)
            else:
                su = self.slots.born(uv, np.full(len(uv), 2))
            pos = np.minimum(np.searchsorted(uv, keys), len(uv) - 1)
            m = np.where(uv[pos] == keys, su[pos], SINK)
            pos = np.minimum(np.searchsorted(uv, wk_), len(uv) - 1)
            sw = np.where(uv[pos] == wk_, su[pos], SINK)
        r, c = np.nonzero(m)  # the places put in had SINK rows and columns
        if len(r):
            s = m[r, c]
            rj, rq = ja[r], qa[r]
            self.ps[rj, rq, c] = s
            self.ps[rj, c, rq] = s
        if wk:
            wj_, w1, w2 = np.array(wj), np.array(wq1), np.array(wq2)
            self.ps[wj_, w1, w2] = sw
            self.ps[wj_, w2, w1] = sw

