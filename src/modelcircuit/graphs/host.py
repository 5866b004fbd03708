"""The host side of a compiled graph: the float head before the circuit's input codes and the
float tail after its output codes (passes/host.py decides which nodes; see its docstring).

`carve` splits the compiled graph into (head, body, tail); the body is what every backend
compiles (its input and output are integer codes). `encode` and `decode` are the one place
where float values become input codes and output codes become float values, for every
backend: the golden model, the RTL simulation, the GPU kernels and the runtime wrappers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import reference
from .compiled import CompiledGraph
from .ir import Graph, prune
from .ops import SPATIAL, Op
from .types import FLOAT32


def _sub(g: Graph, nodes: list, inputs: list[str], outputs: list[str]) -> Graph:
    keep = set(inputs) | {t for n in nodes for t in list(n.inputs) + list(n.outputs) if t}
    meta = tuple((k, v) for k, v in g.meta if k not in ("host_head", "host_tail"))
    return prune(g.replace(inputs=tuple(inputs), outputs=tuple(outputs), nodes=tuple(nodes),
                           tensors={k: t for k, t in g.tensors.items() if k in keep},
                           constants={k: v for k, v in g.constants.items() if k in keep},
                           meta=meta))


def carve(g: Graph) -> tuple[Graph | None, Graph, Graph | None]:
    """(head, body, tail) of a compiled graph; head/tail None where the model has none."""
    hn, tn = set(g.get_meta("host_head") or ()), set(g.get_meta("host_tail") or ())
    if not hn and not tn:
        return None, g, None
    head_nodes = [n for n in g.nodes if n.name in hn]
    tail_nodes = [n for n in g.nodes if n.name in tn]
    body_nodes = [n for n in g.nodes if n.name not in hn and n.name not in tn]
    body_in = head_nodes[-1].outputs[0] if head_nodes else g.inputs[0]
    body_out = tail_nodes[0].inputs[0] if tail_nodes else g.outputs[0]
    head = _sub(g, head_nodes, list(g.inputs), [body_in]) if head_nodes else None
    body = _sub(g, body_nodes, [body_in], [body_out])
    tail = None
    if tail_nodes:
        tail = _sub(g, tail_nodes, [body_out], list(g.outputs))
        tensors = dict(tail.tensors)  # the tail starts from the body's output as float values
        tensors[body_out] = dataclasses.replace(tensors[body_out], dtype=FLOAT32)
        tail = tail.replace(tensors=tensors)
    return head, body, tail


def input_shape(compiled: CompiledGraph) -> tuple[int, ...]:
    """The model's per-sample input shape (the head's, where there is one)."""
    g = getattr(compiled, "head", None) or compiled.graph
    return tuple(g.tensor(g.inputs[0]).shape)


def encode(compiled: CompiledGraph, x: np.ndarray) -> np.ndarray:
    """Float inputs (N, *shape) -> the body's input codes (the head run on the host)."""
    head = getattr(compiled, "head", None)
    if head is None:
        return reference.quantize_inputs(compiled.graph, [x])[0]
    return reference.execute(head, [x])[head.outputs[0]]


def decode(compiled: CompiledGraph, out: np.ndarray) -> np.ndarray:
    """The body's output codes -> float values of the model's output (the tail on the host)."""
    g = compiled.graph
    vals = reference.to_values(g, g.outputs[0], out)
    tail = getattr(compiled, "tail", None)
    if tail is None:
        return vals
    return reference.execute(tail, [vals.astype(np.float32)])[tail.outputs[0]]


def golden(compiled: CompiledGraph, x: np.ndarray) -> np.ndarray:
    """The golden model's float outputs for float inputs (N, *shape): head, body (reference
    interpreter on codes), tail — what api.run(backend="golden") and the sweep compare.
    The body runs as its prepared plan (graphs/golden_plan.py: the same values, faster;
    imported here, not with the module: an export that only reads wire_order needs none of
    the plan's machinery)."""
    from . import golden_plan

    p = golden_plan.plan(compiled.graph)
    if getattr(compiled, "head", None) is None:
        vals = p.values(np.asarray(x), quantize=True)
    else:
        vals = p.values(encode(compiled, np.asarray(x)), quantize=False)
    tail = getattr(compiled, "tail", None)
    if tail is None:
        return vals
    return np.asarray(reference.execute(tail, [vals.astype(np.float32)])[tail.outputs[0]])


