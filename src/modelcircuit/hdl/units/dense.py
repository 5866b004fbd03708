"""Dense (MatMul/Gemm with constant weights), bias, fused ReLU and requantization.

Numbers (reference.dense): products are exact; the sum is exact at the product's binary
point, or the bias's if it has more fractional bits; then one requantization to the output
type, then ReLU. Every partial sum is kept modulo 2**M with M = accumulator width + 1: two's
complement arithmetic is exact modulo 2**M and the final sum fits in M signed bits (the
accumulator type is computed from the weight and input ranges), so the result is exact.

Registers follow the register schedule (hdl/plan/schedule.py: `Schedule`, `plan_stages`; the
presets "latency", "area" and "fmax").

R = 1: one term per non-zero weight (zero weights cost nothing, a power of two is a shift,
anything else a constant multiplier), the bias as one more term, then the adder tree. With
`csd_digits` > 0 ("fmax"), a constant of at most that many canonical signed digits is not a
multiplier but that many shifted (and negated) copies of the input, leaves of the tree: no
DSP, no separate multiplier logic, every stage at most `adder_levels` adders deep.

R = 1, strategy "da" (`--strategy da`; "auto" picks per layer, hdl/flow/fit.py
choose_strategy): no product at all. The weight matrix (pre-shifted to the sum's binary
point) is one shared adder graph (hdl/plan/cmvm.py: CSD digits, two-term common subexpressions
extracted across all outputs, a shallowest-first tree per output with the bias, plus the
rounding's half for RND, as its constant). Each node is a signal of its exact width (at
most M bits, modulo 2**M); a register goes after adder level d wherever plan_stages puts
one (each level weighs 1), and a value read at a later stage is delayed by registers to
it. Latency = registers planned + 1, II = 1, both known before elaboration.

R = 1 core, two writers: `_core_build` (DenseParallel, DenseGraph: hdl/units/dense_r1.py) builds everything up to
the sums (products or adder graph, the tree, their registers) through an "ops" object: on
Amaranth values (`_AmaranthOps`: amaranth.sim, the FPGA flow) or, inside an export
(hdl/export.convert), as Verilog and RTLIL text with the same value shapes
(hdl/netlist_text.TextOps), one module instantiated here. The requantization after the
sums (`_tail`: rounding, its register, overflow + ReLU, the output register) is Amaranth
either way: inline per output, or, in an export, one module per distinct tail (`_Tail`)
that the text core instantiates per output.

R > 1 (fold.Fold): the input vector is loaded into a rotating register and consumed in R_in
chunks of c elements, one chunk per step, for each of R_out output groups of m outputs:
c * m time-shared lanes. The coefficients of every multiplier lane for a step are one word
of a ROM (`amaranth.lib.memory.Memory`, synchronous read; block RAM from the schedule's
`rom_bram_depth` on: 16, "fmax" 128, shallower in LUTs) indexed by the step counter; its output and the chunk are registered twice more, the products
twice (ECP5: yosys does not absorb registers into MULT18X18D, whose 3.9 ns combinational
delay plus the long routes to and from the DSP columns otherwise set the clock; a product
the device builds in logic is registered products of 2-bit coefficient slices summed before
the second register, `split_k`), then a
pipelined tree per output lane, then an accumulator that starts from the bias; at the end
of a group the accumulators are requantized into that group's output registers. A new
vector is accepted every R cycles (II = R, steps R_in * R_out <= R).
Latency = steps + FOLD_STAGES (7, hdl/plan/schedule.py) + tree registers + requantization
registers. The "area" preset (iCE40) and "latency" drop the extra coefficient and chunk
registers and plan the product register with the adder tree (LEAN_FOLD_STAGES, 3, + the
planned registers): on a small part every register fed by a register is a logic cell of
its own. "area" keeps one of them where the ROM is a block RAM (Schedule.bram_reg): the
read and the chunk registered once more and the products alone in their stage, so the
RAM's clock-to-out, a logic product and the accumulator never share a stage (+1 cycle,
+ the product register where the plan had none).
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import ClockSignal, Const, Instance, Module, Signal, Value, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...graphs.types import FixedType, Rounding
from ..errors import HdlError
from ..plan.fold import fold_lanes, fold_shape, lane_kinds, window_memory
from ..plan.schedule import Schedule, plan_stages
from . import netlist_text
from .arith import fit, overflow_relu, shape_of, shift_round, tree_levels
from .base import Unit
from .dense_fold import FoldStages

# per layer: "mult" (a product per weight: DSPs, shifts, shift-add leaves) or "da" (R = 1:
# one shared adder graph, hdl/plan/cmvm.py); "auto" is resolved per layer before lowering
STRATEGIES = ("mult", "da")


class _AmaranthOps:
    """The operations a Dense core is built with (see `Dense._core`), on Amaranth values;
    netlist_text.TextOps is the same interface writing Verilog text, with the same shapes."""

    def __init__(self, unit: Unit, m: Module):
        self.unit, self.m = unit, m

    @staticmethod
    def shape(v: Value) -> tuple[int, bool]:
        s = Value.cast(v).shape()
        return s.width, s.signed

    @staticmethod
    def const(value: int, width: int | None = None, is_signed: bool | None = None) -> Value:
        if width is None:
            return Const(value)
        return Const(value, signed(width) if is_signed else unsigned(width))

    @staticmethod
    def shl(v: Value, k: int) -> Value:
        return Value.cast(v) << k

    @staticmethod
    def neg(v: Value) -> Value:
        return -Value.cast(v)

    @staticmethod
    def add(a: Value, b: Value) -> Value:
        return Value.cast(a) + b

    @staticmethod
    def sub(a: Value, b: Value) -> Value:
        return Value.cast(a) - b

    @staticmethod
    def mul(v: Value, c: int) -> Value:
        return Value.cast(v) * c

    @staticmethod
    def fit(v: Value, width: int, is_signed: bool) -> Value:
        return fit(v, width, is_signed)

    def node(self, name: str, width: int, is_signed: bool, v: Value, keep: bool) -> Signal:
        sig = Signal(signed(width) if is_signed else unsigned(width), name=name,
                     attrs={"keep": 1} if keep else {})
        self.m.d.comb += sig.eq(v)
        return sig

    def regs(self, values: list[Value], name: str) -> list[Signal]:
        return self.unit.regs(self.m, values, name)


Ops = _AmaranthOps | netlist_text.TextOps


class Dense(Unit):
    """A Dense layer: the numbers and the requantization tail every circuit of it shares.
    `Dense(...)` makes the circuit its plan calls for (`__new__`): `DenseParallel` (R = 1,
    products), `DenseGraph` (R = 1, strategy "da": one shared adder graph) or `DenseFolded`
    (R > 1); each plans itself in `_plan` and builds itself in `elaborate`."""

    kind_strategy = "mult"  # what describe() reports: DenseGraph is "da"
    # the circuits, registered by their classes (the R = 1 ones live in dense_r1.py, which
    # the units package imports): "parallel", "graph", "folded"
    kinds: dict[str, type[Dense]] = {}

    def __init_subclass__(cls, kind: str | None = None, **kw: object) -> None:
        super().__init_subclass__(**kw)
        if kind is not None:
            if kind in Dense.kinds:
                raise HdlError(f"internal: Dense kind {kind!r} is {Dense.kinds[kind].__name__} "
                               f"already, not {cls.__name__}")
            Dense.kinds[kind] = cls

    def __new__(cls, tx: FixedType, w: np.ndarray, *args: object, **kw: object) -> Dense:
        if cls is not Dense:
            return super().__new__(cls)
        reuse = int(kw.get("reuse", args[6] if len(args) > 6 else 1))  # type: ignore[arg-type]
        strategy = kw.get("strategy", args[9] if len(args) > 9 else "mult")
        if strategy not in STRATEGIES:
            raise HdlError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        # adder graphs at R = 1 only: a folded layer time-shares its multipliers
        kind = "folded" if reuse > 1 else "graph" if strategy == "da" else "parallel"
        if kind not in Dense.kinds:  # hdl/units/__init__.py imports dense_r1
            raise HdlError(f"internal: no Dense circuit of kind {kind!r} registered")
        return super().__new__(Dense.kinds[kind])

    def __init__(self, tx: FixedType, w: np.ndarray, tw: FixedType, b: np.ndarray | None,
                 tb: FixedType | None, tout: FixedType, acc: FixedType, relu: bool,
                 reuse: int = 1, adder_levels: int = 4, schedule: Schedule | None = None,
                 strategy: str = "mult", dsp_lanes: int | None = None):
        w = np.asarray(w, dtype=np.int64)
        # folded: how many multiplier lanes the plan gave a DSP block (None: any)
        self.dsp_lanes = dsp_lanes
        self.n_in, self.n_out = w.shape
        super().__init__([(tx, self.n_in)], (tout, self.n_out))
        self.tx, self.w, self.tw, self.tout, self.relu_ = tx, w, tw, tout, bool(relu)
        self.pipe = schedule or Schedule(int(adder_levels))
        self.adder_levels = int(adder_levels)
        frac = tx.frac + tw.frac
        self.frac = max(frac, tb.frac) if b is not None and tb is not None else frac
        self.p_shift = self.frac - frac
        self.bias = ([0] * self.n_out if b is None else
                     [int(v) << (self.frac - tb.frac) for v in np.asarray(b).reshape(-1)])
        self.mod = acc.width + 1
        self.x_held = False
        self.window_ports: tuple[Signal, list[Signal]] | None = None
        self.reuse = int(reuse)
        self.ii = self.reuse
        rq = [self.pipe.requant_levels] * 2  # rounding, overflow + ReLU
        self.strategy = self.kind_strategy
        self._plan(w, rq)

    def _plan(self, w: np.ndarray, rq: list[int]) -> None:
        raise NotImplementedError

    def hold_input(self) -> None:
        """Told by a unit that keeps x0 as it was at `start` for ii enabled cycles (the
        window register of hdl/streamed/window.WindowUnit): a fold then reads its chunks
        from x0 and needs no copy of it."""
        self.x_held = True

    def read_window(self, channels: int) -> Dense | None:
        """Asked by a window unit that can keep its window in a memory (hdl/streamed/units.py
        WindowUnit) of pixels of `channels` codes: self when the fold reads chunk `ksel` the
        cycle after asking for it from `window_ports` (DenseFolded), else None (x0 held)."""
        return None

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["adder_levels"] = self.adder_levels
        d["strategy"] = self.strategy
        return d

    # -- shared pieces -------------------------------------------------------------------
    def _amaranth_ops(self, m: Module) -> _AmaranthOps:
        """The ops writer that builds Amaranth values into m (the folded stages use it too)."""
        return _AmaranthOps(self, m)

    def _wrap(self, ops: Ops, v: object) -> object:
        """v modulo 2**M, signed (only where it is wider or unsigned)."""
        width, is_signed = ops.shape(v)
        return ops.fit(v, self.mod, True) if width > self.mod or not is_signed else v

    def _tree(self, ops: Ops, cols: list[list[object]], flags: list[bool],
              carry: list[object], fixed: frozenset[int] = frozenset()
              ) -> tuple[list[object], list[object]]:
        """Reduce each column to one value, registering all columns (and `carry`) after
        adder level i when flags[i], but the `fixed` ones (constants: registers of equal
        constants are merged by yosys into one flip-flop whose net crosses the die).
        Returns (sums, carry)."""
        cols = [c if c else [ops.const(0, 2, True)] for c in cols]
        for lvl in range(self.levels):
            cols = [[self._wrap(ops, ops.add(c[i], c[i + 1])) if i + 1 < len(c) else c[i]
                     for i in range(0, len(c), 2)] for c in cols]
            if flags[lvl]:
                flat = [v for j, c in enumerate(cols) if j not in fixed for v in c]
                r = ops.regs(flat + carry, f"t{lvl}_")
                it = iter(r[:len(flat)])
                cols = [c if j in fixed else [next(it) for _ in c] for j, c in enumerate(cols)]
                carry = r[len(flat):]
        assert all(len(c) == 1 for c in cols)
        return [c[0] for c in cols], carry

    @staticmethod
    def _named(m: Module, vals: list[Value], name: str) -> list[Value]:
        """Within an export (netlist_text.text_cores), each value as a named signal: Amaranth
        emits an expression's cells once per use, and the requantization reads each value
        two or three times (6 shifters per output instead of 1; the export's netlist build
        is then mostly these). Elsewhere the values as they are (the old netlist)."""
        if netlist_text.active() is None:
            return vals
        out = [Signal(Value.cast(v).shape(), name=f"{name}{i}") for i, v in enumerate(vals)]
        m.d.comb += [s.eq(v) for s, v in zip(out, vals, strict=True)]
        return out

    def _finish(self, m: Module, vals: list[Value]) -> list[Value]:
        """Overflow, then ReLU."""
        return self._named(m, [overflow_relu(v, self.tout, self.relu_) for v in vals], "ov")

    def _requant(self, m: Module, vals: list[Value], round_reg: bool,
                 carry: list[Value], en: Value | None = None) -> tuple[list[Value], list[Value]]:
        """Round, (register, enabled by en: the unit's unless given), overflow + ReLU.
        Returns (outputs, carry)."""
        r = self._named(m, [shift_round(fit(v, self.mod, True), self.frac - self.tout.frac,
                                        self._rounding()) for v in vals], "rd")
        if round_reg:
            regd = self.regs(m, r + carry, "rq", en=en)
            r, carry = regd[:len(r)], regd[len(r):]
        return self._finish(m, r), carry

    def _rounding(self) -> Rounding:
        """The tail's rounding (DenseGraph: TRN where the graph's constant adds the half)."""
        return self.tout.rounding

    def _tail_reg(self) -> bool:
        """Whether the tail registers the rounded value (the plan's stage after the tree)."""
        raise NotImplementedError  # R = 1 circuits

    def _tail(self, m: Module, sums: list[Value], en: Value) -> list[Signal]:
        """R = 1: each sum (modulo 2**M) rounded, (registered), overflow + ReLU, into the
        output registers, enabled by en. Returns the output registers."""
        outs, _ = self._requant(m, sums, self._tail_reg(), [], en)
        t = self.tout
        return self.regs(m, [fit(v, t.width, t.signed) for v in outs], "y",
                         [shape_of(t)] * len(outs), en=en)

    def _tail_key(self) -> tuple[object, ...]:
        """What `_tail` depends on: equal keys, the same circuit."""
        return (self.mod, self.frac - self.tout.frac, self._rounding(), self._tail_reg(),
                self.tout, self.relu_)

    def _elaborate_r1(self) -> Module:
        """R = 1: the core (products or adder graph, the tree: `_core_build`) and the tails.
        In Amaranth, or, inside an export's netlist_text.text_cores block, as a Verilog text
        module (the same circuit, written from the same code through netlist_text.TextOps)
        instantiated here, which instantiates one `_Tail` module per output."""
        m = Module()
        cores = netlist_text.active()
        if cores is None:
            sums = [Value.cast(v) for v in self._core_build(self._amaranth_ops(m), self.inputs())]
            self.drive_y(m, self._tail(m, sums, self.en))
            return m
        t, to = self.tx, self.tout
        ops = netlist_text.TextOps(len(self.x0))
        sums = self._core_build(ops, [ops.input(i * t.width, t.width, t.signed)
                                      for i in range(self.n_in)])
        tail = cores.tail(self._tail_key(), lambda: _Tail(self))
        ys = [ops.instance(tail, ops.fit(v, self.mod, True), self.mod, to.width, to.signed)
              for v in sums]
        name = cores.add(ops, ys, to.width)
        m.submodules.core = Instance(name, i_clk=ClockSignal("sync"), i_en=self.en,
                                     i_x=self.x0, o_s=self.y)
        return m

    def _core_build(self, ops: Ops, x: list[object]) -> list[object]:
        raise NotImplementedError  # R = 1 circuits: the products or the adder graph

    def _const_mul(self, ops: Ops, x: object, c: int) -> object | None:
        """x * c as arith.const_mul: None for 0, a shift (and negation) for a power of two,
        a multiplier otherwise."""
        if c == 0:
            return None
        a = abs(c)
        if a & (a - 1) == 0:
            y = ops.shl(x, a.bit_length() - 1)
            return ops.neg(y) if c < 0 else y
        return ops.mul(x, c)


class _Tail(wiring.Component):
    """One output's requantization tail of an R = 1 Dense (`Dense._tail`) as a module of
    its own: ports en, a (the sum, M bits signed) and y (the output code, registered)."""

    def __init__(self, unit: Dense):
        self.unit = unit
        super().__init__({"en": In(1), "a": In(signed(unit.mod)),
                          "y": Out(shape_of(unit.tout))})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        y, = self.unit._tail(m, [self.a], self.en)
        m.d.comb += self.y.eq(y)
        return m


class DenseFolded(FoldStages, Dense, kind="folded"):
    """R > 1: time-shared lanes over a coefficient ROM, an accumulator per output lane
    (the stages in dense_fold.py)."""

    def _plan(self, w: np.ndarray, rq: list[int]) -> None:
        """R > 1: the fold, its lanes (shift or multiplier) and coefficient ROM, and where
        the registers go."""
        L = self.adder_levels
        self.fold = f = fold_shape(self.n_in, self.n_out, self.reuse)
        self.r_in, self.c = f.r_in, f.c
        lanes = fold_lanes(w, f)  # (steps, c, m)
        kinds = lane_kinds(lanes)
        self.lanes = {(t, j): ([int(v) for v in lanes[:, t, j]],
                               "shift" if kinds[t, j] == 1 else "mul")
                      for t in range(f.c) for j in range(f.m) if kinds[t, j]}
        self.multipliers = sum(1 for v in self.lanes.values() if v[1] == "mul")
        self.shifts = sum(1 for v in self.lanes.values() if v[1] == "shift")
        self.levels = tree_levels(f.c)
        mul_lanes = [v[0] for v in self.lanes.values() if v[1] == "mul"]
        self.cw = max([max(abs(x) for x in col).bit_length() + 1 for col in mul_lanes] + [1])
        self.rom_width = self.cw * len(mul_lanes)
        self.rom_depth = f.steps if mul_lanes else 0
        self.rom_block = self.rom_depth >= self.pipe.rom_bram_depth
        # lean, block RAM and `bram_reg`: the read registered, the products alone in their
        # stage (Schedule.bram_reg)
        self.rom_reg = self.pipe.lean and self.rom_block and self.pipe.bram_reg
        slice_levels = self._plan_slices(bool(mul_lanes))
        if self.pipe.lean:  # product, tree levels, accumulate: registers as planned
            mul_w = L if self.rom_reg else (self.pipe.mul_levels or L)
            flags = plan_stages([mul_w] + [1] * (slice_levels + self.levels) + [1], L)
            if any(flags[1:1 + slice_levels]):  # the slices' sum deeper than a stage
                self.soft_keys, slice_levels = frozenset(), 0
                flags = plan_stages([mul_w] + [1] * self.levels + [1], L)
            self.prod_reg = flags[0]
            self.tree_flags = flags[1 + slice_levels:1 + slice_levels + self.levels]
        else:  # products registered twice (DSP out, then near the tree)
            self.prod_reg = True
            self.tree_flags = plan_stages([1] * self.levels + [1], L)[:self.levels]
        self.tree_regs = sum(self.tree_flags) + (self.pipe.lean and self.prod_reg)
        self.rq_flags = [True, False] if self.pipe.round_reg else plan_stages(rq, L)
        self.latency = (f.steps + self.pipe.fold_stages + self.rom_reg + self.tree_regs
                        + sum(self.rq_flags))

    def read_window(self, channels: int) -> Dense | None:
        """A held window read chunk by chunk from its memory where every chunk is part of one
        pixel (c divides the channels): the window's registers (kh*kw*C codes) and the
        R_in:1 selection over them are replaced by a memory read and a C/c:1 selection (an
        8-bit ResNet-8's 3x3x64 windows: 4,608 flip-flops and a 72:1 multiplexer of 64 bits
        each). `window_ports`: (ksel, the chunk's c codes) shared with the window unit."""
        f = self.fold
        if not self.x_held or not window_memory(f, self.n_in // channels, channels):
            return None
        self.window_channels = channels
        if self.window_ports is None:
            self.window_ports = (Signal(range(max(2, f.r_in)), name="ksel"),
                                 [Signal(shape_of(self.tx), name=f"wk{i}") for i in range(f.c)])
        return self

    def window_chunks(self) -> list[tuple[int, int]]:
        """Chunk k of the window (read_window): (its tap, its index within the pixel)."""
        f = self.fold
        per = self.window_channels // f.c
        return [(k // per, k % per) for k in range(f.r_in)]

    def describe(self) -> dict[str, object]:
        f = self.fold
        return {**super().describe(),
                "fold": {"r_in": f.r_in, "c": f.c, "r_out": f.r_out, "m": f.m,
                         "steps": f.steps, **({"logic_lanes": len(self.soft_keys)}
                                              if self.soft_keys else {}),
                         "rom": {"depth": self.rom_depth,
                                                   "width": self.rom_width,
                                                   "style": "block" if self.rom_block
                                                   else "logic"}}}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        f = self.fold
        sr, k, g, s, run = self._fold_issue(m)
        # control travels with the data: first chunk of a group, last chunk, group
        first = Signal(name="first")
        last = Signal(name="last")
        m.d.comb += [first.eq(k == 0), last.eq(run & (k == f.r_in - 1))]
        ctrl = [first, last, g]
        # -- stage 1: ROM read (synchronous) and chunk register --------------------------
        mul_keys = self.mul_keys
        data = self._fold_rom(m, mul_keys, s) if mul_keys else None
        xa = self.regs(m, sr[:f.c] + ctrl, "xa")
        xs, ctrl, coef = self._fold_operands(m, xa, data, mul_keys)
        cols, ctrl = self._fold_products(m, xs, coef, ctrl)
        # -- adder tree, then the accumulator (which starts from the bias) ---------------
        sums, ctrl = self._tree(self._amaranth_ops(m), cols, self.tree_flags, ctrl)
        acc, cap = self._fold_accumulate(m, sums, ctrl)
        self._fold_outputs(m, acc, cap)
        return m
