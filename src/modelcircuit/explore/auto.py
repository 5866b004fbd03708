"""`--precision auto`: per-tensor widths for the cheapest design (by the flow's resource
estimate) whose argmax agreement with the float model on the data stays >= the target —
what HGQ learns in training, searched here after training.

1. Integer bits and signedness come from calibration on the data: the model compiled at a
   uniform `fixed<W0,·>` with `calibrate=x` (W0 = 8 unless given), whose types also give
   the baseline ("uniform fixed<8,3> calibrated").
2. Every typed tensor of the circuit (the input, each layer's result, each Dense layer's
   weights and bias) is a knob: its width. A width assignment is written as a per-layer
   precision map ({node: {result, weight, bias}}, the format of `compile --precision`), so
   what is searched is exactly what the written JSON reproduces; the map of the baseline
   widths is checked to give the baseline's types before the search starts.
3. If the baseline misses the target, the uniform width grows until it meets it. Then, knob
   by knob (weights first, the largest layers first), the least width that keeps the target
   is found by bisection with the others held; passes repeat until none changes.
4. Cost: the estimate (LUT, or logic cells on iCE40) on the sweep's first device at the
   baseline's reuse plan held fixed (the plan the first `--reuse` gives for the baseline),
   so widths are compared on equal terms. The widths found are then swept like any other
   precision over every reuse and device.

The agreement is measured on the data the search runs on (the bundled test split by
default): pass held-out data with --data to keep the choice honest for new inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..graphs.host import golden
from .common import compile_model
from .spec import SweepError

MIN_WIDTH = 2
MAX_WIDTH = 16
MAX_PASSES = 3


@dataclass
class AutoResult:
    per_layer: dict[str, Any]
    default: str
    agreement: float
    cost: int
    lut_unit: str
    baseline: dict[str, Any]
    widths: dict[str, int]
    evaluations: int
    reuse_plan: dict[str, int]
    history: list[dict[str, Any]] = field(default_factory=list)

    def precision_json(self) -> dict[str, Any]:
        return {**self.per_layer, "default": self.default}

    def summary(self) -> dict[str, Any]:
        saved = 1 - self.cost / self.baseline["cost"] if self.baseline["cost"] else 0.0
        return {"chosen": {"agreement": self.agreement, "cost": self.cost,
                           "widths": dict(self.widths)},
                "baseline": dict(self.baseline), "lut_unit": self.lut_unit,
                "reduction": round(saved, 4), "evaluations": self.evaluations,
                "reuse_plan": dict(self.reuse_plan), "precision": self.precision_json()}


def _knob_map(graph: Any, ref: Any) -> dict[str, list[tuple[str, str]]]:
    """Per typed tensor of the compiled circuit, the per-layer entries (node, part) that
    set its type: inputs by name; a node's result by the compiled node's name and by the
    source node that produced the tensor (a fused ReLU, a folded bias Add); constants as
    the compiled node's weight / bias."""
    g = ref.graph
    producer = {o: n.name for n in graph.nodes for o in n.outputs}
    out: dict[str, list[tuple[str, str]]] = {}
    for x in g.inputs:
        out[x] = [(x, "result")]
    for n in g.nodes:
        t = n.outputs[0]
        keys = [(n.name, "result")]
        if producer.get(t) not in (None, n.name):
            keys.append((producer[t], "result"))
        out.setdefault(t, []).extend(keys)
        for k, c in enumerate(n.inputs[1:3], start=1):
            if c and c in g.constants:
                out.setdefault(c, []).append((n.name, "weight" if k == 1 else "bias"))
    return {t: v for t, v in out.items()
            if g.tensor(t).dtype is not None and not g.tensor(t).dtype.is_float}


def _type_text(t: Any) -> str:
    return str(t)


