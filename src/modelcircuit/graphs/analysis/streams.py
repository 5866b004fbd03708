"""Stream assignment: independent branches on their own streams, joins as events.

Pure data, decided at compile time. A node continues the stream of its first producer when
that producer is the last node placed on that stream (a chain stays on one stream); otherwise
it opens a new stream, up to `max_streams` (then streams are reused round-robin, which only
adds ordering). Every dependency that crosses streams becomes an event wait. Stream 0 is the
main stream: it forks the others at the start and joins them at the end (which is also what
CUDA graph capture needs).
"""

from __future__ import annotations

from typing import Any

from ..ir import Graph


def assign_streams(graph: Graph, max_streams: int = 4) -> dict[str, Any]:
    prod = {o: n.name for n in graph.nodes for o in n.outputs}
    stream: dict[str, int] = {}
    last: dict[int, str] = {}
    waits: dict[str, list[str]] = {}
    opened = 0
    for n in graph.nodes:
        ps = [prod[x] for x in graph.activations(n) if x in prod]
        s = None
        for p in ps:
            if last.get(stream[p]) == p:
                s = stream[p]
                break
        if s is None:
            if opened < max_streams:
                s, opened = opened, opened + 1
            else:
                s = len(stream) % max_streams
        stream[n.name] = s
        last[s] = n.name
        waits[n.name] = sorted({p for p in ps if stream[p] != s})
    used = sorted(set(stream.values()) | {0})
    return {
        "streams": len(used),
        "node_stream": stream,
        "waits": {k: v for k, v in waits.items() if v},
        "fork": [s for s in used if s != 0],
        "join": [s for s in used if s != 0],
    }
