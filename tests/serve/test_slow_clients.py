"""Slow and greedy clients against a real server on a loopback port, with raw sockets (an
HTTP client library would not send a body that never ends): a request whose body does not
all arrive gets 408 within the body timeout and its connection is closed; connections over
the cap get 503 at once; afterwards the server still answers (issue 30)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import numpy as np
import pytest

TIMEOUT_S = 1.0
SLACK_S = 20.0  # a loaded 2-core machine: the answer may come late, never early

HEAD = ("POST /v1/models/digits-golden/infer HTTP/1.1\r\nHost: t\r\n"
        "Content-Type: application/json\r\n")
PARTIAL = {  # a body that never ends: the declared length is never reached, or no last chunk
    "content-length": (HEAD + "Content-Length: 1000\r\n\r\n" + '{"inputs": [[').encode(),
    "chunked": (HEAD + "Transfer-Encoding: chunked\r\n\r\n" + "c\r\n" + '{"inputs": [' + "\r\n"
                ).encode(),
}


def _connect(url: str) -> socket.socket:
    u = urlsplit(url)
    s = socket.create_connection((u.hostname, u.port), timeout=SLACK_S + TIMEOUT_S)
    return s


def _read_all(s: socket.socket) -> bytes:
    """Everything until the server closes the connection (a timeout fails the test)."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def _still_serving(r, artifacts) -> None:
    x = np.zeros((1, 64), np.float32)
    assert r.client.get("/v1/debug/graph_status").status_code == 200
    res = r.infer("digits-golden", x)
    assert res.status_code == 200, res.text


@pytest.mark.parametrize("kind", sorted(PARTIAL))
def test_body_that_never_arrives_gets_408_and_closed(kind, serve, artifacts) -> None:
    r = serve([f"digits-golden={artifacts['digits-golden'][1]}"], body_timeout_s=TIMEOUT_S)
    s = _connect(r.srv.url)
    try:
        t0 = time.monotonic()
        s.sendall(PARTIAL[kind])
        reply = _read_all(s)  # returns only once the server closed the connection
        took = time.monotonic() - t0
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"body_timeout" in reply and b"did not arrive within 1 s" in reply, reply
    assert TIMEOUT_S * 0.9 <= took <= TIMEOUT_S + SLACK_S, took
    _still_serving(r, artifacts)


def test_connections_over_the_cap_get_503_then_recover(serve, artifacts) -> None:
    cap, hold_s = 3, 5.0  # held long enough that none times out before the next request
    r = serve([f"digits-golden={artifacts['digits-golden'][1]}"], body_timeout_s=hold_s,
              max_connections=cap)
    held = [_connect(r.srv.url) for _ in range(cap - 1)]  # uvicorn counts the new one too
    try:
        for s in held:
            s.sendall(PARTIAL["content-length"])
            time.sleep(0.2)  # the server has read its headers: one more request in flight
        t0 = time.monotonic()
        over = r.client.get("/v1/models")
        assert over.status_code == 503, over.text
        assert time.monotonic() - t0 < hold_s, "the refusal must not wait for the others"
        for s in held:  # each held request ends in 408 after the body timeout
            assert _read_all(s).startswith(b"HTTP/1.1 408")
    finally:
        for s in held:
            s.close()
    _still_serving(r, artifacts)
