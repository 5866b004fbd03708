"""Requests to models beyond the digits MLP: a per-sample input of two axes takes a batch of
flat samples (N, size) as well as (N, *shape) and one sample; a huge but finite input
through a QuantizeLinear head (float32 x / scale overflows to Inf) is answered (saturated, as
ONNX does), never a 500."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest

import modelcircuit as mc
from tests.graphs.test_host_inputs import qdq_input_model, seq_model

pytestmark = pytest.mark.xdist_group("serve")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from modelcircuit.artifact import write_compiled
    from tests.serve.conftest import httpx, start_server

    d = tmp_path_factory.mktemp("serve-shapes")
    specs, comp = [], {}
    for name, model in (("seq", seq_model()), ("qdq", qdq_input_model())):
        onnx.save(model, str(d / f"{name}.onnx"))
        c = mc.compile(mc.load_onnx(str(d / f"{name}.onnx")))
        write_compiled(c, d / name, "golden")
        specs.append(f"{name}={d / name}")
        comp[name] = c
    srv = start_server(specs, "golden")
    srv.wait_ready()
    with httpx.Client(base_url=srv.url, timeout=30) as cl:
        yield comp, cl
    srv.stop()


def post_npy(cl, name: str, x: np.ndarray):
    b = io.BytesIO()
    np.save(b, x, allow_pickle=False)
    return cl.post(
        f"/v1/models/{name}/infer",
        content=b.getvalue(),
        headers={"content-type": "application/x-npy"},
    )


def test_flat_batch_of_a_two_axis_input(served) -> None:
    comp, cl = served
    x = np.random.default_rng(3).normal(0, 1, (5, 3, 4)).astype(np.float32)
    want = mc.run(comp["seq"], x)
    for body in (x, x.reshape(5, 12)):  # (5, 12) was one sample "[1, 5, 12]": 400
        r = post_npy(cl, "seq", body)
        assert r.status_code == 200, r.text
        assert np.array_equal(np.array(r.json()["outputs"]), want)
    r = post_npy(cl, "seq", x[0])
    assert r.status_code == 200 and np.array_equal(np.array(r.json()["outputs"]), want[:1])
    r = post_npy(cl, "seq", np.zeros((5, 11), np.float32))
    assert r.status_code == 400 and "[5, 11]" in r.json()["error"]["message"]


def test_huge_finite_input_is_answered(served) -> None:
    comp, cl = served
    big = np.float32(3e38)
    x = np.array([[big] * 4, [-big] * 4], np.float32)
    r = post_npy(cl, "qdq", x)  # was 500 "internal error (ValueError)"
    assert r.status_code == 200, r.text
    assert np.array_equal(np.array(r.json()["outputs"]), mc.run(comp["qdq"], x))
