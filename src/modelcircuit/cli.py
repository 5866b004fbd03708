"""The `modelcircuit` command: thin — parses arguments and calls the API.

Exit codes: 0 success, 1 verification mismatch, 2 the user's input is wrong (one line
`error: …` on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_MODEL = "digits_mlp.onnx"


def bundled(name: str) -> Path:
    return Path(str(resources.files("modelcircuit").joinpath("data", name)))


class UsageError(ValueError):
    """Bad command-line input (exit 2)."""


def _is_user_error(e: BaseException) -> bool:
    mod = type(e).__module__
    return isinstance(e, ValueError) and (mod.startswith("modelcircuit") or mod == "__main__")


def parse_precision(text: str | None) -> tuple[str | None, dict[str, Any] | None]:
    """`fixed<16,6>` for all, or a JSON file {node: type | {result, weight, bias}, default?}."""
    if text is None:
        return None, None
    if text.endswith(".json") or Path(text).is_file():
        p = Path(text)
        try:
            m = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read precision file {p}: {e}") from None
        if not isinstance(m, dict):
            raise UsageError(f"precision file {p} must hold a JSON object of node -> type")
        default = m.pop("default", None)
        return default, m
    return text, None


def load_inputs(path: str, what: str = "--inputs") -> np.ndarray:
    try:
        x = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UsageError(f"{what} {path}: not a readable .npy file ({e})") from None
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu":
        raise UsageError(f"{what} {path}: expected a numeric array, got dtype {getattr(x, 'dtype', '?')}")
    return x


def load_model(path: str | None) -> Any:
    from .graphs.onnx_import import load_onnx

    return load_onnx(path if path else bundled(DEFAULT_MODEL))


def compile_from_args(a: argparse.Namespace) -> Any:
    from .api import compile

    graph = load_model(a.model)
    precision, per_layer = parse_precision(getattr(a, "precision", None))
    cal = load_inputs(a.calibrate, "--calibrate") if getattr(a, "calibrate", None) else None
    reuse = parse_reuse(getattr(a, "reuse", None))
    return compile(graph, precision=precision, per_layer=per_layer, calibrate=cal,
                   reuse=reuse if reuse is not None else 1, profile=getattr(a, "profile", None),
                   table_bits=getattr(a, "table_bits", 10))


def parse_reuse(text: str | None) -> int | str | None:
    if text is None:
        return None
    if text == "auto":
        return "auto"
    try:
        r = int(text)
    except ValueError:
        raise UsageError(f"--reuse must be a positive integer or 'auto', got {text!r}") from None
    if r < 1:
        raise UsageError(f"--reuse must be a positive integer or 'auto', got {r}")
    return r


def cmd_compile(a: argparse.Namespace) -> int:
    from .artifact import check_out_path, write_compiled

    out = Path(a.out or f"out/{Path(a.model or DEFAULT_MODEL).stem}-{a.target}")
    check_out_path(out)  # before any work: a bad --out fails fast
    compiled = compile_from_args(a)
    write_compiled(compiled, out, a.target, reuse=parse_reuse(a.reuse),
                   progress=lambda s: print(s, file=sys.stderr),
                   hdl_options={"pipeline": a.pipeline, "adder_levels": a.adder_levels})
    print(f"compiled {compiled.graph.name} -> {out}  (graph id {compiled.graph_id[:16]}, "
          f"target {a.target})")
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    from .report import inspect_rows, render_html, render_text

    p = Path(a.model) if a.model else bundled(DEFAULT_MODEL)
    if p.is_dir():
        from .graphs.serialize import load_artifact_graph

        graph, manifest = load_artifact_graph(p)
        info = {"graph_id": manifest.get("graph_id"), "profile": manifest.get("options", {}).get("profile"),
                "hdl": manifest.get("hdl"), "gpu": manifest.get("gpu"), "memory": manifest.get("memory")}
    else:
        a.model = str(p)
        c = compile_from_args(a)
        graph = c.graph
        mem = c.extra["memory_plan"]
        info = {"graph_id": c.graph_id, "profile": c.profile, "hdl": None, "gpu": None,
                "memory": {k: mem[k] for k in ("arena_bytes_per_sample", "naive_bytes_per_sample")}}
    report = inspect_rows(graph, info)
    if a.html:
        Path(a.html).write_text(render_html(report))
    if a.json:
        print(json.dumps(report, indent=1, sort_keys=True, default=str))
    else:
        print(render_text(report))
    return 0


def cmd_profiles(a: argparse.Namespace) -> int:
    from .graphs.profiles import all_profiles

    for name, p in sorted(all_profiles().items()):
        if p["kind"] == "gpu":
            desc = f"{p['sms']} SMs, {p['bandwidth_gbs']} GB/s, {p['fp32_tflops']} TFLOP/s fp32, {p['mem_gib']} GiB"
        else:
            desc = f"{p['lut']} LUT, {p['ff']} FF, {p['dsp']} DSP, {p['bram']} BRAM"
            if p.get("estimate_only"):
                desc += " (estimate only)"
        print(f"{name:12s} {p['kind']:5s} {p['title']}: {desc}")
    return 0


def cmd_verify(a: argparse.Namespace) -> int:
    from .sim.verify import verify_from_args

    return verify_from_args(a)


def cmd_build(a: argparse.Namespace) -> int:
    from .hdl.fpga import build_from_args

    return build_from_args(a)


def _model_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="ONNX model (default: the bundled digits MLP)")


def _precision_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", help="fixed<W,I>, ufixed<W,I>, float32, or a per-layer JSON file")
    p.add_argument("--calibrate", metavar="X.npy", help="choose integer bits from sample inputs")
    p.add_argument("--reuse", help="reuse factor N or 'auto' (HDL)")
    p.add_argument("--profile", help="hardware profile (see `modelcircuit profiles`)")
    p.add_argument("--table-bits", type=int, default=10, help="lookup-table index bits")


def _hdl_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", choices=["latency", "fmax", "area"],
                   help="HDL register schedule (default: area on iCE40, fmax on other FPGA "
                        "profiles, else latency)")
    p.add_argument("--adder-levels", type=int, help="HDL adder-tree levels per register stage")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def make_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="modelcircuit", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    c = sub.add_parser("compile", help="compile a model to an artifact directory")
    _model_arg(c)
    c.add_argument("--target", choices=["golden", "gpu", "verilog", "fpga"], default="golden")
    _precision_args(c)
    _hdl_args(c)
    c.add_argument("--out", help="artifact directory")
    c.set_defaults(fn=cmd_compile)
    i = sub.add_parser("inspect", help="per-node table: op, shapes, types, cost")
    _model_arg(i)
    _precision_args(i)
    i.add_argument("--json", action="store_true")
    i.add_argument("--html", metavar="FILE")
    i.set_defaults(fn=cmd_inspect)
    p = sub.add_parser("profiles", help="list hardware profiles")
    p.set_defaults(fn=cmd_profiles)
    v = sub.add_parser("verify", help="run backends on the same inputs and compare bit for bit")
    _model_arg(v)
    _precision_args(v)
    v.add_argument("--vectors", type=int, help="number of input vectors (default: test split or 100)")
    v.add_argument("--inputs", metavar="X.npy")
    v.add_argument("--backends", default="golden,gpu-emu")
    v.add_argument("--simulator", default="verilator", choices=["verilator", "icarus"])
    v.add_argument("--json", metavar="FILE")
    v.add_argument("--seed", type=int, default=0)
    v.set_defaults(fn=cmd_verify)
    b = sub.add_parser("build", help="FPGA build to a bitstream")
    _model_arg(b)
    _precision_args(b)
    _hdl_args(b)
    b.add_argument("--device", required=True)
    b.add_argument("--board")
    b.add_argument("--out")
    b.set_defaults(fn=cmd_build)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except Exception as e:  # user errors: one line, exit 2; anything else is a bug
        if _is_user_error(e):
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"error: {msg}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
