"""The `modelcircuit` command: thin — parses arguments and calls the API.

Exit codes: 0 success, 1 verification mismatch, 2 the user's input is wrong (one line
`error: …` on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .data import DEFAULT_MODEL, DIGITS_MODELS, bundled, load_model
from .graphs.check import require_fixed_point, require_single_io
from .graphs.precision_file import parse_precision
from .util.atomic import check_out_dir
from .util.userio import load_array, one_line, shown

__all__ = ["DEFAULT_MODEL", "bundled", "load_inputs", "main", "make_parser", "parse_precision",
           "parse_reuse"]
EXIT_SIGINT, EXIT_SIGTERM, EXIT_INTERNAL = 130, 143, 70
MAX_REUSE = 1 << 20
DEFAULT_VECTORS = 100
MAX_VECTORS = 10_000_000  # verify: (N, input) arrays in memory, and RTL simulation time


class UsageError(ValueError):
    """Bad command-line input (exit 2)."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that `finally` blocks clean up as for Ctrl-C."""


def _is_user_error(e: BaseException) -> bool:
    mod = type(e).__module__
    return isinstance(e, ValueError) and (mod.startswith("modelcircuit") or mod == "__main__")


def load_inputs(path: str, what: str = "--inputs") -> np.ndarray:
    return load_array(path, what)


def compile_from_args(a: argparse.Namespace) -> Any:
    from .api import compile

    precision, per_layer = parse_precision(getattr(a, "precision", None))
    cal = (load_inputs(a.calibrate, "--calibrate")
           if getattr(a, "calibrate", None) is not None else None)
    graph = require_single_io(load_model(a.model))  # before any pass (README: one input, one output)
    reuse = parse_reuse(getattr(a, "reuse", None))
    return compile(graph, precision=precision, per_layer=per_layer, calibrate=cal,
                   reuse=reuse if reuse is not None else 1, profile=getattr(a, "profile", None),
                   table_bits=getattr(a, "table_bits", 10),
                   strategy=getattr(a, "strategy", None) or "mult")


def parse_reuse(text: str | None) -> int | str | None:
    if text is None:
        return None
    if text == "auto":
        return "auto"
    try:
        r = int(text)
    except ValueError:
        raise UsageError(f"--reuse must be a positive integer or 'auto', got {text!r}") from None
    if not 1 <= r <= MAX_REUSE:
        raise UsageError(f"--reuse must be an integer within 1..{MAX_REUSE:,} or 'auto', got {text!r}")
    return r


