"""Hostile input at the CLI's edges: options, files given as options, output folders,
artifacts. Every case must be refused with exit 2, one `error:` line naming the problem, no
traceback, and the working folder unchanged byte for byte (so nothing half-written and no
temp folder is left). Models themselves: tests/frontend/test_hostile_models.py; circuits too
big to elaborate or fit: tests/hdl/test_hostile_hdl.py; signals and races: test_signals.py."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.hostile import assert_refused, run_cli, snapshot

DIGITS_SHAPE = (64,)


def _npy(p: Path, a: np.ndarray) -> str:
    np.save(p, a, allow_pickle=True)
    return str(p)


def _text(p: Path, s: str | bytes) -> str:
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(s, bytes):
        p.write_bytes(s)
    else:
        p.write_text(s)
    return str(p)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _truncated_npy(p: Path) -> str:
    np.save(p, np.zeros((10, 64), np.float32))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 100])
    return str(p)


def _huge_header_npy(p: Path) -> str:
    """A valid .npy header declaring 10^12 x 64 float32 values, with 8 bytes of data."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False,
                                               "shape": (10**12, 64)})
    p.write_bytes(buf.getvalue() + b"\0" * 8)
    return str(p)


def _fifo(p: Path) -> str:
    os.mkfifo(p)
    return str(p)


def _precision_file(p: Path, obj: object) -> str:
    return _text(p, json.dumps(obj))


