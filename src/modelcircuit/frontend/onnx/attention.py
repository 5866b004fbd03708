"""Attention in ONNX: the patterns exporters write, fused before the walk (the handlers of
the fused nodes and of the other transformer-encoder ops are in frontend/onnx/encoder.py).

`fuse(model)` rewrites a ModelProto (a copy) before the walk:

- **Attention.** Each Softmax fed (through a constant additive mask and constant scalar
  Mul/Div) by a MatMul of two activations, whose probabilities feed a MatMul with a third
  activation, is one scaled dot-product attention, whatever layout ops the exporter put
  around it: torch.onnx's nn.MultiheadAttention / nn.TransformerEncoderLayer (TorchScript and
  dynamo exporters write the same Python code: a packed in-projection, the heads split by
  Reshape/Transpose/Gather, sqrt(scale) on q and k), F.scaled_dot_product_attention
  (separate projections, Transpose of heads, one scale). From each of q, k^T, v the walk goes
  back through layout ops (Reshape, Transpose, Squeeze, Unsqueeze, Gather, Slice, Split,
  Flatten, Identity), constant scalar Mul/Div and at most one projection (MatMul/Gemm by a
  constant, its bias Add) to the tensor X they come from; from the output through layout ops
  and at most one projection to Y. Then the sub-model is *evaluated* (onnx.reference, float64)
  on random X of two samples and the projections are fitted: q = X Wq + bq for each head
  arrangement, exact to float64 rounding; a layout that does not fit (heads across samples,
  attention over the batch axis: batch_first=False) is refused. The fitted weights are the
  model's float32 weights (recovered exactly: the evaluation is float64), the scalars on the
  q/k paths and on the scores make `scale`. The sub-graph becomes standard
  MatMul+Add (token-wise Dense) x3, one `Attention` node of DOMAIN, MatMul+Add.
- **Gelu.** An element-wise sub-graph of one tensor x around an Erf or Tanh whose values are
  those of Gelu (erf form) or its tanh approximation (checked on a grid, float64) becomes a
  `Lut` node of DOMAIN (func gelu / gelu_tanh).

Refused in one line naming the node: cross-attention (q and k/v from different tensors), a
key/value cache (a Concat on the key or value path), a mask computed from an input
(data-dependent), a per-head or per-sample mask, a layout that is not batch-first. Mask
entries at or below -1e30 are -inf (a removed key), as torch's float masks mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...graphs import limits
from ...graphs.ir import GraphError
from .io import q
from .layout import attrs

DOMAIN = "modelcircuit.fused"
LAYOUT_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Slice",
                        "Split", "Flatten", "Identity"})
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sqrt", "Neg",
                         "Identity"})
MASK_NEG_INF = -1e30
FIT_TOL = 1e-9  # relative residual of a fitted projection (float64 evaluation)
GELU_TOL = 1e-5


class _Model:
    """The ONNX graph as maps: producers, consumers, constants, which tensors are dynamic."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        g = model.graph
        self.inits = {t.name: t for t in g.initializer}
        self.inputs = [vi.name for vi in g.input if vi.name not in self.inits]
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        dyn = set(self.inputs)
        for n in g.node:
            for o in n.output:
                if o:
                    self.producer[o] = n
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)
            # shapes are known at import (the batch fixed, or 1): Shape/Size are constants
            if n.op_type not in ("Shape", "Size") and any(i in dyn for i in n.input if i):
                dyn.update(o for o in n.output if o)
        self.dynamic = dyn
        self.outputs = {o.name for o in g.output}
        self.input_shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
                             for vi in g.input if vi.name in self.inputs}
        self.info: dict[str, list[int | None]] = {}  # shapes (batch None), set by fuse
        self.shape_feeds: set[str] = set()
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          13)

    def cons(self, t: str) -> list[onnx.NodeProto]:
        """The consumers of t that read its values (Shape/Size only read its shape)."""
        return [n for n in self.consumers.get(t, []) if n.op_type not in ("Shape", "Size")]

    def is_const(self, t: str) -> bool:
        return bool(t) and t not in self.dynamic

    def closure(self, outputs: list[str], feeds: set[str]) -> list[onnx.NodeProto]:
        """The nodes that compute `outputs` from `feeds`, the graph inputs and constants, in
        graph order."""
        need, todo = set(), list(outputs)
        self.shape_feeds: set[str] = set()
        while todo:
            t = todo.pop()
            if t in feeds or t in self.inits or not t or t in self.inputs:
                continue
            n = self.producer.get(t)
            if n is None:
                raise _Foreign(t)
            if id(n) in need:
                continue
            need.add(id(n))
            for i in n.input:
                if not i:
                    continue
                if (n.op_type in ("Shape", "Size") and i not in feeds and i in self.info
                        and all(d is not None for d in self.info[i][1:])):
                    self.shape_feeds.add(i)  # only its shape is read: zeros of that shape
                else:
                    todo.append(i)
        return [n for n in self.model.graph.node if id(n) in need]

    def evaluate(self, outputs: list[str], feeds: dict[str, np.ndarray],
                 batch: int = 1) -> list[np.ndarray]:
        """Evaluate `outputs` with onnx.reference from `feeds` (float initializers in float64,
        so that fitted weights are exact); graph inputs read only for their shapes are zeros
        of `batch` samples."""
        from onnx.reference import ReferenceEvaluator

        outputs = [o for o in outputs]
        nodes = self.closure(outputs, set(feeds))
        feeds = dict(feeds)
        if any(np.asarray(v).size > limits.MAX_TENSOR_ELEMENTS for v in feeds.values()):
            raise ValueError("a probe of the pattern exceeds MAX_TENSOR_ELEMENTS")
        for i in self.shape_feeds:
            feeds[i] = np.zeros((batch,) + tuple(self.info[i][1:]), dtype=np.float64)
        read = {i for n in nodes for i in n.input}
        for i in self.inputs:  # read for their shapes (or by a side path checked before)
            if i in read and i not in feeds:
                feeds[i] = np.zeros((batch,) + tuple(self.input_shapes[i][1:]),
                                    dtype=np.float64)
        used = {i for n in nodes for i in n.input}
        inits = []
        for k in sorted(used & set(self.inits)):
            v = numpy_helper.to_array(self.inits[k])
            inits.append(numpy_helper.from_array(v.astype(np.float64) if v.dtype == np.float32
                                                 else v, k))
        ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
               for k, v in feeds.items()]
        outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
        g = helper.make_graph([_as_double(n) for n in nodes], "probe", ins, outs,
                              initializer=inits)
        m = helper.make_model(g, opset_imports=list(self.model.opset_import))
        import warnings

        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ReferenceEvaluator(m).run(None, feeds)
        return [np.asarray(r) for r in res]

    def value(self, t: str) -> np.ndarray:
        if t in self.inits:
            return numpy_helper.to_array(self.inits[t])
        return self.evaluate([t], {})[0]


