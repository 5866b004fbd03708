"""Shared fixtures: where the third-party models are, the bundled digits model; how far two
float32 implementations of one graph may differ."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# MODELCIRCUIT_SHARED_MODELS: where a copy travels without ../shared (the GPU machine; see
# bench/device_check.sh)
SHARED_MODELS = Path(os.environ.get("MODELCIRCUIT_SHARED_MODELS") or ROOT.parent / "shared" / "models")
DATA = ROOT / "src" / "modelcircuit" / "data"


def shared_model(name: str) -> Path:
    p = SHARED_MODELS / f"{name}.onnx"
    if not p.exists():
        pytest.skip(f"third-party model {p} is absent (../shared/models not beside the project)")
    return p


@pytest.fixture(scope="session")
def digits_model() -> Path:
    return DATA / "digits_mlp.onnx"


@pytest.fixture(scope="session")
def digits_test() -> tuple[np.ndarray, np.ndarray]:
    d = np.load(DATA / "digits_test.npz")
    return d["x"], d["y"]


EPS = float(np.finfo(np.float32).eps)  # 2**-23 = 2u, u the unit roundoff of float32
TINY = float(np.finfo(np.float32).tiny)  # below it float32 is subnormal: relative bounds end


def float32_error_bound(c, x: np.ndarray) -> np.ndarray:
    """For every output element of the compiled float32 graph `c` on input x, the typical size
    of |ours - theirs| between two float32 implementations of it (numpy, onnxruntime, gpu-emu,
    CUDA: each sums in its own, often CPU-dependent, order). E[t] is that size on tensor t,
    node by node, computed from the golden model's intermediates:

    Dense  y = x @ W + b, fan-in K, then ReLU (1-Lipschitz). Each side rounds at most K + 1
           times; the rounding errors are independent with mean zero, so in any summation order
           their sum is of size sqrt(K + 1) u sum_i |x_i W_ij| (Higham & Mary, "A new approach
           to probabilistic rounding error analysis", SIAM J. Sci. Comput. 2019: lambda sqrt(n)
           u replaces the worst case n u, which compounds through layers and would hide real
           bugs). A difference already on x goes through W the same way:
           E_y = sqrt(E_x**2 @ W**2) + sqrt(K + 1) EPS (|x| @ |W| + |b|)   (EPS = 2u: two sides).
    Softmax over n classes: dy_i = y_i (dz_i - sum_j y_j dz_j), so |dy_i| <= 2 y_i max_j E_z.
           Each side's own error is at most (n + 4 + d_i) u y_i: d_i = max z - z_i is rounded
           (d_i u), exp within 2 ulp (4u), a sum of n, a division; subnormal results aside
           (TINY). numpy's and onnxruntime's measured within 0.92 of it on 400,000 random rows.
    Sigmoid: |dy| <= y (1 - y) E_z. 1 / (1 + exp(-z)) is within 4 u y (numpy: 3.8 u y measured;
           gpu-emu, CUDA); onnxruntime's (MLAS: a rational p/q + 0.5) is off by an absolute
           amount, up to 1.4 EPS on 2M points of [-30, 30]: 2 EPS y + 2 EPS for both sides.
    Add/Sub/Mul/Div by a constant: one rounding of the result per side, E_y = |c| E_x + EPS |y|
           (1/|c| for Div). BatchNorm: (x - m) s / sqrt(v + eps) + b in any order of its four
           roundings: |k| E_x + 3 EPS ((|x| + |m|) |k| + |b|). ReLU and layout ops: E_x.
    Add/Sub of two activations (a residual join): E_a + E_b + EPS |y|. Clip: E_x (exact).
    Conv: a Dense per window (fan-in K = window x Cin/group), the same formula with window
           sums. MaxPool, Resize, Concat and layout ops: E_x moved (a max of values differing
           by E is within max E). AvgPool: the mean of E_x plus sqrt(K + 1) EPS mean |x|.
    MatMul of two activations: tests/attention_bounds.py (as Dense, both factors carrying E).
    Other ops have no model here: the function refuses them.
    """
    import modelcircuit as mc
    from modelcircuit.graphs import reference
    from modelcircuit.graphs.ops import ConvAttrs
    from tests import attention_bounds

    g = c.graph
    vals = {k: np.asarray(v, dtype=np.float64) for k, v in mc.run(c, x, trace=True).items()}
    err = {name: np.zeros_like(vals[name]) for name in g.inputs}
    for node in g.nodes:
        z, y = node.inputs[0], vals[node.outputs[0]]
        if node.op == "Dense":
            w = np.asarray(g.constants[node.inputs[1]], dtype=np.float64)
            b = (np.abs(np.asarray(g.constants[node.inputs[2]], dtype=np.float64))
                 if len(node.inputs) > 2 else 0.0)
            k = w.shape[0]
            e = (np.sqrt(err[z] ** 2 @ w ** 2)
                 + np.sqrt(k + 1) * EPS * (np.abs(vals[z]) @ np.abs(w) + b))
        elif node.op == "Softmax":
            n = y.shape[-1]
            d = vals[z].max(axis=-1, keepdims=True) - vals[z]
            e = 2 * y * err[z].max(axis=-1, keepdims=True) + (n + 4 + d) * EPS * y + 2 * TINY
        elif node.op == "Lut" and node.get("func") == "sigmoid":
            e = y * (1 - y) * err[z] + 2 * EPS * y + 2 * EPS
        elif node.op in ("Add", "Sub", "Mul", "Div") and g.is_const(node.inputs[1]):
            # one rounding per side, of the result; a difference on x scales by the constant
            c = np.abs(np.asarray(g.constants[node.inputs[1]], dtype=np.float64))
            gain = c if node.op == "Mul" else (1.0 / c if node.op == "Div" else 1.0)
            e = err[z] * gain + EPS * np.abs(y) + TINY
        elif node.op == "BatchNorm":
            # y = (x - m) k + b, k = s / sqrt(v + eps): k itself (sqrt, division) and the
            # subtraction, product and sum each round once, in whichever order a side uses
            s_, b_, m_, v_ = (np.asarray(g.constants[i], dtype=np.float64)
                              for i in node.inputs[1:5])
            k = np.abs(s_ / np.sqrt(v_ + node.get("epsilon", 1e-5)))
            e = err[z] * k + 3 * EPS * ((np.abs(vals[z]) + np.abs(m_)) * k + np.abs(b_)) + TINY
        elif node.op == "Conv":
            # a Dense per window and group (fan-in K = window * Cin/group), the same model:
            # the window sums of err**2 * W**2 and of |x| * |W| (padding adds nothing)
            a = ConvAttrs.of(node)
            w = np.asarray(g.constants[node.inputs[1]], dtype=np.float64)
            b = (np.abs(np.asarray(g.constants[node.inputs[2]], dtype=np.float64))
                 if len(node.inputs) > 2 else 0.0)
            out_sp = tuple(g.tensor(node.outputs[0]).shape[:-1])
            k = int(np.prod(w.shape[:-1]))
            e = (np.sqrt(reference.conv_sum(err[z] ** 2, w ** 2, a, out_sp))
                 + np.sqrt(k + 1) * EPS * (reference.conv_sum(np.abs(vals[z]), np.abs(w), a,
                                                              out_sp) + b))  # ReLU: 1-Lipschitz
        elif node.op == "MaxPool":
            e = np.asarray(reference.OPS[node.op](g, node, [err[z].astype(np.float32)]),
                           dtype=np.float64)  # max is 1-Lipschitz in the max norm, exact
        elif node.op == "AvgPool":
            # a window sum of K (K roundings) and a division (one more): a mean of the
            # errors on x plus sqrt(K + 1) EPS times the mean of |x|
            k = int(np.prod(node.get("kernel")))
            mean = [np.asarray(reference.OPS[node.op](g, node, [v.astype(np.float32)]),
                               dtype=np.float64) for v in (err[z], np.abs(vals[z]))]
            e = mean[0] + np.sqrt(k + 1) * EPS * mean[1] + TINY
        elif node.op == "Concat":
            e = np.concatenate([err[i] for i in node.inputs], axis=node.get("axis") + 1)
        elif node.op in ("LSTM", "GRU"):
            e = _recurrent_bound(g, node, vals[z], err[z])
        elif node.op in ("Attention", "LayerNorm") or (
                node.op == "Lut" and node.get("func") in ("gelu", "gelu_tanh")):
            e = _attention_bound(g, node, vals, err)
        elif node.op in ("Relu", "Clip"):
            e = err[z]  # 1-Lipschitz, exact
        elif node.op in ("Add", "Sub") and not any(g.is_const(i) for i in node.inputs):
            # a residual join of two activations: both differences add, one rounding
            e = err[node.inputs[0]] + err[node.inputs[1]] + EPS * np.abs(y) + TINY
        elif node.op in ("Reshape", "Transpose", "Resize", "Gather"):
            e = np.asarray(reference.OPS[node.op](g, node, [err[z].astype(np.float32)]),
                           dtype=np.float64)
        elif node.op == "MatMul":  # of two activations: tests/attention_bounds.py
            e = attention_bounds.matmul_bound(*(vals[i] for i in node.inputs[:2]),
                                              *(err[i] for i in node.inputs[:2]))
        else:
            raise AssertionError(f"no rounding model for {node.op} {node.attrs}: add one to "
                                 "tests/conftest.py float32_error_bound")
        err[node.outputs[0]] = e
    return err[g.outputs[0]].reshape(len(x), -1)


def _attention_bound(g, node, vals: dict, err: dict) -> np.ndarray:
    """float32_error_bound of Attention, LayerNorm and the Gelu tables (graphs/attention.py).

    Attention, per head: scores s = scale q.k (+ mask) carry scale sqrt(q**2 @ E_k**2 +
           E_q**2 @ k**2) from the inputs (independent differences, as Dense above) and sqrt(dk + 1) EPS scale |q| @ |k| + 3 EPS |s| of their own (dot
           product, the scale, which exporters apply as sqrt(scale) on q and k: two more
           roundings); softmax as Softmax above; o = p @ v: E_p @ |v| + p @ E_v +
           sqrt(S + 1) EPS p @ |v|.
    LayerNorm: z = (x - mean) / sigma, y = z g + b; dy = g / sigma (dx - mean(dx) - z
           mean(z dx)): |g| / sigma (E + sqrt(mean(E**2) / D) + |z| sqrt(mean(z**2 E**2) / D))
           for independent differences (as Dense above); its own:
           the mean and variance sums (sqrt(D + 1) EPS of mean |x| / sigma and of |z|), a
           variance computed as E[x^2] - E[x]^2 (sqrt(D + 1) EPS mean(x^2) / var |z| / 2),
           and four roundings of the result (4 EPS (|y| + |b|)).
    Gelu (erf or tanh form): |gelu'| <= 1.13, so 1.13 E + 4 EPS (|y| + |x|) (erf and tanh
           within a few ulp; 0.5 x (1 + erf) cancels for negative x: absolute in |x|)."""
    from modelcircuit.graphs import attention as attn
    from modelcircuit.graphs.ops import AttentionAttrs

    z = node.inputs[0]
    y = vals[node.outputs[0]]
    if node.op == "Lut":
        return 1.13 * err[z] + 4 * EPS * (np.abs(y) + np.abs(vals[z])) + TINY
    if node.op == "LayerNorm":
        x = vals[z]
        gm = np.abs(np.asarray(g.constants[node.inputs[1]], dtype=np.float64))
        bt = np.abs(np.asarray(g.constants[node.inputs[2]], dtype=np.float64))
        d = x.shape[-1]
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        sig = np.sqrt(var + node.get("epsilon", 1e-5))
        zz = (x - mu) / sig
        ex = err[z]
        prop = gm / sig * (ex + np.sqrt((ex * ex).mean(axis=-1, keepdims=True) / d)
                           + np.abs(zz) * np.sqrt((zz * zz * ex * ex).mean(axis=-1,
                                                                         keepdims=True) / d))
        k = np.sqrt(d + 1) * EPS
        own = gm * (k * np.abs(x).mean(axis=-1, keepdims=True) / sig + (k + 6 * EPS) * np.abs(zz)
                    + k * (x * x).mean(axis=-1, keepdims=True) / sig**2 * np.abs(zz) / 2)
        return prop + own + 4 * EPS * (np.abs(y) + bt) + TINY
    a = AttentionAttrs.of(node)
    qv, kv, vv = (vals[i] for i in node.inputs[:3])
    eq, ek, ev = (err[i] for i in node.inputs[:3])
    sp = lambda t: attn.split_heads(t, a.heads)  # noqa: E731
    q, k, v, e_q, e_k, e_v = sp(qv), sp(kv), sp(vv), sp(eq), sp(ek), sp(ev)
    kt = lambda t: np.swapaxes(t, -1, -2)  # noqa: E731
    dk = q.shape[-1]
    s = np.matmul(q, kt(k)) * a.scale
    if a.masked:
        s = s + np.asarray(g.constants[node.inputs[3]], dtype=np.float64)
    s_fin = np.where(np.isfinite(s), s, 0.0)
    e_s = (a.scale * np.sqrt((q * q) @ kt(e_k * e_k) + (e_q * e_q) @ kt(k * k))
           + np.sqrt(dk + 1) * EPS * a.scale * (np.abs(q) @ kt(np.abs(k))) + 3 * EPS * np.abs(s_fin))
    mx = np.max(np.where(np.isfinite(s), s, -np.inf), axis=-1, keepdims=True)
    p = np.where(np.isfinite(s), np.exp(s_fin - mx), 0.0)
    p = p / p.sum(axis=-1, keepdims=True)
    n = s.shape[-1]
    e_p = (2 * p * np.where(np.isfinite(s), e_s, 0).max(axis=-1, keepdims=True)
           + (n + 4 + (mx - s_fin)) * EPS * p + 2 * TINY)
    e_o = e_p @ np.abs(v) + p @ e_v + np.sqrt(n + 1) * EPS * (p @ np.abs(v))
    return attn.merge_heads(e_o) + TINY


def _recurrent_bound(g, node, x: np.ndarray, ex: np.ndarray) -> np.ndarray:
    """float32_error_bound of an LSTM / GRU (graphs/recurrent.py), step by step, on float64
    values recomputed here. Gate sums: a Dense of fan-in K = F + H + 2 (x.W + h.R + two
    biases), as Dense above, with the error already on x and h carried through W and R.
    Sigmoid as above; tanh t: (1 - t**2) E + 2 EPS |t| + 2 EPS (onnxruntime's MLAS tanh is
    a rational approximation with an absolute error like its sigmoid's). Products and sums of
    the state update: each factor's error times the other factor, plus one rounding (EPS) of
    each product and of the sum. Clip is 1-Lipschitz. Only sigmoid/tanh activations have a
    model here."""
    from modelcircuit.graphs.ops import attrs

    a = attrs(node)
    assert all(f in ("sigmoid", "tanh") for f in a.acts), f"no rounding model for {a.acts}"
    w, r, b, h0 = (np.asarray(g.constants[i], dtype=np.float64) for i in node.inputs[1:5])
    hid, n = a.hidden, x.shape[0]
    k = w.shape[0] + hid + 2
    h = np.broadcast_to(h0, (n, hid)).copy()
    c = (np.broadcast_to(np.asarray(g.constants[node.inputs[5]], dtype=np.float64), (n, hid))
         .copy() if node.op == "LSTM" else None)
    eh, ec = np.zeros((n, hid)), np.zeros((n, hid))
    clip = a.clip

    def cl(v):
        return v if clip is None else np.clip(v, -clip, clip)

    def dense(xt, ext, hh, ehh, cols):
        s = cl(xt @ w[:, cols] + hh @ r[:, cols] + b[0, cols] + b[1, cols])
        e = (np.sqrt(ext ** 2 @ w[:, cols] ** 2 + ehh ** 2 @ r[:, cols] ** 2)
             + np.sqrt(k + 1) * EPS * (np.abs(xt) @ np.abs(w[:, cols]) + np.abs(hh)
                                       @ np.abs(r[:, cols]) + np.abs(b[0, cols]) + np.abs(b[1, cols])))
        return s, e

    def sig(s, e):
        y = 1 / (1 + np.exp(-s))
        return y, y * (1 - y) * e + 2 * EPS * y + 2 * EPS

    def tanh(s, e):
        y = np.tanh(s)
        return y, (1 - y ** 2) * e + 2 * EPS * np.abs(y) + 2 * EPS

    ys = []
    emit_c = node.op == "LSTM" and a.emit == "c"
    for t in range(x.shape[1]):
        xt, ext = x[:, t], ex[:, t]
        if node.op == "LSTM":
            col = [slice(q * hid, (q + 1) * hid) for q in range(4)]
            (i, ei), (o, eo), (f, ef) = (sig(*dense(xt, ext, h, eh, col[q])) for q in range(3))
            gg, eg = tanh(*dense(xt, ext, h, eh, col[3]))
            cn = f * c + i * gg
            ec = (np.abs(f) * ec + np.abs(c) * ef + np.abs(i) * eg + np.abs(gg) * ei
                  + EPS * (np.abs(f * c) + np.abs(i * gg) + np.abs(cn)))
            c = cn
            tc, etc = tanh(c, ec)  # clip: the gates only (onnxruntime)
            h = o * tc
            eh = np.abs(o) * etc + np.abs(tc) * eo + EPS * np.abs(h)
            ys.append(ec if emit_c else eh)
            continue
        z, ez = sig(*dense(xt, ext, h, eh, slice(0, hid)))
        rr, er = sig(*dense(xt, ext, h, eh, slice(hid, 2 * hid)))
        cn = slice(2 * hid, 3 * hid)
        if a.lbr:
            hn = h @ r[:, cn] + b[1, cn]
            ehn = (np.sqrt(eh ** 2 @ r[:, cn] ** 2)
                   + np.sqrt(hid + 1) * EPS * (np.abs(h) @ np.abs(r[:, cn]) + np.abs(b[1, cn])))
            s, es_ = dense(xt, ext, np.zeros_like(h), eh * 0, cn)
            s = cl(s - b[1, cn] + rr * hn)
            es_ = es_ + np.abs(rr) * ehn + np.abs(hn) * er + 2 * EPS * (np.abs(rr * hn) + np.abs(s))
        else:
            rh = rr * h
            erh = np.abs(rr) * eh + np.abs(h) * er + EPS * np.abs(rh)
            s, es_ = dense(xt, ext, rh, erh, cn)
        nn_, en = tanh(s, es_)
        hnew = (1 - z) * nn_ + z * h
        eh = (np.abs(1 - z) * en + np.abs(z) * eh + np.abs(nn_ - h) * ez
              + 2 * EPS * (np.abs((1 - z) * nn_) + np.abs(z * h) + np.abs(hnew)))
        h = hnew
        ys.append(eh)
    return np.stack(ys, axis=1) + TINY


# How many times float32_error_bound a difference may reach. Measured on the four float models
# (three_layer_keras, three_layer_pytorch, two_layer_keras, digits), 3 x 1000 inputs:
# onnxruntime (every optimisation level, 1 or 2 threads, batched or a row at a time) against
# numpy, and float32 summation orders simulated against each other and float64 (numpy's BLAS,
# sequential, reversed) reach at most 0.18 of the bound, 0.50 where MLAS's sigmoid adds its
# own error. 4 leaves a margin of 8 or more for other CPUs and kernels, while changing any one
# weight by 1e-3 of itself still fails tests/graphs/test_models.py.
FLOAT32_SLACK = 4.0


def assert_float32_close(got: np.ndarray, want: np.ndarray, c, x: np.ndarray,
                         what: str = "got - want") -> None:
    """|got - want| <= FLOAT32_SLACK * float32_error_bound(c, x), elementwise; the message names
    the worst element and how many bounds it is off."""
    n = len(x)
    assert got.size == want.size, f"{what}: {got.shape} vs {want.shape}"
    diff = np.abs(got.astype(np.float64).reshape(n, -1) - want.astype(np.float64).reshape(n, -1))
    bound = float32_error_bound(c, x)
    with np.errstate(divide="ignore", invalid="ignore"):  # a NaN difference stays NaN: fails
        ratio = np.where(diff == 0, 0.0, diff / bound)
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(ratio), ratio.shape))
    assert ratio[worst] <= FLOAT32_SLACK, (
        f"|{what}| = {diff[worst]:.3g} at {worst}: {ratio[worst]:.2f} x the float32 rounding "
        f"bound {bound[worst]:.3g} (allowed: {FLOAT32_SLACK})")


def tail_error_bound(c, x: np.ndarray) -> np.ndarray:
    """Per output element, a bound on the float32 rounding of the host tail (affine ops with
    constants): each op rounds once, by at most eps/2 of the magnitude it computes; the
    magnitudes come from running the tail on |values| with |constants| (no cancellation), so
    two float32 evaluations of the same tail differ by at most ops * eps * magnitude."""

    from modelcircuit.graphs import host, reference

    tail, g = c.tail, c.graph
    vals = np.abs(reference.to_values(g, g.outputs[0],
                                      reference.execute(g, [host.encode(c, x)],
                                                        inputs_are_codes=True)[g.outputs[0]]))
    absg = tail.replace(constants={k: np.abs(v) for k, v in tail.constants.items()})
    mag = reference.execute(absg, [vals.astype(np.float32)])[tail.outputs[0]].astype(np.float64)
    return len(tail.nodes) * 2.0 ** -23 * mag


@cache
def gpu_available() -> bool:
    try:
        import cupy  # noqa: F401

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_configure(config):  # noqa: ANN001
    """BLAS threads: each test process gets its share of the cores it was given (pytest -n N:
    cores // N, at least one), never OpenBLAS's one thread per core in every worker. A
    user's OPENBLAS_NUM_THREADS / OMP_NUM_THREADS still applies where it asks for fewer."""
    import os

    from modelcircuit.graphs.threads import cores_given, limit_process

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    limit_process(max(1, cores_given() // max(workers, 1)))
    _sigint_back()


def _sigint_back() -> None:
    """A suite started in the background (`make test &`, nohup, some CI runners) inherits
    SIGINT as ignored, and every command the tests start inherits that too: the Ctrl-C tests
    then wait for an interrupt that can never arrive (two fresh-clone runs failed so). Python's
    own handler here means children start with the default action again (exec resets handled
    signals, never ignored ones)."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)




# Test modules whose tests run the tools (yosys, nextpnr, Verilator/cocotb): marked
# `integration`, so `pytest -m "not integration"` is a unit run of a few minutes. The default
# suite keeps them (one FPGA flow and one RTL simulation of each model style at least).
INTEGRATION_MODULES = {
    "tests/hdl/test_fpga.py", "tests/hdl/test_fpga_flow.py", "tests/hdl/test_uart.py",
    "tests/hdl/test_uart_host.py", "tests/hdl/streamed/test_stream_uart.py",
    "tests/hdl/flow/test_yosys.py", "tests/hdl/vector/test_timing.py",
    "tests/sim/test_rtl.py", "tests/sim/test_verify.py", "tests/sim/test_models_verify.py",
    "tests/sim/test_stream_models.py", "tests/sim/test_differential.py",
}


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parents[1]
    skip_gpu = None if gpu_available() else pytest.mark.skip(reason="needs a CUDA device "
                                                                    "(none here)")
    for item in items:
        if skip_gpu is not None and item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)
        try:
            rel = Path(item.fspath).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if rel in INTEGRATION_MODULES:
            item.add_marker(pytest.mark.integration)
