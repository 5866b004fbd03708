"""The fully parallel Dense circuits (R = 1; the numbers and the schedule are in
hdl/units/dense.py's docstring): `DenseParallel` (a product, shift or shift-add leaves per
weight, then the adder tree) and `DenseGraph` (`--strategy da`: one shared adder graph,
hdl/plan/cmvm.py). Apart from dense.py, which keeps what every Dense circuit
shares (the numbers, the factory, the tail, the R = 1 elaboration through an ops writer),
because these two are the plans of the R = 1 cores: which terms, which graph, where the
registers go."""

from __future__ import annotations

import numpy as np
from amaranth.hdl import Module

from ...graphs.types import Rounding
from ..plan import cmvm
from ..plan.cmvm import csd
from ..plan.schedule import plan_stages
from .arith import tree_levels
from .dense import Dense, Ops


class DenseParallel(Dense, kind="parallel"):
    """R = 1, products: shift-add leaves, shifts or constant products, the adder tree."""

    def _plan(self, w: np.ndarray, rq: list[int]) -> None:
        """R = 1: which weights are multipliers, shifts or shift-add leaves; the tree depth
        and where its registers go."""
        L = self.adder_levels
        nz = w != 0
        p2 = nz & ((np.abs(w) & (np.abs(w) - 1)) == 0)
        # constants with few signed digits become shift-add leaves of the adder tree
        ndig = np.vectorize(lambda v: len(csd(v)), otypes=[np.int64])(w)
        sa = nz & ~p2 & (ndig <= self.pipe.csd_digits)
        self.shift_add = sa
        self.multipliers, self.shifts = int((nz & ~p2 & ~sa).sum()), int(p2.sum())
        leaves = np.where(sa, ndig, nz.astype(np.int64))
        terms = [int(leaves[:, j].sum()) + (self.bias[j] != 0) for j in range(self.n_out)]
        self.levels = max([tree_levels(t) for t in terms] + [0])
        mw = self.pipe.mul_levels
        if mw is None:
            # a negated leaf (-x << k) is a carry chain of its own: one level
            neg = bool(((w < 0) & (p2 | sa)).any())
            mw = L if self.multipliers else int(neg)
        self.stage_regs = plan_stages([mw] + [1] * self.levels + rq, L)
        self.latency = sum(self.stage_regs) + 1

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "shift_add": int(self.shift_add.sum())}

    def _core_build(self, ops: Ops, x: list[object]) -> list[object]:
        """R = 1, products: one term per non-zero weight (shift-add leaves, shifts or
        constant products) and the bias, the product registers, the adder tree."""
        cols: list[list[object]] = []
        nb: list[int] = []  # per column, 1 where its first term is the bias (not registered)
        for j in range(self.n_out):
            # the bias first: level 0 adds it to a product, so it is never registered (as in
            # DenseGraph: registers of equal constants are merged by yosys across layers into
            # one flip-flop whose net crosses the die)
            terms = [self._wrap(ops, ops.const(self.bias[j]))] if self.bias[j] else []
            nb.append(len(terms))
            for i in range(self.n_in):
                if self.shift_add[i, j]:
                    for d, k in csd(int(self.w[i, j])):
                        v = ops.shl(x[i], k + self.p_shift)
                        terms.append(self._wrap(ops, v if d > 0 else ops.neg(v)))
                    continue
                p = self._const_mul(ops, x[i], int(self.w[i, j]))
                if p is not None:
                    terms.append(self._wrap(ops, ops.shl(p, self.p_shift)))
            cols.append(terms)
        flags = self.stage_regs
        if flags[0]:  # the products alone in their stage
            flat = [v for c, b in zip(cols, nb, strict=True) for v in c[b:]]
            it = iter(ops.regs(flat, "p"))
            cols = [c[:b] + [next(it) for _ in c[b:]] for c, b in zip(cols, nb, strict=True)]
        fixed = frozenset(j for j, c in enumerate(cols) if len(c) == nb[j])  # no product
        sums, _ = self._tree(ops, cols, flags[1:1 + self.levels], [], fixed)
        return sums

    def _tail_reg(self) -> bool:
        return self.stage_regs[1 + self.levels]

    def elaborate(self, platform: object) -> Module:
        return self._elaborate_r1()


