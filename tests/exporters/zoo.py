"""The field's benchmark networks, written by the real exporters (issue 29): our own definitions
of the four MLPerf Tiny models (ResNet-8 on CIFAR-10, DS-CNN keyword spotting on 49x10 MFCCs,
MobileNet-v1 alpha=0.25 visual wake words at 96x96x3, the FC autoencoder), float (torch.onnx,
TorchScript and dynamo exporters) and brevitas 8-bit QAT (export_qonnx), and FINN's flagships
from brevitas_examples (CNV 1W1A, ResNet-18 4W4A, MobileNet-v1 4b) with pretrained=False.

No data set or download is reachable here: weights are the seeded initialisations, and the
BatchNorm statistics are calibrated with a few train-mode passes on seeded random inputs (so
BatchNorms fold into something that is not the identity). Every file is checked when written:
float files with onnxruntime against torch, QONNX files with qonnx execution against brevitas.

    python tests/exporters/zoo.py --out tests/data/exporters/zoo            # the small ones
    python tests/exporters/zoo.py --out /tmp/zoo --only cnv_1w1a,resnet18_4w4a   # big ones

Needs torch 2.13.0 (CPU), brevitas 0.13.4, qonnx, onnxscript, onnxruntime (tests/exporters/
README.md). The tests read the committed small files; the big ones (6 to 45 MB, never
committed) are made by `slow` tests that skip where torch or brevitas is absent
(tests/graphs/test_zoo.py, tests/graphs/test_zoo_finn.py: ZOO_PYTHON, ZOO_CACHE). ResNet-18
goes through brevitas' TorchScript path (QONNX_KW, recorded in its `exporter` field).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

SMALL = ["resnet8", "resnet8_dynamo", "dscnn", "mobilenet_025", "autoencoder",
         "resnet8_q8", "dscnn_q8", "mobilenet_025_q8", "autoencoder_q8"]
BIG = ["cnv_1w1a", "resnet18_4w4a", "mobilenet_v1_4b"]
INPUTS = {"resnet8": (3, 32, 32), "dscnn": (1, 49, 10), "mobilenet_025": (3, 96, 96),
          "autoencoder": (640,), "cnv_1w1a": (3, 32, 32), "resnet18_4w4a": (3, 32, 32),
          "mobilenet_v1_4b": (3, 224, 224)}


# brevitas export_qonnx's own default path is torch's dynamo exporter; brevitas_examples'
# QuantBasicBlock asserts that both operands of its residual add are QuantTensors, which
# torch.export's trace does not give them ("Perform add among QuantTensors"): ResNet-18 goes
# through brevitas' TorchScript path (dynamo=False), as FINN's own flow exports it.
QONNX_KW = {"resnet18_4w4a": {"dynamo": False}}


def base(name: str) -> str:
    return name.replace("_dynamo", "").replace("_q8", "")


# ----------------------------------------------------------------------------- float models
def float_model(name: str):
    from torch import nn

    def cbr(i, o, k, s=1, p=0, groups=1, act="relu"):
        layers = [nn.Conv2d(i, o, k, s, p, groups=groups, bias=False), nn.BatchNorm2d(o)]
        layers.append(nn.ReLU6() if act == "relu6" else nn.ReLU())
        return layers

    class Block(nn.Module):  # MLPerf Tiny ResNet-8 stack: 2 convs and a (1x1, strided) skip
        def __init__(self, i, o, s):
            super().__init__()
            self.a = nn.Sequential(*cbr(i, o, 3, s, 1))
            self.b = nn.Sequential(nn.Conv2d(o, o, 3, 1, 1, bias=False), nn.BatchNorm2d(o))
            self.skip = nn.Conv2d(i, o, 1, s) if s != 1 or i != o else None
            self.relu = nn.ReLU()

        def forward(self, x):
            y = self.b(self.a(x))
            return self.relu(y + (x if self.skip is None else self.skip(x)))

    b = base(name)
    if b == "resnet8":
        return nn.Sequential(*cbr(3, 16, 3, 1, 1), Block(16, 16, 1), Block(16, 32, 2),
                             Block(32, 64, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(64, 10))
    if b == "dscnn":  # TF 'same' padding of the strided 10x4 conv: an explicit Pad
        layers = [nn.ZeroPad2d((1, 1, 4, 5)), *cbr(1, 64, (10, 4), 2, 0)]
        for _ in range(4):
            layers += cbr(64, 64, 3, 1, 1, groups=64) + cbr(64, 64, 1)
        return nn.Sequential(*layers, nn.AvgPool2d((25, 5)), nn.Flatten(), nn.Linear(64, 12))
    if b == "mobilenet_025":
        ch = [(8, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2)]
        ch += [(128, 128, 1)] * 5 + [(128, 256, 2), (256, 256, 1)]
        layers = cbr(3, 8, 3, 2, 1, act="relu6")
        for i, o, s in ch:
            layers += cbr(i, i, 3, s, 1, groups=i, act="relu6") + cbr(i, o, 1, act="relu6")
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 2))
    if b == "autoencoder":
        enc = [640, 128, 128, 128, 128, 8]
        dec = [8, 128, 128, 128, 128]
        layers = []
        for i, o in zip(enc[:-1], enc[1:], strict=True):
            layers += [nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU()]
        for i, o in zip(dec[:-1], dec[1:], strict=True):
            layers += [nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(128, 640))
    raise KeyError(name)


# ----------------------------------------------------------------------------- brevitas QAT
def quant_model(name: str):
    """The MLPerf Tiny model in brevitas, 8-bit weights and activations (per-tensor float
    scales, as brevitas' defaults), BatchNorm in float between a QuantConv and its QuantReLU,
    a residual Add of two tensors quantized by one shared QuantIdentity."""
    import brevitas.nn as qnn
    import torch
    from torch import nn

    def act(relu=True, max_val=None):
        if relu:
            return qnn.QuantReLU(bit_width=8, return_quant_tensor=True,
                                 **({"max_val": max_val} if max_val else {}))
        return qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)

    def conv(i, o, k, s=1, p=0, groups=1, bias=False):
        return qnn.QuantConv2d(i, o, k, s, p, groups=groups, bias=bias, weight_bit_width=8)

    def cbr(i, o, k, s=1, p=0, groups=1, max_val=None):
        return [conv(i, o, k, s, p, groups), nn.BatchNorm2d(o), act(True, max_val)]

    class Block(nn.Module):
        def __init__(self, i, o, s):
            super().__init__()
            self.a = nn.Sequential(*cbr(i, o, 3, s, 1))
            self.b = nn.Sequential(conv(o, o, 3, 1, 1), nn.BatchNorm2d(o))
            self.skip = conv(i, o, 1, s, bias=True) if s != 1 or i != o else None
            self.join = act(False)  # one quantizer for both operands of the Add
            self.relu = act(True)

        def forward(self, x):
            y = self.join(self.b(self.a(x)))
            r = self.join(x if self.skip is None else self.skip(x))
            return self.relu(y + r)

    class Head(nn.Module):
        def __init__(self, c, k, n):
            super().__init__()
            self.pool = qnn.TruncAvgPool2d(k, bit_width=8) if k else None
            self.fc = qnn.QuantLinear(c, n, bias=True, weight_bit_width=8)

        def forward(self, x):
            x = self.pool(x) if self.pool is not None else x
            return self.fc(torch.flatten(x, 1))

    b = base(name)
    inp = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)
    if b == "resnet8":
        return nn.Sequential(inp, *cbr(3, 16, 3, 1, 1), Block(16, 16, 1), Block(16, 32, 2),
                             Block(32, 64, 2), Head(64, 8, 10))
    if b == "dscnn":
        layers = [inp, nn.ZeroPad2d((1, 1, 4, 5)), *cbr(1, 64, (10, 4), 2, 0)]
        for _ in range(4):
            layers += cbr(64, 64, 3, 1, 1, groups=64) + cbr(64, 64, 1)
        return nn.Sequential(*layers, Head(64, (25, 5), 12))
    if b == "mobilenet_025":
        ch = [(8, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2)]
        ch += [(128, 128, 1)] * 5 + [(128, 256, 2), (256, 256, 1)]
        layers = [inp, *cbr(3, 8, 3, 2, 1, max_val=6.0)]
        for i, o, s in ch:
            layers += cbr(i, i, 3, s, 1, i, 6.0) + cbr(i, o, 1, max_val=6.0)
        return nn.Sequential(*layers, Head(256, 3, 2))
    if b == "autoencoder":
        layers = [inp]
        dims = [640, 128, 128, 128, 128, 8, 128, 128, 128, 128]
        for i, o in zip(dims[:-1], dims[1:], strict=True):
            layers += [qnn.QuantLinear(i, o, bias=True, weight_bit_width=8), nn.BatchNorm1d(o),
                       act(True)]
        return nn.Sequential(*layers, qnn.QuantLinear(128, 640, bias=True, weight_bit_width=8))
    raise KeyError(name)


def zoo_model(name: str):
    """brevitas_examples' FINN flagships, untrained (pretrained=False)."""
    if name == "cnv_1w1a":
        from brevitas_examples.bnn_pynq.models import cnv_1w1a
        return cnv_1w1a(pretrained=False)
    if name == "resnet18_4w4a":
        from brevitas_examples.bnn_pynq.models import resnet18_4w4a
        return resnet18_4w4a(pretrained=False)
    if name == "mobilenet_v1_4b":
        from brevitas_examples.imagenet_classification.models import quant_mobilenet_v1_4b
        return quant_mobilenet_v1_4b(pretrained=False)
    raise KeyError(name)


# ----------------------------------------------------------------------------- export
def calibrate(model, shape, s: int, passes: int = 4, batch: int = 8):
    """BatchNorm running statistics from a few train-mode passes on seeded inputs (no data
    set here); brevitas' activation quantizers collect their scale statistics the same way."""
    import torch

    torch.manual_seed(s)
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(torch.rand(batch, *shape) * 2 - 0.5)
    model.eval()
    return model


def sample(name: str, n: int, s: int = 1) -> np.ndarray:
    rng = np.random.default_rng(s)
    return (rng.random((n, *INPUTS[base(name)])) * 2 - 0.5).astype(np.float32)


def value(out):
    return out.value if hasattr(out, "value") else out


def make(name: str, out: Path, check_rows: int = 2) -> dict:
    """Write `name`.onnx into `out` and check it; returns its models.json entry."""
    import onnx
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from generate import normalise, op_list, ort_run, qonnx_run

    torch.manual_seed(29)
    torch.set_num_threads(1)
    b = base(name)
    qonnx = name.endswith("_q8") or name in BIG
    model = zoo_model(name) if name in BIG else quant_model(name) if qonnx else float_model(name)
    shape = INPUTS[b]
    model = calibrate(model, shape, 7)
    path = out / f"{name}.onnx"
    x = sample(name, check_rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if qonnx:
            from brevitas.export import export_qonnx
            export_qonnx(model, input_t=torch.from_numpy(x[:1]), export_path=str(path),
                         **QONNX_KW.get(name, {}))
        else:
            torch.onnx.export(model, (torch.from_numpy(x[:1]),), str(path), opset_version=17,
                              dynamo=name.endswith("_dynamo"), input_names=["input"],
                              output_names=["output"])
    stripped = normalise(path)
    with torch.no_grad():
        ref = value(model(torch.from_numpy(x))).numpy()
    if qonnx:
        got = np.concatenate([qonnx_run(path, x[r:r + 1]) for r in range(check_rows)])
        how = "qonnx execute_onnx vs brevitas forward"
    else:
        got = np.concatenate([ort_run(path, x[r:r + 1]) for r in range(check_rows)])
        how = "onnxruntime vs torch"
    diff = float(np.abs(got.reshape(ref.shape) - ref).max())
    assert diff < 1e-3 * max(1.0, float(np.abs(ref).max())), (name, diff)
    m = onnx.load(str(path))
    return {"file": path.name, "kind": "qonnx" if qonnx else "float",
            "exporter": (f"brevitas export_qonnx{QONNX_KW.get(name) or ''}" if qonnx else
                         f"torch.onnx.export(dynamo={name.endswith('_dynamo')}, opset 17)"),
            "input_shape": [1, *shape], "ops": sorted(set(op_list(path))),
            "check": how, "max_abs_diff": diff, "bytes": path.stat().st_size,
            "params": int(sum(np.prod(t.dims) for t in m.graph.initializer)),
            "stripped": stripped}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=",".join(SMALL))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    entries = []
    for name in a.only.split(","):
        e = make(name, a.out)
        print(f"{name}: {e['bytes']} bytes, {e['params']} params, diff {e['max_abs_diff']:.2e}, "
              f"ops {' '.join(e['ops'])}", flush=True)
        entries.append(e)
    index = a.out / "models.json"
    old = json.loads(index.read_text()) if index.exists() else []
    keep = [e for e in old if e["file"] not in {n["file"] for n in entries}]
    index.write_text(json.dumps(sorted(keep + entries, key=lambda e: e["file"]), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
