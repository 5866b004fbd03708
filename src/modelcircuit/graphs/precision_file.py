"""Per-layer precision given by the user: `fixed<16,6>` for all, or a JSON file of
node -> type. The file's shape is checked here against explicit limits; node names are
checked against the graph by the compiler (passes/precision.check_per_layer)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..util.userio import regular_file, shown
from .ir import GraphError

MAX_PRECISION_FILE_BYTES = 1 << 20  # per-layer precision JSON
MAX_JSON_DEPTH = 4                  # {node: {part: type}} is depth 2


def _depth(o: Any, limit: int, d: int = 0) -> int:
    if d > limit:
        return d
    if isinstance(o, dict):
        return max([_depth(v, limit, d + 1) for v in o.values()] or [d + 1])
    if isinstance(o, list):
        return max([_depth(v, limit, d + 1) for v in o] or [d + 1])
    return d


def parse_precision(text: str | None) -> tuple[str | None, dict[str, Any] | None]:
    """`fixed<16,6>` for all, or a JSON file {node: type | {result, weight, bias}, default?}.
    The shape of the file is checked here; node names are checked against the graph by
    the compiler (passes/precision.check_per_layer)."""
    if text is None:
        return None, None
    if not isinstance(text, str) or not text.strip():
        raise GraphError("--precision is empty; give fixed<W,I>, ufixed<W,I>, float32 or a JSON file")
    looks_like_file = text.endswith(".json") or os.path.lexists(text) or os.sep in text
    if not looks_like_file:
        return text, None
    regular_file(text, "--precision file", MAX_PRECISION_FILE_BYTES)
    try:
        raw = Path(text).read_bytes()
        m = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise GraphError(f"--precision file {shown(text)}: JSON nested too deeply") from None
    except (OSError, ValueError) as e:
        raise GraphError(f"--precision file {shown(text)}: not valid JSON "
                         f"({str(e).splitlines()[0]})") from None
    if not isinstance(m, dict):
        raise GraphError(f"--precision file {shown(text)} must hold a JSON object of node -> type, "
                         f"got {type(m).__name__}")
    if _depth(m, MAX_JSON_DEPTH) > 2:
        raise GraphError(f"--precision file {shown(text)}: nested deeper than "
                         "{node: {result|weight|bias: type}}")
    default = m.pop("default", None)
    if default is not None and not isinstance(default, str):
        raise GraphError(f"--precision file {shown(text)}: 'default' must be a type string like "
                         f"fixed<16,6>, got {json.dumps(default)[:60]}")
    from ..graphs.passes.precision import check_per_layer_entry

    for node, v in m.items():
        check_per_layer_entry(node, v, f"--precision file {shown(text)}")
    return default, m
