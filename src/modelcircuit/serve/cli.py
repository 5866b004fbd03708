"""Arguments and entry point of `modelcircuit serve` (extra [serve]: starlette, uvicorn,
prometheus-client, imported only by `run`).

    modelcircuit serve [NAME=]ARTIFACT_DIR... [--backend gpu|gpu-emu|golden] [--host 127.0.0.1]
                       [--port 8000] [--max-batch 64] [--max-body-bytes N] [--batch-wait-ms 1]
                       [--retry-s 1] [--body-timeout-s 30] [--max-connections 1000]
                       [--debug-endpoints]

Before binding: every artifact is read and checked (manifest hashes, graph id, gpu/ files
against the graph), the backend's prerequisites are checked (a CUDA device for gpu, g++ for
gpu-emu); any failure is one `error:` line and exit 2. Then the socket listens, readiness
(GET /v1/debug/graph_status) answers 503 while the models warm up and self-check, then 200.
A failed warm-up or self-check stops the server: exit 2 with its reason.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import shutil
import signal
import sys
from collections.abc import Iterator

from .errors import ServeError

BACKENDS = ("golden", "gpu-emu", "gpu")
MAX_BODY = 1 << 30


def _number(kind: type, lo: float, hi: float) -> object:
    def parse(text: str) -> float:
        try:
            v = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be within {lo:,}..{hi:,}, got {text}")
        return v

    parse.__name__ = kind.__name__
    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the subcommand; must not import the extra's packages."""
    p.add_argument("artifacts", nargs="+", metavar="[NAME=]ARTIFACT_DIR",
                   help="folders written by `modelcircuit compile --target golden|gpu`; the "
                        "model's name in URLs is NAME, else the folder's name")
    p.add_argument("--backend", choices=BACKENDS, default="golden",
                   help="primary backend (default golden); the golden model on the CPU is the "
                        "fallback of every backend")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_number(int, 0, 65535), default=8000,
                   help="port (default 8000; 0 picks a free one)")
    p.add_argument("--max-batch", type=_number(int, 1, 65536), default=64,
                   help="most rows packed into one batch (default 64); the batch buckets are "
                        "the GPU runtime's (1, 64, 4096, 65536) up to the first that holds "
                        "it, so a bucket size wastes no padding")
    p.add_argument("--max-body-bytes", type=_number(int, 1, MAX_BODY), default=16 << 20,
                   help="largest request body (default 16 MiB); larger ones get 413")
    p.add_argument("--batch-wait-ms", type=_number(float, 0.0, 1000.0), default=1.0,
                   help="how long a batch may wait for requests already arriving (default 1)")
    p.add_argument("--retry-s", type=_number(float, 0.01, 3600.0), default=1.0,
                   help="first back-off before a failed primary backend is tried again "
                        "(doubles per failure, at most 60 s; default 1)")
    p.add_argument("--body-timeout-s", type=_number(float, 0.01, 3600.0), default=30.0,
                   help="a request body not all received within this many seconds of its "
                        "headers gets 408 and its connection closed (default 30)")
    p.add_argument("--max-connections", type=_number(int, 1, 1 << 20), default=1000,
                   help="open connections (or requests in flight) beyond which a request "
                        "gets 503 at once (default 1000)")
    p.add_argument("--debug-endpoints", action="store_true",
                   help="also serve GET /v1/debug/graph_inspect/{graph_id}")


def _imports() -> None:
    for mod in ("starlette", "uvicorn", "prometheus_client"):
        try:
            __import__(mod)
        except ImportError:
            raise ServeError(f"modelcircuit serve needs the [serve] extra ({mod} is not "
                             "installed): pip install 'modelcircuit[serve]'") from None


def _check_backend(backend: str) -> None:
    if backend == "gpu":
        from ..gpu_backend.runtime import device_info

        device_info()  # GpuError (exit 2) without CuPy or a device
    elif backend == "gpu-emu":
        import os

        if not (os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")):
            raise ServeError("the gpu-emu backend needs a C++ compiler (g++) on PATH")


@contextlib.contextmanager
def _graceful_signals() -> Iterator[None]:
    """SIGINT/SIGTERM stop the server gracefully (uvicorn's handlers: requests in flight are
    answered) and the command then exits 0: uvicorn re-raises the signal after shutting down,
    and the handlers installed here absorb it."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    try:
        old = {s: signal.signal(s, lambda *_: None) for s in sigs}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def run(a: argparse.Namespace) -> int:
    _imports()
    from .app import Options, bind, create_app, uvicorn_server
    from .engines import buckets_for
    from .models import load_models

    _check_backend(a.backend)
    from ..graphs.threads import limit_process

    limit_process()  # BLAS threads: at most the cores this server was given
    models = load_models(a.artifacts, a.backend, buckets_for(a.max_batch), a.retry_s)
    try:
        sock = bind(a.host, a.port)
    except OSError as e:
        raise ServeError(f"cannot listen on {a.host}:{a.port}: {e.strerror or e}") from None
    opts = Options(max_batch=a.max_batch, max_body_bytes=a.max_body_bytes,
                   batch_wait_s=a.batch_wait_ms / 1000.0, debug_endpoints=a.debug_endpoints,
                   body_timeout_s=a.body_timeout_s, max_connections=a.max_connections)
    holder: dict[str, object] = {}

    def failed(msg: str) -> None:
        server = holder.get("server")
        if server is not None:
            server.should_exit = True  # type: ignore[attr-defined]

    app = create_app(models, opts, on_failure=failed)
    server = holder["server"] = uvicorn_server(app)
    host, port = sock.getsockname()[:2]
    names = ", ".join(f"{n} ({m.graph_id[:12]})" for n, m in models.items())
    print(f"serving {names} on http://{host}:{port} with the {a.backend} backend; ready once "
          "GET /v1/debug/graph_status answers 200", file=sys.stderr, flush=True)
    if not _loopback(host):
        print(f"note: listening on {host}, beyond loopback: whoever reaches it can use it",
              file=sys.stderr)
    with _graceful_signals():
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
    failure = app.state.serve.failure
    if failure:
        raise ServeError(failure)
    return 0