def _as_double(n: onnx.NodeProto) -> onnx.NodeProto:
    """The node computing in float64 where it would make float32 (Cast, Constant values)."""
    if n.op_type not in ("Cast", "Constant", "ConstantOfShape"):
        return n
    c = onnx.NodeProto()
    c.CopyFrom(n)
    for a in c.attribute:
        if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
            a.i = TensorProto.DOUBLE
        elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
            a.t.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
        elif a.name == "value_float":
            v = a.f
            c.ClearField("attribute")
            c.attribute.extend([helper.make_attribute(
                "value", numpy_helper.from_array(np.array(v, dtype=np.float64)))])
            break
    return c


class _Foreign(Exception):
    """A tensor needed by a sub-model is an activation outside it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _label(n: onnx.NodeProto) -> str:
    return f"node {q(n.name or '?')} ({n.op_type})"


def _err(n: onnx.NodeProto, msg: str) -> GraphError:
    return GraphError(f"{_label(n)}: {msg}")


def _dyn_inputs(m: _Model, n: onnx.NodeProto) -> list[str]:
    return [i for i in n.input if i and i in m.dynamic]


def _scalar(m: _Model, n: onnx.NodeProto) -> float | None:
    """The constant scalar operand of a Mul/Div with one activation (None: not such a node)."""
    if n.op_type not in ("Mul", "Div") or len(_dyn_inputs(m, n)) != 1:
        return None
    c = n.input[1] if n.input[0] in m.dynamic else n.input[0]
    if n.op_type == "Div" and c == n.input[0]:
        return None
    v = m.value(c)
    if v.size != 1:
        return None
    f = float(v.reshape(-1)[0])
    return 1.0 / f if n.op_type == "Div" else f


# -- attention -------------------------------------------------------------------------
class _Path:
    """One walk from q, k^T or v back to the tensor X it comes from."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.scale = 1.0
        self.source = ""
        self.linear = False


