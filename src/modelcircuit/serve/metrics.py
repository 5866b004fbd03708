"""Prometheus metrics of one app, on its own CollectorRegistry (two apps in one process, as in
the tests, never share counters). Model labels are served model names only; a request for an
unknown model is counted under model="-" so that clients cannot grow the label set."""

from __future__ import annotations

from typing import Any

LATENCY_BUCKETS = (5e-5, 1e-4, 2e-4, 3e-4, 5e-4, 7.5e-4, 1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 1e-2,
                   2e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_BUCKETS = tuple(float(2 ** k) for k in range(17))


class Metrics:
    def __init__(self, models: list[str]):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("modelcircuit_requests", "Inference requests answered, by "
                                "fidelity (full: primary backend; reduced: golden fallback)",
                                ["model", "fidelity"], registry=r)
        self.errors = Counter("modelcircuit_request_errors", "Requests refused or failed, by "
                              "kind (bad_json, bad_shape, too_large, backend_failed, ...)",
                              ["model", "kind", "status"], registry=r)
        self.latency = Histogram("modelcircuit_request_latency_seconds", "Time from the request's "
                                 "arrival to its answer, successful inference requests",
                                 ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_rows = Histogram("modelcircuit_batch_rows", "Rows per batch run by a backend "
                                    "(several requests packed together)", ["model"],
                                    buckets=BATCH_BUCKETS, registry=r)
        self.batch_requests = Histogram("modelcircuit_batch_requests", "Requests packed into one "
                                        "batch", ["model"], buckets=BATCH_BUCKETS, registry=r)
        self.fallback = Counter("modelcircuit_fallback_requests", "Requests answered by the "
                                "golden fallback (X-Execution-Fidelity: reduced)", ["model"],
                                registry=r)
        self.primary_failures = Counter("modelcircuit_primary_failures", "Batches on which the "
                                        "primary backend raised", ["model", "backend"],
                                        registry=r)
        self.cache_hit = Counter("execution_graph_cache_hit", "Requests served by a program "
                                 "prepared at load for a compile-time batch bucket (a captured "
                                 "CUDA graph on gpu)", ["model"], registry=r)
        self.cache_miss = Counter("execution_graph_cache_miss", "Requests served without one "
                                  "(the fallback path)", ["model"], registry=r)
        self.ready = Gauge("modelcircuit_ready", "1 once every model is loaded, warmed up and "
                           "self-checked", registry=r)
        self.models = set(models)
        for m in models:  # every series exists from the start (zero), so rates are defined
            self.requests.labels(m, "full")
            self.requests.labels(m, "reduced")
            self.fallback.labels(m)
            self.cache_hit.labels(m)
            self.cache_miss.labels(m)

    def label(self, name: str | None) -> str:
        return name if name in self.models else "-"

    def error(self, name: str | None, kind: str, status: int) -> None:
        self.errors.labels(self.label(name), kind, str(status)).inc()

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def answered(self, name: str, fidelity: str, seconds: float) -> None:
        self.requests.labels(name, fidelity).inc()
        self.latency.labels(name).observe(seconds)
        if fidelity == "full":
            self.cache_hit.labels(name).inc()
        else:
            self.cache_miss.labels(name).inc()
            self.fallback.labels(name).inc()

    def batch(self, name: str, rows: int, requests: int) -> None:
        self.batch_rows.labels(name).observe(rows)
        self.batch_requests.labels(name).observe(requests)

    def on_fallback(self, name: str, backend: str) -> Any:
        def hook(rows: int, err: BaseException | None) -> None:
            if err is not None:
                self.primary_failures.labels(name, backend).inc()
        return hook
