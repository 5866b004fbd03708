"""Graph <-> JSON + weights.npz, deterministic: the artifact's graph.json and weights.npz."""

from __future__ import annotations

import contextlib
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .check import verify_graph
from .identity import canonical
from .ir import Graph, GraphError, Node, Tensor
from .types import parse_type

_EPOCH = (1980, 1, 1, 0, 0, 0)


def graph_to_json(g: Graph) -> dict[str, Any]:
    d = canonical(g)
    d["meta"] = {k: v for k, v in g.meta}
    return d


def graph_from_json(d: dict[str, Any], constants: dict[str, np.ndarray]) -> Graph:
    tensors = {k: Tensor(k, tuple(v["shape"]), None if v["type"] is None else parse_type(v["type"]))
               for k, v in d["tensors"].items()}
    nodes = tuple(Node.make(n["name"], n["op"], n["inputs"], n["outputs"], **n["attrs"])
                  for n in d["nodes"])
    return Graph(d["name"], tuple(d["inputs"]), tuple(d["outputs"]), nodes, tensors, constants,
                 meta=tuple(sorted(d.get("meta", {}).items())))


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n"


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """Like np.savez, but with fixed timestamps and order so the bytes are reproducible."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(arrays):
            a = io.BytesIO()
            np.lib.format.write_array(a, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, a.getvalue())
    return buf.getvalue()


def load_artifact_graph(path: str | Path) -> tuple[Graph, dict[str, Any]]:
    """graph.json + weights.npz (+ the manifest) of an artifact folder; any malformed part is
    one GraphError. Integrity (hashes, graph id) is checked by artifact.load_artifact."""
    p = Path(path)
    with _readable(p):
        manifest = json.loads((p / "manifest.json").read_text())
        d = json.loads((p / "graph.json").read_text())
        with np.load(p / "weights.npz", allow_pickle=False) as z:
            consts = {k: z[k] for k in z.files}
        if not isinstance(manifest, dict) or not isinstance(d, dict):
            raise ValueError("manifest.json and graph.json must hold JSON objects")
        g = graph_from_json(d, consts)
    try:
        verify_graph(g)  # what the backends read (ops.attrs) is well formed
    except GraphError as e:
        raise GraphError(f"{p} is not a readable modelcircuit artifact: {e}") from None
    return g, manifest


def load_host_parts(path: str | Path) -> tuple[Graph | None, Graph | None]:
    """The host head and tail of an artifact (host.json + host.npz), (None, None) without."""
    p = Path(path)
    if not (p / "host.json").exists():
        return None, None
    with _readable(p, " (host.json)"):
        d = json.loads((p / "host.json").read_text())
        with np.load(p / "host.npz", allow_pickle=False) as z:
            consts = {k: z[k] for k in z.files}
        if not isinstance(d, dict) or set(d) - {"head", "tail"}:
            raise ValueError("host.json must hold {head, tail}")
        parts = {}
        for key, gd in d.items():
            pre = f"{key}/"
            parts[key] = verify_graph(graph_from_json(
                gd, {k[len(pre):]: v for k, v in consts.items() if k.startswith(pre)}))
    return parts.get("head"), parts.get("tail")


@contextlib.contextmanager
def _readable(p: Path, part: str = "") -> Iterator[None]:
    """Any malformed file read inside becomes one GraphError naming the artifact."""
    where = f"{p} is not a readable modelcircuit artifact{part}"
    try:
        yield
    except RecursionError:
        raise GraphError(f"{where}: nested too deeply") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise GraphError(f"{where}: {msg}") from None
