"""Constant-matrix-vector multiplication (CMVM) as one shared adder graph: y = x @ W.

Why: a fully parallel Dense layer (R = 1) with constant weights needs no multiplier at all.
Every weight is a handful of canonical signed digits (CSD), so every output is a signed sum
of shifted inputs; many of those two-term sums (x_a ± x_b << k) recur across outputs, and
computing each once and sharing it is what makes distributed arithmetic small (da4ml,
arXiv 2507.04535, extracts two-term patterns greedily in the same way). Pure Python and
numpy: the circuit (hdl/units/dense.py) walks the graph this module returns; nothing here knows
Amaranth. The pattern counts step 2 reads are kept in hdl/plan/cmvm_counts.py.

The algorithm:
1. every column j of W becomes a set of terms (node, shift, sign) from the CSD digits of its
   weights, node = the input index (inputs are the graph's first nodes);
2. the most frequent two-term pattern across all columns, (a, b, b's shift relative to a's,
   relative sign), becomes a new node a + (±b << k) (if its adder depth stays within
   `max_depth`), and every non-overlapping occurrence is replaced by one term of that node;
   repeat while a pattern occurs at least twice (ties: the smallest key, so the graph is
   deterministic);
3. what is left of each column (plus its constant, the bias) is summed shallowest-first
   (a Huffman tree on adder depth; ties: the lowest top bit first), a final negation where
   the sum came out negative.

Exact by construction: every node is an exact integer combination of the inputs (ranges
tracked exactly, so widths are exact), and `evaluate` proves it on any input. A node wider
than `cap` bits may be kept modulo 2**cap (two's complement): the sums are then exact
modulo 2**cap, which is exact for any result that fits in `cap` signed bits (Dense: the
accumulator width + 1).

Cost (`AdderGraph.cost`): an adder of a node v = (a << sa) ± (b << sb), min(sa, sb) = 0,
is a carry chain over the bits of v above max(sa, sb) (the lower bits are the other operand's
bits, wires); yosys maps a carry chain of n bits to ceil(n / 2) CCU2C on ECP5 and n
SB_LUT4 + n SB_CARRY on iCE40, less the chains' ends (checked in tests/hdl/plan/test_cmvm.py
against synth_ecp5 and synth_ice40 on a small graph).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from .cmvm_counts import SH, Columns, Key, unkey


def csd(c: int) -> list[tuple[int, int]]:
    """Canonical signed digits of c: [(+1 or -1, shift)], c == sum(d << k)."""
    out, k = [], 0
    c = int(c)
    while c:
        if c & 1:
            d = 2 - (c & 3)
            out.append((d, k))
            c -= d
        c >>= 1
        k += 1
    return out


def _csd_columns(w: np.ndarray, lo: list[int], hi: list[int]) -> list[dict[int, int]]:
    """Per column of w (|w| < 2**60) its terms {input << SH | shift: sign} of the weights'
    csd digits, as `csd` gives them (the non-adjacent form: x + x >> 1 xor x >> 1 marks
    every digit, its sign by which of the two has the bit), no term of an input that is
    always 0. In numpy: a 16-bit jet tagger's 2,048 weights one by one took 10 ms."""
    n_in, n_out = w.shape
    zero = np.array([a == b == 0 for a, b in zip(lo, hi, strict=True)], dtype=bool)
    x = np.where(zero[:, None], 0, w).astype(np.int64)
    a = np.abs(x)
    half = a >> 1
    carry = half ^ (a + half)
    plus, minus = (a + half) & carry, half & carry
    sign = np.where(x < 0, -1, 1)
    out: list[dict[int, int]] = [{} for _ in range(n_out)]
    parts = []
    for k in range(int((plus | minus).max()).bit_length() if x.size else 0):
        for bits, d in ((plus, 1), (minus, -1)):
            i, j = np.nonzero((bits >> k) & 1)
            parts.append((j, i, np.full(len(i), k), d * sign[i, j]))
    if parts:
        j, i, k, d = (np.concatenate(p) for p in zip(*parts, strict=True))
        order = np.lexsort((k, i, j))
        j, t, d = j[order], (i[order] << SH) | k[order], d[order]
        cuts = np.searchsorted(j, np.arange(n_out + 1))
        for c in range(n_out):
            out[c] = dict(zip(t[cuts[c]:cuts[c + 1]].tolist(), d[cuts[c]:cuts[c + 1]].tolist(),
                              strict=True))
    return out


