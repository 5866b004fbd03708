"""Fixtures for `modelcircuit serve`: artifacts compiled once per session, a server on a
loopback port in a background thread of the test process, a real httpx client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette", reason="the [serve] extra is not installed")
pytest.importorskip("uvicorn", reason="the [serve] extra is not installed")
pytest.importorskip("prometheus_client", reason="the [serve] extra is not installed")
httpx = pytest.importorskip("httpx", reason="the [serve] extra is not installed")

from tests.conftest import DATA, SHARED_MODELS  # noqa: E402

JET = SHARED_MODELS / "three_layer_keras.onnx"


def compile_artifact(model: Path, out: Path, target: str) -> tuple[Any, Path]:
    import modelcircuit as mc
    from modelcircuit.artifact import write_compiled

    c = mc.compile(mc.load_onnx(model))
    write_compiled(c, out, target)
    return c, out


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    """name -> (CompiledGraph compiled afresh from the model, artifact folder)."""
    d = tmp_path_factory.mktemp("serve-artifacts")
    out = {"digits": compile_artifact(DATA / "digits_mlp.onnx", d / "digits", "gpu"),
           "digits-golden": compile_artifact(DATA / "digits_mlp.onnx", d / "digits-golden",
                                             "golden")}
    if JET.exists():
        out["jet"] = compile_artifact(JET, d / "jet", "gpu")
    return out


def jet_or_skip(artifacts: dict[str, Any]) -> tuple[Any, Path]:
    if "jet" not in artifacts:
        pytest.skip(f"third-party model {JET} is absent (../shared/models not beside the project)")
    return artifacts["jet"]


class Running:
    """A started BackgroundServer plus a client."""

    def __init__(self, srv: Any, client: Any):
        self.srv, self.client = srv, client

    @property
    def models(self) -> dict[str, Any]:
        return self.srv.state.models

    def infer(self, name: str, x: np.ndarray, npy: bool = False, **kw: Any) -> Any:
        if npy:
            import io

            b = io.BytesIO()
            np.save(b, np.asarray(x, dtype=np.float32), allow_pickle=False)
            return self.client.post(f"/v1/models/{name}/infer", content=b.getvalue(),
                                    headers={"content-type": "application/x-npy",
                                             "accept": "application/x-npy"}, **kw)
        return self.client.post(f"/v1/models/{name}/infer",
                                json={"inputs": np.asarray(x, dtype=np.float32).tolist()}, **kw)


def start_server(specs: list[str], backend: str, hold: threading.Event | None = None,
                 **opts: Any) -> Any:
    from modelcircuit.serve.app import BackgroundServer, Options, create_app
    from modelcircuit.serve.engines import buckets_for
    from modelcircuit.serve.models import load_models

    retry_s = opts.pop("retry_s", 1.0)
    o = Options(**opts)
    models = load_models(specs, backend, buckets_for(o.max_batch), retry_s)
    return BackgroundServer(create_app(models, o, hold_warmup=hold)).start()


@pytest.fixture
def serve() -> Iterator[Any]:
    """serve(specs, backend, hold=None, **options) -> Running; stopped after the test."""
    started: list[Running] = []

    def make(specs: list[str], backend: str = "golden", hold: threading.Event | None = None,
             wait: bool = True, **opts: Any) -> Running:
        srv = start_server(specs, backend, hold, **opts)
        r = Running(srv, httpx.Client(base_url=srv.url, timeout=60))
        started.append(r)
        if wait and hold is None:
            srv.wait_ready()
        return r

    yield make
    for r in started:
        r.client.close()
        r.srv.stop()


def wait_for(pred: Any, timeout: float = 30.0) -> None:
    t_end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > t_end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)