def _linear_weight(m: _Model, n: onnx.NodeProto) -> bool:
    if n.op_type == "MatMul":
        return len(_dyn_inputs(m, n)) == 1 and n.input[0] in m.dynamic
    if n.op_type == "Gemm":
        return n.input[0] in m.dynamic and all(m.is_const(i) for i in n.input[1:] if i)
    return False


def _back(m: _Model, start: str, site: onnx.NodeProto, what: str) -> _Path:
    p = _Path()
    t = start
    while True:
        n = m.producer.get(t)
        if n is None:
            break
        if p.linear and (n.op_type not in LAYOUT_OPS or len(m.cons(t)) > 1):
            break
        if n.op_type == "Concat" and len(_dyn_inputs(m, n)) > 1 and what in ("key", "value"):
            raise _err(site, f"the {what}s come from {_label(n)}, a Concat of activations (a "
                       "key/value cache); only self-attention over the current sequence is "
                       "supported")
        if n.op_type in LAYOUT_OPS and n.input[0] in m.dynamic and len(_dyn_inputs(m, n)) == 1:
            t = n.input[0]
        elif (s := _scalar(m, n)) is not None:
            p.scale *= s
            t = _dyn_inputs(m, n)[0]
        elif not p.linear and _linear_weight(m, n):
            p.linear = True
            t = n.input[0]
        elif (not p.linear and n.op_type in ("Add", "Sub") and len(_dyn_inputs(m, n)) == 1
              and (pr := m.producer.get(_dyn_inputs(m, n)[0])) is not None
              and _linear_weight(m, pr)):
            t = _dyn_inputs(m, n)[0]  # the projection's bias
        else:
            break
        p.nodes.append(n)
    p.source = t
    return p


def _forward(m: _Model, start: str) -> tuple[str, list[onnx.NodeProto]]:
    """From the attention's output through layout ops and one projection (with its bias) to
    the tensor the rest of the model reads."""
    t, nodes, linear = start, [], False
    while True:
        cons = m.cons(t)
        if len(cons) != 1 or t in m.outputs:
            break
        n = cons[0]
        if n.op_type in LAYOUT_OPS and n.input[0] == t and len(_dyn_inputs(m, n)) == 1:
            pass
        elif not linear and _linear_weight(m, n) and n.input[0] == t:
            linear = True
        elif (linear and n.op_type in ("Add", "Sub") and len(_dyn_inputs(m, n)) == 1
              and m.producer.get(t) is not None and _linear_weight(m, m.producer[t])):
            if n.op_type == "Sub" and n.input[0] != t:
                break
        else:
            break
        nodes.append(n)
        t = n.output[0]
    return t, nodes  # whether t is batch-first: the fit of the output decides


def _score_chain(m: _Model, sm: onnx.NodeProto) -> tuple[onnx.NodeProto, float, str | None,
                                                          list[onnx.NodeProto]] | None:
    """From a Softmax back to the MatMul of two activations: (matmul, scale, mask, nodes)."""
    t, scale, mask, nodes = sm.input[0], 1.0, None, []
    while True:
        n = m.producer.get(t)
        if n is None:
            return None
        if n.op_type == "MatMul" and len(_dyn_inputs(m, n)) == 2:
            return n, scale, mask, nodes
        if (s := _scalar(m, n)) is not None:
            scale *= s
            t = _dyn_inputs(m, n)[0]
        elif n.op_type == "Add" and mask is None:
            d = _dyn_inputs(m, n)
            if len(d) == 2:
                scores = [i for i in d if _leads_to_matmul(m, i)]
                if not scores:
                    return None  # not attention scores: a Softmax of some other sum
                other = d[1] if scores[0] == d[0] else d[0]
                raise _err(n, f"the attention mask {q(other)} is computed from an input (a "
                           "data-dependent mask); only constant masks are supported")
            mask = n.input[1] if n.input[0] in m.dynamic else n.input[0]
            t = d[0]
        elif (n.op_type == "Where" and not m.is_const(n.input[0])
              and any(_leads_to_matmul(m, i) for i in n.input[1:])):
            raise _err(n, f"the attention mask {q(n.input[0])} is computed from an input (a "
                       "data-dependent mask); only constant masks are supported")
        elif n.op_type in ("Identity", "Cast"):
            t = n.input[0]
        else:
            return None
        nodes.append(n)