def signed_width(lo: int, hi: int) -> int:
    """Bits of the smallest two's complement type holding [lo, hi]."""
    return max(1, max(hi.bit_length(), (-lo - 1).bit_length() if lo < 0 else 0) + 1)


def value_width(lo: int, hi: int) -> tuple[int, bool]:
    """(width, signed) of the smallest type holding [lo, hi]: unsigned when lo >= 0."""
    if lo >= 0:
        return max(1, hi.bit_length()), False
    return signed_width(lo, hi), True


@dataclass(frozen=True)
class Node:
    """One value of the graph. kind "in": input `a`; "const": the integer `c`; "add":
    (v[a] << sa) + sign * (v[b] << sb) with min(sa, sb) == 0; "neg": -v[a]."""

    kind: str
    a: int = -1
    b: int = -1
    sa: int = 0
    sb: int = 0
    sign: int = 1
    c: int = 0
    lo: int = 0
    hi: int = 0
    depth: int = 0

    @property
    def width(self) -> int:
        return value_width(self.lo, self.hi)[0]


@dataclass
class AdderGraph:
    """The graph: nodes (inputs first), and per output (node, shift) or None for zero:
    y[j] = v[node] << shift."""

    n_in: int
    nodes: list[Node]
    outputs: list[tuple[int, int] | None]
    cap: int | None = None
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def depth(self) -> int:
        return max([self.nodes[o[0]].depth for o in self.outputs if o is not None] + [0])

    def adders(self) -> list[int]:
        """Indices of the nodes that are carry chains (adds and negations)."""
        return [i for i, n in enumerate(self.nodes) if n.kind in ("add", "neg")]

    def node_width(self, i: int) -> int:
        w = self.nodes[i].width
        return min(w, self.cap) if self.cap else w

    def chain_bits(self, i: int) -> int:
        """Carry-chain length of node i (0 for inputs and constants)."""
        n = self.nodes[i]
        if n.kind == "neg":
            return self.node_width(i)
        if n.kind != "add":
            return 0
        low = max(n.sa, n.sb)
        other = self.nodes[n.b if n.sb >= n.sa else n.a]
        if other.kind == "const":  # a constant's trailing zeros pass the other bits too
            low += (other.c & -other.c).bit_length() - 1 if other.c else 0
        return max(1, self.node_width(i) - low)

    def cost(self, family: str = "ecp5") -> dict[str, int]:
        """Logic of the adders (no registers): ECP5 {"ccu2c", "lut4"}, iCE40 {"lut4",
        "carry"}. Every bit of a carry chain is about half a CCU2C on ECP5 (a 2-bit slice),
        a LUT4 and an SB_CARRY on iCE40 (ECP5_*, ICE40_*: per chain bit, measured on an
        8x6 graph of 674 chain bits, tests/hdl/plan/test_cmvm.py: synth_ecp5 364 CCU2C and no
        LUT4, synth_ice40 626 SB_CARRY + 852 SB_LUT4). This holds as the circuit keeps
        every node (hdl/units/dense.py); merged into $macc cells, yosys maps chains of adds as
        carry-save trees of LUT4s (the same graph: 300 CCU2C + 291 LUT4)."""
        bits = [self.chain_bits(i) for i in self.adders()]
        if family == "ice40":
            n = sum(bits)
            return {"lut4": round(n * ICE40_LUT), "carry": round(n * ICE40_CARRY),
                    "adders": len(bits)}
        n = sum(bits)
        return {"ccu2c": round(n * ECP5_CCU2C), "lut4": round(n * ECP5_LUT),
                "adders": len(bits)}

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        """y for a batch x (n, n_in) of integers, exactly (Python integers where int64
        could overflow)."""
        x = np.asarray(x)
        big = max([max(abs(n.lo), abs(n.hi)) for n in self.nodes] + [1]).bit_length() > 60
        big = big or any(o is not None and o[1] > 0 for o in self.outputs) and \
            max(abs(self.nodes[o[0]].hi) << o[1] for o in self.outputs if o) >= 1 << 62
        dt = object if big else np.int64
        x = x.astype(dt)
        v: list[np.ndarray] = []
        for n in self.nodes:
            if n.kind == "in":
                v.append(x[:, n.a])
            elif n.kind == "const":
                v.append(np.full(len(x), n.c, dtype=dt))
            elif n.kind == "neg":
                v.append(-v[n.a])
            else:
                v.append((v[n.a] << n.sa) + n.sign * (v[n.b] << n.sb))
        out = np.zeros((len(x), len(self.outputs)), dtype=dt)
        for j, o in enumerate(self.outputs):
            if o is not None:
                out[:, j] = v[o[0]] << o[1]
        return out


