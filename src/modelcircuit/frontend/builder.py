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

    def _node(self, op: Op, inputs: list[str], shape: tuple[int, ...], name: str | None,
              out_type: NumType | str | None = None, **attrs: Any) -> str:
        nname = name or f"{op.lower()}{len(self._nodes)}"
        out = self._fresh(nname)
        t = parse_type(out_type) if isinstance(out_type, str) else out_type
        self._tensors[out] = Tensor(out, tuple(shape), t)
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
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 2 or self.shape(x) != (w.shape[0],):
            raise GraphError(f"dense: input shape {self.shape(x)} does not match weight {w.shape}")
        nm = name or f"dense{len(self._nodes)}"
        ins = [x, self._const(f"{nm}_W", w)]
        if b is not None:
            ins.append(self._const(f"{nm}_b", np.asarray(b).reshape(w.shape[1])))
        return self._node(Op.DENSE, ins, (w.shape[1],), nm, out_type)

    def relu(self, x: str, name: str | None = None, out_type: NumType | str | None = None) -> str:
        return self._node(Op.RELU, [x], self.shape(x), name, out_type)

    def leaky_relu(self, x: str, alpha: float = 0.01, name: str | None = None) -> str:
        return self._node(Op.LEAKY_RELU, [x], self.shape(x), name, alpha=float(alpha))

    def activation(self, x: str, func: str, name: str | None = None,
                   out_type: NumType | str | None = None) -> str:
        if func not in ("sigmoid", "tanh", "selu"):
            raise GraphError(f"unknown activation {func!r}; known: sigmoid, tanh, selu")
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
