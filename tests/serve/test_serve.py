"""`modelcircuit serve` with a real server on loopback and a real HTTP client (httpx):
answers equal `mc.run` bit for bit, graph id header, readiness 503 -> 200, /v1/models,
Prometheus metrics that parse, the debug inspect endpoint."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

import modelcircuit as mc
from tests.serve.conftest import jet_or_skip

pytestmark = pytest.mark.xdist_group("serve")


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def digits_x(digits_test: tuple[np.ndarray, np.ndarray], n: int) -> np.ndarray:
    return digits_test[0][:n].reshape(n, 64).astype(np.float32)


@pytest.mark.parametrize("backend", ["golden", "gpu-emu"])
def test_infer_equals_mc_run(backend, artifacts, serve, digits_test):
    c_digits, p_digits = artifacts["digits"]
    c_jet, p_jet = jet_or_skip(artifacts)
    r = serve([f"digits={p_digits}", f"jet={p_jet}"], backend)
    xd = digits_x(digits_test, 40)
    xj = np.random.default_rng(3).standard_normal((40, 16)).astype(np.float32) * 3
    for name, c, x in (("digits", c_digits, xd), ("jet", c_jet, xj)):
        want = mc.run(c, x)
        assert np.array_equal(want, mc.run(c, x, backend="gpu-emu"))  # the premise
        # one request of 40 rows (JSON), one row at a time (.npy), and a single sample
        got = r.infer(name, x)
        assert got.status_code == 200, got.text
        assert got.headers["x-execution-graph-id"] == c.graph_id
        assert got.headers["x-execution-fidelity"] == "full"
        doc = got.json()
        assert doc["graph_id"] == c.graph_id and doc["fidelity"] == "full"
        out = np.array(doc["outputs"])
        assert out.shape == want.shape and np.array_equal(out, want)
        for i in (0, 7, 39):
            g = r.infer(name, x[i:i + 1], npy=True)
            assert g.status_code == 200 and g.headers["content-type"] == "application/x-npy"
            a = np.load(io.BytesIO(g.content), allow_pickle=False)
            assert a.dtype == want.dtype and np.array_equal(a, want[i:i + 1])
        one = r.client.post(f"/v1/models/{name}/infer", json={"inputs": x[5].tolist()})
        assert np.array_equal(np.array(one.json()["outputs"]), want[5:6])
    # more rows than --max-batch (64): chunks of the largest bucket, still exact
    xl = np.random.default_rng(4).standard_normal((150, 64)).astype(np.float32) * 4
    g = r.infer("digits", xl, npy=True)
    assert np.array_equal(np.load(io.BytesIO(g.content)), mc.run(c_digits, xl))
    status = r.client.get("/v1/debug/graph_status").json()
    assert status["ready"] is True
    for m in status["models"].values():
        assert m["buckets_warmed"] == [1, 64] and m["selfcheck"]["bit_exact"] is True
        assert m["selfcheck"]["source"] == "artifact" and m["backend"] == backend


def test_readiness_flips_and_models_listing(artifacts, serve):
    c, p = artifacts["digits"]
    hold = threading.Event()
    r = serve([f"digits={p}"], "gpu-emu", hold=hold)
    s = r.client.get("/v1/debug/graph_status")
    assert s.status_code == 503 and s.json()["ready"] is False
    assert s.json()["models"]["digits"]["state"] == "loaded"
    x = np.zeros((1, 64), np.float32)
    early = r.infer("digits", x)
    assert early.status_code == 503 and early.json()["error"]["kind"] == "not_ready"
    assert early.headers["retry-after"] == "1"
    m = r.client.get("/metrics").text
    assert metric_samples(m)[("modelcircuit_ready", ())] == 0
    hold.set()  # warm-up starts: polled from that moment until done, then a while more
    codes = []
    for _ in range(3000):
        codes.append(r.client.get("/v1/debug/graph_status").status_code)
        if codes[-1] == 200 and len(codes) - codes.index(200) > 20:
            break
    first = codes.index(200)
    assert set(codes[:first]) <= {503} and set(codes[first:]) == {200}  # flips once
    assert r.infer("digits", x).status_code == 200
    lst = r.client.get("/v1/models").json()["models"]
    assert len(lst) == 1
    d = lst[0]
    assert d["name"] == "digits" and d["graph_id"] == c.graph_id and d["backend"] == "gpu-emu"
    assert d["input"]["shape"] == [64] and d["input"]["dtype"] == "float32"
    assert d["output"]["shape"] == [10] and d["output"]["circuit_type"] == "fixed<16,6>"
    assert d["buckets"] == [1, 64] and d["max_batch"] == 64 and d["target"] == "gpu"


def test_metrics_parse_and_count(artifacts, serve, digits_test):
    _c, p = artifacts["digits"]
    r = serve([f"digits={p}"], "golden")
    x = digits_x(digits_test, 5)
    for i in range(5):
        assert r.infer("digits", x[i:i + 1]).status_code == 200
    assert r.infer("digits", x[:3]).status_code == 200
    assert r.client.post("/v1/models/digits/infer", content=b"{",
                         headers={"content-type": "application/json"}).status_code == 400
    assert r.client.post("/v1/models/nope/infer", json={"inputs": [[0]]}).status_code == 404
    text = r.client.get("/metrics")
    assert text.headers["content-type"].startswith("text/plain")
    s = metric_samples(text.text)
    lab = (("model", "digits"),)
    assert s[("modelcircuit_requests_total", (("fidelity", "full"), ("model", "digits")))] == 6
    assert s[("modelcircuit_requests_total", (("fidelity", "reduced"), ("model", "digits")))] == 0
    assert s[("execution_graph_cache_hit_total", lab)] == 6
    assert s[("execution_graph_cache_miss_total", lab)] == 0
    assert s[("modelcircuit_fallback_requests_total", lab)] == 0
    assert s[("modelcircuit_request_latency_seconds_count", lab)] == 6
    assert s[("modelcircuit_batch_rows_sum", lab)] == 8  # 5 batches of 1 row, 1 of 3
    assert s[("modelcircuit_request_errors_total",
              (("kind", "bad_json"), ("model", "digits"), ("status", "400")))] == 1
    assert s[("modelcircuit_request_errors_total",
              (("kind", "unknown_model"), ("model", "-"), ("status", "404")))] == 1
    assert s[("modelcircuit_ready", ())] == 1


def test_debug_inspect_endpoint(artifacts, serve, capsys):
    import json

    from modelcircuit.cli import main

    c, p = artifacts["digits"]
    plain = serve([f"digits={p}"], "golden")
    assert plain.client.get(f"/v1/debug/graph_inspect/{c.graph_id}").status_code == 404
    r = serve([f"digits={p}"], "golden", debug_endpoints=True)
    doc = r.client.get(f"/v1/debug/graph_inspect/{c.graph_id}")
    assert doc.status_code == 200
    assert main(["inspect", str(p), "--json"]) == 0
    assert doc.json() == json.loads(capsys.readouterr().out)  # `inspect --json`, as served
    assert doc.json()["graph_id"] == c.graph_id
    bad = r.client.get("/v1/debug/graph_inspect/" + "0" * 64)
    assert bad.status_code == 404 and bad.json()["error"]["kind"] == "unknown_graph"


@pytest.mark.gpu
def test_gpu_backend_equals_mc_run(artifacts, serve):
    """On a CUDA device: CUDA graphs captured per bucket at load, answers bit-exact."""
    c_digits, p_digits = artifacts["digits"]
    r = serve([f"digits={p_digits}"], "gpu")
    st = r.client.get("/v1/debug/graph_status").json()["models"]["digits"]
    assert st["buckets_warmed"] == [1, 64] and st["selfcheck"]["bit_exact"] is True
    x = (np.random.default_rng(5).standard_normal((100, 64)) * 4).astype(np.float32)
    for rows in (1, 7, 64, 100):
        got = r.infer("digits", x[:rows], npy=True)
        assert got.headers["x-execution-fidelity"] == "full"
        assert np.array_equal(np.load(io.BytesIO(got.content)), mc.run(c_digits, x[:rows]))
