"""The attention pattern's walks over the ONNX graph: from a Softmax back to the scores'
MatMul (its scale and mask), from q, k^T and v back through layout ops, scalars and one
projection to the tensor they come from, from the output forward to what the model reads;
and the direct reading of q, k, v as layouts of batch-first projections, probed by
evaluation (`direct`, `direct_out`, `arrangements`).

Why a module of its own: these find *where* an attention is and which nodes it spans; the
fit of its weights and the replacement nodes (frontend/onnx/attention.py) decide *what* it
computes. The walks are the part that grows with every exporter's layout.
"""

from __future__ import annotations

import numpy as np
import onnx

from .fuse_graph import OnnxModel, dyn_inputs, err, label, scalar
from .io import q

LAYOUT_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Slice",
                        "Split", "Flatten", "Identity"})


class Walk:
    """One walk from q, k^T or v back to the tensor X it comes from."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.scale = 1.0
        self.source = ""
        self.linear = False


def _linear_weight(m: OnnxModel, n: onnx.NodeProto) -> bool:
    if n.op_type == "MatMul":
        return len(dyn_inputs(m, n)) == 1 and n.input[0] in m.dynamic
    if n.op_type == "Gemm":
        return n.input[0] in m.dynamic and all(m.is_const(i) for i in n.input[1:] if i)
    return False


def walk_back(m: OnnxModel, start: str, site: onnx.NodeProto, what: str) -> Walk:
    p = Walk()
    t = start
    while True:
        n = m.producer.get(t)
        if n is None:
            break
        if p.linear and (n.op_type not in LAYOUT_OPS or len(m.cons(t)) > 1):
            break
        if n.op_type == "Concat" and len(dyn_inputs(m, n)) > 1 and what in ("key", "value"):
            raise err(site, f"the {what}s come from {label(n)}, a Concat of activations (a "
                       "key/value cache); only self-attention over the current sequence is "
                       "supported")
        if n.op_type in LAYOUT_OPS and n.input[0] in m.dynamic and len(dyn_inputs(m, n)) == 1:
            t = n.input[0]
        elif (s := scalar(m, n)) is not None:
            p.scale *= s
            t = dyn_inputs(m, n)[0]
        elif not p.linear and _linear_weight(m, n):
            p.linear = True
            t = n.input[0]
        elif (not p.linear and n.op_type in ("Add", "Sub") and len(dyn_inputs(m, n)) == 1
              and (pr := m.producer.get(dyn_inputs(m, n)[0])) is not None
              and _linear_weight(m, pr)):
            t = dyn_inputs(m, n)[0]  # the projection's bias
        else:
            break
        p.nodes.append(n)
    p.source = t
    return p


def walk_forward(m: OnnxModel, start: str) -> tuple[str, list[onnx.NodeProto]]:
    """From the attention's output through layout ops and one projection (with its bias) to
    the tensor the rest of the model reads."""
    t, nodes, linear = start, [], False
    while True:
        cons = m.cons(t)
        if len(cons) != 1 or t in m.outputs:
            break
        n = cons[0]
        if n.op_type in LAYOUT_OPS and n.input[0] == t and len(dyn_inputs(m, n)) == 1:
            pass
        elif not linear and _linear_weight(m, n) and n.input[0] == t:
            linear = True
        elif (linear and n.op_type in ("Add", "Sub") and len(dyn_inputs(m, n)) == 1
              and m.producer.get(t) is not None and _linear_weight(m, m.producer[t])):
            if n.op_type == "Sub" and n.input[0] != t:
                break
        else:
            break
        nodes.append(n)
        t = n.output[0]
    return t, nodes  # whether t is batch-first: the fit of the output decides


def score_chain(m: OnnxModel, sm: onnx.NodeProto) -> tuple[onnx.NodeProto, float, str | None,
                                                          list[onnx.NodeProto]] | None:
    """From a Softmax back to the MatMul of two activations: (matmul, scale, mask, nodes)."""
    t, scale, mask, nodes = sm.input[0], 1.0, None, []
    while True:
        n = m.producer.get(t)
        if n is None:
            return None
        if n.op_type == "MatMul" and len(dyn_inputs(m, n)) == 2:
            return n, scale, mask, nodes
        if (s := scalar(m, n)) is not None:
            scale *= s
            t = dyn_inputs(m, n)[0]
        elif n.op_type == "Add" and mask is None:
            d = dyn_inputs(m, n)
            if len(d) == 2:
                scores = [i for i in d if _leads_to_matmul(m, i)]
                if not scores:
                    return None  # not attention scores: a Softmax of some other sum
                other = d[1] if scores[0] == d[0] else d[0]
                raise err(n, f"the attention mask {q(other)} is computed from an input (a "
                           "data-dependent mask); only constant masks are supported")
            mask = n.input[1] if n.input[0] in m.dynamic else n.input[0]
            t = d[0]
        elif (n.op_type == "Where" and not m.is_const(n.input[0])
              and any(_leads_to_matmul(m, i) for i in n.input[1:])):
            raise err(n, f"the attention mask {q(n.input[0])} is computed from an input (a "
                       "data-dependent mask); only constant masks are supported")
        elif n.op_type in ("Identity", "Cast"):
            t = n.input[0]
        else:
            return None
        nodes.append(n)


def _leads_to_matmul(m: OnnxModel, t: str) -> bool:
    for _ in range(8):
        n = m.producer.get(t)
        if n is None:
            return False
        if n.op_type == "MatMul" and len(dyn_inputs(m, n)) == 2:
            return True
        d = dyn_inputs(m, n)
        if len(d) != 1:
            return False
        t = d[0]
    return False


def deps(m: OnnxModel, t: str) -> frozenset[str]:
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


def direct(m: OnnxModel, start: str, b: int, transpose: bool, rng: np.random.Generator
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
        if n.op_type in LAYOUT_OPS and n.input[0] in m.dynamic and len(dyn_inputs(m, n)) == 1:
            cur = n.input[0]
        elif (sc := scalar(m, n)) is not None:
            scale *= sc
            cur = dyn_inputs(m, n)[0]
        else:
            return None
        nodes.append(n)
        shp = m.info.get(cur)
        if shp is None or len(shp) != 3 or any(d is None for d in shp[1:]) \
                or shp[0] not in (None, b) or _part(m, cur):
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
            for name, arranged in arrangements(v, bb, shp[1]):
                if arranged.shape == p.shape and np.allclose(arranged, p * scale, rtol=1e-12,
                                                             atol=1e-12):
                    found = (cur, scale, list(nodes), arranged.shape[-1] // v.shape[-1], name,
                             v.shape)
                    break
            if found is None:
                break
        if found is not None:
            return found


def _part(m: OnnxModel, t: str) -> bool:
    """t is a part of a packed tensor (a Split or Slice output: torch's qkv.chunk(3, -1)):
    not read as a projection of its own, so that the general walk fits one per-token
    projection for each of q, k, v (as for the Slices TorchScript writes, whose shapes
    inference leaves open) and no split is left between them."""
    n = m.producer.get(t)
    return n is not None and n.op_type in ("Split", "Slice")


def direct_out(m: OnnxModel, mm2: onnx.NodeProto, b: int, arr: str, o_shape: tuple[int, ...],
                rng: np.random.Generator) -> tuple[str, list[onnx.NodeProto]] | None:
    """The batch-first tensor Y that the attention's heads are merged into by layout ops."""
    cur, nodes = mm2.output[0], []
    while True:
        cons = m.cons(cur)
        if len(cons) != 1 or cur in m.outputs:
            return None
        n = cons[0]
        if not (n.op_type in LAYOUT_OPS and n.input[0] == cur and len(dyn_inputs(m, n)) == 1):
            return None
        nodes.append(n)
        cur = n.output[0]
        p = rng.normal(0, 1, o_shape)
        try:
            y = m.evaluate([cur], {mm2.output[0]: p}, b)[0]
        except Exception:
            continue
        want = dict(arrangements(p, b, p.shape[-2])).get(arr)
        if want is not None and y.shape == want.shape and np.array_equal(y, want):
            return cur, nodes


def arrangements(a: np.ndarray, b: int, t: int) -> list[tuple[str, np.ndarray]]:
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
