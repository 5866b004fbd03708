"""Request bodies in, answers out, with every refusal a RequestError (status, kind, message).

In: JSON `{"inputs": [[...], ...]}` (Content-Type application/json) or a raw `.npy`
(application/x-npy or application/octet-stream). The array is (N, *shape) or (N, size) or one
sample of the model's shape (as `mc.run` takes it); numbers are real (no booleans, strings,
null), finite and within float32's range, and reach the model as float32 (its ONNX input
type: a JSON number is rounded to the nearest float32). A `.npy` header is checked against
the body before any data is read: numeric dtypes only (an object array is refused from its
header; np.load always runs with allow_pickle=False), data size equal to what the header
declares.

Out: JSON `{"model", "graph_id", "fidelity", "outputs"}` (float64 numbers print exactly as
repr, so a JSON answer is as exact as a `.npy` one) or a `.npy` of the outputs, chosen by
the Accept header.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from ..graphs.ir import GraphError
from ..util.userio import check_array, read_npy_header
from .errors import RequestError

JSON_TYPES = ("application/json",)
NPY_TYPES = ("application/x-npy", "application/octet-stream")
NPY_MEDIA = "application/x-npy"


def media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def answer_format(accept: str | None) -> str:
    """"json" or "npy" from an Accept header (first acceptable entry; none given: JSON)."""
    if not accept or not accept.strip():
        return "json"
    for part in accept.split(","):
        m = media_type(part)
        if m in JSON_TYPES or m in ("*/*", "application/*"):
            return "json"
        if m in NPY_TYPES:
            return "npy"
    raise RequestError(406, "not_acceptable",
                       f"cannot answer in {accept.strip()[:100]!r}; accepted: application/json, "
                       f"{NPY_MEDIA}")


def _refuse_constant(name: str) -> float:
    raise RequestError(400, "non_finite", f"inputs hold {name}; the model refuses non-finite "
                                          "values")


def parse_json(body: bytes) -> np.ndarray:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(400, "bad_json", f"body is not UTF-8 text (byte {e.start})") from None
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise RequestError(400, "bad_json", "JSON nested too deeply") from None
    except ValueError as e:
        raise RequestError(400, "bad_json", f"malformed JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise RequestError(400, "bad_request", 'body must be a JSON object {"inputs": [[...], '
                                               f'...]}}, got a JSON {_json_kind(doc)}')
    extra = sorted(set(doc) - {"inputs"})
    if extra:
        raise RequestError(400, "bad_request", f"unknown key(s) {', '.join(map(repr, extra[:5]))};"
                                               ' the body is {"inputs": [[...], ...]}')
    if "inputs" not in doc:
        raise RequestError(400, "bad_request", 'missing "inputs": the body is {"inputs": '
                                               "[[...], ...]}")
    inputs = doc["inputs"]
    if not isinstance(inputs, list):
        raise RequestError(400, "bad_shape", f'"inputs" must be a list of samples, got a JSON '
                                             f"{_json_kind(inputs)}")
    if not inputs:
        raise RequestError(400, "bad_shape", '"inputs" is empty: send at least one sample')
    # The body's only strings are keys, all "inputs" (checked above), so a `true`/`false`
    # token in it is a boolean among the numbers (numpy would read it as 1.0 / 0.0).
    if b"true" in body or b"false" in body:
        raise RequestError(400, "bad_dtype", '"inputs" hold booleans; send numbers')
    try:
        x = np.array(inputs)
    except (ValueError, TypeError):
        raise RequestError(400, "bad_shape", '"inputs" is ragged: every sample needs the same '
                                             "shape") from None
    if x.dtype.kind not in "fiu":
        what = {"U": "strings", "O": "null, nested objects or numbers beyond float range",
                "b": "booleans"}.get(x.dtype.kind, f"values of type {x.dtype}")
        raise RequestError(400, "bad_dtype", f'"inputs" hold {what}; send numbers')
    return x


def _json_kind(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(v), type(v).__name__)


def parse_npy(body: bytes) -> np.ndarray:
    f = io.BytesIO(body)
    try:
        shape, _fortran, dtype = read_npy_header(f)
    except Exception as e:  # noqa: BLE001 - a malformed header is the client's
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RequestError(400, "bad_npy", f"body is not a readable .npy array ({msg})") from None
    if dtype.hasobject or dtype.kind not in "fiu" or dtype.fields is not None:
        raise RequestError(400, "bad_dtype", f".npy dtype {dtype} is not accepted; send float32 "
                                             "(or another real number type)")
    n = 1
    for d in shape:
        n *= int(d)
    data = len(body) - f.tell()
    if n * dtype.itemsize != data:
        raise RequestError(400, "bad_npy", f".npy header declares shape {list(shape)} "
                                           f"({n * dtype.itemsize:,} bytes) but the body holds "
                                           f"{data:,} bytes of data")
    f.seek(0)
    try:
        return np.load(f, allow_pickle=False)
    except Exception as e:  # noqa: BLE001
        raise RequestError(400, "bad_npy", f"body is not a readable .npy array "
                                           f"({type(e).__name__})") from None


def parse_inputs(body: bytes, content_type: str | None, shape: tuple[int, ...]) -> np.ndarray:
    """The request's samples as float32 (N, *shape), or a RequestError."""
    m = media_type(content_type)
    if not body:
        raise RequestError(400, "bad_request", "empty body: send JSON {\"inputs\": [[...]]} or "
                                               "a .npy array")
    if m in JSON_TYPES:
        x = parse_json(body)
    elif m in NPY_TYPES:
        x = parse_npy(body)
    else:
        raise RequestError(415, "unsupported_media_type",
                           f"Content-Type {m or '(none)'!r} is not accepted; send "
                           f"application/json or {NPY_MEDIA}")
    if tuple(x.shape) == tuple(shape):  # one sample; (N, size) is a batch even if 2-D
        x = x[None]
    size = int(np.prod(shape, dtype=np.int64))
    if x.ndim < 1 or x.shape[0] == 0 or int(np.prod(x.shape[1:], dtype=np.int64)) != size:
        need = ", ".join(map(str, shape))
        raise RequestError(400, "bad_shape", f"inputs of shape {list(x.shape)} do not fit the "
                                             f"model's input: need (N, {need}) with N >= 1")
    try:
        check_array(x, "inputs")  # numeric, finite, within float32
    except GraphError as e:
        kind = "non_finite" if ("NaN" in str(e) or "range" in str(e)) else "bad_dtype"
        raise RequestError(400, kind, f"{e}; the model refuses them") from None
    return np.ascontiguousarray(x.reshape((x.shape[0],) + tuple(shape)), dtype=np.float32)


def render_answer(fmt: str, name: str, graph_id: str, fidelity: str, out: np.ndarray
                  ) -> tuple[bytes, str]:
    if fmt == "npy":
        b = io.BytesIO()
        np.lib.format.write_array(b, np.ascontiguousarray(out), allow_pickle=False)
        return b.getvalue(), NPY_MEDIA
    doc = {"model": name, "graph_id": graph_id, "fidelity": fidelity, "outputs": out.tolist()}
    try:
        return json.dumps(doc, allow_nan=False).encode(), "application/json"
    except ValueError:  # a float graph's output overflowed: JSON has no Inf
        raise RequestError(500, "non_finite_output", "the model's output holds NaN or Inf, "
                                                     f"which JSON cannot carry; ask for {NPY_MEDIA}"
                           ) from None


def error_body(status: int, kind: str, message: str) -> bytes:
    return json.dumps({"error": {"status": status, "kind": kind, "message": message}}).encode()