def _leads_to_matmul(m: _Model, t: str) -> bool:
    for _ in range(8):
        n = m.producer.get(t)
        if n is None:
            return False
        if n.op_type == "MatMul" and len(_dyn_inputs(m, n)) == 2:
            return True
        d = _dyn_inputs(m, n)
        if len(d) != 1:
            return False
        t = d[0]
    return False


def _deps(m: _Model, t: str) -> frozenset[str]:
    """The graph inputs whose values t depends on (shapes aside)."""
    seen, todo, out = set(), [t], set()
    while todo:
        u = todo.pop()
        if u in seen or not u:
            continue
        seen.add(u)
        if u in m.inputs:
            out.add(u)
            continue
        n = m.producer.get(u)
        if n is not None and n.op_type not in ("Shape", "Size"):
            todo.extend(n.input)
    return frozenset(out)


def _direct(m: _Model, start: str, b: int, transpose: bool, rng: np.random.Generator
            ) -> tuple[str, float, list[onnx.NodeProto], int, str, tuple[int, ...]] | None:
    """The batch-first (N, T, D) tensor P that `start` (q, k^T or v, split into heads) is a
    layout of, times constant scalars, when there is one: (P, scalar, nodes between, heads,
    arrangement, the per-head shape). The projection producing P then stays as it is (a
    token-wise Dense). Checked at two batch sizes (a dimension that only looks like the batch,
    e.g. N*H, fails at the second)."""
    cur, scale, nodes = start, 1.0, []
    while True:
        n = m.producer.get(cur)
        if n is None:
            return None
        if n.op_type in LAYOUT_OPS and n.input[0] in m.dynamic and len(_dyn_inputs(m, n)) == 1:
            cur = n.input[0]
        elif (sc := _scalar(m, n)) is not None:
            scale *= sc
            cur = _dyn_inputs(m, n)[0]
        else:
            return None
        nodes.append(n)
        shp = m.info.get(cur)
        if shp is None or len(shp) != 3 or any(d is None for d in shp[1:]) \
                or shp[0] not in (None, b):
            continue
        found = None
        for bb in ((b + 1, b) if shp[0] is None else (b,)):  # the last: b
            p = rng.normal(0, 1, (bb, shp[1], shp[2]))
            try:
                v = m.evaluate([start], {cur: p}, bb)[0]
            except Exception:
                found = None
                break
            v = np.swapaxes(v, -1, -2) if transpose else v
            found = None
            for name, arranged in _arrangements(v, bb, shp[1]):
                if arranged.shape == p.shape and np.allclose(arranged, p * scale, rtol=1e-12,
                                                             atol=1e-12):
                    found = (cur, scale, list(nodes), arranged.shape[-1] // v.shape[-1], name,
                             v.shape)
                    break
            if found is None:
                break
        if found is not None:
            return found


def _direct_out(m: _Model, mm2: onnx.NodeProto, b: int, arr: str, o_shape: tuple[int, ...],
                rng: np.random.Generator) -> tuple[str, list[onnx.NodeProto]] | None:
    """The batch-first tensor Y that the attention's heads are merged into by layout ops."""
    cur, nodes = mm2.output[0], []
    while True:
        cons = m.cons(cur)
        if len(cons) != 1 or cur in m.outputs:
            return None
        n = cons[0]
        if not (n.op_type in LAYOUT_OPS and n.input[0] == cur and len(_dyn_inputs(m, n)) == 1):
            return None
        nodes.append(n)
        cur = n.output[0]
        p = rng.normal(0, 1, o_shape)
        try:
            y = m.evaluate([cur], {mm2.output[0]: p}, b)[0]
        except Exception:
            continue
        want = dict(_arrangements(p, b, p.shape[-2])).get(arr)
        if want is not None and y.shape == want.shape and np.array_equal(y, want):
            return cur, nodes


