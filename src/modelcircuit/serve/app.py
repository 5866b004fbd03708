"""The HTTP side of `modelcircuit serve` (Starlette on uvicorn): routes, warm-up, a runner.

Routes (the table from model name to served model is built before the app and never
changes):
  POST /v1/models/{name}/infer          JSON or .npy in, JSON or .npy out (bodies.py); headers
                                        X-Execution-Graph-ID and X-Execution-Fidelity
  GET  /v1/models                       names, graph ids, input/output shapes and types, ...
  GET  /v1/debug/graph_status           503 until every model is warmed up and self-checked
  GET  /v1/debug/graph_inspect/{id}     `inspect --json` of that graph (--debug-endpoints)
  GET  /metrics                         Prometheus text (metrics.py)
Every error is JSON `{"error": {"status", "kind", "message"}}`.

Warm-up runs on a thread started with the app (the socket is already listening, so readiness
is observable): each model's `warm_up` in turn; a failure marks the app failed and calls
`on_failure` (the CLI stops the server and exits 2). `hold_warmup` (a threading.Event) is a
test hook: warm-up waits for it to be set.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .batching import Batcher
from .bodies import answer_format, error_body, parse_inputs, render_answer
from .errors import BackendsFailed, RequestError, ServeError
from .metrics import Metrics
from .models import ServedModel


@dataclass
class Options:
    max_batch: int = 64
    max_body_bytes: int = 16 << 20
    batch_wait_s: float = 0.001
    debug_endpoints: bool = False
    body_timeout_s: float = 30.0  # a request body that has not all arrived by then: 408
    max_connections: int = 1000   # uvicorn's limit_concurrency: 503 beyond it


class State:
    """What the routes share: models, batchers, metrics, readiness."""

    def __init__(self, models: Mapping[str, ServedModel], opts: Options):
        self.models = models
        self.opts = opts
        self.metrics = Metrics(list(models))
        self.batchers: dict[str, Batcher] = {}
        self.ready = False
        self.failure: str | None = None
        self.inspect_docs: dict[str, dict[str, Any]] = {}
        for m in models.values():
            m.on_fallback = self.metrics.on_fallback(m.name, m.backend)


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None
           ) -> Response:
    return Response(error_body(status, kind, message), status_code=status,
                    media_type="application/json", headers=headers)


async def _read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body within `timeout_s` of the headers (uvicorn has no body-read timeout of
    its own: without this, a Content-Length larger than what is sent, or a chunked body that
    never ends, holds the connection for ever), at most `limit` bytes."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body_now(request, limit)
    except TimeoutError:
        raise RequestError(408, "body_timeout", f"the request body did not arrive within "
                                                f"{timeout_s:g} s") from None


async def _read_body_now(request: Request, limit: int) -> bytes:
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            declared = int(cl)
        except ValueError:
            raise RequestError(400, "bad_request", f"Content-Length {cl[:40]!r} is not a "
                                                   "number") from None
        if declared > limit:
            raise RequestError(413, "too_large", f"body of {declared:,} bytes is over the "
                                                 f"limit of {limit:,} (--max-body-bytes)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "too_large", f"body is over the limit of {limit:,} bytes "
                                                 "(--max-body-bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


def _inspect_doc(m: ServedModel) -> dict[str, Any]:
    from ..report import inspect_rows

    man = m.manifest
    info = {"graph_id": m.graph_id, "profile": man.get("options", {}).get("profile"),
            "hdl": man.get("hdl"), "gpu": man.get("gpu"), "memory": man.get("memory"),
            "host": man.get("host")}
    return inspect_rows(m.compiled.graph, info)


def create_app(models: dict[str, ServedModel], opts: Options | None = None,
               on_failure: Callable[[str], None] | None = None,
               hold_warmup: threading.Event | None = None) -> Starlette:
    opts = opts or Options()
    models = MappingProxyType(dict(models))  # the route table: fixed from here on
    st = State(models, opts)
    if opts.debug_endpoints:
        st.inspect_docs = {m.graph_id: _inspect_doc(m) for m in models.values()}

    def warm() -> None:
        if hold_warmup is not None:
            hold_warmup.wait()
        for m in models.values():
            try:
                m.warm_up()
            except Exception as e:  # noqa: BLE001 - reported, and the server stops
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                if not isinstance(e, ServeError):
                    msg = f"model {m.name!r}: {m.backend} backend failed to warm up: {msg}"
                m.state, m.error = "failed", msg
                st.failure = msg
                if on_failure is not None:
                    on_failure(msg)
                return
        st.ready = True
        st.metrics.ready.set(1)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for name, m in models.items():
            b = Batcher(m, opts.max_batch, opts.batch_wait_s, st.metrics)
            b.start()
            st.batchers[name] = b
        threading.Thread(target=warm, name="serve-warmup", daemon=True).start()
        try:
            yield
        finally:
            await asyncio.gather(*(b.stop() for b in st.batchers.values()))

    async def infer(request: Request) -> Response:
        t0 = time.perf_counter()
        name = request.path_params["name"]
        m = models.get(name)
        if m is None:
            st.metrics.error(None, "unknown_model", 404)
            return _error(404, "unknown_model", f"no model named {name[:80]!r}; served: "
                                                f"{', '.join(sorted(models))}")
        batcher = st.batchers[name]
        batcher.arriving += 1
        arrived = True
        try:
            if not st.ready:
                raise RequestError(503, "not_ready", st.failure or "warming up: not ready yet "
                                   "(GET /v1/debug/graph_status says when)")
            fmt = answer_format(request.headers.get("accept"))
            body = await _read_body(request, opts.max_body_bytes, opts.body_timeout_s)
            x = parse_inputs(body, request.headers.get("content-type"), m.in_shape)
            batcher.arriving -= 1
            arrived = False
            try:
                out, fid, _bucket = await batcher.submit(x)
            except BackendsFailed as e:
                raise RequestError(503, "backend_failed", str(e)) from None
            data, media = render_answer(fmt, name, m.graph_id, fid, out)
        except RequestError as e:
            st.metrics.error(name, e.kind, e.status)
            hdr = ({"Retry-After": "1"} if e.status == 503 else
                   {"Connection": "close"} if e.status == 408 else None)  # the rest never came
            return _error(e.status, e.kind, e.message, hdr)
        except ClientDisconnect:  # the client left mid-body: nobody to answer
            st.metrics.error(name, "client_disconnected", 499)
            return _error(499, "client_disconnected", "the client closed the connection")
        except Exception as e:  # noqa: BLE001 - a bug: JSON 500, the server keeps serving
            st.metrics.error(name, "internal", 500)
            return _error(500, "internal", f"internal error ({type(e).__name__}); this is a bug")
        finally:
            if arrived:
                batcher.arriving -= 1
        st.metrics.answered(name, fid, time.perf_counter() - t0)
        return Response(data, media_type=media, headers={
            "X-Execution-Graph-ID": m.graph_id, "X-Execution-Fidelity": fid})

    async def list_models(request: Request) -> Response:
        return JSONResponse({"models": [m.describe() | {"max_batch": opts.max_batch}
                                        for m in models.values()]})

    async def graph_status(request: Request) -> Response:
        doc = {"ready": st.ready, "error": st.failure,
               "models": {n: m.status() for n, m in models.items()}}
        return JSONResponse(doc, status_code=200 if st.ready else 503)

    async def graph_inspect(request: Request) -> Response:
        gid = request.path_params["graph_id"]
        doc = st.inspect_docs.get(gid)
        if doc is None:
            return _error(404, "unknown_graph", f"no served graph has id {gid[:80]!r}")
        return JSONResponse(doc)

    async def metrics(request: Request) -> Response:
        data, media = st.metrics.render()
        return Response(data, media_type=media)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http")
        st.metrics.error(None, kind, exc.status_code)
        return _error(exc.status_code, kind, f"{request.method} {request.url.path[:100]}: "
                                             f"{exc.detail}", dict(exc.headers or {}) or None)

    routes = [Route("/v1/models/{name}/infer", infer, methods=["POST"]),
              Route("/v1/models", list_models, methods=["GET"]),
              Route("/v1/debug/graph_status", graph_status, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"])]
    if opts.debug_endpoints:
        routes.append(Route("/v1/debug/graph_inspect/{graph_id}", graph_inspect,
                            methods=["GET"]))
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error})
    app.state.serve = st
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free one); OSError when the address is unusable."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    family, _t, _p, _c, addr = infos[0]
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it a response's headers and body (two writes) meet the client's delayed ACK
    s = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
        s.listen(2048)
    except OSError:
        s.close()
        raise
    s.set_inheritable(True)
    return s


def uvicorn_server(app: Starlette) -> Any:
    """uvicorn with the app's connection cap (Options.max_connections as uvicorn's
    limit_concurrency: a request arriving while that many connections are open, its own
    included, or that many requests are in flight, is answered 503 at once), idle
    keep-alive connections closed after 5 s (timeout_keep_alive)."""
    import uvicorn

    cap = app.state.serve.opts.max_connections
    cfg = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                         timeout_graceful_shutdown=5, server_header=False,
                         limit_concurrency=cap, timeout_keep_alive=5)
    return uvicorn.Server(cfg)


class BackgroundServer:
    """The app on a loopback port, on a thread of this process (tests, bench/serve.py)."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0):
        self.app = app
        self.sock = bind(host, port)
        h, p = self.sock.getsockname()[:2]
        self.url = f"http://{h}:{p}"
        self.server = uvicorn_server(app)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="serve-uvicorn", daemon=True)

    @property
    def state(self) -> State:
        return self.app.state.serve

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        self.thread.start()
        t_end = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > t_end:
                raise RuntimeError("the server did not start")
            time.sleep(0.005)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        t_end = time.monotonic() + timeout
        while not self.state.ready:
            if self.state.failure:
                raise RuntimeError(self.state.failure)
            if time.monotonic() > t_end:
                raise RuntimeError("the server did not get ready")
            time.sleep(0.005)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
