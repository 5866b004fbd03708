"""Build a Graph by hand (the Python graph API), without going through ONNX."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..graphs.ir import Graph, GraphError, Node, Tensor, toposort
from ..graphs.ops import Op
from ..graphs.types import NumType, parse_type


class GraphBuilder:
    """Append ops one by one; every method returns the name of its output tensor."""

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._nodes: list[Node] = []
        self._tensors: dict[str, Tensor] = {}
        self._consts: dict[str, np.ndarray] = {}

    def _fresh(self, base: str) -> str:
        k, name = 0, base
        while name in self._tensors:
            k += 1
            name = f"{base}_{k}"
        return name

    def _const(self, base: str, v: Any, t: NumType | str | None = None) -> str:
        arr = np.asarray(v, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise GraphError(f"constant {base!r} contains NaN or Inf")
        name = self._fresh(base)
        self._consts[name] = arr
        self._tensors[name] = Tensor(name, arr.shape, parse_type(t) if isinstance(t, str) else t)
        return name

    def _node(self, op: Op, inputs: list[str], oshape: tuple[int, ...], name: str | None,
              out_type: NumType | str | None = None, **attrs: Any) -> str:
        nname = name or f"{op.lower()}{len(self._nodes)}"
        out = self._fresh(nname)
        t = parse_type(out_type) if isinstance(out_type, str) else out_type
        self._tensors[out] = Tensor(out, tuple(oshape), t)
        self._nodes.append(Node.make(nname, op, inputs, [out], **attrs))
        return out

    def shape(self, x: str) -> tuple[int, ...]:
        return self._tensors[x].shape

    def input(self, name: str, shape: tuple[int, ...] | int, dtype: NumType | str | None = None) -> str:
        shp = (shape,) if isinstance(shape, int) else tuple(shape)
        t = parse_type(dtype) if isinstance(dtype, str) else dtype
        self._tensors[name] = Tensor(name, shp, t)
        self._inputs.append(name)
        return name

    def dense(self, x: str, w: np.ndarray, b: np.ndarray | None = None, name: str | None = None,
              out_type: NumType | str | None = None) -> str:
        """x @ W (+ b): x a vector (K,), or a token sequence (T, K) (a token-wise Dense: the
        same weights on every token)."""
        w = np.asarray(w, dtype=np.float64)
        shp = self.shape(x)
        if w.ndim != 2 or len(shp) not in (1, 2) or shp[-1] != w.shape[0]:
            raise GraphError(f"dense: input shape {shp} does not match weight {w.shape}")
        nm = name or f"dense{len(self._nodes)}"
        ins = [x, self._const(f"{nm}_W", w)]
        if b is not None:
            ins.append(self._const(f"{nm}_b", np.asarray(b).reshape(w.shape[1])))
        return self._node(Op.DENSE, ins, shp[:-1] + (w.shape[1],), nm, out_type)

    def relu(self, x: str, name: str | None = None, out_type: NumType | str | None = None) -> str:
        return self._node(Op.RELU, [x], self.shape(x), name, out_type)

    def leaky_relu(self, x: str, alpha: float = 0.01, name: str | None = None) -> str:
        return self._node(Op.LEAKY_RELU, [x], self.shape(x), name, alpha=float(alpha))

    def activation(self, x: str, func: str, name: str | None = None,
                   out_type: NumType | str | None = None) -> str:
        known = ("sigmoid", "tanh", "selu", "gelu", "gelu_tanh", "silu")
        if func not in known:
            raise GraphError(f"unknown activation {func!r}; known: {', '.join(known)}")
        return self._node(Op.LUT, [x], self.shape(x), name, out_type, func=func)

    def softmax(self, x: str, name: str | None = None, out_type: NumType | str | None = None) -> str:
        return self._node(Op.SOFTMAX, [x], self.shape(x), name, out_type)

    def add(self, a: str, b: str | np.ndarray, name: str | None = None,
            out_type: NumType | str | None = None) -> str:
        if not isinstance(b, str):
            b = self._const(f"{name or 'add'}_c", np.broadcast_to(b, self.shape(a)))
        return self._node(Op.ADD, [a, b], self.shape(a), name, out_type)

    def mul(self, x: str, c: np.ndarray | float, name: str | None = None,
            out_type: NumType | str | None = None) -> str:
        cn = self._const(f"{name or 'mul'}_c", c)
        return self._node(Op.MUL, [x, cn], self.shape(x), name, out_type)

    def quant(self, x: str, t: NumType | str, name: str | None = None) -> str:
        """A model quantizer: the tensor after it has type t, whatever the precision."""
        tt = parse_type(t) if isinstance(t, str) else t
        return self._node(Op.REQUANT, [x], self.shape(x), name, tt, quant_type=str(tt))

    def sub(self, a: str, b: str, name: str | None = None,
            out_type: NumType | str | None = None) -> str:
        return self._node(Op.SUB, [a, b], self.shape(a), name, out_type)

    def reshape(self, x: str, shape: tuple[int, ...], name: str | None = None) -> str:
        shape = tuple(int(d) for d in shape)
        if int(np.prod(shape)) != int(np.prod(self.shape(x))):
            raise GraphError(f"reshape: {self.shape(x)} has not the size of {shape}")
        return self._node(Op.RESHAPE, [x], shape, name, shape=shape)

    def transpose(self, x: str, perm: tuple[int, ...], name: str | None = None) -> str:
        shp = self.shape(x)
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(len(shp))):
            raise GraphError(f"transpose: perm {perm} does not fit shape {shp}")
        return self._node(Op.TRANSPOSE, [x], tuple(shp[p] for p in perm), name, perm=perm)

    # -- token sequences (graphs/attention.py has the numeric contract) --------------------
    def matmul(self, a: str, b: str, name: str | None = None,
               out_type: NumType | str | None = None) -> str:
        """a @ b of two activations over the last two axes, (..., T, K) x (..., K, N)."""
        sa, sb = self.shape(a), self.shape(b)
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2] or sa[:-2] != sb[:-2]:
            raise GraphError(f"matmul: shapes {sa} and {sb} do not multiply (..., T, K) x "
                             "(..., K, N)")
        return self._node(Op.MATMUL, [a, b], sa[:-1] + (sb[-1],), name, out_type)

    def attention(self, q: str, k: str, v: str, heads: int, scale: float | None = None,
                  mask: np.ndarray | None = None, name: str | None = None,
                  out_type: NumType | str | None = None) -> str:
        """Multi-head scaled dot-product attention: q (T, H*dk), k (S, H*dk), v (S, H*dv) ->
        (T, H*dv); scale defaults to 1/sqrt(dk); mask: a constant (T, S) added to the scores
        (-inf removes a key)."""
        (t, hdk), (s, hdk2), (s2, hdv) = self.shape(q), self.shape(k), self.shape(v)
        if hdk != hdk2 or s != s2 or heads < 1 or hdk % heads or hdv % heads:
            raise GraphError(f"attention: q {self.shape(q)}, k {self.shape(k)}, v "
                             f"{self.shape(v)} do not fit {heads} heads")
        nm = name or f"attention{len(self._nodes)}"
        ins = [q, k, v]
        if mask is not None:
            m = np.asarray(mask, dtype=np.float64)
            if m.shape != (t, s) or np.any(np.isnan(m)) or np.any(np.isposinf(m)):
                raise GraphError(f"attention: mask of shape {m.shape} must be ({t}, {s}), "
                                 "finite or -inf")
            mn = self._fresh(f"{nm}_mask")
            self._consts[mn] = m
            self._tensors[mn] = Tensor(mn, m.shape, None)
            ins.append(mn)
        sc = 1.0 / float(np.sqrt(hdk // heads)) if scale is None else float(scale)
        return self._node(Op.ATTENTION, ins, (t, hdv), nm, out_type, heads=int(heads),
                          scale=sc, masked=mask is not None)

    def layer_norm(self, x: str, gamma: np.ndarray, beta: np.ndarray, epsilon: float = 1e-5,
                   name: str | None = None, out_type: NumType | str | None = None) -> str:
        """LayerNormalization over the last axis."""
        d = self.shape(x)[-1]
        nm = name or f"layer_norm{len(self._nodes)}"
        gn = self._const(f"{nm}_gamma", np.broadcast_to(np.asarray(gamma, np.float64), (d,)))
        bn = self._const(f"{nm}_beta", np.broadcast_to(np.asarray(beta, np.float64), (d,)))
        return self._node(Op.LAYER_NORM, [x, gn, bn], self.shape(x), nm, out_type,
                          epsilon=float(epsilon))

    def mean_tokens(self, x: str, name: str | None = None,
                    out_type: NumType | str | None = None) -> str:
        """The mean over the tokens of a (T, D) sequence -> (D,) (an AvgPool over the whole
        1-D frame, then a Reshape)."""
        t, d = self.shape(x)
        nm = name or f"mean{len(self._nodes)}"
        p = self._node(Op.AVG_POOL, [x], (1, d), nm, out_type, kernel=(t,), strides=(t,),
                       pads=(0, 0))
        return self.reshape(p, (d,), name=f"{nm}_flat")

    def output(self, x: str) -> None:
        self._outputs.append(x)

    def build(self) -> Graph:
        if not self._inputs or not self._outputs:
            raise GraphError("a graph needs at least one input and one output")
        typed = any(n.op == Op.REQUANT for n in self._nodes)
        nodes = toposort(self._nodes, self._inputs + list(self._consts))
        return Graph(self.name, tuple(self._inputs), tuple(self._outputs), nodes,
                     dict(self._tensors), dict(self._consts),
                     meta=(("source", "builder"), ("typed_by_model", typed)))