class _Builder:
    """Nodes with exact ranges and depths; identical nodes are made once."""

    def __init__(self, lo: list[int], hi: list[int]):
        self.lo, self.hi = [int(v) for v in lo], [int(v) for v in hi]
        self.nodes = [Node("in", a=i, lo=self.lo[i], hi=self.hi[i]) for i in range(len(lo))]
        # each node as a linear combination of the inputs {input: coefficient} (+ constant):
        # the inputs are independent, so its range (and width) is tight
        self.lin: list[tuple[dict[int, int], int]] = [({i: 1}, 0) for i in range(len(lo))]
        self.memo: dict[tuple, int] = {}
        one = set(zip(self.lo, self.hi, strict=True))
        self.one = one.pop() if len(one) == 1 else None  # the inputs' range, if one

    def _range(self, lin: dict[int, int], c: int) -> tuple[int, int]:
        if self.one is not None:  # every input in [a, b]: a sum of positives and one of
            a, b = self.one  # negatives, in C (sum, map)
            k = lin.values()
            total, size = sum(k), sum(map(abs, k))
            pos, neg = (size + total) >> 1, (total - size) >> 1
            return c + a * pos + b * neg, c + b * pos + a * neg
        lo = hi = c
        ilo, ihi = self.lo, self.hi
        for i, k in lin.items():
            if k > 0:
                lo += k * ilo[i]
                hi += k * ihi[i]
            else:
                lo += k * ihi[i]
                hi += k * ilo[i]
        return lo, hi

    def const(self, c: int) -> int:
        key = ("c", c)
        if key not in self.memo:
            self.memo[key] = len(self.nodes)
            self.nodes.append(Node("const", c=c, lo=c, hi=c))
            self.lin.append(({}, c))
        return self.memo[key]

    def add(self, a: int, sa: int, b: int, sb: int, sign: int) -> int:
        key = ("a", a, sa, b, sb, sign)
        done = self.memo.get(key)
        if done is not None:
            return done
        na, nb = self.nodes[a], self.nodes[b]
        (la, ca), (lb, cb) = self.lin[a], self.lin[b]
        lin = {i: k << sa for i, k in la.items()} if sa else dict(la)
        get = lin.get
        for i, k in lb.items():
            v = get(i, 0) + sign * (k << sb)
            if v:
                lin[i] = v
            else:
                del lin[i]
        c = (ca << sa) + sign * (cb << sb)
        lo, hi = self._range(lin, c)
        node = Node("add", a=a, b=b, sa=sa, sb=sb, sign=sign, lo=lo, hi=hi,
                    depth=max(na.depth, nb.depth) + 1)
        self.memo[key] = len(self.nodes)
        self.nodes.append(node)
        self.lin.append((lin, c))
        return self.memo[key]

    def neg(self, a: int) -> int:
        key = ("n", a)
        if key not in self.memo:
            n = self.nodes[a]
            self.memo[key] = len(self.nodes)
            self.nodes.append(Node("neg", a=a, lo=-n.hi, hi=-n.lo, depth=n.depth + 1))
            la, ca = self.lin[a]
            self.lin.append(({i: -k for i, k in la.items()}, -ca))
        return self.memo[key]

    def pair(self, t1: tuple[int, int, int], t2: tuple[int, int, int]
             ) -> tuple[int, int, int]:
        """The node for the two terms (node, shift, sign) and the term that replaces them."""
        (n1, s1, d1), (n2, s2, d2) = t1, t2
        m = min(s1, s2)
        return self.add(n1, s1 - m, n2, s2 - m, d1 * d2), m, d1


