"""The recurrent circuit (LSTM, GRU): one time step per handshake in, the numeric contract of
graphs/recurrent.py bit for bit.

A sequence streams as T tokens of F codes (the streamed model style, hdl/streamed/units.py);
the unit emits one token of H codes per step (the state h, or LSTM's cell state c for
`emit="c"`). Each step:
  1. the gate sums: a `Dense` (hdl/units/dense.py, folded by the node's reuse factor,
     hdl/plan/fold.py) over [x; h], both aligned to one binary point fxh, with the weights
     [W; R] and the accumulators starting from the bias; its output type is the node's exact
     accumulator `acc`, so the sums come out unrounded;
  2. one requantization per gate to pre_type (and the clip), the gate tables (the node's own
     constant tables, read through `table_index` from ROMs with a registered output, as the
     Lut unit);
  3. the elementwise update with the contract's requantization points, then the state
     registers. After the last step of a sequence they are reset to h0 / c0.
GRU with linear_before_reset = 0 needs r before the candidate's h product: a second Dense
over [x; requantize(r * h)] (a second MAC pass). With linear_before_reset = 1 one Dense
computes z, r, x.Wh + Wbh and h.Rh + Rbh as four column groups.

h_t must be in its register before step t+1 multiplies by it, so a step occupies the unit
for its whole latency: the step II = the Dense latency(s) (its reuse plus its pipeline) plus a
fixed tail (`TAIL`), known at compile time as data (`step_ii`); a sequence's T steps take
T * step_ii cycles.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value

from ...graphs import recurrent as rc
from ...graphs.types import FixedType
from ..plan.schedule import Schedule
from ..units.arith import fit, requantize, shape_of, table_index
from ..units.base import circuit
from ..units.dense import Dense
from ..units.elementwise import table_rom
from .units import Step, SUnit, Tok

# cycles from the (last) Dense's sums to the output token (the state registers are written
# the cycle before): LSTM gate tables, cell update, tanh(c) table, h; GRU linear_before_reset
# 1: gate tables, candidate table, h; 0: after pass 1, r * h (2 cycles) before pass 2, then
# the candidate table and h
TAIL = {"LSTM": 4, "GRU1": 3, "GRU0": 3}
# read ports per copy of a gate table (a true dual-port block RAM); every element's lookup
# is a port, so a table has ceil(lookups / TABLE_PORTS) copies (`table_copies`)
TABLE_PORTS = 2


def table_lookups(op: str, hidden: int, lbr: bool) -> list[int]:
    """Lookups per step of each table (f, g[, h]): LSTM 3H, H, H; GRU 2H, H."""
    return [3 * hidden, hidden, hidden] if op == "LSTM" else [2 * hidden, hidden]


def _sx(v: Value) -> Value:
    """v as a signed value (unsigned codes get a zero sign bit): exact signed arithmetic."""
    v = Value.cast(v)
    return v if v.shape().signed else Cat(v, Const(0, 1)).as_signed()


def _align(v: Value, f_in: int, f_out: int) -> Value:
    return _sx(v) << (f_out - f_in)


class RecurrentUnit(SUnit):
    """An LSTM / GRU node as a stream unit (module docstring). `node_types`: the compiled
    node's types by role (reference.rnn_types); `tables`: (values, lo, shift) for f, g[, h]."""

    def __init__(self, op: str, tin: Tok, tx: FixedType, tw: FixedType, tb: FixedType,
                 w: np.ndarray, r: np.ndarray, b: np.ndarray, h0: np.ndarray,
                 c0: np.ndarray | None, types: dict[str, FixedType],
                 tables: list[tuple[np.ndarray, int, int]], clip: float | None,
                 lbr: bool, emit: str, reuse: int, adder_levels: int,
                 schedule: Schedule | None, strategy: str = "mult"):
        self.op, self.lbr, self.emit = op, bool(lbr), emit
        hid = int(r.shape[0])
        self.hid, self.steps_per_seq = hid, tin.per_frame
        th = types["state_type"]
        tout = types["cell_type"] if op == "LSTM" and emit == "c" else th
        super().__init__([tin], Tok(tout, hid, tin.per_frame))
        self.tx, self.th, self.types, self.tables = tx, th, types, tables
        self.h0 = [int(v) for v in np.asarray(h0).reshape(-1)]
        self.c0 = None if c0 is None else [int(v) for v in np.asarray(c0).reshape(-1)]
        tp = types["pre_type"]
        self.cc = rc.clip_code(clip, tp.frac, tp.qmax)
        fxh = max(tx.frac, th.frac)
        self.fxh = fxh
        width = max(tx.width + fxh - tx.frac, th.width + fxh - th.frac) + 1
        self.tv = FixedType(width, width - fxh)  # x and h, aligned (signed)
        acc = types["acc"]
        self.fa = max(fxh + tw.frac, tb.frac)
        w, r, b = (np.asarray(v, dtype=np.int64) for v in (w, r, b))
        wr = np.concatenate([w, r], axis=0)
        bias = b[0] + b[1]
        # the sums leave the Dense unrounded: its output type is the accumulator's (+2 bits
        # of room for the pieces of GRU's candidate)
        tacc = FixedType(acc.width + 2, acc.width + 2 - self.fa)

        def gate_sums(wm: np.ndarray, bm: np.ndarray) -> Dense:
            return Dense(self.tv, wm, tw, bm, tb, tacc, tacc, False, reuse, adder_levels,
                         schedule, strategy)

        cn = slice(2 * hid, 3 * hid)
        if op == "LSTM":
            self.dense = gate_sums(wr, bias)
        elif not self.lbr:  # z, r; the candidate in a second pass over [x; r * h]
            self.dense = gate_sums(wr[:, :2 * hid], bias[:2 * hid])
        else:  # z, r, x.Wh + Wbh, h.Rh + Rbh
            wz = np.concatenate([wr[:, :2 * hid], np.concatenate([w[:, cn], 0 * r[:, cn]]),
                                 np.concatenate([0 * w[:, cn], r[:, cn]])], axis=1)
            self.dense = gate_sums(wz, np.concatenate([bias[:2 * hid], b[0, cn], b[1, cn]]))
        self.dense2 = gate_sums(wr[:, cn], bias[cn]) if op == "GRU" and not self.lbr else None
        self.tacc = tacc
        self.reuse = int(reuse)
        # the step's output token is pushed the cycle after the state registers are
        # written, and the next step may multiply by the new h from then on
        self.step_ii = self._write_cycle() + 1
        self.lat = self.step_ii

    @property
    def max_dur(self) -> int:
        return self.step_ii

    def steps(self) -> Iterator[Step]:
        for _ in range(self.steps_per_seq):
            yield (True,), True, self.step_ii

    def describe(self) -> dict[str, Any]:
        d = {**super().describe(), "step_ii": self.step_ii, "reuse": self.reuse,
             "sequence_cycles": self.step_ii * self.steps_per_seq,
             "multipliers": self.dense.multipliers}
        if self.dense2 is not None:
            d["multipliers"] += self.dense2.multipliers
        return d

    # -- the circuit -----------------------------------------------------------------------
    def elaborate(self, platform: object) -> Module:
        m = Module()
        en, hid, ty = self.en, self.hid, self.types
        th, tp, tf, tg = ty["state_type"], ty["pre_type"], ty["f_type"], ty["g_type"]
        fire = self._issue(m, [1], self.step_ii - 1)
        pulses: dict[int, Value] = {0: fire}

        def at(k: int) -> Value:
            """fire delayed by k enabled cycles."""
            if k not in pulses:
                prev = at(k - 1)
                s = Signal(name=f"at{k}")
                with m.If(en):
                    m.d.sync += s.eq(prev)
                pulses[k] = s
            return pulses[k]

        def hold(vals: list[Value], when: Value, name: str) -> list[Signal]:
            out = []
            for i, v in enumerate(vals):
                v = Value.cast(v)
                s = Signal(v.shape(), name=f"{name}{i}", reset_less=True)
                with m.If(en & when):
                    m.d.sync += s.eq(v)
                out.append(s)
            return out

        tx = self.tx
        x = [fit(self.i0.payload[i * tx.width:(i + 1) * tx.width], tx.width, tx.signed)
             for i in range(self.ins[0].elements)]
        xr = hold(x, fire, "x")
        hreg = [Signal(shape_of(th), name=f"h{i}", init=self.h0[i]) for i in range(hid)]
        creg: list[Signal] = []
        if self.op == "LSTM":
            tc = ty["cell_type"]
            c0 = self.c0 or [0] * hid
            creg = [Signal(shape_of(tc), name=f"c{i}", init=c0[i]) for i in range(hid)]
        tv = self.tv

        def pack(xs: list[Value], hs: list[Value], ft: FixedType) -> Value:
            vs = [_align(v, tx.frac, self.fxh) for v in xs] + \
                 [_align(v, ft.frac, self.fxh) for v in hs]
            return Cat(*[fit(v, tv.width, True) for v in vs])

        def sums(d: Dense) -> list[Value]:
            t = self.tacc
            return [fit(d.y[i * t.width:(i + 1) * t.width], t.width, True)
                    for i in range(d.n_out)]

        def pre(a: Value, frac: int) -> Value:
            p = requantize(a, frac, tp)
            if self.cc is None:
                return p
            return Mux(p > self.cc, self.cc, Mux(p < -self.cc, -self.cc, p))

        roms: dict[int, list[Any]] = {k: [] for k in range(len(self.tables))}

        def look(k: int, q: Value) -> Value:
            """One lookup of table k: a read port of a copy of the ROM holding at most
            TABLE_PORTS of them (a block RAM's ports: each copy maps to one)."""
            vals, lo, shift = self.tables[k]
            copies = roms[k]
            if not copies or copies[-1][1] == TABLE_PORTS:
                name = f"table_{'fgh'[k]}{len(copies)}"
                copies.append([table_rom(m, name, vals, ty[("f_type", "g_type", "h_type")[k]]), 0])
            copies[-1][1] += 1
            rp = copies[-1][0].read_port(domain="sync")
            m.d.comb += [rp.addr.eq(table_index(q, lo, shift, len(vals))), rp.en.eq(en)]
            return rp.data

        m.submodules.gates = d1 = circuit(self.dense)
        m.d.comb += [d1.en.eq(en), d1.start.eq(fire), d1.x0.eq(pack(x, hreg, th))]
        ld = self.dense.latency
        a = sums(self.dense)
        fa = self.fa
        newh: list[Value]
        newc: list[Value] = []
        if self.op == "LSTM":
            tc, tht = ty["cell_type"], ty["h_type"]
            p = [pre(v, fa) for v in a]  # cycle ld
            gates = [look(0, p[k]) for k in range(3 * hid)] + \
                    [look(1, p[k]) for k in range(3 * hid, 4 * hid)]  # cycle ld + 1
            i_, o_, f_, g_ = (gates[k * hid:(k + 1) * hid] for k in range(4))
            fu = max(tf.frac + tc.frac, tf.frac + tg.frac)
            cn = [requantize(_align(_sx(f_[j]) * creg[j], tf.frac + tc.frac, fu)
                             + _align(_sx(i_[j]) * _sx(g_[j]), tf.frac + tg.frac, fu), fu, tc)
                  for j in range(hid)]
            cr = hold([fit(v, tc.width, tc.signed) for v in cn], at(ld + 1), "cn")
            orr = hold(o_, at(ld + 1), "o")
            hc = [look(2, cr[j]) for j in range(hid)]  # cycle ld + 3
            newh = [requantize(_sx(orr[j]) * _sx(hc[j]), tf.frac + tht.frac, th)
                    for j in range(hid)]
            newc = list(cr)
            write = at(ld + 3)
        elif self.lbr:
            thn = ty["hn_type"]
            p = [pre(v, fa) for v in a[:2 * hid]]
            zr = [look(0, v) for v in p]  # cycle ld + 1
            axn = hold(a[2 * hid:3 * hid], at(ld), "axn")
            hn = hold([fit(requantize(v, fa, thn), thn.width, thn.signed)
                       for v in a[3 * hid:]], at(ld), "hn")
            fs = max(fa, tf.frac + thn.frac)
            pc = [pre(_align(axn[j], fa, fs)
                      + _align(_sx(zr[hid + j]) * _sx(hn[j]), tf.frac + thn.frac, fs), fs)
                  for j in range(hid)]
            n_ = [look(1, v) for v in pc]  # cycle ld + 2
            z = hold(zr[:hid], at(ld + 1), "z")
            newh = self._gru_h(z, n_, hreg)
            write = at(ld + 2)
        else:
            assert self.dense2 is not None
            p = [pre(v, fa) for v in a]
            zr = [look(0, v) for v in p]  # cycle ld + 1
            z = hold(zr[:hid], at(ld + 1), "z")
            rh = hold([fit(requantize(_sx(zr[hid + j]) * hreg[j], tf.frac + th.frac, th),
                           th.width, th.signed) for j in range(hid)], at(ld + 1), "rh")
            m.submodules.cand = d2 = circuit(self.dense2)
            s2 = ld + 2  # pass 2 starts with rh in its register
            m.d.comb += [d2.en.eq(en), d2.start.eq(at(s2)), d2.x0.eq(pack(xr, rh, th))]
            a2 = sums(self.dense2)
            n_ = [look(1, pre(v, fa)) for v in a2]  # cycle s2 + ld2 + 1
            newh = self._gru_h(z, n_, hreg)
            write = at(s2 + self.dense2.latency + 1)
        # the state registers (h0 / c0 after the sequence's last step) and the output token
        last = self.steps_per_seq - 1
        cnt = Signal(range(max(2, self.steps_per_seq)), name="t")
        tout = self.out.t
        outv = newc if self.op == "LSTM" and self.emit == "c" else newh
        yreg = hold([fit(v, tout.width, tout.signed) for v in outv], write, "y")
        with m.If(en & write):
            m.d.sync += cnt.eq(Mux(cnt == last, 0, cnt + 1))
            with m.If(cnt == last):
                m.d.sync += [hreg[j].eq(self.h0[j]) for j in range(hid)]
                m.d.sync += [creg[j].eq(self.c0[j] if self.c0 else 0) for j in range(len(creg))]
            with m.Else():
                m.d.sync += [hreg[j].eq(fit(newh[j], th.width, th.signed)) for j in range(hid)]
                m.d.sync += [creg[j].eq(fit(newc[j], len(creg[j]), creg[j].shape().signed))
                             for j in range(len(creg))]
        assert self.lat == self._write_cycle() + 1
        m.d.comb += [self.y.eq(Cat(*yreg)), self.push.eq(en & at(self.lat))]
        return m

    def _write_cycle(self) -> int:
        """Cycles from a step's fire to the write of its state registers (elaborate's
        schedule): the Dense's latency, then the tail (TAIL - 1 cycles)."""
        ld = self.dense.latency
        if self.op == "LSTM":
            return ld + TAIL["LSTM"] - 1
        if self.lbr:
            return ld + TAIL["GRU1"] - 1
        assert self.dense2 is not None  # pass 2 starts 2 cycles after pass 1's sums
        return ld + 2 + self.dense2.latency + TAIL["GRU0"] - 2

    def _gru_h(self, z: list[Value], n_: list[Value], h: list[Value]) -> list[Value]:
        ty = self.types
        th, tf, tg = ty["state_type"], ty["f_type"], ty["g_type"]
        one = 1 << tf.frac
        fu = max(tf.frac + tg.frac, tf.frac + th.frac)
        return [requantize(_align((one - _sx(z[j])) * _sx(n_[j]), tf.frac + tg.frac, fu)
                           + _align(_sx(z[j]) * _sx(h[j]), tf.frac + th.frac, fu), fu, th)
                for j in range(self.hid)]