def _int_in(lo: int, hi: int) -> Any:
    """argparse type: an integer within [lo, hi] (argparse names the option on failure)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be within {lo:,}..{hi:,}, got {v:,}")
        return v

    parse.__name__ = "integer"
    return parse


def cmd_compile(a: argparse.Namespace) -> int:
    from .artifact import write_compiled

    out = a.out if a.out is not None else f"out/{Path(a.model or DEFAULT_MODEL).stem}-{a.target}"
    check_out_dir(out)  # before any work: a bad --out fails fast
    out = Path(out)
    compiled = compile_from_args(a)
    if a.target in ("verilog", "fpga"):
        require_fixed_point(compiled.graph, f"compile --target {a.target}")
    with _tool_tail_on_error():  # --target fpga runs the tools
        write_compiled(compiled, out, a.target, reuse=parse_reuse(a.reuse),
                       progress=lambda s: print(s, file=sys.stderr, flush=True),
                       hdl_options={"pipeline": a.pipeline, "adder_levels": a.adder_levels})
    print(f"compiled {compiled.graph.name} -> {shown(out)}  (graph id {compiled.graph_id[:16]}, "
          f"target {a.target})")
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    from .artifact import host_summary
    from .graphs.host import wire_order
    from .report import inspect_rows, render_html, render_text
    from .util.userio import check_output_file, write_text_atomic

    if a.html is not None:
        check_output_file(a.html, "--html")
    p = Path(a.model) if a.model is not None else bundled(DEFAULT_MODEL)
    if p.is_dir():
        from .artifact import load_artifact

        graph, manifest = load_artifact(p)
        info = {"graph_id": manifest.get("graph_id"), "profile": manifest.get("options", {}).get("profile"),
                "hdl": manifest.get("hdl"), "gpu": manifest.get("gpu"), "memory": manifest.get("memory"),
                "host": manifest.get("host"), "wire": manifest.get("wire")}
    else:
        a.model = str(p)
        c = compile_from_args(a)
        graph = c.graph
        mem = c.extra["memory_plan"]
        info = {"graph_id": c.graph_id, "profile": c.profile, "hdl": None, "gpu": None,
                "memory": {k: mem[k] for k in ("arena_bytes_per_sample", "naive_bytes_per_sample")},
                "host": host_summary(c) if c.head or c.tail else None,
                "wire": wire_order(c)}
    report = inspect_rows(graph, info)
    if a.html is not None:
        write_text_atomic(a.html, render_html(report), "--html")
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


def select_inputs(a: argparse.Namespace, shape: tuple[int, ...]
                  ) -> tuple[np.ndarray, np.ndarray | None, str]:
    """verify's vectors: (float inputs (N, *shape), labels or None, description) — from
    --inputs, else the bundled test split for the bundled model, else seeded random normals."""
    from .graphs.ir import GraphError

    n = a.vectors
    size = int(np.prod(shape, dtype=np.int64))
    if a.inputs is not None:
        x = load_inputs(a.inputs)
        if x.ndim == len(shape) and tuple(x.shape) == tuple(shape):
            x = x[None]
        if x.ndim < 1 or x.shape[0] == 0 or int(np.prod(x.shape[1:], dtype=np.int64)) != size:
            raise GraphError(f"--inputs {shown(a.inputs)}: shape {list(x.shape)} does not match "
                             f"the model's input: need (N, {', '.join(map(str, shape))})")
        x = x.reshape((x.shape[0],) + tuple(shape))
        return (x[:n] if n else x), None, f"{shown(a.inputs)} ({min(n or len(x), len(x))} vectors)"
    if a.model is None or Path(a.model).resolve() in {bundled(m).resolve() for m in DIGITS_MODELS}:
        d = np.load(bundled("digits_test.npz"))
        x, y = d["x"], d["y"]
        if n:
            x, y = x[:n], y[:n]
        return x.reshape((len(x),) + tuple(shape)), y, \
            f"bundled digits test split ({len(x)} vectors)"
    n = n or DEFAULT_VECTORS
    x = np.random.default_rng(a.seed).standard_normal((n,) + tuple(shape)).astype(np.float32)
    return x, None, f"{n} random normal vectors (seed {a.seed})"


def cmd_verify(a: argparse.Namespace) -> int:
    from .api import compile as mc_compile
    from .graphs import host, reference
    from .sim.verify import parse_backends, report_json, verify
    from .util.userio import check_output_file, write_text_atomic

    backends = parse_backends(a.backends)
    if a.json is not None:
        check_output_file(a.json, "--json")  # a bad path fails before the long work
    if "rtl" in backends:
        from .sim.rtl import check_simulator

        check_simulator(a.simulator)  # before any long work
    compiled = compile_from_args(a)
    if "rtl" in backends:
        require_fixed_point(compiled.graph, "verify --backends rtl")
    x, labels, source = select_inputs(a, host.input_shape(compiled))
    float_out = None
    if labels is not None:  # accuracy of the float model too, where it compiles
        try:
            fc = mc_compile(load_model(a.model), precision="float32")
            float_out = reference.execute(fc.graph, [x])[fc.graph.outputs[0]]
        except ValueError:
            float_out = None
    rc, report = verify(compiled, x, backends, labels=labels, float_out=float_out,
                        source=source, simulator=a.simulator, seed=a.seed)
    if a.json is not None:
        write_text_atomic(a.json, report_json(report), "--json")
    return rc


@contextlib.contextmanager
def _tool_tail_on_error() -> Iterator[None]:
    """A failing FPGA tool's last log lines (hdl.flow.FlowError.tail) on stderr, before the
    one `error:` line that names the failure."""
    try:
        yield
    except ValueError as e:
        tail = getattr(e, "tail", "")
        if tail:
            print("last lines of the tool's log:", file=sys.stderr)
            for ln in tail.splitlines():
                print(f"  | {ln}", file=sys.stderr)
            sys.stderr.flush()
        raise


def cmd_build(a: argparse.Namespace) -> int:
    from .graphs.profiles import get_profile
    from .hdl.flow import build, fpga_profile, text_table
    from .hdl.flow.build import check_profile

    def say(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    prof = fpga_profile(a.device)
    if a.board:
        from .hdl.flow import board_for

        board_for(a.board, prof)
    reuse = parse_reuse(a.reuse)
    if not a.profile:
        a.profile = prof["name"]
    check_profile(get_profile(a.profile)["name"], prof["name"])  # before the compile
    out = (a.out if a.out is not None else
           f"out/{Path(a.model or DEFAULT_MODEL).stem}-{prof['name']}"
           + (f"-{a.board}" if a.board else ""))
    check_out_dir(out)  # a bad --out fails before any work
    compiled = compile_from_args(a)
    require_fixed_point(compiled.graph, "build")
    with _tool_tail_on_error():
        rep = build(compiled, prof["name"], Path(out), board=a.board,
                    reuse=reuse if reuse is not None else "auto", progress=say,
                    pipeline=a.pipeline, adder_levels=a.adder_levels)
    print(text_table(rep), end="")
    print(f"wrote {shown(out)}")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    """`export`: a Vivado/Quartus project of the model as AXI IP (hdl/flow/vendor.py)."""
    from .hdl.flow.vendor import check_request, export_project

    check_request(a.vendor, a.part, a.clock_mhz)  # bad input fails before any work
    out = a.out if a.out is not None else (
        f"out/{Path(a.model or DEFAULT_MODEL).stem}-{a.vendor}-{a.part}")
    check_out_dir(out)
    compiled = compile_from_args(a)
    rep = export_project(compiled, a.vendor, a.part, Path(out), clock_mhz=a.clock_mhz,
                         reuse=parse_reuse(a.reuse), axis_bytes=a.axis_bytes)
    print(f"{a.vendor} project for {a.part} at {a.clock_mhz:g} MHz: AXI4-Stream "
          f"{8 * rep['axi']['input']['beat_bytes']}-bit in, "
          f"{8 * rep['axi']['output']['beat_bytes']}-bit out, latency {rep['latency']}, "
          f"II {rep['ii']}")
    print(f"wrote {shown(out)}")
    return 0


def _model_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="ONNX model (default: the bundled digits MLP)")


def _precision_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", help="fixed<W,I>, ufixed<W,I>, float32, or a per-layer JSON file")
    p.add_argument("--calibrate", metavar="X.npy", help="choose integer bits from sample inputs")
    p.add_argument("--reuse", help="reuse factor N or 'auto' (HDL)")
    p.add_argument("--strategy", choices=["mult", "da", "auto"],
                   help="HDL Dense layers at R=1: mult (products, default), da (shared adder "
                        "graphs, no multipliers), auto (per layer, DSPs where the device has "
                        "them to spare)")
    p.add_argument("--profile", help="hardware profile (see `modelcircuit profiles`)")
    p.add_argument("--table-bits", type=_int_in(4, 16), default=10, help="lookup-table index bits")


def _hdl_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", choices=["latency", "fmax", "area"],
                   help="HDL register schedule (default: area on iCE40, fmax on other FPGA "
                        "profiles, else latency)")
    p.add_argument("--adder-levels", type=_int_in(1, 64), help="HDL adder-tree levels per register stage")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        _say_error(f"{' '.join(message.split(chr(10)))} (see `{self.prog} --help`)")
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
    v.add_argument("--vectors", type=_int_in(1, MAX_VECTORS), help="number of input vectors (default: test split or 100)")
    v.add_argument("--inputs", metavar="X.npy")
    v.add_argument("--backends", default="golden,gpu-emu")
    v.add_argument("--simulator", default="verilator", choices=["verilator", "icarus"])
    v.add_argument("--json", metavar="FILE")
    v.add_argument("--seed", type=_int_in(0, 2**63 - 1), default=0)
    v.set_defaults(fn=cmd_verify)
    b = sub.add_parser("build", help="FPGA build to a bitstream")
    _model_arg(b)
    _precision_args(b)
    _hdl_args(b)
    b.add_argument("--device", required=True)
    b.add_argument("--board")
    b.add_argument("--out")
    b.set_defaults(fn=cmd_build)
    e = sub.add_parser("export", help="Vivado/Quartus project of the model as AXI IP "
                                      "(edalize, IP-XACT, PYNQ driver)")
    _model_arg(e)
    _precision_args(e)
    e.add_argument("--vendor", required=True, help="vivado or quartus")
    e.add_argument("--part", required=True, help="e.g. xczu3eg-sbva484-1-e, 5CSEMA5F31C6")
    e.add_argument("--clock-mhz", type=float, default=200.0)
    e.add_argument("--axis-bytes", type=_int_in(1, 128),
                   help="TDATA bytes of both streams (default: per direction, the largest "
                        "power of two <= 8 dividing a token)")
    e.add_argument("--out")
    e.set_defaults(fn=cmd_export)
    # the optional extras' commands: their modules import ray / starlette only when run
    from .explore import cli as sweep_cli
    from .serve import cli as serve_cli

    s = sub.add_parser("sweep", help="design-space exploration: precision x reuse x device "
                                     "(Ray; extra [sweep])")
    sweep_cli.add_arguments(s)
    s.set_defaults(fn=sweep_cli.run)
    r = sub.add_parser("serve", help="serve compiled artifacts over HTTP (extra [serve])")
    serve_cli.add_arguments(r)
    r.set_defaults(fn=serve_cli.run)
    return ap


def _say_error(msg: str) -> None:
    """One line on stderr, printable whatever bytes the message holds."""
    line = one_line(msg) or "unknown error"
    try:
        sys.stderr.write(f"error: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _in_import(frame: Any) -> bool:
    """Whether the interrupted code runs under an `import` (the compiler imports onnx,
    onnxruntime, amaranth lazily). An exception raised there can land inside a C extension's
    module initialisation, and nanobind (onnx) answers with std::terminate: an abort and a
    C++ traceback instead of the one line (seen in CI: SIGINT 0.3 s into a compile)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


