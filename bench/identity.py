"""Byte-identity of everything the compiler writes, for a restructuring that must change
nothing: compile each model for each target at two precisions, hash every file.

    python bench/identity.py --write bench/identity_baseline.json   # on the commit before
    python bench/identity.py --check bench/identity_baseline.json   # after: lists differences

Models: the bundled digits MLP and the MLPs of ../shared/models (skipped where absent), the
streamed circuits of three CNNs (bundled digits CNN, conv1d/conv2d_small_keras) at reuse 1
and 4, Verilog target only (their top.v/top.il/top.json are what a restructure of the streamed
HDL must leave alone), and the circuits of CIRCUITS (`--strategy da`, a folded `--reuse
auto`). Prints a table (model, precision, target, files, graph id, same?) and writes JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "models"
MODELS = ["digits", "three_layer_keras", "three_layer_pytorch", "two_layer_keras",
          "qkeras_jettagging", "TFC_2W2A", "TFC_1W2A", "bnn_model_fc_1layer"]
PRECISIONS = [None, "fixed<8,3>"]
TARGETS = ["golden", "gpu", "verilog"]
STREAMED = ["digits_cnn", "conv1d_small_keras", "conv2d_small_keras"]
STREAMED_REUSE = [1, 4]
# Verilog of circuits the rows above never build: R = 1 with `--strategy da` (the CMVM adder
# graphs, hdl/plan/cmvm.py: the default strategy is mult) and the folded jet tagger of
# `--reuse auto` on an ECP5-25k (folded Dense lanes, the serial Softmax's "fmax" schedule)
# (model, precision, compile options, write_compiled's reuse)
CIRCUITS = [("qkeras_jettagging", None, {"strategy": "da"}, None),
            ("three_layer_keras", "fixed<16,6>", {"strategy": "da"}, None),
            ("two_layer_keras", "fixed<8,3>", {"strategy": "da"}, None),
            ("three_layer_keras", "fixed<16,6>", {"profile": "ecp5-25k"}, "auto")]


def model_path(name: str) -> Path | None:
    if name in ("digits", "digits_cnn"):
        stem = "digits_mlp" if name == "digits" else name
        return ROOT / "src" / "modelcircuit" / "data" / f"{stem}.onnx"
    p = SHARED / f"{name}.onnx"
    return p if p.exists() else None


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def record(out: dict[str, dict[str, str]], key: str, tmp: str,
           build: Callable[[Path], str]) -> None:
    """out[key]: the graph id `build` returns and the hashes of the files it wrote into a
    folder of its own under tmp, or the error it raised."""
    d = Path(tmp) / hashlib.sha256(key.encode()).hexdigest()[:16]
    t0 = time.perf_counter()
    try:
        gid = build(d)
        out[key] = {"graph_id": gid, **hashes(d)}
    except ValueError as e:
        out[key] = {"error": str(e).splitlines()[0]}
    print(f"{key:55s} {len(out[key]):3d} files  {time.perf_counter() - t0:6.1f} s",
          file=sys.stderr)


def run(models: list[str], targets: list[str],
        streamed: list[str] = STREAMED) -> dict[str, dict[str, str]]:
    import modelcircuit as mc
    from modelcircuit.artifact import write_compiled

    def written(c: Any, target: str, **kw: Any) -> Callable[[Path], str]:
        return lambda d: (write_compiled(c, d, target, **kw), c.graph_id)[1]

    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            path = model_path(name)
            if path is None:
                print(f"skip {name}: {SHARED} absent", file=sys.stderr)
                continue
            for prec in PRECISIONS:
                try:
                    c = mc.compile(mc.load_onnx(path), precision=prec)
                except ValueError as e:
                    out[f"{name}|{prec}"] = {"error": str(e).splitlines()[0]}
                    continue
                for target in targets:
                    record(out, f"{name}|{prec}|{target}", tmp, written(c, target))
        if "verilog" not in targets:
            return out
        for name, prec, opts, reuse in CIRCUITS:
            path = model_path(name)
            if path is None or name not in models:
                continue
            key = f"{name}|{prec}|verilog|" + ",".join(f"{k}={v}" for k, v in opts.items()) \
                + (f",reuse={reuse}" if reuse else "")

            def build(d: Path, path: Path = path, prec: str | None = prec,
                      opts: dict[str, Any] = opts, reuse: str | None = reuse) -> str:
                c = mc.compile(mc.load_onnx(path), precision=prec, **opts)
                return written(c, "verilog", reuse=reuse)(d)

            record(out, key, tmp, build)
        for name in streamed:
            path = model_path(name)
            if path is None:
                print(f"skip {name}: {SHARED} absent", file=sys.stderr)
                continue
            c = mc.compile(mc.load_onnx(path))
            for r in STREAMED_REUSE:
                record(out, f"{name}|None|verilog|R{r}", tmp, written(c, "verilog", reuse=r))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="JSON")
    g.add_argument("--check", metavar="JSON")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--streamed", default=",".join(STREAMED),
                    help="CNNs whose streamed Verilog is hashed at reuse 1 and 4 ('' for none)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "identity.json"))
    a = ap.parse_args()
    streamed = [m for m in a.streamed.split(",") if m]
    got = run(a.models.split(","), a.targets.split(","), streamed)
    if a.write:
        Path(a.write).write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {a.write}: {sum(len(v) for v in got.values())} hashes")
        return 0
    want = json.loads(Path(a.check).read_text())
    models, targets = set(a.models.split(",")) | set(streamed), set(a.targets.split(","))
    want = {k: v for k, v in want.items()  # only what this run was asked to compile
            if k.split("|")[0] in models and (k.count("|") < 2 or k.split("|")[2] in targets)}
    bad = 0
    print(f"{'model|precision|target':55s} {'files':>5s}  same")
    for key in sorted(set(want) | set(got)):
        w, h = want.get(key), got.get(key)
        same = w == h
        bad += not same
        print(f"{key:55s} {len(h or {}):5d}  {'yes' if same else 'NO'}")
        if not same and w and h:
            for f in sorted(set(w) | set(h)):
                if w.get(f) != h.get(f):
                    print(f"    differs: {f}")
    total = len(set(want) | set(got))
    print(f"{total - bad}/{total} identical")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"got": got, "differences": bad}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
