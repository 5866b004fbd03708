"""The self-check vectors that `compile --target golden|gpu` stores for `serve`: deterministic
bytes, hashed in the manifest, the golden codes of the graph; an artifact without them (an
older one) is self-checked on vectors generated at load."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.artifact import SELFCHECK, write_compiled
from modelcircuit.data import DEFAULT_MODEL, bundled

pytestmark = pytest.mark.xdist_group("serve")


def test_selfcheck_file_is_deterministic_and_golden(tmp_path):
    c1 = mc.compile(mc.load_onnx(bundled(DEFAULT_MODEL)))
    c2 = mc.compile(mc.load_onnx(bundled(DEFAULT_MODEL)))
    write_compiled(c1, tmp_path / "a", "golden")
    write_compiled(c2, tmp_path / "b", "golden")
    a, b = (tmp_path / "a" / SELFCHECK).read_bytes(), (tmp_path / "b" / SELFCHECK).read_bytes()
    assert a == b
    assert (tmp_path / "a" / "manifest.json").read_bytes() == \
        (tmp_path / "b" / "manifest.json").read_bytes()
    assert SELFCHECK in json.loads((tmp_path / "a" / "manifest.json").read_text())["files"]
    with np.load(tmp_path / "a" / SELFCHECK, allow_pickle=False) as z:
        x, y = z["inputs"], z["expected"]
    assert x.dtype == np.float32 and x.shape == (16, 64)
    assert np.array_equal(y, mc.run(c1, x, codes=True))
    assert len({r.tobytes() for r in y}) == 16  # distinct answers: the check can fail


def test_artifact_without_selfcheck_generates_vectors(artifacts, tmp_path, serve):
    a = tmp_path / "old"
    shutil.copytree(artifacts["digits-golden"][1], a)
    (a / SELFCHECK).unlink()
    m = json.loads((a / "manifest.json").read_text())
    del m["files"][SELFCHECK]
    (a / "manifest.json").write_text(json.dumps(m))
    r = serve([f"old={a}"], "golden")
    st = r.client.get("/v1/debug/graph_status").json()["models"]["old"]
    assert st["selfcheck"]["source"].startswith("generated at load")
    assert st["selfcheck"]["bit_exact"] is True