def float_trace(compiled: CompiledGraph, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of head, body and tail as float values (api.run(trace=True))."""
    return {k: values(compiled, k, v) for k, v in trace(compiled, np.asarray(x)).items()}


def trace(compiled: CompiledGraph, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of head, body and tail (codes for fixed point, float32 otherwise)."""
    env: dict[str, np.ndarray] = {}
    head, tail, g = getattr(compiled, "head", None), getattr(compiled, "tail", None), compiled.graph
    if head is not None:
        env.update(reference.execute(head, [x], trace=True))
        codes = env[head.outputs[0]]
    else:
        codes = encode(compiled, x)
    env.update(reference.execute(g, [codes], trace=True, inputs_are_codes=True))
    if tail is not None:
        vals = reference.to_values(g, g.outputs[0], env[g.outputs[0]]).astype(np.float32)
        t_env = reference.execute(tail, [vals], trace=True)
        env.update({k: v for k, v in t_env.items() if k not in env})
    return env


def values(compiled: CompiledGraph, name: str, v: np.ndarray) -> np.ndarray:
    """Float values of tensor `name` of head, body or tail (codes or floats)."""
    for part in (compiled.graph, getattr(compiled, "head", None), getattr(compiled, "tail", None)):
        if part is not None and name in part.tensors:
            return reference.to_values(part, name, v)
    return np.asarray(v, dtype=np.float64)


def _moves(g: Graph | None) -> list[dict]:
    """The layout moves of a host part: what reorders values between the model's layout and
    the circuit's."""
    out = []
    for n in (g.nodes if g is not None else ()):
        if n.op == Op.TRANSPOSE:
            out.append({"node": n.name, "op": "Transpose", "perm": list(n.get("perm"))})
        elif n.op == Op.GATHER:
            out.append({"node": n.name, "op": "Gather"})
        elif n.op == Op.RESHAPE:
            out.append({"node": n.name, "op": "Reshape"})
    return out


def wire_order(compiled: CompiledGraph) -> dict | None:
    """The order in which values cross the wire of a model whose circuit streams pixels (a
    frame input (*S, C), spatial ops), or None: per end, the model's per-sample shape, the
    circuit's, and the host's layout moves between them. The circuit's frame goes as one
    token per pixel in raster order (row-major over the spatial axes), all C channels of a
    pixel in one token, channel k in element k; a channels-first (C, *S) model tensor is
    reordered by the host (the head's / tail's Transpose), never by the circuit."""
    g = compiled.graph
    if not any(n.op in SPATIAL for n in g.nodes):
        return None
    head, tail = getattr(compiled, "head", None), getattr(compiled, "tail", None)
    ends = {}
    for key, part, model_t, circ_t in (
            ("input", head, (head or g).inputs[0], g.inputs[0]),
            ("output", tail, (tail or g).outputs[0], g.outputs[0])):
        ms = [int(s) for s in (part or g).tensor(model_t).shape]
        cs = [int(s) for s in g.tensor(circ_t).shape]
        frame = len(cs) >= 2
        moves = _moves(part)
        cf = bool(moves) and frame and len(ms) == len(cs) and ms[0] == cs[-1] and \
            ms[1:] == cs[:-1] and ms != cs
        if frame:
            pix = int(np.prod(cs[:-1]))
            order = (f"{pix} pixels in raster order (row-major over {cs[:-1]}), one token of "
                     f"{cs[-1]} channels each, channel k in element k")
        else:
            order = f"one vector of {cs[0] if cs else 1} elements"
        ends[key] = {"model_tensor": model_t, "model_shape": ms,
                     "model_layout": "channels-first" if cf else "as the circuit's",
                     "circuit_tensor": circ_t, "circuit_shape": cs, "order": order,
                     "host_moves": moves}
    return ends


def wire_lines(w: dict | None) -> list[str]:
    """`inspect`'s lines for wire_order."""
    out = []
    for key, e in (w or {}).items():
        how = ("the host reorders it (" + ", ".join(
            f"{m['op']}({m['node']}" + (f", perm {m['perm']}" if "perm" in m else "") + ")"
            for m in e["host_moves"]) + ")") if e["host_moves"] else "no host reordering"
        out.append(f"wire order, {key}: model {e['model_shape']} ({e['model_layout']}); "
                   f"{how}; circuit {e['circuit_shape']}: {e['order']}")
    return out