class SelectUnit(SUnit):
    """The Gather of one step of a sequence (Y_h, the last state): the token at `index` of
    each frame, as a vector (one token per frame); latency 1."""

    def __init__(self, tin: Tok, index: int):
        super().__init__([tin], Tok(tin.t, tin.elements, 1))
        self.index = int(index)
        self.lat = 1

    def steps(self) -> Iterator[Step]:
        for i in range(self.ins[0].per_frame):
            yield (True,), i == self.index, 1

    def elaborate(self, platform: object) -> Module:
        m = Module()
        n = self.ins[0].per_frame
        cnt = Signal(range(max(2, n)), name="cnt")
        fire = self._issue(m, [1], 0)
        keep = Signal(self.ins[0].width, name="keep", reset_less=True)
        done = Signal(name="done")
        with m.If(fire):
            m.d.sync += cnt.eq(Mux(cnt == n - 1, 0, cnt + 1))
            with m.If(cnt == self.index):
                m.d.sync += keep.eq(self.i0.payload)
        with m.If(self.en):
            m.d.sync += done.eq(fire & (cnt == self.index))
        m.d.comb += [self.y.eq(keep), self.push.eq(self.en & done)]
        return m


__all__ = ["TABLE_PORTS", "TAIL", "RecurrentUnit", "SelectUnit", "table_lookups"]