class DenseGraph(Dense, kind="graph"):
    """R = 1, strategy "da": one shared adder graph (hdl/plan/cmvm.py), no product; or, with
    the schedule's `graph_cluster` ("fmax"), one graph per cluster of that many output
    columns, each reading its own registered copy of the inputs (cmvm.clustered: what is
    shared stays within a cluster, so its adders can be placed together)."""

    kind_strategy = "da"

    def _plan(self, w: np.ndarray, rq: list[int]) -> None:
        """R = 1 as one shared adder graph (hdl/plan/cmvm.py): the weights pre-shifted to the
        sum's binary point, the bias (plus the rounding's half for RND: one adder fewer per
        output) as each column's constant, widths modulo 2**M. A register after every
        adder level where the schedule puts one (plan_stages: each level weighs 1)."""
        tx = self.tx
        lo = -(1 << (tx.width - 1)) if tx.signed else 0  # every code the port can carry
        hi = (1 << (tx.width - (1 if tx.signed else 0))) - 1
        s = self.frac - self.tout.frac
        self.round_trn = self.tout.rounding == Rounding.RND and s > 0
        bias = [b + ((1 << (s - 1)) if self.round_trn else 0) for b in self.bias]
        wq = np.asarray(w, dtype=np.int64) << self.p_shift
        size = self.pipe.graph_cluster
        if size and self.n_out > size:
            # one graph per cluster of `size` output columns, each with its own registered copy
            # of the inputs (cmvm.clustered: no node shared across clusters)
            self.graph, self.cluster_of = cmvm.clustered(wq, [lo] * self.n_in, [hi] * self.n_in,
                                                         bias, self.mod, size)
            self.clusters = max(self.cluster_of) + 1
        else:
            self.graph = cmvm.optimize(wq, [lo] * self.n_in, [hi] * self.n_in, bias,
                                       cap=self.mod)
            self.cluster_of, self.clusters = [], 0
        self.multipliers = self.shifts = 0
        self.levels = self.graph.depth
        if s <= 0 or self.round_trn or self.tout.rounding == Rounding.TRN:
            # the rounding is wiring (a bit select): no stage of its own ("fmax" gave it one:
            # a cycle per layer that held no logic); the overflow/ReLU (reductions of the
            # high bits, a multiplexer) weighs one adder level
            rq = [0, min(1, rq[1])]
        else:
            # rounding (RND_CONV: a compare of the dropped bits and an increment) and the
            # overflow/ReLU (reductions of the high bits, a multiplexer) share one stage:
            # a few LUT levels and one short carry chain, less than two adder levels (the
            # graph's 2-level stages set the clock: 12.8 ns on the qkeras jet tagger, 11 of
            # them routing)
            rq = [rq[0], 0]
        copy = [True] if self.clusters else []  # the inputs' copies: a stage of their own
        self.stage_regs = copy + plan_stages([1] * self.levels + rq, self.adder_levels)
        self.latency = sum(self.stage_regs) + 1

    def describe(self) -> dict[str, object]:
        return {**super().describe(),
                "adder_graph": {"adders": len(self.graph.adders()), "depth": self.levels,
                                **({"clusters": self.clusters} if self.clusters else {}),
                                "chain_bits": sum(self.graph.chain_bits(i)
                                                  for i in self.graph.adders())}}

    def _core_build(self, ops: Ops, x: list[object]) -> list[object]:
        """The adder graph, node by node (one signal each, its exact width or M bits), each
        value delayed by registers to the stage of every level that reads it."""
        g, flags = self.graph, self.stage_regs
        k = 1 if self.clusters else 0  # the copy stage first
        pre = [0]
        for f in flags[k:]:
            pre.append(pre[-1] + int(f))
        pre = [p + k for p in pre]
        vals: dict[tuple[int, int], object] = {}  # (node, stage) -> value in that stage
        copies: list[list[object]] = []
        if self.clusters:
            # every cluster reads its own registered copy of the inputs (names *_xdup*: the
            # FPGA flow's prep.ys keeps them apart, hdl/flow/yosys.py), placed by its adders
            copies = [ops.regs(x, f"c{c}_xdup") for c in range(self.clusters)]

        def at(i: int, stage: int) -> object:
            v = vals.get((i, stage))
            if v is None:
                if g.nodes[i].kind == "const":
                    # the same in every stage: no register (registers of equal constants,
                    # merged by yosys across layers, became one flip-flop whose net crossed
                    # the die: the qkeras jet tagger's critical path, 14 ns of routing)
                    return vals[(i, 0)]
                v = ops.regs([at(i, stage - 1)], f"n{i}s{stage}_")[0]
                vals[(i, stage)] = v
            return v

        def src(j: int, stage: int, c: int) -> object:
            """Node j in `stage` as cluster c reads it (its copy of an input)."""
            if not copies or g.nodes[j].kind != "in":
                return at(j, stage)
            key = (-1 - j - c * g.n_in, stage)
            v = vals.get(key)
            if v is None:
                v = copies[c][g.nodes[j].a] if stage == 1 else \
                    ops.regs([src(j, stage - 1, c)], f"c{c}i{j}s{stage}_")[0]
                vals[key] = v
            return v

        for i, nd in enumerate(g.nodes):
            home = pre[nd.depth - 1] if nd.depth else 0
            if nd.kind == "in":
                vals[(i, 0)] = x[nd.a]
                continue
            if nd.kind == "const":
                vals[(i, 0)] = ops.const(nd.c)
                continue
            width = g.node_width(i)
            # keep: yosys would otherwise merge chains of adds into one $macc, mapped as a
            # carry-save tree of LUT4s (a + b + c on ECP5: 9 CCU2C + 97 LUT4 merged,
            # 27 CCU2C kept); each node stays its own carry chain
            c = self.cluster_of[i] if copies else 0
            a = src(nd.a, home, c)
            if nd.kind == "neg":
                v = ops.neg(a)
            else:
                a, b = ops.shl(a, nd.sa), ops.shl(src(nd.b, home, c), nd.sb)
                v = ops.add(a, b) if nd.sign > 0 else ops.sub(a, b)
            vals[(i, home)] = ops.node(f"n{i}", width, nd.lo < 0 or width < nd.width, v,
                                       keep=True)
        stage = pre[self.levels]
        return [ops.const(0, 1, False) if o is None else ops.shl(at(o[0], stage), o[1])
                for o in g.outputs]

    def _rounding(self) -> Rounding:
        return Rounding.TRN if self.round_trn else self.tout.rounding

    def _tail_reg(self) -> bool:
        return self.stage_regs[self.levels + (1 if self.clusters else 0)]

    def elaborate(self, platform: object) -> Module:
        return self._elaborate_r1()
