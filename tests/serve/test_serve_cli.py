"""`modelcircuit serve` on the command line: refusals before binding (one `error:` line,
exit 2), a self-check failure after binding (exit 2), a real run stopped by SIGTERM (exit 0),
and the subcommand's parser importing none of the extra's packages."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from modelcircuit.cli import main
from tests.conftest import ROOT

pytestmark = pytest.mark.xdist_group("serve")


def rehash(art, rel: str) -> None:
    m = json.loads((art / "manifest.json").read_text())
    m["files"][rel] = hashlib.sha256((art / rel).read_bytes()).hexdigest()
    (art / "manifest.json").write_text(json.dumps(m, indent=1, sort_keys=True) + "\n")


def copy(artifacts, name, tmp_path):
    dst = tmp_path / name
    shutil.copytree(artifacts[name][1], dst)
    return dst


def edit_weights(a):
    b = bytearray((a / "weights.npz").read_bytes())
    b[len(b) // 2] ^= 1
    (a / "weights.npz").write_bytes(bytes(b))


def edit_kernels_rehashed(a):
    p = a / "gpu" / "kernels.cu"
    p.write_text(p.read_text().replace("+", "-", 1))
    rehash(a, "gpu/kernels.cu")


def edit_manifest_id(a):
    m = json.loads((a / "manifest.json").read_text())
    m["graph_id"] = "0" * 64
    (a / "manifest.json").write_text(json.dumps(m))


def drop_selfcheck(a):
    (a / "selfcheck.npz").unlink()


REFUSED = [
    ("weights-edited", "digits", ["--backend", "golden"], edit_weights, "weights.npz was modified"),
    ("manifest-graph-id", "digits", [], edit_manifest_id, "graph id"),
    ("file-missing", "digits", [], drop_selfcheck, "selfcheck.npz is missing"),
    ("kernels-edited-rehashed", "digits", ["--backend", "gpu-emu"], edit_kernels_rehashed,
     "kernels.cu is not the source"),
    ("golden-artifact-gpu-emu", "digits-golden", ["--backend", "gpu-emu"], None,
     "holds no GPU kernels"),
    ("not-a-folder", None, [], None, "is not a directory"),
    ("bad-name", "digits", [], "name", "cannot be a model name"),
    ("duplicate-name", "digits", [], "dup", "two artifacts are named"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_before_binding(case, artifacts, tmp_path, capsys):
    _id, name, extra, edit, words = case
    if name is None:
        spec = [str(tmp_path / "nothing")]
    else:
        a = copy(artifacts, name, tmp_path)
        if callable(edit):
            edit(a)
        if edit == "name":  # a folder name that cannot be a URL path segment, no NAME=
            a = a.rename(a.parent / "my model")
        spec = [f"m={a}", f"m={a}"] if edit == "dup" else [str(a)]
    rc = main(["serve", *spec, "--port", "0", *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], err


def test_other_target_refused(artifacts, tmp_path, capsys):
    """A --target verilog|fpga artifact (its manifest's target; compiling one takes ~40 s of
    Amaranth export, so the target field is edited here: it is not covered by a hash)."""
    a = copy(artifacts, "digits-golden", tmp_path)
    m = json.loads((a / "manifest.json").read_text())
    m["target"] = "verilog"
    (a / "manifest.json").write_text(json.dumps(m))
    assert main(["serve", str(a), "--port", "0"]) == 2
    assert "--target verilog; serve takes artifacts of --target golden or gpu" in \
        capsys.readouterr().err


def test_gpu_backend_without_device_is_one_line(artifacts, capsys):
    pytest.importorskip("modelcircuit.gpu_backend")
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is importable here: the gpu backend may start")
    except ImportError:
        pass
    assert main(["serve", str(artifacts["digits"][1]), "--backend", "gpu", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CuPy" in err and "gpu-emu" in err


def test_port_in_use(artifacts, capsys):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        rc = main(["serve", str(artifacts["digits"][1]), "--port", str(s.getsockname()[1])])
    finally:
        s.close()
    err = capsys.readouterr().err
    assert rc == 2 and "cannot listen on 127.0.0.1:" in err and err.count("\n") == 1


def test_bad_option_values(capsys):
    for argv in (["--port", "70000"], ["--max-batch", "0"], ["--max-body-bytes", "x"],
                 ["--batch-wait-ms", "-1"], ["--backend", "rtl"]):
        assert main(["serve", "somewhere", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and argv[0] in err


def test_selfcheck_mismatch_stops_the_server(artifacts, tmp_path, capsys):
    """An artifact whose stored golden codes do not match what its graph computes (edited and
    re-hashed): the server binds, warm-up's self-check fails, it stops; exit 2."""
    a = copy(artifacts, "digits", tmp_path)
    with np.load(a / "selfcheck.npz") as z:
        x, y = z["inputs"], z["expected"].copy()
    y[3, 2] += 1
    from modelcircuit.graphs.serialize import npz_bytes

    (a / "selfcheck.npz").write_bytes(npz_bytes({"inputs": x, "expected": y}))
    rehash(a, "selfcheck.npz")
    t0 = time.monotonic()
    rc = main(["serve", str(a), "--port", "0", "--backend", "gpu-emu"])
    err = capsys.readouterr().err
    assert rc == 2 and time.monotonic() - t0 < 60
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "self-check vector 3, element 2" in last
    assert "golden output codes stored at compile time" in last


def test_missing_extra_is_one_line(artifacts, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn -> ImportError
    assert main(["serve", str(artifacts["digits"][1]), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[serve] extra" in err and "uvicorn" in err


def test_parser_imports_no_extra_package():
    code = ("import sys; from modelcircuit.cli import make_parser; "
            "make_parser().parse_args(['serve', 'x']); "
            "bad = [m for m in ('starlette', 'uvicorn', 'prometheus_client', 'httpx') "
            "if m in sys.modules]; assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


def test_real_process_serves_and_stops_on_sigterm(artifacts):
    import httpx

    import modelcircuit as mc

    c, p = artifacts["digits"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "modelcircuit.cli", "serve", f"d={p}",
                             "--port", "0"], stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    try:
        line = proc.stderr.readline()
        m = re.search(r"on (http://127\.0\.0\.1:\d+) ", line)
        assert m, line
        url = m.group(1)
        t_end = time.monotonic() + 60
        while httpx.get(url + "/v1/debug/graph_status").status_code != 200:
            assert time.monotonic() < t_end
            time.sleep(0.05)
        x = np.linspace(-3, 3, 128, dtype=np.float32).reshape(2, 64)
        r = httpx.post(url + "/v1/models/d/infer", json={"inputs": x.tolist()})
        assert r.status_code == 200 and r.headers["x-execution-graph-id"] == c.graph_id
        assert np.array_equal(np.array(r.json()["outputs"]), mc.run(c, x))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "error" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
