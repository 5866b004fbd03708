"""The streaming attention circuit: multi-head scaled dot-product self-attention over a token
sequence, tokens in, tokens out, the contract of graphs/attention.py (`attention_codes`) bit
for bit; and the streamed lowerings of Attention and LayerNorm (hdl/streamed/lower.py's
table names them).

`AttentionUnit` takes three token streams q (T, H*dk), k and v (S, H*dk / H*dv) (in a
self-attention layer the three token-wise Dense projections of one sequence: T = S) and
emits T tokens of H*dv codes. A sequence:
  load:  S steps of one cycle, each consuming one q, one k and one v token into three
         memories of S words (block RAM: the token buffer, sized at compile time);
  rows:  T steps, one output token each, `row_cycles` = 3 S + 8 cycles from a row's start to
         its token; a row starts every `row_interval` = 2 S + 5 cycles (the next row's passes
         1-2 run beside this row's pass 3: a front counter and a back counter). All heads
         run side by side; the keys are serial (one key per cycle: H*dk multipliers for the
         scores, H*dv for the values, H for the probabilities, reused over the S keys):
           pass 1, cycles 1..S+2:    k_s read, q.k_s products (registered), the per-head
                                     sums (registered), then the score (the scale, the
                                     optional constant mask from a ROM of T*S words) shifted
                                     into a ring of S scores per head, the running max over
                                     the keys the mask keeps;
           pass 2, cycles S+3..2S+3: the ring rotates through the exp table (one ROM copy per
                                     head, registered read), e (0 where the mask removes the
                                     key) into a second ring and the per-head sum;
           cycle 2S+4:               the reciprocal table read;
           pass 3, cycles 2S+5..3S+6: e * r requantized to the probability (registered),
                                     v_s read, p * v products (registered), accumulated;
           cycle 3S+7:               the output token requantized into its register; pushed
                                     the next cycle (the row's latency is its duration).
The sequence occupies the unit S + (T - 1) * row_interval + row_cycles cycles (its II per
sequence: the last row runs whole, so the next load never overwrites a v that pass 3 still
reads); the first output token leaves row_cycles cycles after the load's last step. hdl/streamed/top.py's schedule runs these steps as it runs every unit's, so the
FIFOs (the residual path's holds the sequence while the unit works) and the latency per
sequence are compile-time data, checked in simulation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, Value, signed
from amaranth.lib.memory import Memory

from ...graphs import attention as attn
from ...graphs import fixed as fx
from ...graphs.ops import AttentionAttrs
from ...graphs.types import FixedType
from ..errors import HdlError
from ..units.arith import fit, overflow, requantize, shape_of, table_index
from ..units.elementwise import table_read, table_rom
from .units import Step, SUnit, Tok


def row_cycles(s: int) -> int:
    """Cycles from a row's start to its output token: three passes over the S keys plus the
    pipeline (module docstring)."""
    return 3 * s + 8


def row_interval(s: int) -> int:
    """Cycles between two rows' starts: the next row's passes 1 and 2 overlap this row's pass
    3 (the front part, passes 1-2 and the reciprocal, is 2S + 4 cycles long)."""
    return 2 * s + 5


def sequence_cycles(t: int, s: int) -> int:
    """Cycles one sequence occupies the unit: the load, T - 1 row intervals, the last row
    whole (the next load may not overwrite v while its pass 3 reads it)."""
    return s + (t - 1) * row_interval(s) + row_cycles(s)


class AttentionUnit(SUnit):
    """Multi-head self-attention as a stream unit (module docstring). Codes and tables as
    graphs/attention.py's `attention_codes` takes them; `mask_codes` / `keep`: (T, S) or
    None."""

    def __init__(self, tq: Tok, tk: Tok, tv: Tok, heads: int, scale_code: int,
                 scale_frac: int, score_type: FixedType, mask_codes: np.ndarray | None,
                 keep: np.ndarray | None, exp: tuple[np.ndarray, FixedType, int, int],
                 recip: tuple[np.ndarray, FixedType, int, int], prob_type: FixedType,
                 out_type: FixedType, where: str = "Attention"):
        h = int(heads)
        if tq.per_frame != tk.per_frame or tk.per_frame != tv.per_frame:
            raise HdlError(f"{where}: q, k and v stream {tq.per_frame}, {tk.per_frame} and "
                           f"{tv.per_frame} tokens; the streamed circuit takes self-attention "
                           "(one sequence for the three)")
        if h < 1 or tq.elements % h or tv.elements % h or tq.elements != tk.elements:
            raise HdlError(f"{where}: {h} heads do not divide q/k ({tq.elements}, "
                           f"{tk.elements}) and v ({tv.elements})")
        super().__init__([tq, tk, tv], Tok(out_type, tv.elements, tq.per_frame))
        self.heads, self.dk, self.dv = h, tq.elements // h, tv.elements // h
        self.t_len, self.s_len = tq.per_frame, tk.per_frame
        self.scale_code, self.scale_frac = int(scale_code), int(scale_frac)
        self.score_type, self.prob_type, self.out_type = score_type, prob_type, out_type
        self.mask_codes = None if mask_codes is None else np.asarray(mask_codes, np.int64)
        self.keep = None if keep is None else np.asarray(keep, dtype=bool)
        for a in (self.mask_codes, self.keep):
            if a is not None and a.shape != (self.t_len, self.s_len):
                raise HdlError(f"{where}: the mask's shape {list(a.shape)} is not "
                               f"[{self.t_len}, {self.s_len}]")
        if self.keep is not None and not self.keep.any(axis=1).all():
            raise HdlError(f"{where}: the mask removes every key of a row")
        self.exp = (np.asarray(exp[0], np.int64),) + tuple(exp[1:])
        self.recip = (np.asarray(recip[0], np.int64),) + tuple(recip[1:])
        self.row = row_cycles(self.s_len)
        self.interval = row_interval(self.s_len)
        self.lat = self.row
        self.multipliers = h * (self.dk + self.dv + 1)
        self.buffer_bits = self.s_len * (tq.width + tk.width + tv.width)

    @property
    def max_dur(self) -> int:
        return self.row

    def steps(self) -> Iterator[Step]:
        for _ in range(self.s_len):
            yield (True, True, True), False, 1
        for r in range(self.t_len):
            yield (False, False, False), True, self.row if r == self.t_len - 1 \
                else self.interval

    def products(self) -> list[tuple[int, int, int]]:
        """(A width, B width, count) of the products `elaborate` writes as `*` (the `$mul`s
        yosys lists before choosing DSP blocks, hdl/flow/yosys.py): q * k (H*dk), the sum
        times the scale code (H), e * r (H), p * v (H*dv)."""
        from ..units.layernorm import mul_operands

        h, dk, dv = self.heads, self.dk, self.dv
        tq, tk, tv = self.ins
        qk = Signal(shape_of(tq.t)) * Signal(shape_of(tk.t))
        acc = _tree([qk] * dk)
        e_w = max(1, int(self.exp[0].max(initial=0)).bit_length())
        out = [(*mul_operands(Signal(shape_of(tq.t)), Signal(shape_of(tk.t))), h * dk),
               (*mul_operands(acc, self.scale_code), h),
               (*mul_operands(Signal(e_w), Signal(shape_of(self.recip[1]))), h),
               (*mul_operands(Signal(shape_of(self.prob_type)), Signal(shape_of(tv.t))),
                h * dv)]
        return out

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "heads": self.heads, "dk": self.dk, "dv": self.dv,
                "row_cycles": self.row, "row_interval": self.interval,
                "sequence_cycles": sequence_cycles(self.t_len, self.s_len),
                "multipliers": self.multipliers, "token_buffer_bits": self.buffer_bits,
                "masked": self.keep is not None or self.mask_codes is not None}

    # -- the circuit -----------------------------------------------------------------------
    def _split(self, word: Value, tok: Tok) -> list[Value]:
        w = tok.t.width
        return [fit(word[i * w:(i + 1) * w], w, tok.t.signed) for i in range(tok.elements)]

    def elaborate(self, platform: object) -> Module:
        m = Module()
        en = self.en
        h, dk, dv, S, T, L = self.heads, self.dk, self.dv, self.s_len, self.t_len, self.row
        tq, tk, tv = self.ins
        st, pt, ot = self.score_type, self.prob_type, self.out_type
        etab, et, elo, esh = self.exp
        rtab, rt, rlo, rsh = self.recip

        loading = Signal(init=1, name="loading")
        t = Signal(range(max(2, S, T)), name="t")
        F = 2 * S + 4  # the front: passes 1 and 2, the reciprocal read
        fire = self._issue(m, [loading] * 3,
                           Mux(loading, 0, Mux(t == T - 1, L - 1, self.interval - 1)))
        load = Signal(name="load")
        start = Signal(name="row_start")
        m.d.comb += [load.eq(fire & loading), start.eq(fire & ~loading)]

        # the token buffer
        mems, rports = [], []
        aw = max(1, (S - 1).bit_length())
        for k, tok in enumerate(self.ins):
            mem = Memory(shape=tok.width, depth=S, init=[], attrs={"ram_style": "block"})
            m.submodules[f"buf_{'qkv'[k]}"] = mem
            wp = mem.write_port()
            m.d.comb += [wp.addr.eq(t), wp.data.eq(self._port(k).payload), wp.en.eq(load)]
            rp = mem.read_port(domain="sync")
            m.d.comb += rp.en.eq(en)
            mems.append(mem)
            rports.append(rp)
        with m.If(load):
            with m.If(t == S - 1):
                m.d.sync += [t.eq(0), loading.eq(0)]
            with m.Else():
                m.d.sync += t.eq(t + 1)

        # the front counter c (0 at a row's start, 1..F while it runs), then the back
        # counter c2 (pass 3 and the output: row cycle F + c2); the next row's front may run
        # beside this row's back
        c = Signal(range(F + 1), name="c")
        run = Signal(name="run")
        c2 = Signal(range(L - F + 1), name="c2")
        run2 = Signal(name="run2")
        with m.If(en):
            with m.If(start):
                m.d.sync += [c.eq(1), run.eq(1)]
            with m.Elif(run):
                m.d.sync += c.eq(c + 1)
                with m.If(c == F):
                    m.d.sync += [c.eq(0), run.eq(0)]
                    with m.If(t == T - 1):
                        m.d.sync += [t.eq(0), loading.eq(1)]
                    with m.Else():
                        m.d.sync += t.eq(t + 1)
            with m.If(run & (c == F)):
                m.d.sync += [c2.eq(1), run2.eq(1)]
            with m.Elif(run2):
                m.d.sync += c2.eq(c2 + 1)
                with m.If(c2 == L - F - 1):
                    m.d.sync += [c2.eq(0), run2.eq(0)]

        def at(k: int) -> Value:
            return run & (c == k) if k <= F else run2 & (c2 == k - F)

        def between(a: int, b: int) -> Value:
            if a > F:
                return run2 & (c2 >= a - F) & (c2 <= b - F)
            assert b <= F
            return run & (c >= a) & (c <= b)

        def reg(v: Value, name: str, when: Value | None = None, shape: Any = None) -> Signal:
            v = Value.cast(v)
            s = Signal(shape if shape is not None else v.shape(), name=name, reset_less=True)
            with m.If(en if when is None else en & when):
                m.d.sync += s.eq(v)
            return s

        rq, rk, rv = rports
        m.d.comb += [rq.addr.eq(t), rk.addr.eq(fit(c, aw, False)),
                     rv.addr.eq(fit(c2 - (2 * S + 5 - F), aw, False))]
        q = self._split(rq.data, tq)
        kk = self._split(rk.data, tk)
        vv = self._split(rv.data, tv)

        # pass 1: scores
        prods = [[reg(q[hh * dk + j] * kk[hh * dk + j], f"qk{hh}_{j}") for j in range(dk)]
                 for hh in range(h)]
        sums = [reg(_tree(p), f"a{hh}") for hh, p in enumerate(prods)]
        fs = tq.t.frac + tk.t.frac + self.scale_frac
        scores = [requantize(a * self.scale_code, fs, st) for a in sums]
        keep_now: Value = Value.cast(1)
        if self.mask_codes is not None or self.keep is not None:
            mc = self.mask_codes if self.mask_codes is not None else np.zeros((T, S), np.int64)
            kp = self.keep if self.keep is not None else np.ones((T, S), bool)
            words = [(int(code) & ((1 << st.width) - 1)) | (int(kb) << st.width)
                     for code, kb in zip(mc.reshape(-1), kp.reshape(-1), strict=True)]
            mrom = Memory(shape=st.width + 1, depth=T * S, init=words)
            m.submodules.mask_rom = mrom
            mw = max(1, (T * S - 1).bit_length())
            mdata = table_read(m, mrom, fit(t * S + c - 2, mw, False), en)
            if self.mask_codes is not None:
                mcode = fit(mdata[:st.width], st.width, True)
                scores = [overflow(sc + mcode, st) for sc in scores]
            keep_now = mdata[st.width]
        scores = [fit(sc, st.width, st.signed) for sc in scores]
        p1 = between(3, S + 2)
        p2 = between(S + 3, 2 * S + 2)
        ring = [[Signal(shape_of(st), name=f"sc{hh}_{i}", reset_less=True) for i in range(S)]
                for hh in range(h)]
        kring = [Signal(name=f"keep{i}", reset_less=True) for i in range(S)]
        mx = [Signal(shape_of(st), name=f"mx{hh}", reset_less=True) for hh in range(h)]
        with m.If(en & p1):
            for hh in range(h):
                m.d.sync += [ring[hh][i].eq(ring[hh][i + 1]) for i in range(S - 1)]
                m.d.sync += ring[hh][S - 1].eq(scores[hh])
                base = Mux(c == 3, st.qmin, mx[hh])
                m.d.sync += mx[hh].eq(Mux(keep_now & (scores[hh] > base), scores[hh], base))
            m.d.sync += [kring[i].eq(kring[i + 1]) for i in range(S - 1)]
            m.d.sync += kring[S - 1].eq(keep_now)
        # pass 2: exp, the sums
        with m.If(en & p2):
            for hh in range(h):
                m.d.sync += [ring[hh][i].eq(ring[hh][(i + 1) % S]) for i in range(S)]
            m.d.sync += [kring[i].eq(kring[(i + 1) % S]) for i in range(S)]
        k1 = reg(kring[0], "keep_d")
        e_w = max(1, int(etab.max(initial=0)).bit_length())
        s_w = max(1, (S * int(etab.max(initial=0))).bit_length())
        p2e = between(S + 4, 2 * S + 3)
        ering = [[Signal(e_w, name=f"e{hh}_{i}", reset_less=True) for i in range(S)]
                 for hh in range(h)]
        esum = [Signal(s_w, name=f"esum{hh}", reset_less=True) for hh in range(h)]
        p3 = between(2 * S + 5, 3 * S + 4)
        rvals = []
        for hh in range(h):
            erom = table_rom(m, f"exp_table{hh}", etab, et)
            e = table_read(m, erom, table_index(ring[hh][0] - mx[hh], elo, esh, len(etab)), en)
            ev = Mux(k1, fit(e, e_w, False), 0)
            with m.If(en & p2e):
                m.d.sync += [ering[hh][i].eq(ering[hh][i + 1]) for i in range(S - 1)]
                m.d.sync += ering[hh][S - 1].eq(ev)
                m.d.sync += esum[hh].eq(fit(Mux(c == S + 4, 0, esum[hh]) + ev, s_w, False))
            with m.If(en & p3):
                m.d.sync += [ering[hh][i].eq(ering[hh][(i + 1) % S]) for i in range(S)]
            rrom = table_rom(m, f"recip_table{hh}", rtab, rt)
            rp = rrom.read_port(domain="sync")
            m.d.comb += [rp.addr.eq(table_index(esum[hh], rlo, rsh, len(rtab))),
                         rp.en.eq(en & at(2 * S + 4))]
            rvals.append(rp.data)
        # pass 3: probabilities, p * v, the accumulators
        probs = [reg(fit(requantize(ering[hh][0] * rvals[hh], et.frac + rt.frac, pt),
                         pt.width, pt.signed), f"p{hh}") for hh in range(h)]
        pv = [[reg(probs[hh] * vv[hh * dv + j], f"pv{hh}_{j}") for j in range(dv)]
              for hh in range(h)]
        acc_w = pt.width + tv.t.width + max(1, S.bit_length()) + 1
        p3a = between(2 * S + 7, 3 * S + 6)
        accs = []
        for hh in range(h):
            for j in range(dv):
                a = Signal(signed(acc_w), name=f"acc{hh}_{j}", reset_less=True)
                with m.If(en & p3a):
                    m.d.sync += a.eq(Mux(at(2 * S + 7), 0, a) + pv[hh][j])
                accs.append(a)
        fo = pt.frac + tv.t.frac
        ys = [reg(fit(requantize(a, fo, ot), ot.width, ot.signed), f"y{i}", at(3 * S + 7),
                  shape_of(ot)) for i, a in enumerate(accs)]
        pend = reg(at(3 * S + 7), "pend")
        m.d.comb += [self.y.eq(Cat(*ys)), self.push.eq(en & pend)]
        assert 3 * S + 8 == L and self.interval == F + 1
        return m


def _tree(vals: list[Value]) -> Value:
    cur: list[Value] = list(vals)
    while len(cur) > 1:
        cur = [cur[i] + cur[i + 1] if i + 1 < len(cur) else cur[i] for i in range(0, len(cur), 2)]
    return cur[0]


def attention_unit(g: Any, node: Any, toks: list[Tok]) -> AttentionUnit:
    """The unit of a compiled Attention node (its attributes and constants) for the three
    token streams `toks` (q, k, v)."""
    where = f"node {node.name} ({node.op})"
    a = AttentionAttrs.of(node)
    if a.score_type is None or a.prob_type is None or a.exp_type is None or \
            a.recip_type is None or len(node.inputs) < 5:
        raise HdlError(f"{where}: no score types or Softmax tables; compile the graph first")
    tlen, slen = toks[0].per_frame, toks[1].per_frame
    mask_codes = keep = None
    if a.masked:
        mask = np.asarray(g.constants[node.inputs[3]], dtype=np.float64)
        while mask.ndim > 2 and mask.shape[0] == 1:
            mask = mask[0]
        try:
            mask = np.broadcast_to(mask, (tlen, slen))
        except ValueError:
            raise HdlError(f"{where}: the mask of shape {list(mask.shape)} is not "
                           f"[{tlen}, {slen}] (one constant mask for every head)") from None
        keep = attn.mask_keep(mask)
        finite = np.where(keep, mask, 0.0)
        if finite.any():
            mask_codes = fx.quantize(finite, a.score_type)
        if keep.all():
            keep = None
    exp_t, rec_t = (np.asarray(g.constants[n], dtype=np.int64) for n in node.inputs[-2:])
    out_t = g.tensor(node.outputs[0]).dtype
    if not isinstance(out_t, FixedType):
        raise HdlError(f"{where}: the output is not fixed point")
    return AttentionUnit(toks[0], toks[1], toks[2], a.heads, int(a.scale_code),
                         int(a.scale_frac), a.score_type, mask_codes, keep,
                         (exp_t, a.exp_type, int(a.exp_lo), int(a.exp_shift)),
                         (rec_t, a.recip_type, int(a.recip_lo), int(a.recip_shift)),
                         a.prob_type, out_t, where)


def fixed_products(g: Any, reuse: Any) -> list[tuple[str, int, int, int]]:
    """(node, A width, B width, count) of every product the attention circuits write as a
    `$mul` of two signals (or of a signal and a constant), which yosys keeps in a DSP block
    or builds as logic after the fact: those of each Attention node's unit and each
    LayerNorm's (folded as `layernorm_passes` decides for `reuse`, the plan's). The circuit
    plan (hdl/plan/circuit.dsp_lanes) gives them the device's DSP blocks before the Dense
    lanes, and the estimate (hdl/flow/attention_cost.py) counts them, as the flow
    (hdl/flow/yosys.soft_products, the widest first) does; issue 25: uncounted, they took
    82 of the ECP5-85k's 156 DSP blocks that the plan had given to Dense lanes, and yosys
    made 70 of those lanes booth logic."""
    from ...graphs.ops import Op
    from ..units.layernorm import layernorm_unit

    out: list[tuple[str, int, int, int]] = []
    for n in g.nodes:
        try:
            if n.op == Op.ATTENTION and len(n.inputs) >= 5:
                toks = []
                for x in n.inputs[:3]:
                    shp = g.tensor(x).shape
                    toks.append(Tok(g.tensor(x).dtype, int(shp[-1]),
                                    int(np.prod(shp[:-1])) if len(shp) > 1 else 1))
                prods = attention_unit(g, n, toks).products()
            elif n.op == Op.LAYER_NORM and len(n.inputs) >= 6:
                shp = g.tensor(n.inputs[0]).shape
                passes = layernorm_passes(g, n, reuse) if streams_tokens(g, n) else 0
                prods = layernorm_unit(g, n, g.tensor(n.inputs[0]).dtype, int(shp[-1]),
                                       g.tensor(n.outputs[0]).dtype, passes).products()
            else:
                continue
        except (HdlError, AttributeError, TypeError, ValueError):
            continue  # the circuit refuses it with its own message
        out += [(n.name, a, b, k) for a, b, k in prods if k]
    return out


# -- the streamed lowerings (hdl/streamed/lower.py's STREAM_LOWERING names them) -------------
def streams_tokens(g: Any, node: Any) -> bool:
    """Does this node make a model streamed (one token per handshake)? Attention always; a
    LayerNorm over the last axis of a (T, D) sequence."""
    from ...graphs.ops import Op

    if node.op == Op.ATTENTION:
        return True
    return node.op == Op.LAYER_NORM and len(g.tensor(node.inputs[0]).shape) >= 2


def lower_attention(lw: Any, node: Any, inst: str) -> None:
    """Attention on three token streams -> AttentionUnit."""
    where = f"node {node.name} ({node.op})"
    ins = lw.ins(node)
    if len(ins) != 3 or not all(i[2] for i in ins):
        raise HdlError(f"{where}: q, k and v must be token streams (a (T, D) sequence each)")
    unit = attention_unit(lw.g, node, [i[1] for i in ins])
    lw.add(inst, node, unit, [i[0] for i in ins], True, kind="attention, keys serial",
           row_cycles=unit.row, sequence_cycles=sequence_cycles(unit.t_len, unit.s_len))


def layernorm_passes(g: Any, node: Any, reuse: Any) -> int:
    """Cycles per pass of a streamed LayerNorm (hdl/units/layernorm.py LayerNormFold): the
    plan's reuse for the node if it names one, else the most that keeps its II within the
    cycles per token the design takes anyway: the graph's attention (its sequence time over
    its tokens) or, where slower, a token-wise Dense at its reuse (one token per R cycles),
    else 0 (the parallel unit, II 1)."""
    from ...graphs.ops import Op
    from ..units.layernorm import fold_passes

    if node.name in reuse:
        return int(reuse[node.name])
    rows = [sequence_cycles(int(g.tensor(n.inputs[0]).shape[-2]),
                            int(g.tensor(n.inputs[1]).shape[-2]))
            // int(g.tensor(n.inputs[0]).shape[-2]) for n in g.nodes if n.op == Op.ATTENTION]
    if not rows:
        return 0
    per_token = [int(reuse[n.name]) for n in g.nodes
                 if n.op == Op.DENSE and isinstance(reuse.get(n.name), int)
                 and len(g.tensor(n.inputs[0]).shape) >= 2]
    d = int(g.tensor(node.inputs[0]).shape[-1])
    return fold_passes(d, max([min(rows), *per_token]))


def lower_layer_norm(lw: Any, node: Any, inst: str) -> None:
    """LayerNorm of every token of a stream -> MapUnit(LayerNormUnit)."""
    from ..units.arith import check_fixed
    from ..units.layernorm import layernorm_unit
    from .units import MapUnit

    g, where = lw.g, f"node {node.name} ({node.op})"
    s, tok, px = lw.ins(node)[0]
    out = node.outputs[0]
    tout = check_fixed(g.tensor(out).dtype, f"{where}, tensor {out!r}")
    if not px and tok.per_frame != 1:
        raise HdlError(f"{where}: its input is not a token stream")
    unit = layernorm_unit(g, node, tok.t, tok.elements, tout,
                          layernorm_passes(g, node, lw.opt.reuse))
    lw.add(inst, node, MapUnit(unit, [tok], Tok(tout, tok.elements, tok.per_frame)), [s], px,
           kind="LayerNorm per token")

__all__ = ["AttentionUnit", "attention_unit", "fixed_products", "layernorm_passes", "lower_attention",
           "lower_layer_norm",
           "row_cycles", "sequence_cycles", "streams_tokens"]