ICE40_CARRY, ICE40_LUT = 0.93, 1.26  # per carry-chain bit (see AdderGraph.cost)
ECP5_CCU2C, ECP5_LUT = 0.54, 0.0


def optimize(w: np.ndarray, lo: list[int] | np.ndarray, hi: list[int] | np.ndarray,
             bias: list[int] | None = None, max_depth: int | None = None,
             cap: int | None = None, cse: bool = True) -> AdderGraph:
    """The adder graph of y = x @ w (+ bias) for integer inputs x[i] in [lo[i], hi[i]].

    `max_depth`: no shared node deeper than this (None: the depth of a plain adder tree over
    the longest column, plus one); `cap`: widths kept modulo 2**cap (see the module's
    docstring); `cse=False`: no sharing, each column its own tree (the baseline)."""
    w = np.asarray(w, dtype=object if np.asarray(w).dtype == object else np.int64)
    n_in, n_out = w.shape
    bld = _Builder([int(v) for v in lo], [int(v) for v in hi])
    cols = Columns(n_out)
    if w.dtype != object and (not w.size or int(np.abs(w).max()) < 1 << 60):
        for j, terms in enumerate(_csd_columns(w, bld.lo, bld.hi)):
            cols.fill(j, terms)
    else:
        for j in range(n_out):
            for i in range(n_in):
                c = int(w[i, j])
                if c and hi[i] == lo[i] == 0:
                    continue
                for d, k in csd(c):
                    if k > 255:
                        raise ValueError(f"weight {c} has digits beyond 2**255")
                    cols.insert(j, (i << SH) | k, d)
    digits = sum(len(c) for c in cols.cols)
    longest = max([len(c) for c in cols.cols] + [1])
    if max_depth is None:
        max_depth = max(1, math.ceil(math.log2(max(2, longest)))) + 1
    extracted = 0
    if cse:
        cols.build_counts()
        nodes = bld.nodes

        def ok(k: Key) -> bool:
            a, b, _, _ = unkey(k)
            return max(nodes[a].depth, nodes[b].depth) + 1 <= max_depth

        while True:
            k = cols.slots.best(ok)
            if k is None:
                break
            a, b, ds, sg = unkey(k)
            node = -1  # every occurrence makes the same node: made at the first
            for j in sorted(cols.where[a] & cols.where[b]):
                col = cols.cols[j]
                for s in sorted(cols.idx[j].get(a, ())):
                    s2 = s + ds
                    if not 0 <= s2 < 256:
                        continue
                    t1, t2 = (a << SH) | s, (b << SH) | s2
                    d1, d2 = col.get(t1), col.get(t2)
                    if d1 is None or d2 is None or t1 == t2 or d1 * d2 != sg:
                        continue
                    if node < 0:
                        node = bld.pair((a, s, d1), (b, s2, d2))[0]
                    cols.replace(j, t1, t2, (node << SH) | min(s, s2), d1)
            extracted += 1
            if node < 0:  # only overlapping occurrences were counted: drop the pattern
                cols.slots.drop(k)
            cols.update()
    outputs: list[tuple[int, int] | None] = []
    for j, col in enumerate(cols.cols):
        terms = [(t >> SH, t & 255, d) for t, d in sorted(col.items())]
        if bias is not None and int(bias[j]):
            b = int(bias[j])
            tz = (b & -b).bit_length() - 1
            terms.append((bld.const(b >> tz), tz, 1))
        outputs.append(_sum(bld, terms))
    g = AdderGraph(n_in, bld.nodes, outputs, cap)
    g.stats = {"digits": digits, "patterns": extracted, "adders": len(g.adders()),
               "depth": g.depth}
    return g