# Each case: id, a function (tmp folder) -> argv, and a substring the error line must hold.
Setup = Callable[[Path], list[str]]
CASES: list[tuple[str, Setup, str]] = [
    # -- precision strings --------------------------------------------------------------
    ("precision-empty", lambda d: ["compile", "--precision", "", "--out", f"{d}/o"], "precision"),
    ("precision-garbage", lambda d: ["compile", "--precision", "banana", "--out", f"{d}/o"], "banana"),
    ("precision-zero-width", lambda d: ["compile", "--precision", "fixed<0,0>", "--out", f"{d}/o"], "width"),
    ("precision-huge-width", lambda d: ["compile", "--precision", "fixed<100000,6>", "--out", f"{d}/o"], "64"),
    ("precision-negative-width", lambda d: ["compile", "--precision", "fixed<-3,2>", "--out", f"{d}/o"], "precision"),
    ("precision-accumulator-too-wide", lambda d: ["compile", "--precision", "fixed<64,32>", "--out", f"{d}/o"], "64-bit"),
    ("precision-unknown-mode", lambda d: ["compile", "--precision", "fixed<8,3,RNDX>", "--out", f"{d}/o"], "RNDX"),
    ("precision-float64", lambda d: ["compile", "--precision", "float64", "--out", f"{d}/o"], "float64"),
    ("precision-missing-file", lambda d: ["compile", "--precision", f"{d}/nope.json", "--out", f"{d}/o"], "no such file"),
    # -- per-layer precision files -----------------------------------------------------------
    ("layers-number", lambda d: ["compile", "--precision", _precision_file(d / "p.json", 3), "--out", f"{d}/o"], "JSON object"),
    ("layers-list", lambda d: ["compile", "--precision", _precision_file(d / "p.json", ["fc1"]), "--out", f"{d}/o"], "JSON object"),
    ("layers-string", lambda d: ["compile", "--precision", _precision_file(d / "p.json", "fixed<8,3>"), "--out", f"{d}/o"], "JSON object"),
    ("layers-nested-10000", lambda d: ["compile", "--precision", _text(d / "p.json", _nested(10000)), "--out", f"{d}/o"], "precision file"),
    ("layers-nested-object", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"a": {"result": {"x": "fixed<8,3>"}}}), "--out", f"{d}/o"], "precision file"),
    ("layers-unknown-node", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"no_such_layer": "fixed<8,3>"}), "--out", f"{d}/o"], "no_such_layer"),
    ("layers-unknown-key", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"fc1_matmul": {"colour": "fixed<8,3>"}}), "--out", f"{d}/o"], "colour"),
    ("layers-type-number", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"fc1_matmul": 8}), "--out", f"{d}/o"], "fc1_matmul"),
    ("layers-bad-type", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"fc1_matmul": "fixed<8"}), "--out", f"{d}/o"], "fixed<8"),
    # a weight (or bias) type for a node with none was accepted and ignored
    ("layers-weight-of-relu", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"relu1": {"weight": "fixed<8,3>"}}), "--out", f"{d}/o"], "entry 'relu1': key 'weight', but node relu1 (Relu) has no weight"),
    ("layers-bias-of-input", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"pixels": {"result": "fixed<8,3>", "bias": "fixed<8,3>"}}), "--out", f"{d}/o"], "key 'bias', but graph input 'pixels' has no bias"),
    ("layers-bad-part-type", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"fc1_matmul": {"weight": "int8"}}), "--out", f"{d}/o"], "int8"),
    ("layers-default-number", lambda d: ["compile", "--precision", _precision_file(d / "p.json", {"default": 16}), "--out", f"{d}/o"], "default"),
    ("layers-invalid-json", lambda d: ["compile", "--precision", _text(d / "p.json", "{fc1: fixed<8,3>"), "--out", f"{d}/o"], "not valid JSON"),
    ("layers-binary", lambda d: ["compile", "--precision", _text(d / "p.json", b"\xff\xfe\x00garbage"), "--out", f"{d}/o"], "not valid JSON"),
    ("layers-empty-file", lambda d: ["compile", "--precision", _text(d / "p.json", ""), "--out", f"{d}/o"], "not valid JSON"),
    ("layers-directory", lambda d: ["compile", "--precision", str((d / "dir.json").mkdir() or d / "dir.json"), "--out", f"{d}/o"], "directory"),
    ("layers-fifo", lambda d: ["compile", "--precision", _fifo(d / "p.json"), "--out", f"{d}/o"], "not a regular file"),
    # -- --calibrate ---------------------------------------------------------------------
    ("calibrate-nan", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.full((4, 64), np.nan, np.float32)), "--out", f"{d}/o"], "NaN"),
    ("calibrate-inf", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.full((4, 64), np.inf)), "--out", f"{d}/o"], "Inf"),
    ("calibrate-zero-rows", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.zeros((0, 64), np.float32)), "--out", f"{d}/o"], "no values"),
    ("calibrate-beyond-float32", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.full((4, 64), 1e300)), "--out", f"{d}/o"], "float32"),
    ("calibrate-wrong-shape", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.zeros((4, 63), np.float32)), "--out", f"{d}/o"], "--calibrate"),
    ("calibrate-text", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _text(d / "c.npy", "1,2,3\n"), "--out", f"{d}/o"], ".npy"),
    ("calibrate-truncated", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _truncated_npy(d / "c.npy"), "--out", f"{d}/o"], "truncated"),
    ("calibrate-huge-header", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _huge_header_npy(d / "c.npy"), "--out", f"{d}/o"], "header declares"),
    ("calibrate-pickle", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.array([{"a": 1}], dtype=object)), "--out", f"{d}/o"], "numeric"),
    ("calibrate-bool", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.ones((4, 64), bool)), "--out", f"{d}/o"], "numeric"),
    ("calibrate-complex", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.ones((4, 64), complex)), "--out", f"{d}/o"], "numeric"),
    ("calibrate-strings", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.array(["a"] * 64)), "--out", f"{d}/o"], "numeric"),
    ("calibrate-scalar", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _npy(d / "c.npy", np.float32(1.0)), "--out", f"{d}/o"], "scalar"),
    ("calibrate-npz", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", (np.savez(d / "c.npz", x=np.zeros((4, 64))) or str(d / "c.npz")), "--out", f"{d}/o"], ".npy"),
    ("calibrate-directory", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", str(d), "--out", f"{d}/o"], "directory"),
    ("calibrate-dev-zero", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", "/dev/zero", "--out", f"{d}/o"], "not a regular file"),
    ("calibrate-fifo", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", _fifo(d / "c.npy"), "--out", f"{d}/o"], "not a regular file"),
    ("calibrate-missing", lambda d: ["compile", "--precision", "fixed<8,3>", "--calibrate", f"{d}/none.npy", "--out", f"{d}/o"], "no such file"),
    ("calibrate-float32-precision", lambda d: ["compile", "--precision", "float32", "--calibrate", _npy(d / "c.npy", np.zeros((4, 64), np.float32)), "--out", f"{d}/o"], "fixed-point"),
    # -- numeric options -----------------------------------------------------------------
    ("reuse-zero", lambda d: ["compile", "--target", "verilog", "--reuse", "0", "--out", f"{d}/o"], "--reuse"),
    ("reuse-negative", lambda d: ["compile", "--target", "verilog", "--reuse", "-4", "--out", f"{d}/o"], "--reuse"),
    ("reuse-word", lambda d: ["compile", "--target", "verilog", "--reuse", "lots", "--out", f"{d}/o"], "--reuse"),
    ("reuse-float", lambda d: ["compile", "--target", "verilog", "--reuse", "2.5", "--out", f"{d}/o"], "--reuse"),
    ("reuse-huge", lambda d: ["compile", "--target", "verilog", "--reuse", "1" + "0" * 30, "--out", f"{d}/o"], "--reuse"),
    ("table-bits-zero", lambda d: ["compile", "--table-bits", "0", "--out", f"{d}/o"], "--table-bits"),
    ("table-bits-huge", lambda d: ["compile", "--table-bits", "40", "--out", f"{d}/o"], "--table-bits"),
    ("table-bits-word", lambda d: ["compile", "--table-bits", "ten", "--out", f"{d}/o"], "--table-bits"),
    ("adder-levels-zero", lambda d: ["compile", "--target", "verilog", "--adder-levels", "0", "--out", f"{d}/o"], "--adder-levels"),
    ("adder-levels-negative", lambda d: ["compile", "--target", "verilog", "--adder-levels", "-2", "--out", f"{d}/o"], "--adder-levels"),
    ("profile-unknown", lambda d: ["compile", "--profile", "gtx-9000", "--out", f"{d}/o"], "gtx-9000"),
    ("target-unknown", lambda d: ["compile", "--target", "asic", "--out", f"{d}/o"], "asic"),
    ("pipeline-unknown", lambda d: ["compile", "--target", "verilog", "--pipeline", "fast", "--out", f"{d}/o"], "fast"),
    ("vectors-zero", lambda d: ["verify", "--vectors", "0"], "--vectors"),
    ("vectors-negative", lambda d: ["verify", "--vectors", "-5"], "--vectors"),
    ("vectors-float-notation", lambda d: ["verify", "--vectors", "1e12"], "--vectors"),
    ("vectors-huge", lambda d: ["verify", "--vectors", "1000000000000"], "--vectors"),
    ("seed-negative", lambda d: ["verify", "--seed", "-1"], "--seed"),
    ("seed-huge", lambda d: ["verify", "--seed", str(2**64)], "--seed"),
    ("backends-unknown", lambda d: ["verify", "--backends", "golden,fpga"], "fpga"),
    ("backends-empty", lambda d: ["verify", "--backends", ","], "--backends"),
    ("simulator-unknown", lambda d: ["verify", "--simulator", "modelsim"], "modelsim"),
    ("subcommand-unknown", lambda d: ["synthesize"], "synthesize"),
    ("subcommand-missing", lambda d: [], "required"),
    ("option-unknown", lambda d: ["compile", "--frobnicate", "--out", f"{d}/o"], "--frobnicate"),
    ("build-no-device", lambda d: ["build", "--out", f"{d}/o"], "--device"),
    ("build-unknown-device", lambda d: ["build", "--device", "xc7z020", "--out", f"{d}/o"], "xc7z020"),
    ("build-unknown-board", lambda d: ["build", "--device", "ice40-up5k", "--board", "arty", "--out", f"{d}/o"], "arty"),
    # -- verify inputs and report paths ------------------------------------------------------
    ("inputs-nan", lambda d: ["verify", "--inputs", _npy(d / "x.npy", np.full((3, 64), np.nan, np.float32))], "NaN"),
    ("inputs-wrong-shape", lambda d: ["verify", "--inputs", _npy(d / "x.npy", np.zeros((3, 10), np.float32))], "shape"),
    ("inputs-zero-rows", lambda d: ["verify", "--inputs", _npy(d / "x.npy", np.zeros((0, 64), np.float32))], "no values"),
    ("inputs-strings", lambda d: ["verify", "--inputs", _npy(d / "x.npy", np.array(["x"] * 64))], "numeric"),
    ("inputs-beyond-float32", lambda d: ["verify", "--inputs", _npy(d / "x.npy", np.full((2, 64), -1e39))], "float32"),
    ("json-is-directory", lambda d: ["verify", "--vectors", "2", "--json", str(d)], "directory"),
    ("json-missing-parent", lambda d: ["verify", "--vectors", "2", "--json", f"{d}/no/such/r.json"], "does not exist"),
    ("json-under-a-file", lambda d: ["verify", "--vectors", "2", "--json", _text(d / "f", "x") + "/r.json"], "not a directory"),
    ("json-empty", lambda d: ["verify", "--vectors", "2", "--json", ""], "--json"),
    ("html-is-directory", lambda d: ["inspect", "--html", str(d)], "directory"),
    ("html-missing-parent", lambda d: ["inspect", "--html", f"{d}/no/r.html"], "does not exist"),
    ("html-under-a-file", lambda d: ["inspect", "--html", _text(d / "f", "x") + "/r.html"], "not a directory"),
    # -- output folders ------------------------------------------------------------------
    ("out-empty", lambda d: ["compile", "--out", ""], "--out"),
    ("out-is-file", lambda d: ["compile", "--out", _text(d / "file", "mine")], "is a file"),
    ("out-under-file", lambda d: ["compile", "--out", _text(d / "file", "mine") + "/sub"], "is a file"),
    ("out-user-folder-with-manifest", lambda d: ["compile", "--out", (_text(d / "u" / "manifest.json", "{}"), _text(d / "u" / "thesis.tex", "years of work"))[0].rsplit("/", 1)[0]], "did not write"),
    ("out-user-folder", lambda d: ["compile", "--out", _text(d / "u" / "notes.txt", "mine").rsplit("/", 1)[0]], "did not write"),
    ("out-root", lambda d: ["compile", "--out", "/"], "root"),
    ("out-cwd", lambda d: ["compile", "--out", (_text(d / "keep.txt", "x"), ".")[1]], "did not write"),
    ("out-symlink", lambda d: ["compile", "--out", (os.symlink(d, d / "link") or str(d / "link"))], "symbolic link"),
    ("out-dangling-symlink", lambda d: ["compile", "--out", (os.symlink(d / "nowhere", d / "dl") or str(d / "dl"))], "symbolic link"),
    ("out-in-proc", lambda d: ["compile", "--out", "/proc/modelcircuit-out"], "/proc"),
    ("build-out-user-folder", lambda d: ["build", "--device", "ice40-up5k", "--out", _text(d / "u" / "top.v", "// mine").rsplit("/", 1)[0]], "did not write"),
    # -- models given as paths (the importer's own cases: tests/frontend/test_hostile_models.py) --
    ("model-missing", lambda d: ["compile", f"{d}/none.onnx", "--out", f"{d}/o"], "none.onnx"),
    ("model-undecodable-name", lambda d: ["compile", os.fsdecode(bytes(d) + b"/\xff\xfe.onnx"), "--out", f"{d}/o"], "\\udcff"),
    ("model-directory", lambda d: ["compile", str(d), "--out", f"{d}/o"], "directory"),
    ("model-empty", lambda d: ["compile", _text(d / "m.onnx", b""), "--out", f"{d}/o"], "m.onnx"),
    ("model-text", lambda d: ["compile", _text(d / "m.onnx", "this is not a model\n"), "--out", f"{d}/o"], "m.onnx"),
    ("inspect-model-missing", lambda d: ["inspect", f"{d}/none.onnx"], "none.onnx"),
    ("inspect-plain-folder", lambda d: ["inspect", _text(d / "f" / "a.txt", "x").rsplit("/", 1)[0]], "manifest"),
]


@pytest.mark.parametrize("case_id,setup,match", CASES, ids=[c[0] for c in CASES])
def test_refused_cleanly(case_id: str, setup: Setup, match: str, tmp_path: Path) -> None:
    argv = setup(tmp_path)
    before = snapshot(tmp_path)
    res = run_cli(argv, cwd=tmp_path)
    assert_refused(res, match)
    assert snapshot(tmp_path) == before, "the refusal changed the folder"


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 100 - 60  # with tests/graphs and tests/hdl's corpora: over 100
    assert len({c[0] for c in CASES}) == len(CASES)


# -- artifacts: compile once, then tamper with a copy ------------------------------------
@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("art")
    res = run_cli(["compile", "--out", str(d / "a")], cwd=d)
    assert res.rc == 0, res.err
    return d / "a"


@pytest.fixture(scope="module")
def other_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("art2")
    res = run_cli(["compile", "--precision", "fixed<8,3>", "--out", str(d / "b")], cwd=d)
    assert res.rc == 0, res.err
    return d / "b"


def _edit_json(p: Path, fn: Callable[[dict], object]) -> None:
    m = json.loads(p.read_text())
    r = fn(m)
    p.write_text(json.dumps(m if r is None else r))


def _flip_byte(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x01
    p.write_bytes(bytes(b))


def _rehash(a: Path, rel: str) -> None:
    import hashlib

    _edit_json(a / "manifest.json", lambda m: m["files"].__setitem__(
        rel, hashlib.sha256((a / rel).read_bytes()).hexdigest()))


TAMPER: list[tuple[str, Callable[[Path, Path], None], str]] = [
    ("manifest-is-list", lambda a, o: (a / "manifest.json").write_text("[1, 2]"), "not a modelcircuit manifest"),
    ("manifest-missing", lambda a, o: (a / "manifest.json").unlink(), "no such file"),
    ("manifest-invalid-json", lambda a, o: (a / "manifest.json").write_text("{"), "not valid JSON"),
    ("manifest-nested", lambda a, o: (a / "manifest.json").write_text(_nested(100000)), "manifest"),
    ("manifest-wrong-format", lambda a, o: _edit_json(a / "manifest.json", lambda m: m.__setitem__("format", "other/9")), "not a modelcircuit manifest"),
    ("manifest-no-hashes", lambda a, o: _edit_json(a / "manifest.json", lambda m: (m.pop("files"), None)[1]), "hashes"),
    ("graph-id-edited", lambda a, o: _edit_json(a / "manifest.json", lambda m: m.__setitem__("graph_id", "0" * 64)), "graph id"),
    ("options-edited", lambda a, o: _edit_json(a / "manifest.json", lambda m: m["options"].__setitem__("table_bits", 12)), "graph id"),
    ("weights-edited", lambda a, o: _flip_byte(a / "weights.npz"), "weights.npz"),
    ("weights-from-other-model", lambda a, o: shutil.copy(o / "weights.npz", a / "weights.npz"), "weights.npz"),
    ("weights-swapped-and-rehashed", lambda a, o: (shutil.copy(o / "weights.npz", a / "weights.npz"), _rehash(a, "weights.npz")), "graph id"),
    ("graph-edited", lambda a, o: _edit_json(a / "graph.json", lambda g: g.__setitem__("name", "other")), "graph.json"),
    ("graph-garbage-rehashed", lambda a, o: ((a / "graph.json").write_text('{"nodes": 3}'), _rehash(a, "graph.json")), "not a readable"),
    ("graph-missing", lambda a, o: (a / "graph.json").unlink(), "missing"),
    ("file-added", lambda a, o: (a / "extra.bin").write_bytes(b"x"), "extra.bin"),
    ("weights-truncated-rehashed", lambda a, o: ((a / "weights.npz").write_bytes((a / "weights.npz").read_bytes()[:50]), _rehash(a, "weights.npz")), "not a readable"),
]


@pytest.mark.parametrize("case_id,tamper,match", TAMPER, ids=[t[0] for t in TAMPER])
def test_tampered_artifact_refused(case_id: str, tamper: Callable[[Path, Path], None],
                                   match: str, artifact: Path, other_artifact: Path,
                                   tmp_path: Path) -> None:
    a = tmp_path / "a"
    shutil.copytree(artifact, a)
    assert run_cli(["inspect", str(a)], cwd=tmp_path).rc == 0  # untouched: accepted
    tamper(a, other_artifact)
    before = snapshot(tmp_path)
    res = run_cli(["inspect", str(a)], cwd=tmp_path)
    assert_refused(res, match)
    assert snapshot(tmp_path) == before


def test_recompile_into_our_artifact_replaces_it(artifact: Path, tmp_path: Path) -> None:
    """The other side of the ownership rule: a folder we wrote may be replaced whole."""
    a = tmp_path / "a"
    shutil.copytree(artifact, a)
    res = run_cli(["compile", "--precision", "fixed<8,3>", "--out", str(a)], cwd=tmp_path)
    assert res.rc == 0, res.err
    m = json.loads((a / "manifest.json").read_text())
    assert m["options"]["precision"].startswith("fixed<8,3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no temp folder left
