"""The stages of a folded Dense (R > 1; the schedule and numbers are in hdl/units/dense.py's
docstring): the input rotation and step counters, the coefficient ROM, the operand and
product registers, the accumulator and the per-group output registers. Apart from
dense.py because the fully parallel cores (and their text twins, hdl/units/netlist_text.py)
are a different circuit; `Dense._folded` strings these stages together."""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib.memory import Memory

from ...graphs.types import FixedType
from ..plan.fold import Fold
from ..plan.schedule import Schedule
from .arith import const_mul, fit, shape_of, tree_levels

# bits of a coefficient slice in a split logic product (folded: "fmax" products of logic
# width, lean lanes the plan left without a DSP)
SPLIT_SLICE = 2


class FoldStages:
    """Mixed into DenseFolded: every method reads the plan DenseFolded._plan made (declared
    here) and the Dense/Unit helpers (regs, inputs, drive_y, _wrap, _requant …)."""

    # the fold's plan (DenseFolded._plan)
    fold: Fold
    lanes: dict[tuple[int, int], tuple[list[int], str]]  # (lane, out) -> (coefficients, kind)
    cw: int  # coefficient width in the ROM
    rom_width: int
    rom_depth: int
    rom_block: bool
    rom_reg: bool  # lean: the block RAM's read registered once more (Schedule.bram_reg)
    split_k: int  # coefficient slice width of split logic products (0: not split)
    mul_keys: list[tuple[int, int]]  # the multiplier lanes, sorted (their order in the ROM)
    soft_keys: frozenset[tuple[int, int]]  # lanes the plan left without a DSP, in slices
    slice_k: int  # their slice width (DenseFolded._plan)
    slice_terms: bool  # "fmax": the slices go to the adder tree as terms of their own
    prod_reg: bool
    rq_flags: list[bool]
    levels: int  # the adder tree's per output lane
    # the layer (Dense.__init__) and the ports (Unit)
    dsp_lanes: int | None  # multiplier lanes the circuit plan gave a DSP (None: any)
    tx: FixedType
    tout: FixedType
    n_in: int
    n_out: int
    mod: int
    p_shift: int
    bias: list[int]
    pipe: Schedule
    en: Signal
    start: Signal
    x_held: bool  # Dense.hold_input
    window_ports: tuple[Signal, list[Signal]] | None  # DenseFolded.read_window

    def _plan_slices(self, has_mul: bool) -> int:
        """Which multiplier lanes are built as coefficient slices, and how (part of
        DenseFolded._plan, after the fold, the lanes and the ROM): sets mul_keys, split_k,
        soft_keys, slice_terms, slice_k (and the tree's levels when the slices are its
        terms). Returns the adder levels the slices' sum adds before the tree (lean)."""
        f = self.fold
        self.mul_keys = mul_keys = sorted(k for k, v in self.lanes.items() if v[1] == "mul")
        # products the device builds in logic, with a second product register to spare
        # ("fmax"): split over 2-bit slices of the coefficient (dense_fold._fold_products:
        # each x * slice is one adder, its AND in the carry chain's own LUTs; the slices are
        # summed in the next stage)
        soft = self.pipe.soft_width
        self.split_k = (SPLIT_SLICE if has_mul and not self.pipe.lean
                        and self.cw >= 2 * SPLIT_SLICE and max(self.cw, self.tx.width) <= soft
                        else 0)
        # lanes the plan left without a DSP (CircuitPlan.dsp_lanes), built as registered
        # products of coefficient slices rather than `$mul`s yosys would make one deep array
        # multiplier of: lean with the product alone in its stage ("area"), summed in the
        # next stage before the tree (the same latency); "fmax", every slice a term of the
        # output's adder tree, which grows by the levels it needs (the slices of a 16-bit
        # coefficient: 8 terms, 3 levels, 2 a stage)
        planned = (self.dsp_lanes is not None and not self.split_k
                   and self.cw >= 2 * SPLIT_SLICE and (self.rom_reg or not self.pipe.lean))
        self.soft_keys: frozenset[tuple[int, int]] = frozenset(
            mul_keys[self.dsp_lanes:] if planned else [])
        self.slice_terms = bool(self.soft_keys) and not self.pipe.lean
        # lean: the slice width that balances the two stages: a k-bit slice's product is
        # k - 1 adders, the next stage sums ceil(cw / k) slices, the tree and the
        # accumulator (a 6-bit coefficient: 3-bit slices, 2 adders a stage; 2-bit ones made
        # it 1 and 3); "fmax": 2-bit slices, one adder within its 2-level stage
        self.slice_k = SPLIT_SLICE if self.slice_terms else min(
            range(SPLIT_SLICE, self.cw // 2 + 1),
            key=lambda k: (max(k - 1, -(-self.cw // k) + self.levels), -k),
            default=SPLIT_SLICE)
        n_slices = -(-self.cw // self.slice_k)
        if self.slice_terms:  # the output columns' adder trees take every slice
            self.levels = max(tree_levels(sum(n_slices if (t, j) in self.soft_keys else 1
                                              for t in range(f.c) if (t, j) in self.lanes))
                              for j in range(f.m))
        return n_slices - 1 if self.soft_keys and not self.slice_terms else 0

    def _fold_issue(self, m: Module) -> tuple[list[Signal], Signal, Signal, Signal, Signal]:
        """The input rotation and the step counters (issue stage): the rotating register,
        chunk k, group g, step s, run."""
        f = self.fold
        x = self.inputs()
        n = f.r_in * f.c
        en = self.en
        k = Signal(range(max(2, f.r_in)), name="k")
        g = Signal(range(max(2, f.r_out)), name="g")
        s = Signal(range(max(2, f.steps)), name="s")
        run = Signal(name="run")
        ports = self.window_ports
        if ports is not None:
            # the window is a memory (WindowUnit, DenseFolded.read_window): chunk `sel` is
            # asked for this cycle and arrives the next, read and selected by the window
            ksel, sr = ports
            nxt = Signal(range(max(2, f.r_in)), name="k_next")
            sel = Mux(self.start, 0, nxt)
            m.d.comb += ksel.eq(sel)
            with m.If(en):
                m.d.sync += nxt.eq(Mux(sel == f.r_in - 1, 0, sel + 1))
        elif self.x_held and f.r_in > 1:
            # the holder keeps x as it was at start for ii >= steps enabled cycles
            # (WindowUnit: its window register): chunk k is selected from x a cycle ahead
            # into c registers, rather than x copied into a ring of n (an 8-bit ResNet-8's
            # 3x3x64 windows: 4,608 flip-flops and a load mux per bit, per convolution)
            sr = [Signal(shape_of(self.tx), name=f"xk{i}", reset_less=True)
                  for i in range(f.c)]
            nxt = Signal(range(max(2, f.r_in)), name="k_next")
            sel = Mux(self.start, 0, nxt)
            with m.If(en):
                m.d.sync += nxt.eq(Mux(sel == f.r_in - 1, 0, sel + 1))
                with m.Switch(sel):
                    for ch in range(f.r_in):
                        with m.Case(ch):
                            m.d.sync += [sr[i].eq(x[ch * f.c + i]) for i in range(f.c)
                                         if ch * f.c + i < self.n_in]
                            m.d.sync += [sr[i].eq(0) for i in range(f.c)
                                         if ch * f.c + i >= self.n_in]
        else:
            sr = [Signal(shape_of(self.tx), name=f"sr{i}", reset_less=True)
                  for i in range(n)]
            with m.If(en):
                with m.If(self.start):
                    m.d.sync += [sr[i].eq(x[i] if i < self.n_in else 0) for i in range(n)]
                with m.Else():
                    m.d.sync += [sr[i].eq(sr[(i + f.c) % n]) for i in range(n)]
        with m.If(en):
            with m.If(self.start):
                m.d.sync += [k.eq(0), g.eq(0), s.eq(0), run.eq(1)]
            with m.Else():
                with m.If(run):
                    m.d.sync += [k.eq(k + 1), s.eq(s + 1)]
                    with m.If(k == f.r_in - 1):
                        m.d.sync += [k.eq(0), g.eq(g + 1)]
                        with m.If(g == f.r_out - 1):
                            m.d.sync += [run.eq(0), g.eq(0), s.eq(0)]
        return sr, k, g, s, run

    def _fold_rom(self, m: Module, mul_keys: list[tuple[int, int]], s: Signal) -> Value:
        """The coefficient ROM: one word per step, every multiplier lane's coefficient in
        it; read synchronously at step s. Returns the read data."""
        f = self.fold
        words = []
        for st in range(f.steps):
            word = 0
            for li, key in enumerate(mul_keys):
                word |= (self.lanes[key][0][st] & ((1 << self.cw) - 1)) << (li * self.cw)
            words.append(word)
        attrs = {"ram_style": "block" if self.rom_block else "logic"}
        rom = Memory(shape=unsigned(self.rom_width), depth=f.steps, init=words,
                     attrs=attrs)
        m.submodules.rom = rom
        if self.rom_block or self.pipe.lean:
            rp = rom.read_port(domain="sync")
            m.d.comb += [rp.addr.eq(s), rp.en.eq(self.en)]
            return rp.data
        # in LUTs with the extra fold registers: the address registered (a copy of s) and
        # read combinationally, the same timing as a synchronous read; yosys would
        # otherwise read the LUT ROM at s's next value, its counter logic on the path
        ra = Signal.like(s, name="rom_a")
        with m.If(self.en):
            m.d.sync += ra.eq(s)
        rp = rom.read_port(domain="comb")
        m.d.comb += rp.addr.eq(ra)
        return rp.data

    def _fold_operands(self, m: Module, xa: list[Signal], data: Value | None,
                       mul_keys: list[tuple[int, int]]
                       ) -> tuple[list[Value], list[Value], dict[tuple[int, int], Value]]:
        """Stages 2-3: coefficients and chunk registered twice more (block RAM clock-to-out,
        and room for the placer to reach the DSP columns), not with a lean schedule.
        Returns (chunk, control, coefficient per multiplier lane)."""
        f = self.fold
        lean = self.pipe.lean
        coef: dict[tuple[int, int], Value] = {}
        if lean and self.rom_reg:  # the block RAM's read, and the chunk with it, once more
            if mul_keys:
                data = self.regs(m, [data], "coef")[0]
            xa = self.regs(m, xa, "xb")
        if mul_keys:
            cw = data if lean else self.regs(m, self.regs(m, [data], "coef")[:1], "coefd")[0]
            for li, key in enumerate(mul_keys):
                coef[key] = cw[li * self.cw:(li + 1) * self.cw].as_signed()
        xb = xa if lean else self.regs(m, self.regs(m, xa, "xb"), "xc")
        return xb[:f.c], xb[f.c:], coef

    def _slice_products(self, x: Value, c: Value) -> list[Value]:
        """x * (slice i of the signed coefficient c, at bit 0) for each `split_k`-bit slice:
        a sum of x << b where bit b of the slice is set, subtracted for c's sign bit (two's
        complement). Written as selects and one adder per slice rather than a `*`: yosys
        builds a signed-by-unsigned product with sign corrections, two more logic levels."""
        k, out = self.split_k or self.slice_k, []
        for lo in range(0, self.cw, k):
            acc: Value | None = None
            for b in range(lo, min(lo + k, self.cw)):
                term = Mux(c[b], x << (b - lo), 0)
                if acc is None:
                    acc = -term if b == self.cw - 1 else term
                else:
                    acc = acc - term if b == self.cw - 1 else acc + term
            out.append(acc)
        return out

    def _fold_products(self, m: Module, xs: list[Value], coef: dict[tuple[int, int], Value],
                       ctrl: list[Value]) -> tuple[list[list[Value]], list[Value]]:
        """Stage 4: the lanes' products, registered twice (DSP out, then near the tree; lean:
        as planned). Returns (the products per output lane, control)."""
        f = self.fold
        cols: list[list[Value]] = [[] for _ in range(f.m)]
        keys = sorted(self.lanes)
        ops = self._amaranth_ops(m)
        parts: list[list[Value]] = []  # per lane: its product, or its slices' products
        split_all = bool(self.split_k)  # "fmax": every logic-width product (lean: soft_keys)
        for (t, j) in keys:
            col, kind = self.lanes[(t, j)]
            if kind == "shift":
                parts.append([const_mul(xs[t], col[0])[0] << self.p_shift])
            elif split_all or (t, j) in self.soft_keys:
                # x * c = sum over slices i of x * c[i*k:(i+1)*k] << i*k
                parts.append(self._slice_products(xs[t], coef[(t, j)]))
            else:
                parts.append([xs[t] * coef[(t, j)] << self.p_shift])
        if not (split_all or self.soft_keys):
            pr = [self._wrap(ops, p[0]) for p in parts] + ctrl
            if self.prod_reg:
                pr = self.regs(m, pr, "p")
        else:  # slices' products registered, summed before the second product register
            # (lean: before the tree)
            assert self.prod_reg
            flat = self.regs(m, [v for p in parts for v in p] + ctrl, "p")
            it = iter(flat)
            k = self.split_k or self.slice_k
            if self.slice_terms:  # "fmax": every slice a term of its output's adder tree
                terms: list[list[Value]] = []
                for p in parts:
                    vs = [next(it) for _ in p]
                    terms.append([self._wrap(ops, vs[0])] if len(vs) == 1 else
                                 [self._wrap(ops, v << (i * k + self.p_shift))
                                  for i, v in enumerate(vs)])
                ctrl = list(it)
                flat = self.regs(m, [v for ts in terms for v in ts] + ctrl, "pd")
                it = iter(flat)
                for (_t, j), ts in zip(keys, terms, strict=True):
                    cols[j].extend(next(it) for _ in ts)
                return cols, list(it)
            pr = []
            for p in parts:
                vs = [next(it) for _ in p]
                v = vs[0]
                for i, u in enumerate(vs[1:], 1):
                    v = v + (u << (i * k))
                pr.append(self._wrap(ops, v if len(vs) == 1 else v << self.p_shift))
            pr += list(it)
        if not self.pipe.lean:
            pr = self.regs(m, pr, "pd")
        for (_t, j), v in zip(keys, pr[:len(keys)], strict=True):
            cols[j].append(v)
        return cols, pr[len(keys):]

    def _fold_accumulate(self, m: Module, sums: list[Value], ctrl: list[Value]
                         ) -> tuple[list[Signal], list[Signal]]:
        """The accumulators, each starting from its output's bias on a group's first chunk.
        Returns (accumulators, the registered (last chunk, group) that captures them)."""
        f = self.fold
        fst, lst, gg = ctrl
        biases = [[self.bias[gi * f.m + j] if gi * f.m + j < self.n_out else 0
                   for j in range(f.m)] for gi in range(f.r_out)]
        if f.r_out == 1:
            bsel: list[Value] = [Const(b) for b in biases[0]]
        else:
            bsel = [Signal(signed(self.mod), name=f"bias{j}") for j in range(f.m)]
            with m.Switch(gg):
                for gi in range(f.r_out):
                    with m.Case(gi):
                        m.d.comb += [bsel[j].eq(biases[gi][j]) for j in range(f.m)]
        acc = [Signal(signed(self.mod), name=f"acc{j}", reset_less=True) for j in range(f.m)]
        with m.If(self.en):
            m.d.sync += [acc[j].eq(fit(Mux(fst, bsel[j], acc[j]) + sums[j], self.mod, True))
                         for j in range(f.m)]
        return acc, self.regs(m, [lst, gg], "cap")

    def _fold_outputs(self, m: Module, acc: list[Signal], cap: list[Signal]) -> None:
        """Requantization into the group's output registers, which drive y."""
        f = self.fold
        outs, (cap_v, cap_g) = self._requant(m, list(acc), self.rq_flags[0], cap)
        t = self.tout
        y = [Signal(shape_of(t), name=f"y{j}", reset_less=True) for j in range(self.n_out)]
        en = self.en
        for gi in range(f.r_out):
            write = en & cap_v & (cap_g == gi) if f.r_out > 1 else en & cap_v
            with m.If(write):
                m.d.sync += [y[gi * f.m + j].eq(fit(outs[j], t.width, t.signed))
                             for j in range(f.m) if gi * f.m + j < self.n_out]
        self.drive_y(m, y)