def _arrangements(a: np.ndarray, b: int, t: int) -> list[tuple[str, np.ndarray]]:
    """Ways to read an (..., T, d) per-head tensor of b samples as (b, T, H*d)."""
    if a.ndim < 2 or a.shape[-2] != t or a.size % (b * t * a.shape[-1]):
        return []
    d = a.shape[-1]
    h = a.size // (b * t * d)
    x = a.reshape(-1, t, d)
    out = []
    for name, hb in (("bh", x.reshape(b, h, t, d)),
                     ("hb", np.moveaxis(x.reshape(h, b, t, d), 0, 1))):
        out.append((name, np.moveaxis(hb, 1, 2).reshape(b, t, h * d)))
    return out


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """y = x W + b over rows (least squares, float64): (W, b, relative residual)."""
    xr = x.reshape(-1, x.shape[-1])
    yr = y.reshape(-1, y.shape[-1])
    a = np.concatenate([xr, np.ones((xr.shape[0], 1))], axis=1)
    sol, *_ = np.linalg.lstsq(a, yr, rcond=None)
    res = float(np.abs(a @ sol - yr).max()) / (1.0 + float(np.abs(yr).max()))
    return sol[:-1], sol[-1], res


def _probe_shape(info: dict[str, list[int | None]], x: str, site: onnx.NodeProto
                 ) -> tuple[int, ...]:
    shp = info.get(x)
    if shp is None or len(shp) != 3 or any(d is None for d in shp[1:]):
        raise _err(site, f"attention over {q(x)} of shape {shp}: the importer needs a "
                   "batch-first (N, T, D) token sequence with T and D fixed")
    return (2 if shp[0] is None or shp[0] != 1 else 1, int(shp[1]), int(shp[2]))


def _shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    try:
        inf = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:
        inf = model
    out = {}
    for vi in list(inf.graph.value_info) + list(inf.graph.input) + list(inf.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                            for d in tt.shape.dim]
    return out


class _Fused:
    def __init__(self) -> None:
        self.remove: set[int] = set()
        self.new_nodes: list[tuple[onnx.NodeProto, list[onnx.NodeProto]]] = []  # (anchor, nodes)
        self.inits: list[onnx.TensorProto] = []