class Search:
    """Widths -> (agreement, cost), cached; the compile of a width assignment goes through
    the per-layer map it writes."""

    def __init__(self, graph: Any, x: np.ndarray, float_argmax: np.ndarray, device: str,
                 reuse: int | str, start_width: int, say: Callable[[str], None]):
        from ..graphs.types import parse_type
        from ..hdl.flow import fpga_profile, plan_build

        self.graph, self.x, self.fa, self.say = graph, x, float_argmax, say
        self.prof = fpga_profile(device)
        self.device = device
        self.default = f"fixed<{start_width},3,RND>"
        self.ref = compile_model(graph, precision=f"fixed<{start_width},3>", calibrate=x,
                              reuse=reuse, profile=device)
        plan, fp = plan_build(self.ref, self.prof, reuse)
        self.plan = {k: int(v) for k, v in plan.reuse.items()}
        self.lut_unit = fp.lut_unit
        self.knobs = _knob_map(graph, self.ref)
        self.base = {t: self.ref.graph.tensor(t).dtype for t in self.knobs}
        self.parse = parse_type
        self.cache: dict[tuple[int, ...], tuple[float, int]] = {}
        self.order = self._order()

    def _order(self) -> list[str]:
        g = self.ref.graph
        consts = sorted((t for t in self.knobs if t in g.constants),
                        key=lambda t: -int(np.asarray(g.constants[t]).size))
        acts = [t for t in self.knobs if t not in g.constants]
        return consts + acts

    def per_layer(self, widths: dict[str, int]) -> dict[str, Any]:
        m: dict[str, dict[str, str]] = {}
        for t, keys in self.knobs.items():
            ty = dataclasses.replace(self.base[t], width=int(widths[t]))
            for node, part in keys:
                m.setdefault(node, {})[part] = _type_text(ty)
        return {k: m[k] for k in sorted(m)}

    def compile(self, widths: dict[str, int]) -> Any:
        return compile_model(self.graph, precision=self.default, per_layer=self.per_layer(widths),
                          reuse=self.plan, profile=self.device)

    def cost(self, compiled: Any) -> int:
        from ..hdl.flow import plan_build

        _p, fp = plan_build(compiled, self.prof, self.plan)
        return int(fp.estimate["lut"])

    def agreement(self, compiled: Any) -> float:
        out = golden(compiled, self.x)
        return float(np.mean(out.reshape(len(out), -1).argmax(axis=1) == self.fa))

    def evaluate(self, widths: dict[str, int]) -> tuple[float, int]:
        k = tuple(widths[t] for t in self.order)
        if k not in self.cache:
            try:
                c = self.compile(widths)
                self.cache[k] = (self.agreement(c), self.cost(c))
            except ValueError:  # a width the compiler refuses (e.g. an accumulator over 64 bits)
                self.cache[k] = (-1.0, 1 << 62)
        return self.cache[k]

    def check_map(self, widths: dict[str, int]) -> None:
        """The map of the baseline widths must give the baseline's types: the JSON the
        search writes reproduces what it measured."""
        c = self.compile(widths)
        got = {t: str(c.graph.tensor(t).dtype) for t in self.knobs if t in c.graph.tensors}
        want = {t: str(self.base[t]) for t in self.knobs}
        if got != want:
            bad = sorted(t for t in want if got.get(t) != want[t])
            raise SweepError(f"--precision auto: the per-layer map does not reproduce the "
                             f"calibrated types of {', '.join(bad[:4])} in this model")


def search(graph: Any, x: np.ndarray, float_argmax: np.ndarray, target: float, device: str,
           reuse: int | str, start_width: int = 8, say: Callable[[str], None] = print
           ) -> AutoResult:
    """The cheapest per-tensor widths keeping argmax agreement >= target (module doc)."""
    s = Search(graph, x, float_argmax, device, reuse, start_width, say)
    widths = {t: start_width for t in s.knobs}
    s.check_map(widths)
    base_ag, base_cost = s.evaluate(widths)
    # the baseline itself: "uniform fixed<W0,3> calibrated" compiled the ordinary way
    ref_ag = s.agreement(s.ref)
    ref_cost = s.cost(s.ref)
    baseline = {"precision": f"fixed<{start_width},3> calibrated", "agreement": ref_ag,
                "cost": ref_cost}
    w = start_width
    while base_ag < target:
        if w >= MAX_WIDTH:
            raise SweepError(f"--precision auto: even {MAX_WIDTH}-bit types agree with the "
                             f"float model on only {base_ag:.4f} of the data (target {target})")
        w += 1
        widths = {t: w for t in s.knobs}
        base_ag, base_cost = s.evaluate(widths)
    say(f"[auto] baseline fixed<{start_width},3> calibrated: agreement {ref_ag:.4f}, "
        f"{ref_cost} {s.lut_unit} on {device} (reuse {s.plan}); searching "
        f"{len(s.knobs)} widths for agreement >= {target}")
    history = []
    for p in range(MAX_PASSES):
        changed = False
        for t in s.order:
            lo, hi = MIN_WIDTH, widths[t]  # hi meets the target
            while lo < hi:
                mid = (lo + hi) // 2
                ag, _c = s.evaluate({**widths, t: mid})
                if ag >= target:
                    hi = mid
                else:
                    lo = mid + 1
            if hi != widths[t]:
                widths[t] = hi
                changed = True
        ag, cost = s.evaluate(widths)
        history.append({"pass": p + 1, "agreement": ag, "cost": cost})
        say(f"[auto] pass {p + 1}: agreement {ag:.4f}, {cost} {s.lut_unit} "
            f"({len(s.cache)} designs evaluated)")
        if not changed:
            break
    ag, cost = s.evaluate(widths)
    return AutoResult(s.per_layer(widths), s.default, ag, cost, s.lut_unit, baseline,
                      {t: widths[t] for t in s.order}, len(s.cache), s.plan, history)