SIGNAL_RETRY_S = 0.02  # how soon a signal that arrived during an import is delivered again


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM become exceptions in the main thread (cleanup runs, exit 130/143),
    but never inside an import: there the signal is sent again a moment later, until the
    import has finished (an import is short; nothing is written during one)."""
    raises = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}

    def handler(signum: int, frame: Any) -> None:
        if _in_import(frame):
            t = threading.Timer(SIGNAL_RETRY_S, os.kill, (os.getpid(), signum))
            t.daemon = True
            t.start()
            return
        raise raises[signal.Signals(signum)]()

    old: dict[int, Any] = {}
    try:
        for s in raises:
            old[s] = signal.signal(s, handler)
    except ValueError:  # not the main thread (an embedding program): leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _error_text(e: BaseException) -> str:
    if isinstance(e, OSError):
        where = f" ({shown(e.filename)})" if getattr(e, "filename", None) else ""
        return f"{e.strerror or type(e).__name__}{where}"
    return str(e) or type(e).__name__


def main(argv: list[str] | None = None) -> int:
    """Every way out is an exit code and at most one `error:` line: 0 success, 1 a
    verification mismatch, 2 the user's input (or environment) is wrong, 130/143 interrupted,
    70 a bug (MODELCIRCUIT_DEBUG=1 shows its traceback)."""
    rc = _main(argv)
    if rc != 0:  # half-built circuits of an aborted run are not worth a warning at exit
        warnings.simplefilter("ignore")
    return rc


def _main(argv: list[str] | None) -> int:
    with _signals_raise():
        try:
            args = make_parser().parse_args(argv)
            return int(args.fn(args))
        except KeyboardInterrupt:
            _say_error("interrupted (SIGINT); nothing half-written was left")
            return EXIT_SIGINT
        except Terminated:
            _say_error("terminated (SIGTERM); nothing half-written was left")
            return EXIT_SIGTERM
        except SystemExit as e:  # argparse: --help (0) or a usage error (2, already printed)
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        except MemoryError:
            _say_error("out of memory: the model or the inputs are too large for this machine")
            return 2
        except RecursionError:
            _say_error("input nested too deeply to process")
            return 2
        except Exception as e:  # user errors: one line, exit 2; anything else is a bug
            if _is_user_error(e) or isinstance(e, OSError):
                _say_error(_error_text(e))
                return 2
            if os.environ.get("MODELCIRCUIT_DEBUG"):
                raise
            _say_error(f"internal error ({type(e).__name__}: {_error_text(e)}); this is a bug in "
                       "modelcircuit — please report it with the command line "
                       "(MODELCIRCUIT_DEBUG=1 shows the traceback)")
            return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
