"""Fault injection: the primary backend raises mid-run (the documented test hook
`ServedModel.fault`); requests keep succeeding with `X-Execution-Fidelity: reduced`, the
fallback counter rises, the primary is retried and recovery is seen once the fault is
removed. 64 concurrent clients, each request with its own inputs: none lost, none answered
twice, each answer its own."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

import modelcircuit as mc
from tests.serve.conftest import httpx, wait_for
from tests.serve.test_serve import metric_samples

pytestmark = pytest.mark.xdist_group("serve")

CLIENTS = 64
PER_CLIENT = 6


class InjectedFault(RuntimeError):
    pass


def test_fallback_under_64_concurrent_clients(artifacts, serve):
    c, p = artifacts["digits"]
    r = serve([f"digits={p}"], "gpu-emu", retry_s=0.05)
    model = r.models["digits"]
    n = CLIENTS * PER_CLIENT
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((n, 64)) * 4).astype(np.float32)
    want = mc.run(c, x)
    assert len({w.tobytes() for w in want}) > n * 0.9  # answers tell requests apart
    seen: dict[int, list[tuple[str, np.ndarray]]] = {i: [] for i in range(n)}
    phase = {"answered": 0}

    async def client(k: int, ac: httpx.AsyncClient) -> None:
        for j in range(PER_CLIENT):
            i = k * PER_CLIENT + j
            resp = await ac.post("/v1/models/digits/infer", json={"inputs": x[i:i + 1].tolist()})
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-execution-graph-id"] == c.graph_id
            seen[i].append((resp.headers["x-execution-fidelity"],
                            np.array(resp.json()["outputs"])))
            phase["answered"] += 1
            if phase["answered"] == n // 4:
                model.fault = InjectedFault("injected: CUDA error (test hook)")
            if phase["answered"] == n // 2:
                model.fault = None

    async def main() -> None:
        limits = httpx.Limits(max_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=r.srv.url, limits=limits, timeout=60) as ac:
            await asyncio.gather(*(client(k, ac) for k in range(CLIENTS)))

    asyncio.run(main())
    fids = []
    for i in range(n):
        assert len(seen[i]) == 1  # answered once
        fid, out = seen[i][0]
        assert np.array_equal(out, want[i:i + 1]), f"request {i} got another request's answer"
        fids.append(fid)
    reduced = fids.count("reduced")
    assert reduced > 0 and fids.count("full") > 0
    s = metric_samples(r.client.get("/metrics").text)
    lab = (("model", "digits"),)
    assert s[("modelcircuit_fallback_requests_total", lab)] == reduced
    assert s[("execution_graph_cache_miss_total", lab)] == reduced
    assert s[("modelcircuit_requests_total", (("fidelity", "full"), ("model", "digits")))] \
        + s[("modelcircuit_requests_total", (("fidelity", "reduced"), ("model", "digits")))] == n
    assert s[("modelcircuit_primary_failures_total",
              (("backend", "gpu-emu"), ("model", "digits")))] >= 1
    assert s[("modelcircuit_batch_rows_sum", lab)] == n
    assert s[("modelcircuit_batch_requests_count", lab)] < n  # requests were packed together
    # recovered: the fault is gone, after the back-off the primary answers again
    wait_for(lambda: r.infer("digits", x[:1]).headers["x-execution-fidelity"] == "full")
    st = r.client.get("/v1/debug/graph_status").json()["models"]["digits"]
    assert st["primary"] == "healthy" and "injected" in st["last_primary_error"]


def test_both_paths_failing_is_503_and_the_server_stays_up(artifacts, serve):
    c, p = artifacts["digits"]
    r = serve([f"digits={p}"], "golden", retry_s=0.05)
    model = r.models["digits"]
    x = np.ones((2, 64), np.float32)
    model.fault = InjectedFault("primary down")
    got = r.infer("digits", x)
    assert got.status_code == 200 and got.headers["x-execution-fidelity"] == "reduced"
    assert np.array_equal(np.array(got.json()["outputs"]), mc.run(c, x))
    model.fallback_fault = InjectedFault("fallback down too")
    bad = r.infer("digits", x)
    assert bad.status_code == 503 and bad.headers["retry-after"] == "1"
    err = bad.json()["error"]
    assert err["kind"] == "backend_failed"
    assert "primary down" in err["message"] and "fallback down too" in err["message"]
    assert r.client.get("/v1/debug/graph_status").status_code == 200  # still up
    model.fault = model.fallback_fault = None
    time.sleep(0.2)  # past the back-off (0.05 s doubling: at most 0.1 s here)
    ok = r.infer("digits", x)
    assert ok.status_code == 200 and ok.headers["x-execution-fidelity"] == "full"
    s = metric_samples(r.client.get("/metrics").text)
    assert s[("modelcircuit_request_errors_total", (("kind", "backend_failed"),
                                                    ("model", "digits"), ("status", "503")))] == 1