def _attention(m: _Model, sm: onnx.NodeProto, info: dict, out: _Fused, k: int) -> None:
    chain = _score_chain(m, sm)
    if chain is None:
        return
    mm1, s_scale, mask, s_nodes = chain
    cons = m.cons(sm.output[0])
    if len(cons) != 1 or cons[0].op_type != "MatMul" or cons[0].input[0] != sm.output[0] \
            or len(_dyn_inputs(m, cons[0])) != 2:
        return
    mm2 = cons[0]
    a = attrs(sm)
    rank = len(info.get(sm.input[0]) or []) or 4
    if int(a.get("axis", -1 if m.opset >= 13 else 1)) % rank != rank - 1:
        raise _err(sm, "attention's Softmax must be over the keys (the last axis)")
    rng0 = np.random.default_rng(1000 + k)
    shq = m.info.get(mm1.input[0])
    bsz = 2 if not shq or shq[0] is None or shq[0] != 1 else 1
    dq = _direct(m, mm1.input[0], bsz, False, rng0)
    dk_ = _direct(m, mm1.input[1], bsz, True, rng0) if dq else None
    dv = _direct(m, mm2.input[1], bsz, False, rng0) if dk_ else None
    if dq and dk_ and dv:
        _attention_direct(m, sm, mm1, mm2, s_scale, mask, s_nodes, (dq, dk_, dv), bsz, out,
                          rng0)
        return
    pq = _back(m, mm1.input[0], mm1, "query")
    pk = _back(m, mm1.input[1], mm1, "key")
    pv = _back(m, mm2.input[1], mm2, "value")
    if not (pq.source == pk.source == pv.source):
        raise _err(mm1, f"cross-attention: the queries come from {q(pq.source)}, the keys from "
                   f"{q(pk.source)} and the values from {q(pv.source)}; only self-attention "
                   "(q, k, v projections of one token sequence) is supported")
    x = pq.source
    y, f_nodes = _forward(m, mm2.output[0])
    b, t, d = _probe_shape(info, x, mm1)
    rng = np.random.default_rng(k)
    probes = [rng.normal(0, 1, (b, t, d)) for _ in range(3)]
    try:
        vals = [m.evaluate([mm1.input[0], mm1.input[1], mm2.input[1]], {x: p}, b)
                for p in probes]
    except _Foreign as e:
        raise _err(mm1, f"the attention reads {q(e.name)} besides its input {q(x)}; only "
                   "self-attention over one token sequence is supported") from None
    except Exception as e:  # an evaluation the reference cannot do: not our pattern
        raise _err(mm1, f"cannot read this attention pattern ({type(e).__name__}: "
                   f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None

    def fit(idx: int, transpose: bool, what: str, path: _Path):
        best = None
        per = [np.swapaxes(v[idx], -1, -2) if transpose else v[idx] for v in vals]
        for arr_name, arranged in _arrangements(per[0], b, t):
            ys = [dict(_arrangements(a_, b, t))[arr_name] for a_ in per]
            w, bias, res = _fit(np.concatenate(probes), np.concatenate(ys))
            if best is None or res < best[2]:
                best = (w, bias, res, arranged.shape[-1] // per[0].shape[-1], arr_name)
        if best is None or best[2] > FIT_TOL:
            raise _err(mm1, f"the {what} of this attention are not a per-token projection of "
                       f"{q(x)} split into heads (layout not recognised: attention must run "
                       "over axis 1 of a batch-first (N, T, D) sequence, batch_first=True)")
        w, bias, _, h, arr_name = best
        return (w / path.scale).astype(np.float32), (bias / path.scale).astype(np.float32), h, \
            arr_name

    wq, bq, hq, arr_q = fit(0, False, "queries", pq)
    wk, bk, hk, arr_k = fit(1, True, "keys", pk)
    wv, bv, hv, arr_v = fit(2, False, "values", pv)
    if not hq == hk == hv:
        raise _err(mm1, f"queries, keys and values split into {hq}, {hk}, {hv} heads")
    heads = hq
    dk = wq.shape[1] // heads
    scale = pq.scale * pk.scale * s_scale
    if not (math.isfinite(scale) and scale > 0):
        raise _err(mm1, f"the scores' scale {scale} is not a positive number")
    # the output: probe the attention result (per head) through the forward nodes
    o_shape = vals[0][2].shape[:-2] + (vals[0][0].shape[-2], vals[0][2].shape[-1])
    wo = bo = None
    if f_nodes:
        ps = [rng.normal(0, 1, o_shape) for _ in range(3)]
        try:
            ys = [m.evaluate([y], {mm2.output[0]: p}, b)[0] for p in ps]
        except Exception as e:
            raise _err(mm2, f"cannot read the attention's output layout ({type(e).__name__})") \
                from None
        if ys[0].shape[:2] != (b, t) or ys[0].ndim != 3:
            raise _err(mm2, f"the attention's output {q(y)} has shape {list(ys[0].shape)}; a "
                       f"batch-first ({b}, {t}, D) sequence was expected (batch_first=True)")
        xs = [dict(_arrangements(p, b, t))[arr_v] for p in ps]
        wo, bo, res = _fit(np.concatenate(xs), np.concatenate(ys))
        if res > FIT_TOL:
            raise _err(mm2, "the attention's output is not a per-token projection of its heads "
                       "(layout not recognised)")
        wo, bo = wo.astype(np.float32), bo.astype(np.float32)
        if wo.shape[0] == wo.shape[1] and np.array_equal(wo, np.eye(wo.shape[0])) \
                and not bo.any():
            wo = bo = None
    mask_v = _mask(m, sm, mask, t)
    # the replacement (batch-first, standard ops + one Attention node)
    base = f"attn{k}"
    nodes: list[onnx.NodeProto] = []

    def init(name: str, v: np.ndarray) -> str:
        nm = f"{base}_{name}"
        out.inits.append(numpy_helper.from_array(np.ascontiguousarray(v), nm))
        return nm

    def proj(name: str, src: str, w: np.ndarray, bias: np.ndarray | None, dst: str) -> str:
        mid = dst if bias is None else f"{base}_{name}_mm"
        nodes.append(helper.make_node("MatMul", [src, init(f"{name}_w", w)], [mid],
                                      name=f"{base}/{name}/MatMul"))
        if bias is not None:
            nodes.append(helper.make_node("Add", [mid, init(f"{name}_b", bias)], [dst],
                                          name=f"{base}/{name}/Add"))
        return dst

    qn = proj("q", x, wq, bq, f"{base}_q")
    kn = proj("k", x, wk, bk, f"{base}_k")
    vn = proj("v", x, wv, bv, f"{base}_v")
    ins = [qn, kn, vn]
    if mask_v is not None:
        ins.append(init("mask", mask_v.astype(np.float32)))
    att_out = y if wo is None else f"{base}_heads"
    nodes.append(helper.make_node("Attention", ins, [att_out], name=mm1.name or f"{base}/Attention",
                                  domain=DOMAIN, heads=int(heads), scale=float(scale),
                                  head_dim=int(dk)))
    if wo is not None:
        proj("out", att_out, wo, bo, y)
    region = pq.nodes + pk.nodes + pv.nodes + s_nodes + [mm1, sm, mm2] + f_nodes
    for n in region:
        out.remove.add(id(n))
    out.new_nodes.append((mm1, nodes))


def _mask(m: _Model, sm: onnx.NodeProto, mask: str | None, t: int) -> np.ndarray | None:
    if mask is None:
        return None
    mv = np.asarray(m.value(mask), dtype=np.float64)
    lead = mv.shape[:-2]
    full = np.broadcast_to(mv, lead + (t, t)) if mv.ndim >= 2 else np.broadcast_to(mv, (t, t))
    flat = full.reshape(-1, t, t)
    if not all(np.array_equal(flat[0], f) for f in flat[1:]):
        raise _err(sm, f"the attention mask {q(mask)} differs between heads or samples; "
                   "only one (T, S) mask for every head is supported")
    mask_v = np.where(flat[0] <= MASK_NEG_INF, -np.inf, flat[0])
    return mask_v if mask_v.any() else None


def _attention_direct(m: _Model, sm: onnx.NodeProto, mm1: onnx.NodeProto,
                      mm2: onnx.NodeProto, s_scale: float, mask: str | None,
                      s_nodes: list[onnx.NodeProto], srcs: tuple, b: int, out: _Fused,
                      rng: np.random.Generator) -> None:
    """q, k, v are layouts of batch-first projections (SDPA-style exports, QAT models with
    quantizers on the projections): the Attention reads them as they are."""
    (pq, cq, nq, hq, arr, sq), (pk, ck, nk, hk, _, _), (pv, cv, nv, hv, arr_v, sv) = srcs
    dq, dk, dv = (_deps(m, t) for t in (pq, pk, pv))
    t = m.info[pq][1]
    if not dq == dk == dv or m.info[pk][1] != t:
        raise _err(mm1, f"cross-attention: the queries come from {q(pq)}, the keys from "
                   f"{q(pk)} and the values from {q(pv)}, not one token sequence; only "
                   "self-attention is supported")
    if not hq == hk == hv:
        raise _err(mm1, f"queries, keys and values split into {hq}, {hk}, {hv} heads")
    if cv != 1.0:
        raise _err(mm2, f"the values are scaled by {cv}; only the scores may be scaled")
    scale = cq * ck * s_scale
    if not (math.isfinite(scale) and scale > 0):
        raise _err(mm1, f"the scores' scale {scale} is not a positive number")
    o = _direct_out(m, mm2, b, arr_v, tuple(sq[:-1]) + (sv[-1],), rng)
    if o is None:
        raise _err(mm2, "the attention's heads are not merged back into a batch-first (N, T, "
                   "D) sequence by layout ops (layout not recognised; batch_first=True "
                   "expected)")
    y, f_nodes = o
    mask_v = _mask(m, sm, mask, t)
    ins = [pq, pk, pv]
    base = f"attn{len(out.new_nodes)}"
    if mask_v is not None:
        nm = f"{base}_mask"
        out.inits.append(numpy_helper.from_array(mask_v.astype(np.float32), nm))
        ins.append(nm)
    node = helper.make_node("Attention", ins, [y], name=mm1.name or f"{base}/Attention",
                            domain=DOMAIN, heads=int(hq), scale=float(scale))
    for n in nq + nk + nv + s_nodes + [mm1, sm, mm2] + f_nodes:
        out.remove.add(id(n))
    out.new_nodes.append((mm2, [node]))


# -- Gelu as a table -------------------------------------------------------------------
def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


_FUNCS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"gelu": _gelu, "gelu_tanh": _gelu_tanh}


def _elementwise(m: _Model, n: onnx.NodeProto) -> bool:
    return n.op_type in ELEMENTWISE and all(
        m.is_const(i) and m.value(i).size == 1 for i in n.input if i and i not in m.dynamic)


def _region(m: _Model, z: str, x: str) -> list[onnx.NodeProto] | None:
    """The element-wise nodes computing z from x and scalar constants alone (None: z reads
    another activation)."""
    seen: dict[int, onnx.NodeProto] = {}
    todo = [z]
    while todo:
        t = todo.pop()
        if t == x or not m.dynamic.__contains__(t):
            continue
        n = m.producer.get(t)
        if n is None or not _elementwise(m, n):
            return None
        if id(n) not in seen:
            seen[id(n)] = n
            todo.extend(i for i in n.input if i)
    return [n for n in m.model.graph.node if id(n) in seen]


def _ancestors(m: _Model, t: str, limit: int = 12) -> list[str]:
    out, todo = [], [t]
    while todo and len(out) < limit:
        s = todo.pop(0)
        n = m.producer.get(s)
        if n is None or not _elementwise(m, n):
            continue
        for i in n.input:
            if i in m.dynamic and i not in out:
                out.append(i)
                todo.append(i)
    return out


def _gelu_fuse(m: _Model, n: onnx.NodeProto, out: _Fused) -> None:
    chain, t = [], n.output[0]
    while len(m.cons(t)) == 1 and t not in m.outputs and _elementwise(m, m.cons(t)[0]):
        t = m.cons(t)[0].output[0]
        chain.append(t)
    for z in reversed(chain):
        for x in _ancestors(m, n.input[0]):
            reg = _region(m, z, x)
            if reg is None or not any(r is n for r in reg):
                continue
            inner = {o for r in reg for o in r.output} - {z}
            if any(c not in reg for o in inner for c in m.cons(o)) or inner & m.outputs:
                continue
            grid = np.concatenate([np.linspace(-8, 8, 641), [-30.0, -12.0, 12.0, 30.0]])
            try:
                sub = _Model(m.model)
                got = sub.evaluate([z], {x: grid})[0].astype(np.float64)
            except Exception:
                continue
            for func, f in _FUNCS.items():
                if got.shape == grid.shape and np.all(
                        np.abs(got - f(grid)) <= GELU_TOL * (1.0 + np.abs(grid))):
                    for r in reg:
                        out.remove.add(id(r))
                    out.new_nodes.append((reg[0], [helper.make_node(
                        "Lut", [x], [z], name=reg[-1].name or f"gelu_{z}", domain=DOMAIN,
                        func=func)]))
                    return
            return


def fuse(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with attention and Gelu patterns fused (module docstring); the model itself
    when there is none. GraphError (one line, naming the node) for what is refused."""
    ops = {n.op_type for n in model.graph.node}
    if not ops & {"Softmax", "Erf", "Tanh"}:
        return model
    m = _Model(model)
    out = _Fused()
    info = _shapes(model) if "Softmax" in ops else {}
    m.info = info
    for k, n in enumerate(model.graph.node):
        if id(n) in out.remove:
            continue
        if n.op_type == "Softmax" and n.domain in ("", "ai.onnx") and n.input[0] in m.dynamic:
            _attention(m, n, info, out, k)
        elif n.op_type in ("Erf", "Tanh") and n.input[0] in m.dynamic:
            _gelu_fuse(m, n, out)
    if not out.new_nodes:
        return model
    new = onnx.ModelProto()
    new.CopyFrom(model)
    anchors = {id(a): nodes for a, nodes in out.new_nodes}
    kept: list[onnx.NodeProto] = []
    for n in model.graph.node:
        if id(n) in anchors:
            kept.extend(anchors[id(n)])
        if id(n) not in out.remove:
            kept.append(n)
    kept = _topo(kept, {t.name for t in model.graph.initializer} |
                 {vi.name for vi in model.graph.input})
    kept = _dead(kept, {o.name for o in model.graph.output})
    del new.graph.node[:]
    new.graph.node.extend(kept)
    new.graph.initializer.extend(out.inits)
    if not any(o.domain == DOMAIN for o in new.opset_import):
        new.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    del new.graph.value_info[:]  # shapes of removed tensors; the walk computes its own
    return new


def _topo(nodes: list[onnx.NodeProto], avail: set[str]) -> list[onnx.NodeProto]:
    """The nodes in an order where each input is defined first (the new nodes sit at the
    first node of their pattern; the projections read tensors defined before it)."""
    avail = set(avail) | {""}
    out, todo = [], list(nodes)
    while todo:
        rest = []
        for n in todo:
            if all(i in avail for i in n.input):
                out.append(n)
                avail.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(todo):  # inputs never defined: left for the walk to name
            out.extend(rest)
            break
        todo = rest
    return out


def _dead(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """Drop nodes none of whose outputs is read (the shape arithmetic of removed layouts)."""
    while True:
        used = set(outputs) | {i for n in nodes for i in n.input}
        keep = [n for n in nodes if any(o in used for o in n.output if o)]
        if len(keep) == len(nodes):
            return nodes
        nodes = keep


__all__ = ["DOMAIN", "fuse"]
