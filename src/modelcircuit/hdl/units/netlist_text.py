"""R = 1 Dense cores as Verilog and RTLIL text, for a fast export.

Why: building the Amaranth netlist of a fully parallel Dense layer (thousands of products or
adder-graph nodes, every one a bit-level NIR cell), checking it for combinational cycles and
writing it as RTLIL took ~80 % of an export (jet tagger fixed<16,6>, R = 1: 15-30 s). The
core of such a layer (the products or the shared adder graph, the adder tree and its pipeline
registers, up to the sums) is a plain word-level netlist that the plan (hdl/units/dense.py) already
describes completely, so `export.convert` writes it as text straight from the plan (the
same `Dense._core_*` code, run on `TextOps`), one module per Dense in Verilog
(templates/hdl/core.v.j2) and in RTLIL (core.il.j2), which the Dense unit instantiates (an
Amaranth `Instance`; yosys writes the Verilog of the rest, as before). The
requantization tail of each output (rounding, overflow, ReLU, its registers) is written
once, in Amaranth (hdl/units/dense.py `Dense._tail`): the tail of one output is converted
once per distinct tail (`CoreSet.tail`: the same width, shift, rounding, type and ReLU give
the same circuit) as a module `<top>__tail<n>`, which each core instantiates per output
(`TextOps.instance`). Built in Amaranth per output instead, the tails were most of an
export's netlist time after the cores (the jet tagger's 133 outputs: ~0.7 s).
amaranth.sim and the FPGA flow (hdl/flow/yosys.write_design) keep the pure Amaranth circuit:
the text cores are used only inside `text_cores()`.

Semantics, the same circuit as the Amaranth core bit for bit: `TextOps` offers the
operations hdl/units/dense.py builds its core with (constant shift, negation, add, subtract,
multiplication by a constant, wrap to M bits, a named node, registers) and gives every
result the shape Amaranth gives it (`Operator.shape`: `a + b` is one bit wider than the
unified operands, `-a` is signed and one bit wider, `a * c` is the sum of the widths, `a << k`
with an integer k is 2**bits_for(k) - 1 bits wider, k = 0 included, a `Const` is
bits_for(c) wide; checked against Amaranth in tests/hdl/test_export_fast.py), so wires
and registers have exactly the widths of the Amaranth netlist (the flip-flop count is the
same). Every operand is written as a signed Verilog expression of its exact value
(`$signed(e)`, or `$signed({1'b0, e})` for an unsigned one) and assigned to a wire or
register of the result's width: Verilog then sign-extends every operand to the assignment's
width and the result is exact modulo 2**width, which is what Amaranth's assignment gives.
No expression mixes signed and unsigned operands, none relies on context-determined width
beyond that assignment. In RTLIL the same: every cell's operands signed ($pos for a plain
assignment, which extends or truncates), registers are $dffe cells.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ...util import templating
from ..errors import HdlError

_MODULE = re.compile(r"^module (\S+)\n(.*?)^end$", re.S | re.M)
_FF = re.compile(r"cell \$(?:a?dffe?|sdffe?|aldffe?|dffsre?) .*?\n(.*?)\n\s*end\n", re.S)
_MEMRD = re.compile(r"cell \$memrd_v2 .*?\n(.*?)\n\s*end\n", re.S)
_WIDTH = re.compile(r"parameter \\WIDTH (\d+)")
_INSTANCE = re.compile(r"^\s*cell (\\\S+) ", re.M)


def _own_register_bits(body: str) -> int:
    bits = 0
    for cell in _FF.findall(body):
        m = _WIDTH.search(cell)
        bits += int(m.group(1)) if m else 0
    for cell in _MEMRD.findall(body):
        if re.search(r"parameter \\CLK_ENABLE 1'1|parameter \\CLK_ENABLE 1\b", cell):
            m = _WIDTH.search(cell)
            bits += int(m.group(1)) if m else 0
    return bits


def register_bits(rtlil_text: str) -> int:
    """Flip-flop bits of an RTLIL netlist (memory read registers included), each module's
    counted once per instance: from every module no other module instantiates (the top).
    Only whole modules count (`module ... end`): a fragment of one counts 0."""
    own: dict[str, int] = {}
    uses: dict[str, Counter[str]] = {}
    for name, body in _MODULE.findall(rtlil_text):
        own[name] = _own_register_bits(body)
        uses[name] = Counter(_INSTANCE.findall(body))
    memo: dict[str, int] = {}

    def total(name: str) -> int:
        if name not in memo:
            memo[name] = own[name] + sum(n * total(t) for t, n in uses[name].items() if t in own)
        return memo[name]

    used = {t for u in uses.values() for t in u}
    return sum(total(n) for n in own if n not in used)


def bits_for(n: int) -> int:
    """amaranth.utils.bits_for(n): the width of Const(n) (1 for 0)."""
    if n > 0:
        return n.bit_length()
    return (-n - 1).bit_length() + 1


class TV(NamedTuple):
    """A value of a text core: `expr` (Verilog) and `sig` (an RTLIL sigspec) are exactly
    `bits` bits (self-determined, unsigned), whose value, read with `signed`, is the value;
    `width` is its Amaranth shape's width (>= bits: the top bits are sign or zero
    extension)."""

    expr: str
    sig: str
    bits: int
    width: int
    signed: bool

    def sv(self) -> str:
        """The value as a signed Verilog expression (unsigned ones get a zero bit on top)."""
        return f"$signed({self.expr})" if self.signed else f"$signed({{1'b0, {self.expr}}})"

    def il(self) -> tuple[str, int]:
        """The value as a signed RTLIL operand: (sigspec, width)."""
        return (self.sig, self.bits) if self.signed else (f"{{ 1'0 {self.sig} }}", self.bits + 1)


def unify(a: TV, b: TV) -> tuple[int, bool]:
    """amaranth Shape._unify of two shapes."""
    if not a.signed and not b.signed:
        return max(a.width, b.width), False
    sw = max(v.width for v in (a, b) if v.signed)
    uw = max([v.width for v in (a, b) if not v.signed] + [0])
    return max(sw, uw + 1), True


# the operations a wire can be assigned: Verilog operator, RTLIL cell
_OPS = {"pos": ("", "$pos"), "neg": ("-", "$neg"), "add": (" + ", "$add"),
        "sub": (" - ", "$sub"), "mul": (" * ", "$mul")}


class TextOps:
    """The operations of a Dense core (see hdl/units/dense.py `_AmaranthOps`, the same interface
    on Amaranth values), recorded as wires (each the result of one signed operation) and
    registers of one module, written as Verilog (`verilog`) and RTLIL (`rtlil`)."""

    def __init__(self, in_width: int):
        self.in_width = in_width
        self.wires: list[tuple[bool, int, str, str, tuple[TV, ...]]] = []
        self.regs_: list[tuple[int, str, TV]] = []
        self.insts: list[tuple[str, str, TV, str, int]] = []  # (module, instance, a, y, width)
        self.names: set[str] = set()
        self.reg_bits = 0
        self._n = 0

    def _wire(self, width: int, signed: bool, op: str, args: tuple[TV, ...],
              name: str | None = None, keep: bool = False) -> TV:
        if name is None:
            name = f"w{self._n}"
            self._n += 1
        assert name not in self.names, name
        self.names.add(name)
        self.wires.append((keep, width, name, op, args))
        return TV(name, f"\\{name}", width, width, signed)

    # -- values -----------------------------------------------------------------------
    @staticmethod
    def shape(v: TV) -> tuple[int, bool]:
        return v.width, v.signed

    def input(self, lo: int, width: int, signed: bool) -> TV:
        """fit(x[lo:lo + width], width, signed): one element of the packed input."""
        hi = lo + width - 1
        return TV(f"x[{hi}:{lo}]", f"\\x [{hi}:{lo}]", width, width, signed)

    def const(self, value: int, width: int | None = None, signed: bool | None = None) -> TV:
        """Const(value[, shape]): bits_for(value) wide unless a shape is given."""
        if width is None:
            width, signed = bits_for(value), value < 0
        assert width > 0 and signed is not None, "zero-width constant"
        v = value & ((1 << width) - 1)
        return TV(f"{width}'h{v:x}", f"{width}'{v:0{width}b}", width, width, signed)

    # -- operations (Amaranth's result shapes) ------------------------------------------
    def shl(self, v: TV, k: int) -> TV:
        """v << k for an integer k: Amaranth widens by 2**bits_for(k) - 1 bits (k = 0: 1)."""
        if k == 0:
            return TV(v.expr, v.sig, v.bits, v.width + 1, v.signed)
        return TV(f"{{{v.expr}, {k}'h0}}", f"{{ {v.sig} {k}'{'0' * k} }}", v.bits + k,
                  v.width + (1 << bits_for(k)) - 1, v.signed)

    def neg(self, v: TV) -> TV:
        return self._wire(v.width + 1, True, "neg", (v,))

    def add(self, a: TV, b: TV) -> TV:
        w, s = unify(a, b)
        return self._wire(w + 1, s, "add", (a, b))

    def sub(self, a: TV, b: TV) -> TV:
        w, _ = unify(a, b)
        return self._wire(w + 1, True, "sub", (a, b))

    def mul(self, v: TV, c: int) -> TV:
        k = self.const(c)
        return self._wire(v.width + k.width, v.signed or k.signed, "mul", (v, k))

    def fit(self, v: TV, width: int, signed: bool) -> TV:
        """arith.fit: the low `width` bits of v (extended per v's sign), read as `signed`."""
        if v.width == width and v.bits == width:
            return TV(v.expr, v.sig, width, width, signed)
        return self._wire(width, signed, "pos", (v,))

    def node(self, name: str, width: int, signed: bool, v: TV, keep: bool) -> TV:
        """A named signal of the given shape assigned v (kept from yosys's merging)."""
        return self._wire(width, signed, "pos", (v,), name, keep)

    def regs(self, values: Sequence[TV], name: str) -> list[TV]:
        """Registers (enabled by en) of each value's shape, as component.Unit.regs."""
        out = []
        for i, v in enumerate(values):
            r = f"{name}{i}"
            assert r not in self.names, r
            self.names.add(r)
            self.regs_.append((v.width, r, v))
            self.reg_bits += v.width
            out.append(TV(r, f"\\{r}", v.width, v.width, v.signed))
        return out

    def instance(self, module: str, a: TV, a_width: int, width: int, signed: bool) -> TV:
        """An instance of `module` (a tail, `CoreSet.tail`: ports clk, rst, en, a and y)
        fed `a`, which must be exactly its port's `a_width` bits (`fit` it first: a port
        connection would otherwise extend it without its sign); its y, `width` bits."""
        if not a.bits == a.width == a_width:
            raise HdlError(f"internal: {module}'s port a is {a_width} bits, the value "
                           f"{a.bits} ({a.width} wide)")
        n = len(self.insts)
        y = self._wire_name(f"q{n}")
        self.insts.append((module, self._wire_name(f"t{n}"), a, y, width))
        return TV(y, f"\\{y}", width, width, signed)

    def _wire_name(self, name: str) -> str:
        assert name not in self.names, name
        self.names.add(name)
        return name

    # -- the module -------------------------------------------------------------------
    def verilog(self, name: str, outs: Sequence[TV], out_width: int) -> str:
        """The module as Verilog: outs[j] (each fit to out_width bits by its assignment) in
        bits [j*out_width, (j+1)*out_width) of the output s."""
        wires = []
        for keep, width, wname, op, args in self.wires:
            sym = _OPS[op][0]
            expr = f"{sym}{args[0].sv()}" if len(args) == 1 else sym.join(a.sv() for a in args)
            wires.append(("(* keep = 32'd1 *) " if keep else "", width, wname, expr))
        o = [((j + 1) * out_width - 1, j * out_width, v.sv()) for j, v in enumerate(outs)]
        insts = [(mod, inst, a.expr, y, w) for mod, inst, a, y, w in self.insts]
        return templating.render("hdl", "core.v.j2", name=name, in_width=self.in_width,
                                 out_width=max(1, out_width * len(outs)), wires=wires,
                                 regs=[(w, r, v.sv()) for w, r, v in self.regs_], outs=o,
                                 insts=insts)

    def rtlil(self, name: str, outs: Sequence[TV], out_width: int) -> str:
        """The same module as RTLIL: one signed cell per wire ($pos for a plain assignment,
        which extends or truncates), a $dffe per register (its D a $pos of the value)."""
        wires: list[tuple[str, int, str]] = []
        unary: list[tuple[str, int, int, str, str]] = []
        binary: list[tuple[str, int, int, int, str, str, str]] = []
        dffs: list[tuple[int, str, str]] = []

        def cell(kind: str, args: Sequence[TV], width: int, y: str) -> None:
            if len(args) == 1:
                (a, aw), = (v.il() for v in args)
                unary.append((kind, aw, width, a, y))
            else:
                (a, aw), (b, bw) = (v.il() for v in args)
                binary.append((kind, aw, bw, width, a, b, y))

        for keep, width, wname, op, args in self.wires:
            wires.append(("attribute \\keep 1\n  " if keep else "", width, f"\\{wname}"))
            cell(_OPS[op][1], args, width, f"\\{wname}")
        for k, (width, r, v) in enumerate(self.regs_):
            wires.append((f"attribute \\init {width}'{'0' * width}\n  ", width, f"\\{r}"))
            wires.append(("", width, f"$d{k}"))
            cell("$pos", [v], width, f"$d{k}")
            dffs.append((width, f"$d{k}", f"\\{r}"))
        insts = []
        for mod, inst, a, y, w in self.insts:
            wires.append(("", w, f"\\{y}"))
            insts.append((f"\\{mod}", f"\\{inst}", a.sig, f"\\{y}"))
        for j, v in enumerate(outs):
            cell("$pos", [v], out_width, f"\\s [{(j + 1) * out_width - 1}:{j * out_width}]")
        return templating.render("hdl", "core.il.j2", name=name, in_width=self.in_width,
                                 out_width=max(1, out_width * len(outs)), wires=wires,
                                 unary=unary, binary=binary, dffs=dffs, insts=insts)


@dataclass
class CoreSet:
    """The text cores of one export, one module per Dense, in elaboration order
    (deterministic names): Verilog and RTLIL; and the tails they instantiate (`tail`),
    converted by Amaranth once each (`tails_rtlil`: their Verilog comes from the yosys run
    that writes the rest of the design)."""

    prefix: str
    # each module's text, or what renders it (a core is rendered when the export asks for
    # the text: hdl/export.convert does that while yosys writes the rest's Verilog)
    verilog_texts: list[str | Callable[[], str]] = field(default_factory=list)
    rtlil_texts: list[str | Callable[[], str]] = field(default_factory=list)
    core_bits: int = 0
    tails: dict[Any, tuple[str, Any]] = field(default_factory=dict)  # key -> (name, component)
    tail_uses: Counter[str] = field(default_factory=Counter)
    _tails_il: dict[str, str] | None = None

    def tail(self, key: Any, make: Callable[[], Any]) -> str:
        """The module name of the tail `key` (its component made by `make` the first time)."""
        if self._tails_il is not None:
            raise HdlError("internal: a tail asked for after the tails were converted")
        if key not in self.tails:
            self.tails[key] = (f"{self.prefix}__tail{len(self.tails)}", make())
        return self.tails[key][0]

    def add(self, ops: TextOps, outs: Sequence[TV], out_width: int) -> str:
        """Record one core; returns its module name."""
        name = f"{self.prefix}__core{len(self.verilog_texts)}"
        self.verilog_texts.append(lambda: ops.verilog(name, outs, out_width))
        self.rtlil_texts.append(lambda: ops.rtlil(name, outs, out_width))
        self.core_bits += ops.reg_bits
        self.tail_uses.update(inst[0] for inst in ops.insts)
        return name

    def tails_rtlil(self) -> str:
        """The tails as RTLIL modules (after elaboration: every tail is known then)."""
        return "".join(self._tails().values())

    def _tails(self) -> dict[str, str]:
        if self._tails_il is None:
            from amaranth.back import rtlil

            self._tails_il = {}
            for name, comp in self.tails.values():
                il = rtlil.convert(comp, name=name, emit_src=False)
                # one top per design: the tail is a submodule
                il = il.replace("attribute \\top 1\n", "", 1)
                if not re.search(r"wire width 1 input \d+ +\\rst\n", il):
                    raise HdlError(f"internal: tail {name} has no rst port")
                self._tails_il[name] = il
        return self._tails_il

    @property
    def reg_bits(self) -> int:
        """Flip-flop bits of the cores, the tails they instantiate included."""
        tails = {name: register_bits(il) for name, il in self._tails().items()}
        return self.core_bits + sum(n * tails[t] for t, n in self.tail_uses.items())

    def verilog(self) -> str:
        return "".join(_text(t) for t in self.verilog_texts)

    def rtlil(self) -> str:
        """The cores' RTLIL, then the tails'."""
        return "".join(_text(t) for t in self.rtlil_texts) + self.tails_rtlil()


def _text(t: str | Callable[[], str]) -> str:
    return t if isinstance(t, str) else t()


_ACTIVE: ContextVar[CoreSet | None] = ContextVar("modelcircuit_text_cores", default=None)


def active() -> CoreSet | None:
    """The CoreSet of the export being elaborated, or None (pure Amaranth cores)."""
    return _ACTIVE.get()


@contextmanager
def text_cores(prefix: str) -> Iterator[CoreSet]:
    """Within this block, R = 1 Dense units elaborate their cores as text modules named
    `<prefix>__core<n>` (collected in the yielded CoreSet) and instantiate them."""
    cs = CoreSet(prefix)
    token = _ACTIVE.set(cs)
    try:
        yield cs
    finally:
        _ACTIVE.reset(token)