def _sum(bld: _Builder, terms: list[tuple[int, int, int]]) -> tuple[int, int] | None:
    """Sum (node, shift, sign) terms shallowest first; among the shallowest, the two whose
    top bits (width + shift) are lowest first: the depth of the sum is that of the Huffman
    tree on depth whatever the tie-break, and pairing narrow terms keeps the carry chains
    of the wide ones short (chain bits of the jet taggers' graphs -1.5 % (qkeras) and
    -2.7 % (jet16 fixed<16,6>) against ties by node number). None for an empty sum."""
    if not terms:
        return None
    nodes = bld.nodes

    widths: dict[int, int] = {}

    def key(n: int, s: int, d: int) -> tuple[int, int, int, int, int]:
        node = nodes[n]
        w = widths.get(n)
        if w is None:
            w = widths[n] = node.width
        return node.depth, w + s, n, s, d

    heap = [key(*t) for t in terms]
    heapq.heapify(heap)
    while len(heap) > 1:
        _, _, n1, s1, d1 = heapq.heappop(heap)
        _, _, n2, s2, d2 = heapq.heappop(heap)
        if d1 < 0 and d2 > 0:  # a - b, never -a + b: no negation needed
            n1, s1, d1, n2, s2, d2 = n2, s2, d2, n1, s1, d1
        node, m, d = bld.pair((n1, s1, d1), (n2, s2, d2))
        heapq.heappush(heap, key(node, m, d))
    _, _, n, s, d = heap[0]
    if d < 0:
        n = bld.neg(n)
    return n, s


def clustered(w: np.ndarray, lo: list[int], hi: list[int], bias: list[int] | None,
              cap: int | None, size: int) -> tuple[AdderGraph, list[int]]:
    """y = x @ w as one graph per cluster of `size` consecutive output columns (each its own
    `optimize`, nothing shared across clusters), joined: the inputs first, then each
    cluster's nodes; and each node's cluster (inputs: 0).

    Why: a graph shared by every column couples every input and every shared node to adders
    all over the die; placed on an ECP5-85k, the qkeras jet tagger's second layer alone (64 x
    32, one graph) had routes of 6-9 ns in a 6.7 ns cycle. A cluster's adders read only that
    cluster's nodes and its own copy of the inputs (hdl/units/dense_r1.DenseGraph), so they
    can sit together; the price is the sharing across clusters (more adders)."""
    n_in, n_out = w.shape
    nodes: list[Node] = [Node("in", a=i, lo=int(lo[i]), hi=int(hi[i])) for i in range(n_in)]
    cluster = [0] * n_in
    outputs: list[tuple[int, int] | None] = []
    for c, j0 in enumerate(range(0, n_out, size)):
        cols = list(range(j0, min(n_out, j0 + size)))
        g = optimize(w[:, cols], lo, hi, None if bias is None else [bias[j] for j in cols],
                     cap=cap)
        base = len(nodes) - n_in
        at = [i if i < n_in else i + base for i in range(len(g.nodes))]
        for nd in g.nodes[n_in:]:
            nodes.append(Node(nd.kind, a=at[nd.a] if nd.a >= 0 else -1,
                              b=at[nd.b] if nd.b >= 0 else -1, sa=nd.sa, sb=nd.sb,
                              sign=nd.sign, c=nd.c, lo=nd.lo, hi=nd.hi, depth=nd.depth))
            cluster.append(c)
        outputs += [None if o is None else (at[o[0]], o[1]) for o in g.outputs]
    out = AdderGraph(n_in, nodes, outputs, cap)
    out.stats = {"adders": len(out.adders()), "depth": out.depth, "clusters": cluster[-1] + 1}
    return out, cluster
