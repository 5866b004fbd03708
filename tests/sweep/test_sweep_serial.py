"""`modelcircuit sweep` without Ray (engine serial): bad input refused before anything is
written, `--precision auto` on the digits MLP, the store's resume, the report's files."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

import modelcircuit as mc
from modelcircuit.cli import main
from modelcircuit.explore.report import pareto
from modelcircuit.explore.spec import split_list
from modelcircuit.graphs.precision_file import parse_precision

BASE = ["sweep", "--reuse", "256", "--device", "ice40-up5k"]


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more
    return port


@pytest.mark.parametrize("args, needle", [
    (["sweep", "--device", "ice40-up5k,no-such-fpga", "--precision", "fixed<8,3>"], "no-such-fpga"),
    (["sweep", "--device", "", "--precision", "fixed<8,3>"], "--device is empty"),
    (["sweep", "--precision", " ; ", "--device", "ice40-up5k"], "--precision is empty"),
    (["sweep", "--precision", "fixed<8,3>,fixd<6,3>", "--device", "ice40-up5k"], "fixd<6,3>"),
    (["sweep", "--precision", "float32", "--device", "ice40-up5k"], "fixed-point"),
    (["sweep", "--precision", "fixed<8,3>", "--reuse", "256,0", "--device", "ice40-up5k"],
     "--reuse"),
    (["sweep", "--precision", "fixed<8,3>", "--device", "ice40-up5k", "--workers", "0"],
     "--workers"),
    (["sweep", "--precision", "nofile.json", "--device", "ice40-up5k"], "nofile.json"),
    (["sweep", "--precision", "fixed<8,3>", "--device", "ice40-up5k", "--labels", "y.npy"],
     "--labels needs --data"),
    (["sweep", "--precision", "fixed<8,3>", "--device", "ice40-up5k", "--engine", "ray"],
     "--address"),
])
def test_bad_input_refused_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          args: list[str], needle: str) -> None:
    out = tmp_path / "store"
    engine = [] if "--engine" in args else ["--engine", "serial"]
    rc = main([*args, *engine, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_dead_ray_address_refused_quickly(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    import time

    out = tmp_path / "store"
    port = _free_port()
    ray_before = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    t0 = time.monotonic()
    rc = main([*BASE, "--precision", "fixed<8,3>", "--address", f"127.0.0.1:{port}",
               "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"127.0.0.1:{port}" in err[0], err
    assert time.monotonic() - t0 < 10
    assert not out.exists()
    # no Ray instance was started for it
    assert ray_before or "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_foreign_out_folder_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.txt").write_text("not a sweep store")
    rc = main([*BASE, "--precision", "fixed<8,3>", "--engine", "serial", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not a sweep store" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_split_list() -> None:
    assert split_list(["fixed<8,3>,fixed<6,3>; ufixed<4,0,RND,WRAP>", "8"], "x") == \
        ["fixed<8,3>", "fixed<6,3>", "ufixed<4,0,RND,WRAP>", "8"]


def test_pareto_front() -> None:
    pts = [(1.0, 9.0, 0), (2.0, 5.0, 1), (2.0, 7.0, 2), (3.0, 5.0, 3), (4.0, 1.0, 4),
           (5.0, 2.0, 5)]
    front = set(pareto(pts))
    # brute force: a point is on the front when no other is <= in both and < in one
    want = {i for x, y, i in pts
            if not any((x2 <= x and y2 <= y) and (x2, y2) != (x, y) for x2, y2, _ in pts)}
    assert front == want == {0, 1, 4}


def _agreement(c: object, x: np.ndarray, float_pred: np.ndarray) -> float:
    return float(np.mean(np.asarray(mc.run(c, x)).argmax(-1) == float_pred))


def test_auto_precision_acceptance(tmp_path: Path, digits_model: Path,
                                   digits_test: tuple[np.ndarray, np.ndarray]) -> None:
    """--precision auto, target 0.99 on the test split: >= 20 % smaller than uniform
    fixed<8,3> calibrated by the estimate, the target met, and the written JSON compiles
    (without --calibrate) to a design with the same agreement and estimate."""
    x, _y = digits_test
    out = tmp_path / "auto"
    res = mc.sweep(precision=["fixed<8,3>", "auto"], reuse=[256], device=["ice40-up5k"],
                   engine="serial", out=out, target_agreement=0.99, say=lambda s: None)
    by = {r["precision"]: r for r in res["points"]}
    assert all(r["status"] == "done" for r in res["points"])
    a = res["auto"]
    # independent of the search's own numbers: the sweep's record of the uniform point
    base, chosen = by["fixed<8,3>"], by["auto"]
    assert chosen["agreement"] >= 0.99
    assert chosen["estimate"]["lut"] <= 0.8 * base["estimate"]["lut"], (chosen, base)
    assert a["baseline"]["cost"] == base["estimate"]["lut"]
    assert a["chosen"]["cost"] == chosen["estimate"]["lut"]
    # the JSON is a --precision file: compile it and measure agreement here
    default, per_layer = parse_precision(str(out / "auto_precision.json"))
    g = mc.load_onnx(str(digits_model))
    fpred = np.asarray(mc.run(mc.compile(g, precision="float32"), x)).argmax(-1)
    c = mc.compile(g, precision=default, per_layer=per_layer)
    assert _agreement(c, x, fpred) == pytest.approx(chosen["agreement"], abs=0)
    assert _agreement(c, x, fpred) >= 0.99
    rc = main(["compile", "--precision", str(out / "auto_precision.json"), "--out",
               str(tmp_path / "art")])
    assert rc == 0


def test_resume_and_report_determinism(tmp_path: Path) -> None:
    kw = dict(precision=["fixed<8,3>", "fixed<5,3>"], reuse=["256", "auto"],
              device=["ice40-up5k"], engine="serial", say=lambda s: None)
    a = mc.sweep(out=tmp_path / "a", **kw)
    assert a["computed"] == 4 and a["skipped"] == 0
    pts = sorted((tmp_path / "a" / "points").iterdir())
    assert len(pts) == 4
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in pts}
    # a second folder from scratch: byte-identical report files
    mc.sweep(out=tmp_path / "b", **kw)
    names = ["sweep.txt", "index.html", "accuracy.png", "pareto-ice40-up5k.png", "profile.png"]
    for n in names:
        assert (tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes(), n
    ja = json.loads((tmp_path / "a" / "sweep.json").read_text())
    jb = json.loads((tmp_path / "b" / "sweep.json").read_text())
    assert ja.pop("out") != jb.pop("out")
    assert ja == jb
    # a rerun to the first folder computes nothing and leaves the records as they were
    again = mc.sweep(out=tmp_path / "a", **kw)
    assert again["computed"] == 0 and again["skipped"] == 4
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes())
            for p in (tmp_path / "a" / "points").iterdir()} == before
    assert again["points"] == a["points"]
    # the numbers are the flow's: each record's estimate equals a direct call
    from modelcircuit.hdl.flow import fpga_profile, plan_build

    g = mc.load_onnx(str(Path(mc.__file__).parent / "data" / "digits_mlp.onnx"))
    x = np.load(Path(mc.__file__).parent / "data" / "digits_test.npz")["x"]
    rec = next(r for r in a["points"] if r["precision"] == "fixed<5,3>" and r["reuse"] == 256)
    c = mc.compile(g, precision="fixed<5,3>", calibrate=x, reuse=256, profile="ice40-up5k")
    assert c.graph_id == rec["graph_id"]
    _p, fp = plan_build(c, fpga_profile("ice40-up5k"), 256)
    assert rec["estimate"]["lut"] == fp.estimate["lut"]
    text = (tmp_path / "a" / "sweep.txt").read_text()
    assert "fixed<5,3>" in text and str(rec["estimate"]["lut"]) in text


def test_point_failure_recorded_not_fatal(tmp_path: Path) -> None:
    """A point over the device (explicit reuse 1 of the digits MLP on an iCE40) fails with
    the flow's error; the others finish."""
    res = mc.sweep(precision=["fixed<6,3>"], reuse=["1", "256"], device=["ice40-up5k"],
                   engine="serial", out=tmp_path / "s", say=lambda s: None)
    st = {r["reuse"]: r for r in res["points"]}
    assert st[1]["status"] == "failed" and "ice40-up5k" in st[1]["error"]
    assert st[256]["status"] == "done"
    assert len(list((tmp_path / "s" / "points").iterdir())) == 2


@pytest.mark.parametrize("missing, engine", [("ray", "local"), ("matplotlib", "serial")])
def test_missing_extra_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch, missing: str, engine: str) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # `import ray` raises ImportError
    out = tmp_path / "s"
    rc = main([*BASE, "--precision", "fixed<8,3>", "--engine", engine, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "modelcircuit[sweep]" in err[0], err
    assert not out.exists()
