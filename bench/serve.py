"""`modelcircuit serve` under load: p50/p99 latency and requests/s at concurrency 1, 16 and 64,
the per-request overhead of the server against a direct `mc.run` of the same batch in this
process, and a soak (RSS growth of the server process).

    python bench/serve.py                                  # golden (+ gpu when a device is here)
    python bench/serve.py --backends golden,gpu-emu --soak 100000

The server is the real command (`python -m modelcircuit.cli serve ... --port 0`) in its own
process, so client and server do not share a GIL; the client is a minimal asyncio HTTP/1.1
client (keep-alive, one connection per concurrent client, the request bytes built once), so
its own cost (tens of microseconds) stays out of the figures. A request is one sample (a
batch of 1) as JSON. Overhead = p50 of a request at concurrency 1 minus p50 of
`mc.run(compiled, x, backend=...)` on the same sample here (both measured in this run). "in server" is
the mean time from a request's arrival in the app to its answer (the server's own latency
histogram, sum / count over the level): the rest of a request's latency is the sockets and
the OS scheduling both processes. Prints a table
and writes bench/results/serve.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchio import write_json

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "models"
MODELS = {"jet": SHARED / "three_layer_keras.onnx",
          "digits": ROOT / "src" / "modelcircuit" / "data" / "digits_mlp.onnx"}


def start_server(specs: list[str], backend: str, extra: list[str]) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "modelcircuit.cli", "serve", *specs,
                             "--port", "0", "--backend", backend, *extra],
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stderr.readline()
    m = re.search(r"on http://([\d.]+):(\d+) ", line)
    if not m:
        proc.kill()
        raise SystemExit(f"server did not start: {line}{proc.stderr.read()}")
    return proc, f"{m.group(1)}:{m.group(2)}"


def request_bytes(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    return status, head, await reader.readexactly(n)


async def get(addr: str, path: str) -> tuple[int, bytes]:
    host, port = addr.split(":")
    r, w = await asyncio.open_connection(host, int(port))
    w.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    await w.drain()
    status, _h, body = await read_response(r)
    w.close()
    return status, body


async def wait_ready(addr: str, timeout: float = 300) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            if (await get(addr, "/v1/debug/graph_status"))[0] == 200:
                return time.perf_counter() - t0
        except OSError:
            pass
        await asyncio.sleep(0.02)
    raise SystemExit("server not ready in time")


async def load(addr: str, reqs: list[bytes], concurrency: int) -> tuple[np.ndarray, float]:
    """Send every request once, `concurrency` connections each sending in turn; latencies."""
    host, port = addr.split(":")
    lat = np.zeros(len(reqs))
    nxt = iter(range(len(reqs)))

    async def client() -> None:
        r, w = await asyncio.open_connection(host, int(port))
        for i in nxt:
            t0 = time.perf_counter()
            w.write(reqs[i])
            status, head, body = await read_response(r)
            lat[i] = time.perf_counter() - t0
            if status != 200 or b"x-execution-fidelity: full" not in head.lower():
                raise SystemExit(f"request {i}: {status} {body[:200]!r}")
        w.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return lat, time.perf_counter() - t0


def server_seconds(addr: str, model: str) -> tuple[float, float]:
    """(sum, count) of the server's own latency histogram: arrival to answer, in the app."""
    from prometheus_client.parser import text_string_to_metric_families

    _s, body = asyncio.run(get(addr, "/metrics"))
    total = count = 0.0
    for fam in text_string_to_metric_families(body.decode()):
        for smp in fam.samples:
            if smp.labels.get("model") != model:
                continue
            if smp.name == "modelcircuit_request_latency_seconds_sum":
                total = smp.value
            elif smp.name == "modelcircuit_request_latency_seconds_count":
                count = smp.value
    return total, count


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def direct_p50(c: object, x: np.ndarray, n: int, backend: str) -> float:
    import modelcircuit as mc

    for i in range(200):
        mc.run(c, x[i % len(x)][None], backend=backend)
    t = []
    for i in range(n):
        xi = x[i % len(x)][None]
        t0 = time.perf_counter()
        mc.run(c, xi, backend=backend)
        t.append(time.perf_counter() - t0)
    return float(np.median(t))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="jet,digits")
    ap.add_argument("--backends", default=None, help="default: golden, plus gpu with a device")
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--requests", type=int, default=4000, help="per concurrency level")
    ap.add_argument("--soak", type=int, default=0, help="requests of the soak (0: none)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "serve.json"))
    a = ap.parse_args()
    import modelcircuit as mc
    from modelcircuit.artifact import write_compiled
    from modelcircuit.sim.backends import gpu_device

    backends = a.backends.split(",") if a.backends else \
        ["golden"] + (["gpu"] if gpu_device()[0] else [])
    levels = [int(v) for v in a.concurrency.split(",")]
    rows, soak, direct = [], None, {}
    with tempfile.TemporaryDirectory() as tmp:
        compiled, specs = {}, []
        for name in a.models.split(","):
            if not MODELS[name].exists():
                print(f"skip {name}: {MODELS[name]} absent", file=sys.stderr)
                continue
            c = compiled[name] = mc.compile(mc.load_onnx(MODELS[name]))
            write_compiled(c, Path(tmp) / name, "gpu")
            specs.append(f"{name}={Path(tmp) / name}")
        rng = np.random.default_rng(0)
        xs = {n: (rng.standard_normal((1024,) + tuple(c.graph.tensor(c.graph.inputs[0]).shape))
                  * 2).astype(np.float32) for n, c in compiled.items()}
        for backend in backends:
            for name, c in compiled.items():  # mc.run of the same backend, in this process
                direct[name] = direct_p50(c, xs[name], 3000, backend)
            proc, addr = start_server(specs, backend, [])
            try:
                ready_s = asyncio.run(wait_ready(addr))
                print(f"{backend}: ready after {ready_s:.2f} s", file=sys.stderr)
                for name in compiled:
                    path = f"/v1/models/{name}/infer"
                    bodies = [request_bytes(path, json.dumps({"inputs": [r.tolist()]}).encode())
                              for r in xs[name]]
                    asyncio.run(load(addr, bodies[:300], 1))  # warm the connection paths
                    for conc in levels:
                        reqs = [bodies[i % len(bodies)] for i in range(a.requests)]
                        s0, n0 = server_seconds(addr, name)
                        lat, wall = asyncio.run(load(addr, reqs, conc))
                        s1, n1 = server_seconds(addr, name)
                        row = {"model": name, "backend": backend, "concurrency": conc,
                               "requests": len(reqs), "p50_ms": float(np.median(lat) * 1e3),
                               "p99_ms": float(np.percentile(lat, 99) * 1e3),
                               "rps": len(reqs) / wall,
                               "in_server_mean_ms": (s1 - s0) / max(1.0, n1 - n0) * 1e3}
                        if conc == 1:
                            row["direct_mc_run_p50_ms"] = direct[name] * 1e3
                            row["overhead_p50_ms"] = row["p50_ms"] - direct[name] * 1e3
                        rows.append(row)
                        print(f"  {name} c={conc}: p50 {row['p50_ms']:.3f} ms", file=sys.stderr)
                if a.soak and backend == backends[0]:
                    name = next(iter(compiled))
                    path = f"/v1/models/{name}/infer"
                    bodies = [request_bytes(path, json.dumps({"inputs": [r.tolist()]}).encode())
                              for r in xs[name]]
                    warm = min(5000, a.soak // 10)
                    asyncio.run(load(addr, [bodies[i % 1024] for i in range(warm)], 16))
                    r0 = rss_kib(proc.pid)
                    lat, wall = asyncio.run(load(addr, [bodies[i % 1024] for i in range(a.soak)],
                                                 16))
                    r1 = rss_kib(proc.pid)
                    soak = {"model": name, "backend": backend, "requests": a.soak,
                            "concurrency": 16, "warmup_requests": warm, "rss_start_kib": r0,
                            "rss_end_kib": r1, "rss_growth_pct": 100.0 * (r1 - r0) / r0,
                            "p50_ms": float(np.median(lat) * 1e3),
                            "p99_ms": float(np.percentile(lat, 99) * 1e3),
                            "rps": a.soak / wall}
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    print(f"{'model':8s} {'backend':8s} {'conc':>4s} {'requests':>8s} {'p50 ms':>8s} "
          f"{'p99 ms':>8s} {'req/s':>8s} {'in server':>9s} {'mc.run p50':>10s} "
          f"{'overhead p50':>12s}")
    for r in rows:
        extra = (f" {r['direct_mc_run_p50_ms']:10.3f} {r['overhead_p50_ms']:12.3f}"
                 if "overhead_p50_ms" in r else "")
        print(f"{r['model']:8s} {r['backend']:8s} {r['concurrency']:4d} {r['requests']:8d} "
              f"{r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['rps']:8.0f} "
              f"{r['in_server_mean_ms']:9.3f}{extra}")
    if soak:
        print(f"soak: {soak['requests']:,} requests ({soak['model']}, {soak['backend']}, "
              f"concurrency 16): RSS {soak['rss_start_kib']/1024:.1f} -> "
              f"{soak['rss_end_kib']/1024:.1f} MiB ({soak['rss_growth_pct']:+.1f} %), "
              f"p50 {soak['p50_ms']:.3f} ms, p99 {soak['p99_ms']:.3f} ms, {soak['rps']:.0f} req/s")
    write_json(a.json, {"rows": rows, "soak": soak})
    return 0


if __name__ == "__main__":
    sys.exit(main())
