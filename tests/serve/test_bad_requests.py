"""Malformed requests: each gets its documented status and a JSON error naming the problem,
and the server keeps serving (a good request is answered after every one)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import modelcircuit as mc

pytestmark = pytest.mark.xdist_group("serve")

LIMIT = 8192  # --max-body-bytes of the server under test
JSON = {"content-type": "application/json"}
NPY = {"content-type": "application/x-npy"}
ROW = [0.5] * 64


def npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, a, allow_pickle=a.dtype.hasobject)
    return b.getvalue()


def npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": descr, "fortran_order": False,
                                             "shape": shape})
    return b.getvalue()


def js(obj: object) -> bytes:
    return json.dumps(obj).encode()


GOOD = npy(np.ones((2, 64), np.float32))
# (id, method, path, headers, body, status, error kind, words the message must hold)
CASES = [
    ("json-syntax", "POST", "digits", JSON, b'{"inputs": [[1, 2,', 400, "bad_json", "malformed JSON"),
    ("json-trailing-garbage", "POST", "digits", JSON, js({"inputs": [ROW]}) + b"x", 400, "bad_json", "malformed"),
    ("json-not-utf8", "POST", "digits", JSON, b'{"inputs": [[\xff\xfe]]}', 400, "bad_json", "UTF-8"),
    ("json-empty-body", "POST", "digits", JSON, b"", 400, "bad_request", "empty body"),
    ("json-array-top", "POST", "digits", JSON, js([ROW]), 400, "bad_request", "JSON object"),
    ("json-string-top", "POST", "digits", JSON, js("hello"), 400, "bad_request", "string"),
    ("json-no-inputs", "POST", "digits", JSON, js({"input": [ROW]}), 400, "bad_request", "'input'"),
    ("json-missing-inputs", "POST", "digits", JSON, js({}), 400, "bad_request", "missing"),
    ("json-extra-key", "POST", "digits", JSON, js({"inputs": [ROW], "x": 1}), 400, "bad_request", "unknown key"),
    ("json-inputs-number", "POST", "digits", JSON, js({"inputs": 3}), 400, "bad_shape", "list of samples"),
    ("json-inputs-object", "POST", "digits", JSON, js({"inputs": {"a": 1}}), 400, "bad_shape", "object"),
    ("json-inputs-empty", "POST", "digits", JSON, js({"inputs": []}), 400, "bad_shape", "empty"),
    ("json-ragged", "POST", "digits", JSON, js({"inputs": [ROW, ROW[:10]]}), 400, "bad_shape", "ragged"),
    ("json-wrong-width", "POST", "digits", JSON, js({"inputs": [ROW[:63]]}), 400, "bad_shape", "[1, 63]"),
    ("json-wrong-width-batch", "POST", "digits", JSON, js({"inputs": [ROW + [1.0]] * 2}), 400, "bad_shape", "[2, 65]"),
    ("json-strings", "POST", "digits", JSON, js({"inputs": [["a"] * 64]}), 400, "bad_dtype", "strings"),
    ("json-numeric-strings", "POST", "digits", JSON, js({"inputs": [["1.5"] * 64]}), 400, "bad_dtype", "strings"),
    ("json-null", "POST", "digits", JSON, js({"inputs": [[None] * 64]}), 400, "bad_dtype", "null"),
    ("json-bool", "POST", "digits", JSON, js({"inputs": [[True] + ROW[1:]]}), 400, "bad_dtype", "booleans"),
    ("json-nested-object", "POST", "digits", JSON, js({"inputs": [[{"v": 1}] * 64]}), 400, "bad_dtype", "null, nested"),
    ("json-NaN", "POST", "digits", JSON, b'{"inputs": [[NaN' + b", 0" * 63 + b"]]}", 400, "non_finite", "NaN"),
    ("json-Infinity", "POST", "digits", JSON, b'{"inputs": [[Infinity' + b", 0" * 63 + b"]]}", 400, "non_finite", "Infinity"),
    ("json-minus-Infinity", "POST", "digits", JSON, b'{"inputs": [[-Infinity' + b", 0" * 63 + b"]]}", 400, "non_finite", "-Infinity"),
    ("json-overflow-float64", "POST", "digits", JSON, b'{"inputs": [[1e400' + b", 0" * 63 + b"]]}", 400, "non_finite", "NaN or Inf"),
    ("json-beyond-float32", "POST", "digits", JSON, b'{"inputs": [[1e39' + b", 0" * 63 + b"]]}", 400, "non_finite", "float32"),
    ("json-huge-integer", "POST", "digits", JSON, b'{"inputs": [[' + b"9" * 400 + b", 0" * 63 + b"]]}", 400, "bad_dtype", "beyond"),
    ("json-deep-nesting", "POST", "digits", JSON, b'{"inputs": ' + b"[" * 3000 + b"]" * 3000 + b"}", 400, "bad_json", "deeply"),
    ("npy-bad-magic", "POST", "digits", NPY, b"not a numpy file at all", 400, "bad_npy", "not a readable .npy"),
    ("npy-truncated", "POST", "digits", NPY, GOOD[:-10], 400, "bad_npy", "holds"),
    ("npy-header-lies", "POST", "digits", NPY, npy_header("<f4", (10**12, 64)) + b"\0" * 256, 400, "bad_npy", "declares"),
    ("npy-object-pickle", "POST", "digits", NPY, npy(np.array([{"a": 1}, None], dtype=object)), 400, "bad_dtype", "object"),
    ("npy-complex", "POST", "digits", NPY, npy(np.ones((1, 64), np.complex64)), 400, "bad_dtype", "complex64"),
    ("npy-unicode", "POST", "digits", NPY, npy(np.array([["1"] * 64])), 400, "bad_dtype", "<U1"),
    ("npy-structured", "POST", "digits", NPY, npy(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])), 400, "bad_dtype", "not accepted"),
    ("npy-bool", "POST", "digits", NPY, npy(np.ones((1, 64), bool)), 400, "bad_dtype", "bool"),
    ("npy-scalar", "POST", "digits", NPY, npy(np.float32(1.0)), 400, "bad_shape", "[]"),
    ("npy-wrong-shape", "POST", "digits", NPY, npy(np.ones((3, 8), np.float32)), 400, "bad_shape", "[3, 8]"),
    ("npy-zero-rows", "POST", "digits", NPY, npy(np.ones((0, 64), np.float32)), 400, "bad_shape", "N >= 1"),
    ("npy-nan", "POST", "digits", NPY, npy(np.full((1, 64), np.nan, np.float32)), 400, "non_finite", "NaN"),
    ("npy-inf", "POST", "digits", NPY, npy(np.full((1, 64), -np.inf, np.float64)), 400, "non_finite", "Inf"),
    ("npy-beyond-float32", "POST", "digits", NPY, npy(np.full((1, 64), 1e300)), 400, "non_finite", "float32"),
    ("too-large-content-length", "POST", "digits", JSON, js({"inputs": [ROW] * 200}), 413, "too_large", "limit"),
    ("too-large-chunked", "POST", "digits", JSON, "chunked", 413, "too_large", "limit"),
    ("content-type-text", "POST", "digits", {"content-type": "text/plain"}, js({"inputs": [ROW]}), 415, "unsupported_media_type", "text/plain"),
    ("content-type-missing", "POST", "digits", {}, js({"inputs": [ROW]}), 415, "unsupported_media_type", "(none)"),
    ("accept-unsupported", "POST", "digits", {**JSON, "accept": "image/png"}, js({"inputs": [ROW]}), 406, "not_acceptable", "image/png"),
    ("unknown-model", "POST", "nope", JSON, js({"inputs": [ROW]}), 404, "unknown_model", "nope"),
    ("get-on-infer", "GET", "digits", {}, b"", 405, "method_not_allowed", "GET"),
    ("unknown-route", "GET", None, {}, b"", 404, "not_found", "/v1/nothing"),
]


def chunks(data: bytes, size: int = 1000):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def test_table_has_thirty_plus_cases():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def server(artifacts):
    from tests.serve.conftest import httpx, start_server

    c, p = artifacts["digits"]
    srv = start_server([f"digits={p}"], "golden", max_body_bytes=LIMIT)
    srv.wait_ready()
    with httpx.Client(base_url=srv.url, timeout=30) as cl:
        yield c, srv, cl
    srv.stop()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_request(case, server):
    name, method, model, headers, body, status, kind, words = case
    c, srv, cl = server
    url = "/v1/nothing" if model is None else f"/v1/models/{model}/infer"
    if body == "chunked":  # no Content-Length: the limit is checked on the streamed size
        big = js({"inputs": [ROW] * 200})
        assert len(big) > LIMIT
        resp = cl.request(method, url, headers=headers, content=chunks(big))
    else:
        resp = cl.request(method, url, headers=headers, content=body)
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    err = resp.json()["error"]
    assert err["status"] == status and err["kind"] == kind
    assert words in err["message"], err["message"]
    assert "Traceback" not in err["message"] and "\n" not in err["message"]
    # still serving, and still right
    x = np.arange(128, dtype=np.float32).reshape(2, 64) / 8
    ok = cl.post("/v1/models/digits/infer", content=npy(x), headers=NPY)
    assert ok.status_code == 200
    assert np.array_equal(np.array(ok.json()["outputs"]), mc.run(c, x))
