"""Golden-model benchmark: fixed-point rows/s beside onnxruntime, idle and beside a competing
CPU-bound process; compile time and fidelity of the jet tagger.

Models: the jet tagger (three_layer_keras, from ../shared/models), the bundled digits CNN, and
two built here with onnx.helper (random but fixed weights: speed does not depend on them): an
MLP autoencoder 640-128-128-128-128-8-128-128-128-128-640 (MLPerf Tiny anomaly detection) and
a ResNet-8-sized CNN (MLPerf Tiny image classification: 3x32x32, 16/32/64 channels, three
residual stacks, ~12.5 M multiply-adds). Each at fixed<16,6> (float64 GEMMs: 16-bit x 16-bit
products summed over the fan-in pass 2**24) and fixed<8,3> (float32 GEMMs).

golden = modelcircuit.run(compiled, x) (float in, float out: quantize, layers, decode), one call
per batch (the prepared plan, graphs/golden_plan.py, with its C loops, graphs/native.py);
GEMM bound = ort's time over the time of the model's GEMMs alone in the golden's float
arithmetic through numpy (a float64 GEMM is ~2.4x slower than onnxruntime's float32 one, so
16-bit models that are mostly GEMM stayed below 0.5x there): the golden model passes it where
its layers run the exact int16 x int16 -> int32 GEMM of graphs/native.py instead (codes within
int16, partial sums under 2**31; AVX2 or AVX-512 VNNI); interpreter = the same through
reference.execute, node by node (what mc.run did before the plan; idle only); onnxruntime = the float32 model, one intra-op thread, the same batch in one call.
Each is timed as the median of repeated calls (a shared machine: the median, not the best,
says what a user sees), idle and beside a competing process started by this script (a second
golden loop, `--compete`, with the process's default BLAS threads), in alternating rounds
(the competitor stopped, then continued) so both phases see the same background load: the
slowdown factor is busy median / idle median. Ratios are ort's time / golden's: wall
time (the medians above), and CPU time (this process's, per call: on a machine that other
jobs load, wall time measures their load as much as ours). Ratios are measured side by side in one run; absolute
times on a shared machine mean little. Prints a table and writes JSON.

Run: .venv/bin/python bench/golden.py [--json FILE] [--batches 64,256] [--models a,b]
     [--precisions "fixed<16,6>;fixed<8,3>"] [--seconds 0.4] [--no-busy]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from benchio import write_json
from onnx import TensorProto, helper, numpy_helper

import modelcircuit as mc
from modelcircuit.graphs import host, reference

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT.parent / "shared" / "models"
DATA = ROOT / "src" / "modelcircuit" / "data"
MLPS = ("jet_tagger", "autoencoder")


# -- models built here -------------------------------------------------------------------
def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)


def autoencoder() -> onnx.ModelProto:
    """640-128-128-128-128-8-128-128-128-128-640, ReLU after every layer but the last."""
    rng = np.random.default_rng(26)
    sizes = [640, 128, 128, 128, 128, 8, 128, 128, 128, 128, 640]
    nodes, inits, x = [], [], "x"
    for i, (k, n) in enumerate(zip(sizes, sizes[1:], strict=False)):
        w = rng.normal(0, np.sqrt(2 / k), (k, n))
        b = rng.normal(0, 0.05, n)
        inits += [_init(f"w{i}", w), _init(f"b{i}", b)]
        y = f"h{i}"
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [y]))
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [y], [f"r{i}"]))
            y = f"r{i}"
        x = y
    g = helper.make_graph(nodes, "autoencoder",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 640])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 640])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def resnet8() -> onnx.ModelProto:
    """MLPerf Tiny's ResNet-8 shape (BatchNorm folded away: random weights)."""
    rng = np.random.default_rng(8)
    nodes, inits = [], []

    def conv(x: str, cin: int, cout: int, k: int, stride: int, relu: bool, name: str) -> str:
        w = rng.normal(0, np.sqrt(2 / (cin * k * k)), (cout, cin, k, k))
        inits.extend([_init(name + "_w", w), _init(name + "_b", rng.normal(0, 0.05, cout))])
        p = k // 2
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name],
                                      kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[p, p, p, p]))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [name + "_r"]))
        return name + "_r"

    def block(x: str, cin: int, cout: int, stride: int, name: str) -> str:
        y = conv(x, cin, cout, 3, stride, True, name + "a")
        y = conv(y, cout, cout, 3, 1, False, name + "b")
        skip = x if stride == 1 and cin == cout else conv(x, cin, cout, 1, stride, False,
                                                           name + "s")
        nodes.append(helper.make_node("Add", [y, skip], [name + "_add"]))
        nodes.append(helper.make_node("Relu", [name + "_add"], [name + "_out"]))
        return name + "_out"

    x = conv("x", 3, 16, 3, 1, True, "stem")
    x = block(x, 16, 16, 1, "s1")
    x = block(x, 16, 32, 2, "s2")
    x = block(x, 32, 64, 2, "s3")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inits += [_init("fc_w", rng.normal(0, 0.2, (64, 10))), _init("fc_b", np.zeros(10))]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"]))
    g = helper.make_graph(nodes, "resnet8",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def model_paths(tmp: Path) -> dict[str, Path]:
    paths = {"jet_tagger": MODELS / "three_layer_keras.onnx", "digits_cnn": DATA / "digits_cnn.onnx"}
    for name, fn in (("autoencoder", autoencoder), ("resnet8", resnet8)):
        p = tmp / f"{name}.onnx"
        onnx.save(fn(), str(p))
        paths[name] = p
    return {k: p for k, p in paths.items() if p.exists()}


# -- timing ------------------------------------------------------------------------------
def call_times(fn, seconds: float) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each call over at least 3 calls and about `seconds` of calls.
    CPU seconds (this process's, all threads) say what a call costs when other processes
    take turns on the cores: wall time then mostly measures their load."""
    fn()  # warm: caches, first-call allocations
    times: list[tuple[float, float]] = []
    t_end = time.perf_counter() + seconds
    while len(times) < 3 or time.perf_counter() < t_end:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    return times


def ort_session(path: Path) -> ort.InferenceSession:
    m = onnx.load(str(path))
    for vi in list(m.graph.input) + list(m.graph.output):
        d = vi.type.tensor_type.shape.dim
        if d:
            d[0].ClearField("dim_value")
            d[0].dim_param = "N"
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def arithmetic_of(c) -> str:
    """How many Dense/Conv run in each arithmetic (absent on code without graphs/arithmetic)."""
    try:
        from modelcircuit.graphs import arithmetic
    except ImportError:
        return "-"
    counts: dict[str, int] = {}
    for a in arithmetic.plan(c.graph).values():
        counts[a.dtype] = counts.get(a.dtype, 0) + 1
    return " ".join(f"{k}x{v}" for k, v in sorted(counts.items()))


def measure(cases, seconds: float, competitor: subprocess.Popen | None
            ) -> tuple[dict, dict]:
    """Per case, median seconds per call of golden and onnxruntime: idle (the competitor
    stopped) and busy (running), in alternating rounds so that both phases see the same
    background load of the machine."""
    idle: dict = {}
    busy: dict = {}
    rounds = 3 if competitor else 1
    for key, (c, sess, x) in cases.items():
        name = sess.get_inputs()[0].name
        fns = {"golden_s": lambda c=c, x=x: mc.run(c, x),
               "ort_s": lambda s=sess, n=name, x=x: s.run(None, {n: x}),
               "interp_s": lambda c=c, x=x: interpreter(c, x),
               "gemm_s": gemm_only(c, x.shape[0])}
        times: dict = {ph: {k: [] for k in fns} for ph in ("idle", "busy")}
        for _ in range(rounds):
            for ph in ("idle", "busy") if competitor else ("idle",):
                if competitor:
                    competitor.send_signal(signal.SIGCONT if ph == "busy" else signal.SIGSTOP)
                    time.sleep(0.05)
                for k, fn in fns.items():
                    if k in ("interp_s", "gemm_s") and ph == "busy":
                        continue
                    times[ph][k].extend(call_times(fn, seconds / rounds))
        idle[key] = {k: statistics.median(w for w, _ in v) for k, v in times["idle"].items()}
        idle[key].update({k[:-2] + "_cpu_s": statistics.median(c for _, c in v)
                          for k, v in times["idle"].items()})
        if competitor:
            busy[key] = {k: statistics.median(w for w, _ in v)
                         for k, v in times["busy"].items() if v}
    if competitor:
        competitor.send_signal(signal.SIGCONT)
    return idle, busy


def gemm_only(c, batch: int):
    """A call doing only the model's Dense/Conv GEMMs (the golden's arithmetic, shapes, chunks
    of at most reference.IM2COL_ELEMENTS window elements and BLAS thread policy) on arrays
    made once: ort's time over this one is the ratio an exact golden model in that
    arithmetic could reach if everything else were free (float64 GEMMs of 16-bit models
    bound it)."""
    from modelcircuit.graphs.threads import golden_threads

    g = c.graph
    mats = []
    for node in g.nodes:
        if node.op == "Dense":
            lp, m = reference.dense_linear(g, node), batch
        elif node.op == "Conv":
            lp = reference.conv_linear(g, node)
            m = batch * int(np.prod(g.tensor(node.outputs[0]).shape[:-1]))
        else:
            continue
        if lp.w.ndim != 2:  # grouped: (groups, K, N/groups), one product per group
            w = np.ones((lp.w.shape[1], lp.w.shape[2]), lp.dtype)
            m *= lp.w.shape[0]
        else:
            w = lp.w
        rows = max(1, min(m, reference.IM2COL_ELEMENTS // max(w.shape[0], 1)))
        a = np.ones((rows, w.shape[0]), lp.dtype)
        o = np.empty((rows, w.shape[1]), lp.dtype)
        full, last = divmod(m, rows)
        mats.append((a, w, o, full, last))

    def fn() -> None:
        with golden_threads() as t:
            reference.set_threads(t)
            try:
                for a, w, o, full, last in mats:
                    for _ in range(full):
                        reference.blas_threads(a.shape[0] * w.size)
                        np.matmul(a, w, out=o)
                    if last:
                        np.matmul(a[:last], w, out=o[:last])
            finally:
                reference.set_threads(None)

    return fn


def interpreter(c, x: np.ndarray) -> np.ndarray:
    """mc.run's golden path through reference.execute (the interpreter) instead of the plan."""
    g = c.graph
    out = reference.execute(g, [host.encode(c, x)], inputs_are_codes=True)[g.outputs[0]]
    return host.decode(c, out)


def compete(paths: dict[str, Path]) -> None:
    """The competing process: golden runs of every model at 64 rows, forever."""
    cs = []
    for p in paths.values():
        c = mc.compile(mc.load_onnx(p), precision="fixed<16,6>")
        cs.append((c, np.random.default_rng(1).standard_normal((64, *host.input_shape(c)))
                   .astype(np.float32)))
    print("ready", flush=True)
    while True:
        for c, x in cs:
            mc.run(c, x)


def jet_extras(path: Path) -> dict:
    g = mc.load_onnx(path)
    compile_times = []
    for _ in range(5):
        t0 = time.perf_counter()
        mc.compile(mc.load_onnx(path), precision="fixed<16,6>")
        compile_times.append(time.perf_counter() - t0)
    rng = np.random.default_rng(0)
    xf = rng.standard_normal((1000, 16)).astype(np.float32)
    cal = rng.standard_normal((1000, 16)).astype(np.float32)

    def logits(c, x):
        sm = next((n for n in c.graph.nodes if n.op == "Softmax"), None)
        return mc.run(c, x) if sm is None else mc.run(c, x, trace=True)[sm.inputs[0]]

    yf = logits(mc.compile(g, precision="float32"), xf)
    fid = {}
    for label, kw in [("fixed<16,6>", {"precision": "fixed<16,6>"}),
                      ("fixed<8,3>", {"precision": "fixed<8,3>"}),
                      ("fixed<8,3> --calibrate", {"precision": "fixed<8,3>", "calibrate": cal})]:
        fid[label] = float(np.mean(logits(mc.compile(g, **kw), xf).argmax(-1) == yf.argmax(-1)))
    return {"compile_s_median": statistics.median(compile_times), "fidelity_argmax_vs_float": fid,
            "hls4ml_reference": {"fixed<16,6>": 0.986, "ap_fixed<8,3>": 0.264}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "golden.json"))
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--models", default="jet_tagger,autoencoder,digits_cnn,resnet8")
    ap.add_argument("--precisions", default="fixed<16,6>;fixed<8,3>")
    ap.add_argument("--seconds", type=float, default=0.6, help="timing per case and phase")
    ap.add_argument("--no-busy", action="store_true", help="skip the competing-process phase")
    ap.add_argument("--compete", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-golden-"))
    paths = model_paths(tmp)
    if a.compete:
        compete(paths)
        return 0
    wanted = [m for m in a.models.split(",") if m in paths]
    batches = [int(b) for b in a.batches.split(",")]
    cases, info = {}, {}
    for m in wanted:
        sess = ort_session(paths[m])
        g = mc.load_onnx(paths[m])
        for prec in a.precisions.split(";"):
            c = mc.compile(g, precision=prec)
            shp = host.input_shape(c)
            ort_shape = tuple(d for d in sess.get_inputs()[0].shape[1:])
            for b in batches:
                x = np.random.default_rng(b).standard_normal((b, *shp)).astype(np.float32)
                if m == "digits_cnn":  # the real test digits, tiled
                    d = np.load(DATA / "digits_test.npz")["x"].astype(np.float32)
                    x = np.tile(d, (-(-b // len(d)), 1))[:b]
                x = x.reshape((b, *ort_shape)) if all(isinstance(d, int) for d in ort_shape) \
                    else x
                cases[(m, prec, b)] = (c, sess, x)
                info[(m, prec, b)] = arithmetic_of(c)
    proc = None
    if not a.no_busy:
        proc = subprocess.Popen([sys.executable, __file__, "--compete"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        proc.stdout.readline()  # "ready": its models are compiled, it loops from now on
    try:
        idle, busy = measure(cases, a.seconds, proc)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    rows = []
    for key in cases:
        m, prec, b = key
        r = {"model": m, "precision": prec, "batch": b, "arithmetic": info[key],
             "golden_rows_per_s": b / idle[key]["golden_s"],
             "ort_rows_per_s": b / idle[key]["ort_s"],
             "ratio_golden_over_ort": idle[key]["ort_s"] / idle[key]["golden_s"],
             "cpu_ratio_golden_over_ort": idle[key]["ort_cpu_s"] / idle[key]["golden_cpu_s"],
             "cpu_ratio_interpreter_over_ort": idle[key]["ort_cpu_s"] / idle[key]["interp_cpu_s"],
             "interpreter_rows_per_s": b / idle[key]["interp_s"],
             "ratio_interpreter_over_ort": idle[key]["ort_s"] / idle[key]["interp_s"],
             "gemm_only_s": idle[key]["gemm_s"],
             "ratio_gemm_bound": idle[key]["ort_s"] / idle[key]["gemm_s"]}
        if busy:
            r["golden_busy_rows_per_s"] = b / busy[key]["golden_s"]
            r["golden_slowdown"] = busy[key]["golden_s"] / idle[key]["golden_s"]
            r["ort_slowdown"] = busy[key]["ort_s"] / idle[key]["ort_s"]
        rows.append(r)
    hdr = (f"{'model':12s} {'precision':12s} {'batch':>5s} {'golden rows/s':>14s} "
           f"{'ort rows/s':>12s} {'ratio':>6s} {'interp ratio':>12s} {'cpu ratio':>9s} "
           f"{'interp cpu':>10s} {'GEMM bound':>10s} {'busy slowdown':>13s} {'ort slowdown':>12s}  "
           "GEMM arithmetic")
    print(hdr)
    for r in rows:
        print(f"{r['model']:12s} {r['precision']:12s} {r['batch']:5d} "
              f"{r['golden_rows_per_s']:14,.0f} {r['ort_rows_per_s']:12,.0f} "
              f"{r['ratio_golden_over_ort']:5.2f}x {r['ratio_interpreter_over_ort']:11.2f}x "
              f"{r['cpu_ratio_golden_over_ort']:8.2f}x {r['cpu_ratio_interpreter_over_ort']:9.2f}x "
              f"{r['ratio_gemm_bound']:9.2f}x "
              f"{r.get('golden_slowdown', float('nan')):12.2f}x "
              f"{r.get('ort_slowdown', float('nan')):11.2f}x  {r['arithmetic']}")
    from modelcircuit.graphs import native

    print(f"golden loops: {native.status()}; GEMM bound = ort time / the time of the "
          "model's GEMMs alone (what an exact golden model in that arithmetic could reach)")
    payload = {"rows": rows, "seconds_per_case": a.seconds, "golden_loops": native.status(),
               "blas_env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS",
                                                           "OMP_NUM_THREADS")}}
    if "jet_tagger" in paths:
        payload["jet_tagger"] = jet_extras(paths["jet_tagger"])
        j = payload["jet_tagger"]
        print(f"jet tagger: compile {j['compile_s_median'] * 1e3:.1f} ms (median of 5); argmax "
              "agreement with float: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                   j["fidelity_argmax_vs_float"].items()))
    write_json(a.json, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
