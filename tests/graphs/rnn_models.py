"""Small ONNX LSTM / GRU models written with onnx.helper (random weights, seeded), in the
layouts exporters write: torch's batch_first Transpose wrapper, a sequence-first graph input,
layout 1; outputs Y (squeezed and transposed back, as torch writes), Y_h, Y_c; a Linear
after the last step or on every step."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GATES = {"LSTM": 4, "GRU": 3}


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(a), name)


def rnn_model(op: str = "LSTM", t: int = 7, f: int = 3, h: int = 5, seed: int = 0,
              wrap: str = "transpose", head: str = "last", out_classes: int = 2,
              lbr: int | None = None, clip: float | None = None,
              activations: list[str] | None = None, alphas: list[float] | None = None,
              betas: list[float] | None = None, h0: bool = False, c0: bool = False,
              output: str = "Y", direction: str = "forward", peephole: bool = False,
              seq_lens: str | None = None, h0_input: bool = False, input_forget: int = 0,
              batch: int | str = "N", scale: float = 0.5, opset: int = 17,
              seq_batch: int | str = 1, shape_h0: bool = False) -> onnx.ModelProto:
    """wrap: "transpose" (input (N, T, F) -> Transpose [1, 0, 2]: torch batch_first), "seq"
    (input (T, N, F) straight in), "layout1" (input (N, T, F), layout=1). output: "Y" (the
    sequence, back to (N, T, H) then head), "Y_h", "Y_c" (the last state, squeezed, then
    head). head: "last" (Gather of the last step -> Gemm; Y only), "seq" (MatMul + Add on
    every step; Y only), "none". seq_batch: the batch dimension of the "seq" input (fixed, or
    symbolic as torch writes it). shape_h0: a zero initial_h (and initial_c) of the batch's
    size, made from Shape(X) as torch writes `torch.zeros(layers, x.size(1), H)`."""
    rng = np.random.default_rng(seed)
    g = GATES[op]
    nd = 2 if direction == "bidirectional" else 1
    W = (rng.normal(size=(nd, g * h, f)) * scale).astype(np.float32)
    R = (rng.normal(size=(nd, g * h, h)) * scale).astype(np.float32)
    B = (rng.normal(size=(nd, 2 * g * h)) * scale * 0.5).astype(np.float32)
    inits = [_init("W", W), _init("R", R), _init("B", B)]
    nodes = []
    if wrap == "transpose":
        xin = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, t, f])
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], name="tin", perm=[1, 0, 2]))
        xname = "xt"
    elif wrap == "seq":
        xin = helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, seq_batch, f])
        xname = "x"
    else:
        xin = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, t, f])
        xname = "x"
    layout = 1 if wrap == "layout1" else 0
    nb = 1  # the batch of constant initial states
    ins = [xname, "W", "R", "B", "", "", ""]
    if seq_lens == "const":
        inits.append(_init("lens", np.full((1,), t, dtype=np.int32)))
        ins[4] = "lens"
    elif seq_lens == "short":
        inits.append(_init("lens", np.full((1,), t - 1, dtype=np.int32)))
        ins[4] = "lens"
    extra_inputs = []
    if seq_lens == "input":
        extra_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [1]))
        ins[4] = "lens"
    hshape = [nb, nd, h] if layout else [nd, nb, h]
    if h0:
        inits.append(_init("h0", (rng.normal(size=hshape) * 0.3).astype(np.float32)))
        ins[5] = "h0"
    if h0_input:
        extra_inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, hshape))
        ins[5] = "h0"
    if shape_h0:
        inits += [_init("bax", np.array([0 if layout else 1], np.int64)),
                  _init("one", np.array([1], np.int64)), _init("hid", np.array([h], np.int64))]
        nodes += [helper.make_node("Shape", [xname], ["xs"], name="xshape"),
                  helper.make_node("Gather", ["xs", "bax"], ["nb"], name="nb", axis=0),
                  helper.make_node("Concat", ["nb", "one", "hid"] if layout else
                                   ["one", "nb", "hid"], ["hs"], name="hs", axis=0),
                  helper.make_node("ConstantOfShape", ["hs"], ["z0"], name="z0",
                                   value=numpy_helper.from_array(np.zeros(1, np.float32)))]
        ins[5] = "z0"
        if op == "LSTM":
            ins[6] = "z0"
    if op == "LSTM" and c0:
        inits.append(_init("c0", (rng.normal(size=hshape) * 0.3).astype(np.float32)))
        ins[6] = "c0"
    if peephole:
        inits.append(_init("P", np.zeros((nd, 3 * h), np.float32)))
        ins.append("P")
    while ins and ins[-1] == "" and len(ins) > 3:
        ins.pop()
    if op == "GRU":
        ins = ins[:6]
    a: dict = {"hidden_size": h}
    if direction != "forward":
        a["direction"] = direction
    if layout:
        a["layout"] = 1
    if lbr is not None:
        a["linear_before_reset"] = lbr
    if clip is not None:
        a["clip"] = clip
    if activations is not None:
        a["activations"] = activations
    if alphas is not None:
        a["activation_alpha"] = alphas
    if betas is not None:
        a["activation_beta"] = betas
    if input_forget:
        a["input_forget"] = input_forget
    outs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    nodes.append(helper.make_node(op, ins, outs, name="rnn", **a))
    if output == "Y":
        if layout:  # (N, T, 1, H) -> (N, T, H)
            inits.append(_init("ax2", np.array([2], np.int64)))
            nodes.append(helper.make_node("Squeeze", ["Y", "ax2"], ["ys"], name="sq"))
            seq = "ys"
        else:  # (T, 1, N, H) -> (T, N, H) -> (N, T, H)
            inits.append(_init("ax1", np.array([1], np.int64)))
            nodes.append(helper.make_node("Squeeze", ["Y", "ax1"], ["ysq"], name="sq"))
            nodes.append(helper.make_node("Transpose", ["ysq"], ["ys"], name="tout",
                                          perm=[1, 0, 2]))
            seq = "ys"
        if head == "last":
            inits.append(_init("last", np.array(-1, np.int64)))
            nodes.append(helper.make_node("Gather", [seq, "last"], ["hl"], name="pick", axis=1))
            feat = "hl"
        else:
            feat = seq
    else:
        src = output
        inits.append(_init("ax0", np.array([1 if layout else 0], np.int64)))
        nodes.append(helper.make_node("Squeeze", [src, "ax0"], ["hl"], name="sq"))
        feat = "hl"
    final = feat
    if head in ("last", "seq") or output != "Y":
        Wf = (rng.normal(size=(h, out_classes)) * 0.5).astype(np.float32)
        bf = (rng.normal(size=(out_classes,)) * 0.1).astype(np.float32)
        inits += [_init("Wf", Wf), _init("bf", bf)]
        if head == "seq" and output == "Y":
            nodes.append(helper.make_node("MatMul", [feat, "Wf"], ["mm"], name="fc_mm"))
            nodes.append(helper.make_node("Add", ["mm", "bf"], ["out"], name="fc_add"))
        else:
            nodes.append(helper.make_node("Gemm", [feat, "Wf", "bf"], ["out"], name="fc"))
        final = "out"
    gr = helper.make_graph(nodes, "rnn", [xin, *extra_inputs],
                           [helper.make_tensor_value_info(final, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def ort_run(m: onnx.ModelProto, x: np.ndarray, wrap: str = "transpose") -> np.ndarray:
    """onnxruntime on x (N, T, F), one sample at a time for a sequence-first input."""
    import onnxruntime as ort

    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    # one sample at a time: constant initial states are written for a batch of 1
    rows = [x[i][:, None, :] if wrap == "seq" else x[i:i + 1] for i in range(len(x))]
    return np.stack([s.run(None, {name: r})[0].reshape(-1) for r in rows])


def stacked_h_n_model(op: str) -> onnx.ModelProto:
    """torch's nn.LSTM/GRU(num_layers=2, batch_first=True) -> h_n[-1] -> Linear, as the
    exporters write it: layer 2 reads layer 1's squeezed Y; h_n is the Concat of both layers'
    Y_h along the layer axis, then a Gather of the last layer."""
    t, f, h, g = 6, 3, 5, {"LSTM": 4, "GRU": 3}[op]
    rng = np.random.default_rng(5)

    def init(name, shape, s=0.5):
        return numpy_helper.from_array((rng.normal(size=shape) * s).astype(np.float32), name)

    inits = [init("W1", (1, g * h, f)), init("R1", (1, g * h, h)), init("B1", (1, 2 * g * h)),
             init("W2", (1, g * h, h)), init("R2", (1, g * h, h)), init("B2", (1, 2 * g * h)),
             init("Wf", (2, h)), init("bf", (2,), 0.1),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array(-1, np.int64), "last")]
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node(op, ["xt", "W1", "R1", "B1"], ["y1", "h1"], hidden_size=h,
                              name="l1", **extra),
             helper.make_node("Squeeze", ["y1", "ax1"], ["y1s"]),
             helper.make_node(op, ["y1s", "W2", "R2", "B2"], ["y2", "h2"], hidden_size=h,
                              name="l2", **extra),
             helper.make_node("Concat", ["h1", "h2"], ["hn"], axis=0, name="hn"),
             helper.make_node("Gather", ["hn", "last"], ["hl"], axis=0),
             helper.make_node("Gemm", ["hl", "Wf", "bf"], ["out"], transB=1)]
    gr = helper.make_graph(nodes, "stacked", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", t, f])], [helper.make_tensor_value_info(
            "out", TensorProto.FLOAT, ["N", 2])], inits)
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m
