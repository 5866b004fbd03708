"""The attention group of tests/data/exporters/ (`generate.py --attn`): transformer encoders
written by torch.onnx (both exporters) and brevitas, trained briefly on synthetic token tasks,
and small models the importer must refuse. Called by generate.py with its helpers (`h`: the
generate module, whose `torch`/`nn` globals main() has set)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np

CLASSES = 3
JET_CLASSES = 5


def token_task(f: int, t: int, n: int = 1536, s: int = 0):
    """Tokens N(0, 1) (N, T, F); the label is which of the first three channels has the
    largest sum over the tokens whose channel 3 is positive (a content-selected sum: the
    tokens that count are found by their values, which attention can do). Train/test split."""
    rng = np.random.default_rng(2000 + s)
    x = rng.normal(0.0, 1.0, (n, t, f)).astype(np.float32)
    gate = (x[:, :, 3:4] > 0).astype(np.float32)
    y = (x[:, :, :CLASSES] * gate).sum(axis=1).argmax(axis=1).astype(np.int64)
    k = n * 3 // 4
    return x[:k], x[k:], y[:k], y[k:]


def jet_task(n: int = 2048, particles: int = 16, s: int = 0):
    """A particle-transformer-style toy: each jet is N particles x 4 features (log pt, eta,
    phi, a charge-like +-1/0). Five classes differ in how pt is shared among particles and
    how wide the jet is (prongs: 1, 2, 3; a wide QCD-like spray; a charged-dominated jet).
    Features are standardised; particles sorted by pt (as taggers take them)."""
    rng = np.random.default_rng(3000 + s)
    y = rng.integers(0, JET_CLASSES, n)
    x = np.zeros((n, particles, 4), dtype=np.float32)
    for i in range(n):
        c = int(y[i])
        prongs = (1, 2, 3, 1, 1)[c]
        width = (0.05, 0.08, 0.1, 0.35, 0.1)[c]
        centres = rng.normal(0, 0.15, (prongs, 2))
        which = rng.integers(0, prongs, particles)
        pos = centres[which] + rng.normal(0, width, (particles, 2))
        pt = rng.exponential(1.0, particles) * (3.0 if c < 3 else 1.5)
        charge = rng.choice([-1.0, 0.0, 1.0], particles, p=(0.45, 0.1, 0.45) if c == 4
                            else (0.3, 0.4, 0.3))
        order = np.argsort(-pt)
        x[i, :, 0] = np.log1p(pt[order])
        x[i, :, 1:3] = pos[order]
        x[i, :, 3] = charge[order]
    x = (x - x.reshape(-1, 4).mean(0)) / (x.reshape(-1, 4).std(0) + 1e-6)
    k = n * 3 // 4
    return x[:k].astype(np.float32), x[k:].astype(np.float32), y[:k], y[k:]


def models(h: ModuleType) -> dict:
    torch, nn = h.torch, h.nn
    F = torch.nn.functional

    class Encoder(nn.Module):
        """Linear embedding -> nn.TransformerEncoder (batch_first) -> mean over tokens ->
        Linear; an optional constant causal mask."""

        def __init__(self, f, d, heads, ffn, layers, act="relu", causal_t=0, classes=CLASSES):
            super().__init__()
            self.embed = nn.Linear(f, d)
            layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, batch_first=True,
                                               activation=act)
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.fc = nn.Linear(d, classes)
            self.causal = causal_t
            if causal_t:
                self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(
                    causal_t))

        def forward(self, x):
            z = self.embed(x)
            z = self.enc(z, mask=self.mask, is_causal=True) if self.causal else self.enc(z)
            return self.fc(z.mean(dim=1))

    class Sdpa(nn.Module):
        """Separate q/k/v Linear, F.scaled_dot_product_attention, out Linear, residual, a
        Gelu FFN (tanh approximation or erf), mean, Linear."""

        def __init__(self, f, d, heads, approx, causal=False):
            super().__init__()
            self.h, self.approx, self.causal = heads, approx, causal
            self.embed = nn.Linear(f, d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ff1, self.ff2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
            self.fc = nn.Linear(d, CLASSES)

        def forward(self, x):
            z = self.embed(x)
            b, t, d = z.shape

            def split(u):
                return u.view(b, t, self.h, d // self.h).transpose(1, 2)

            a = F.scaled_dot_product_attention(split(self.q(z)), split(self.k(z)),
                                               split(self.v(z)), is_causal=self.causal)
            z = z + self.o(a.transpose(1, 2).reshape(b, t, d))
            z = z + self.ff2(F.gelu(self.ff1(z), approximate=self.approx))
            return self.fc(z.mean(dim=1))

    class Cross(nn.Module):
        """Refused: queries from x, keys/values from a second input (cross-attention)."""

        def __init__(self, f, d, heads):
            super().__init__()
            self.e1, self.e2 = nn.Linear(f, d), nn.Linear(f, d)
            self.mha = nn.MultiheadAttention(d, heads, batch_first=True)
            self.fc = nn.Linear(d, CLASSES)

        def forward(self, x, mem):
            a, _ = self.mha(self.e1(x), self.e2(mem), self.e2(mem), need_weights=False)
            return self.fc(a.mean(dim=1))

    class InputMask(nn.Module):
        """Refused: an additive attention mask given at run time (data-dependent)."""

        def __init__(self, f, d, heads):
            super().__init__()
            self.e = nn.Linear(f, d)
            self.mha = nn.MultiheadAttention(d, heads, batch_first=True)
            self.fc = nn.Linear(d, CLASSES)

        def forward(self, x, mask):
            z = self.e(x)
            a, _ = self.mha(z, z, z, attn_mask=mask, need_weights=False)
            return self.fc(a.mean(dim=1))

    return {"Encoder": Encoder, "Sdpa": Sdpa, "Cross": Cross, "InputMask": InputMask}


# (file, exporter path, model kind, kwargs, features, tokens, pattern)
FLOAT_MODELS = [
    ("torch_encoder_d16_h2_t8.onnx", "torchscript", "Encoder",
     dict(d=16, heads=2, ffn=32, layers=1), 6, 8,
     "Linear(6,16) -> TransformerEncoder(1 x TransformerEncoderLayer(16, 2, 32, relu, "
     "batch_first)) -> mean over 8 tokens -> Linear(16, 3)"),
    ("torch_encoder_d16_h2_t8_dynamo.onnx", "dynamo", "Encoder",
     dict(d=16, heads=2, ffn=32, layers=1), 6, 8, "the same architecture, dynamo exporter"),
    ("torch_encoder2_d32_h4_t16_gelu.onnx", "torchscript", "Encoder",
     dict(d=32, heads=4, ffn=64, layers=2, act="gelu"), 6, 16,
     "Linear(6,32) -> TransformerEncoder(2 x TransformerEncoderLayer(32, 4, 64, gelu, "
     "batch_first)) -> mean over 16 tokens -> Linear(32, 3); Gelu exported as Erf"),
    ("torch_encoder2_d32_h4_t16_gelu_dynamo.onnx", "dynamo", "Encoder",
     dict(d=32, heads=4, ffn=64, layers=2, act="gelu"), 6, 16,
     "the same architecture, dynamo exporter"),
    ("torch_sdpa_gelu_tanh_d16_h4_t12.onnx", "torchscript", "Sdpa",
     dict(d=16, heads=4, approx="tanh"), 6, 12,
     "Linear(6,16) -> q/k/v Linear -> F.scaled_dot_product_attention (4 heads) -> Linear, "
     "residual -> Linear(16,32) -> F.gelu(approximate='tanh') -> Linear(32,16), residual -> "
     "mean over 12 tokens -> Linear(16, 3)"),
    ("torch_sdpa_gelu_d16_h2_t12_dynamo.onnx", "dynamo", "Sdpa",
     dict(d=16, heads=2, approx="none"), 6, 12,
     "as torch_sdpa_gelu_tanh but 2 heads and erf Gelu, dynamo exporter"),
    ("torch_causal_encoder_d16_h2_t8.onnx", "torchscript", "Encoder",
     dict(d=16, heads=2, ffn=32, layers=1, causal_t=8), 6, 8,
     "the 1-layer encoder with a constant causal mask "
     "(nn.Transformer.generate_square_subsequent_mask(8), is_causal=True)"),
    ("torch_sdpa_causal_d16_h2_t8_dynamo.onnx", "dynamo", "Sdpa",
     dict(d=16, heads=2, approx="none", causal=True), 6, 8,
     "SDPA with is_causal=True (the mask is computed from constants: Trilu/Where), dynamo"),
]
JET_MODEL = ("torch_particle_transformer_p16_f4.onnx", "dynamo", "Encoder",
             dict(d=16, heads=2, ffn=32, layers=2, act="gelu", classes=JET_CLASSES), 4, 16,
             "particle-transformer-style jet tagger: 16 particles x 4 features -> Linear(4,16)"
             " -> 2 x TransformerEncoderLayer(16, 2, 32, gelu, batch_first) -> mean over "
             "particles -> Linear(16, 5)")
REFUSED = [
    ("refuse_cross_attention.onnx", "Cross", "cross-attention: nn.MultiheadAttention(q from "
     "input x, k/v from input mem)"),
    ("refuse_input_mask.onnx", "InputMask", "nn.MultiheadAttention with attn_mask given as a "
     "second input (data-dependent mask)"),
]


def _export(h, model, args, path: Path, how: str, names: list[str]) -> None:
    torch = h.torch
    if how == "dynamo":
        dyn = {n: {0: torch.export.Dim("batch")} for n in names}
        torch.onnx.export(model, args, str(path), dynamo=True, opset_version=18,
                          input_names=names, output_names=["logits"], dynamic_shapes=dyn)
    else:
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17,
                          do_constant_folding=True, input_names=names,
                          output_names=["logits"],
                          dynamic_axes={**{n: {0: "batch"} for n in names},
                                        "logits": {0: "batch"}})


def _entry(h, fname, exporter, kind, pattern, path, ref, y, diff, stripped, training,
           accuracy_of, extra=None):
    e = {
        "file": fname, "exporter": exporter, "kind": kind, "pattern": pattern,
        "ops": h.op_list(path), "input_shape": h.shape_of(path), "input_grid": None,
        "float_test_accuracy": h.acc(ref, y) if y is not None else None,
        "accuracy_of": accuracy_of, "ort_vs_torch_max_abs_diff": diff,
        "postprocess": "none" + ("; stripped " + ", ".join(stripped) if stripped else ""),
        "training": training,
    }
    e.update(extra or {})
    return e


def _exporter_text(h, how: str) -> str:
    v = h.torch.__version__.split("+")[0]
    return ("torch.onnx.export (dynamo=True, opset 18; torch " + v + ")" if how == "dynamo"
            else "torch.onnx.export (dynamo=False, TorchScript exporter, opset 17; torch "
            + v + ")")


def gen_attention(h: ModuleType, out: Path, entries: list) -> None:
    torch = h.torch
    M = models(h)
    trained: dict = {}
    for k, (fname, how, kind, kw, f, t, pattern) in enumerate(FLOAT_MODELS + [JET_MODEL]):
        jet = fname == JET_MODEL[0]
        x_tr, x_te, y_tr, y_te = jet_task() if jet else token_task(f, t)
        key = (kind, tuple(sorted(kw.items())), f, t)
        if key not in trained:  # the two exporters of one architecture share the weights
            h.seed(400 + k)
            model = M[kind](f, **kw)
            trained[key] = h.train(model, x_tr, y_tr, 10 if jet else 8, lr=3e-3, s=400 + k)
        model = trained[key]
        ref = h.torch_out(model, x_te)
        path = out / fname
        _export(h, model, (torch.from_numpy(x_te[:2]),), path, how, ["x"])
        stripped = h.normalise(path)
        got = h.ort_run(path, x_te)
        diff = float(np.abs(got - ref).max())
        assert diff < 1e-4, (fname, diff)
        task = "jet_task" if jet else "token_task"
        entries.append(_entry(
            h, fname, _exporter_text(h, how), "float", pattern, path, ref, y_te, diff, stripped,
            f"{10 if jet else 8} epochs Adam lr=3e-3 batch 64 on {task} ({len(y_tr)} samples)",
            f"torch forward on the {len(y_te)} test rows of {task}"))
        print(f"{fname}: acc {h.acc(ref, y_te)} diff {diff:.2e}")
    gen_brevitas_attention(h, out, entries)
    for fname, kind, pattern in REFUSED:
        h.seed(500)
        model = M[kind](6, 16, 2).eval()
        x = torch.randn(2, 8, 6)
        second = torch.randn(2, 8, 6) if kind == "Cross" else torch.zeros(8, 8)
        path = out / fname
        torch.onnx.export(model, (x, second), str(path), dynamo=False, opset_version=17,
                          input_names=["x", "mem" if kind == "Cross" else "mask"],
                          output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"},
                                        **({"mem": {0: "batch"}} if kind == "Cross" else {})})
        stripped = h.normalise(path)
        entries.append({
            "file": fname, "exporter": _exporter_text(h, "torchscript"), "kind": "refused",
            "pattern": pattern, "ops": h.op_list(path), "input_shape": h.shape_of(path),
            "input_grid": None, "float_test_accuracy": None, "accuracy_of": None,
            "ort_vs_torch_max_abs_diff": None,
            "postprocess": "none" + ("; stripped " + ", ".join(stripped) if stripped else ""),
            "training": "untrained (seeded): only the import's refusal is tested"})
        print(f"{fname}: written")


def gen_brevitas_attention(h: ModuleType, out: Path, entries: list) -> None:
    """brevitas 8-bit QAT: QuantLinear embedding and q/k/v/out projections (8-bit weights,
    8-bit activations after each), F.scaled_dot_product_attention between them (float, as
    torch runs it; the compiler types its internals), QuantReLU FFN, exported with
    export_qonnx. QuantMultiheadAttention's export is not used: it quantizes inside the
    attention (q*scale, k^T, probabilities), which the fused Attention op does not take."""
    import brevitas.nn as qnn
    from brevitas.export import export_qonnx

    torch, nn = h.torch, h.nn
    F = torch.nn.functional

    class QatSdpa(nn.Module):
        def __init__(self, f, d, heads):
            super().__init__()
            self.h = heads
            self.inp = qnn.QuantIdentity(bit_width=8, return_quant_tensor=False)
            self.embed = qnn.QuantLinear(f, d, bias=True, weight_bit_width=8)
            self.emb_q = qnn.QuantIdentity(bit_width=8, return_quant_tensor=False)
            self.q, self.k, self.v, self.o = (qnn.QuantLinear(d, d, bias=True,
                                                              weight_bit_width=8)
                                              for _ in range(4))
            self.qq, self.kq, self.vq = (qnn.QuantIdentity(bit_width=8,
                                                           return_quant_tensor=False)
                                         for _ in range(3))
            self.aq = qnn.QuantIdentity(bit_width=8, return_quant_tensor=False)
            self.ff1 = qnn.QuantLinear(d, 2 * d, bias=True, weight_bit_width=8)
            self.relu = qnn.QuantReLU(bit_width=8, return_quant_tensor=False)
            self.ff2 = qnn.QuantLinear(2 * d, d, bias=True, weight_bit_width=8)
            self.fc = qnn.QuantLinear(d, CLASSES, bias=True, weight_bit_width=8)

        def forward(self, x):
            z = self.emb_q(self.embed(self.inp(x)))
            b, t, d = z.shape

            def split(u):
                return u.view(b, t, self.h, d // self.h).transpose(1, 2)

            a = F.scaled_dot_product_attention(split(self.qq(self.q(z))),
                                               split(self.kq(self.k(z))),
                                               split(self.vq(self.v(z))))
            a = self.aq(a.transpose(1, 2).reshape(b, t, d))
            z = z + self.o(a)
            z = z + self.ff2(self.relu(self.ff1(z)))
            return self.fc(z.mean(dim=1))

    fname, f, t = "brevitas_sdpa_w8a8_d16_h2_t8.onnx", 6, 8
    x_tr, x_te, y_tr, y_te = token_task(f, t, s=99)
    h.seed(600)
    model = h.train(QatSdpa(f, 16, 2), x_tr, y_tr, 8, lr=3e-3, s=600)
    ref = h.torch_out(model, x_te)
    path = out / fname
    export_qonnx(model, input_t=torch.from_numpy(x_te[:1]), export_path=str(path),
                 dynamo=False)
    stripped = h.normalise(path)
    got = np.concatenate([h.qonnx_run(path, x_te[i: i + 1]) for i in range(h.N_CHECK)])
    diff = float(np.abs(got - ref[: h.N_CHECK]).max())
    assert diff < 1e-3, (fname, diff)
    entries.append(_entry(
        h, fname, "brevitas export_qonnx(dynamo=False) (brevitas 0.13.4, TorchScript path)",
        "qonnx_attention", "8-bit QAT: QuantIdentity -> QuantLinear(6,16) -> QuantIdentity -> q/k/v "
        "QuantLinear(16,16) each -> QuantIdentity(8b) -> F.scaled_dot_product_attention (2 "
        "heads, float) -> QuantIdentity -> QuantLinear out, residual -> QuantLinear(16,32) -> "
        "QuantReLU(8b) -> QuantLinear(32,16), residual -> mean over 8 tokens -> QuantLinear(16,3)",
        path, ref, y_te, None, stripped,
        f"8 epochs Adam lr=3e-3 batch 64 on token_task ({len(y_tr)} samples)",
        f"brevitas forward on the {len(y_te)} test rows of token_task",
        {"brevitas_vs_qonnx_max_abs_diff": diff}))
    print(f"{fname}: acc {h.acc(ref, y_te)} qonnx diff {diff:.2e}")


def generate_attention(h: ModuleType, out: Path) -> list:
    """Only the attention group (--attn): its files, its entries replaced in models.json."""
    entries: list = []
    gen_attention(h, out, entries)
    return h.merge_entries(out, entries)
