"""U-Net-like streamed models (issue 12): skip-connection FIFO depths against the structural
lag computed independently, block-RAM packing, `--reuse auto` for a streamed model (a plan
with II per pixel, frame latency, the memories, and the FIFOs that would need external
memory named), `build` refusing a plan that needs external memory with one `error:` line,
and (slow) one full tiny_unet_ch_last frame bit-exact through Verilator."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelcircuit.api import compile as mc_compile
from modelcircuit.api import load_onnx
from modelcircuit.cli import main as cli
from modelcircuit.hdl import plan_top
from modelcircuit.hdl.flow import fit_reuse, fpga_profile
from modelcircuit.hdl.flow.layer_cost import bram_tiles
from modelcircuit.hdl.flow.stream_fit import refusal

H = W = 32


def unet_onnx(path: Path, h: int = H, w: int = W, c: int = 2, ch: int = 4,
              levels: int = 2) -> Path:
    """A float U-Net, channels-last at its ends as keras writes it (a Transpose pair around
    channels-first Convs, which the importer cancels): per level a 3x3 Conv (pad 1) + Relu (the skip), a
    2x2 MaxPool; two 3x3 Convs at the bottom; per level up a nearest Resize x2, a Concat
    with the skip, a 1x1 Conv + Relu; a 1x1 Conv to one channel."""
    rng = np.random.default_rng(7)
    n = helper.make_node
    nodes, inits = [], {"S": np.array([1, 1, 2, 2], np.float32)}

    def conv(x: str, cin: int, cout: int, k: int, name: str) -> str:
        inits[name + "_w"] = rng.normal(0, 0.4, (cout, cin, k, k)).astype(np.float32)
        inits[name + "_b"] = rng.normal(0, 0.1, (cout,)).astype(np.float32)
        p = k // 2
        nodes.append(n("Conv", [x, name + "_w", name + "_b"], [name], pads=[p] * 4,
                       name=name))
        nodes.append(n("Relu", [name], [name + "_r"], name=name + "_relu"))
        return name + "_r"

    nodes.append(n("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2], name="to_nchw"))
    cur, cc, skips = "xt", c, []
    for lv in range(levels):
        cur = conv(cur, cc, ch, 3, f"enc{lv}")
        skips.append(cur)
        cc = ch
        nodes.append(n("MaxPool", [cur], [f"pool{lv}"], kernel_shape=[2, 2], strides=[2, 2],
                       name=f"pool{lv}"))
        cur = f"pool{lv}"
    cur = conv(cur, ch, ch, 3, "bot0")
    cur = conv(cur, ch, ch, 3, "bot1")
    for lv in reversed(range(levels)):
        nodes.append(n("Resize", [cur, "", "S"], [f"up{lv}"], mode="nearest", name=f"up{lv}"))
        nodes.append(n("Concat", [f"up{lv}", skips[lv]], [f"cat{lv}"], axis=1,
                       name=f"cat{lv}"))
        cur = conv(f"cat{lv}", 2 * ch, ch, 1, f"dec{lv}")
    inits["out_w"] = rng.normal(0, 0.4, (1, ch, 1, 1)).astype(np.float32)
    nodes.append(n("Conv", [cur, "out_w"], ["yc"], name="out"))
    nodes.append(n("Transpose", ["yc"], ["y"], perm=[0, 2, 3, 1], name="to_nhwc"))
    g = helper.make_graph(
        nodes, "unet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, h, w, c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.fixture(scope="module")
def unet_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unet_onnx(tmp_path_factory.mktemp("unet") / "unet.onnx")


@pytest.fixture(scope="module")
def unet(unet_path: Path):
    return mc_compile(load_onnx(str(unet_path)), precision="fixed<8,3>")


def skip_lag_rows(h: int, levels: int = 2) -> int:
    """max over rows y of (the skip row the long path needs for its row y) - y, for
    unet_onnx's structure: a 3x3 Conv (pad 1) needs input row y + 1 (clipped), a 2x2 pool
    rows 2y and 2y + 1, a Resize x2 row y // 2, a 1x1 Conv row y. In rows of the top
    skip tensor; written out from the graph's structure, not from the schedule."""

    def conv3(y: int, hl: int) -> int:
        return min(y + 1, hl - 1)

    def skip_row(lv: int, y: int) -> int:  # the skip tensor at level lv, row y -> top row
        if lv == 0:
            return y
        hl = h >> lv
        pooled = conv3(y, hl)  # enc{lv}'s 3x3 Conv over pool{lv-1}
        return skip_row(lv - 1, 2 * pooled + 1)

    def bottom(y: int) -> int:
        hb = h >> levels
        pooled = conv3(conv3(y, hb), hb)
        return skip_row(levels - 1, 2 * pooled + 1)

    def dec(lv: int, y: int) -> int:  # decoder output (after cat{lv} and dec{lv}) row y
        up = bottom(y // 2) if lv == levels - 1 else dec(lv + 1, y // 2)
        return max(up, skip_row(lv, y))

    return max(dec(1, y // 2) - y for y in range(h)) if levels > 1 else 0


def test_skip_fifo_depth_is_the_structural_lag(unet) -> None:
    """The top Concat's FIFO on the skip side holds exactly what the long path still needs
    (its rows of lag x W, plus less than two rows of columns and pipeline): the event model
    sizes it at the structural bound, not at a multiple of it."""
    info = plan_top(unet, 1)
    cat = [lay for lay in info["layers"] if lay.get("node") == "cat0"][0]
    srcs = cat["sources"]
    assert len(srcs) == 2
    skip = cat["fifo_depths"][1]  # Concat(up0, skip0): the skip is input 1
    lag = skip_lag_rows(H) * W
    assert lag >= 3 * W  # pool, two 3x3 rows at level 1 ... (the bound is not trivial)
    assert lag <= skip <= lag + 2 * W, (skip, lag)


def test_bram_packing_by_configuration() -> None:
    """DP16KD: 512x36 .. 16384x1, the best tiling; iCE40 SB_RAM40_4K 256x16 .. 2048x2."""
    # 128 bits x 34,949: 2048x9 -> ceil(128/9)=15 x ceil(34949/2048)=18 = 270 (512x36: 276)
    assert bram_tiles(128, 34949, "ecp5") == 270
    assert bram_tiles(5, 2000, "ecp5") == 1  # 2048x9 (one 36x512 geometry would say 4)
    assert bram_tiles(36, 512, "ecp5") == 1 and bram_tiles(37, 512, "ecp5") == 2
    assert bram_tiles(1, 16385, "ecp5") == 2
    assert bram_tiles(16, 257, "ice40") == 2 and bram_tiles(2, 2048, "ice40") == 1
    assert bram_tiles(0, 10, "ecp5") == 0


def _small_bram(name: str, bram: int) -> dict:
    return dict(fpga_profile(name), bram=bram)


def test_auto_plan_names_fifos_for_external_memory(unet) -> None:
    """On a device with too little block RAM for the skip FIFOs the plan is still made:
    per-layer reuse, II per pixel, frame latency, the estimate, and the FIFOs that would
    need external memory (largest first, size and bandwidth at the scheduled rate)."""
    info = plan_top(unet, 1)
    cat = [lay for lay in info["layers"] if lay.get("node") == "cat0"][0]
    fp = fit_reuse(unet, _small_bram("ecp5-85k", 2))
    j = fp.to_json()
    st = j["stream"]
    assert set(j["reuse"]) == {"enc0", "enc1", "bot0", "bot1", "dec1", "dec0", "out"}
    assert st["ii_per_pixel"] >= 1 and st["latency"] > H * W and st["frame_cycles"] >= H * W
    assert st["bram"]["total"] > 2 and st["over"]["bram"]["need"] == st["bram"]["total"]
    ext = st["external"]
    assert ext and ext[0]["node"] == "cat0" and ext[0]["fifo"].endswith("input 1")
    # FIFO depths in the plan's design are the schedule's, tokens x bits as the circuit's
    assert ext[0]["tokens"] >= skip_lag_rows(H) * W
    assert ext[0]["token_bits"] == 4 * 8 and ext[0]["bits"] == ext[0]["tokens"] * 32
    # bandwidth: every token written once and read once per frame
    assert ext[0]["bandwidth_bits_per_cycle"] == pytest.approx(
        2 * 32 * H * W / st["frame_cycles"], abs=1e-3)
    assert st["bram"]["on_chip"] <= st["bram"]["total"] - ext[0]["bram"]
    assert cat["fifo_depths"][1] > 0
    why = refusal(unet, fp)
    assert why and "cat0" in why and "external memory" in why and "\n" not in why
    # on the real device it fits: no refusal, nothing external
    fp85 = fit_reuse(unet, fpga_profile("ecp5-85k"))
    assert fp85.stream["external"] == [] and refusal(unet, fp85) is None
    assert fp85.estimate["bram"] == fp85.stream["bram"]["total"] > 0  # line buffers, FIFOs


def test_build_refuses_a_plan_needing_external_memory(unet_path, tmp_path, capsys,
                                                     monkeypatch) -> None:
    """`build --reuse auto` on a device whose block RAM the FIFOs overflow: one `error:`
    line naming the FIFO, exit 2, nothing written."""
    from modelcircuit.graphs import profiles

    real = profiles.all_profiles()
    small = {**real, "ecp5-85k": dict(real["ecp5-85k"], bram=2)}
    from modelcircuit.hdl.flow import devices

    monkeypatch.setattr(devices, "all_profiles", lambda: small)
    out = tmp_path / "b"
    for reuse in ("auto", "1"):  # the plan --reuse auto makes; an explicit reuse
        rc = cli(["build", str(unet_path), "--precision", "fixed<8,3>", "--device",
                  "ecp5-85k", "--reuse", reuse, "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        errs = [ln for ln in err if ln.startswith("error:")]
        assert rc == 2 and len(errs) == 1, err
        assert "cat0" in errs[0] and "external memory" in errs[0] and "BRAM" in errs[0]
        assert not out.exists()


def test_compile_writes_the_streamed_plan(unet_path, tmp_path, capsys, monkeypatch) -> None:
    """`compile --target verilog --reuse auto` on a device the FIFOs overflow: the plan is
    written (with its stream block), the circuit built from it has the II and latency the
    plan says, and `inspect` prints the plan with the FIFO that needs external memory."""
    from modelcircuit.graphs import profiles
    from modelcircuit.hdl.flow import fit

    real = profiles.all_profiles()
    monkeypatch.setattr(fit, "all_profiles",
                        lambda: {**real, "ecp5-85k": dict(real["ecp5-85k"], bram=2)})
    out = tmp_path / "c"
    assert cli(["compile", str(unet_path), "--precision", "fixed<8,3>", "--target", "verilog",
                "--profile", "ecp5-85k", "--reuse", "auto", "--out", str(out)]) == 0
    top = json.loads((out / "hdl" / "top.json").read_text())
    plan = top["fit"]
    st = plan["stream"]
    assert (st["ii_per_pixel"], st["latency"], st["frame_cycles"]) == \
        (top["ii"], top["latency"], top["frame_cycles"])
    assert {lay["node"]: lay["reuse"] for lay in top["layers"] if lay.get("op") == "Conv"} \
        == plan["reuse"]
    # the FIFO named for external memory is the circuit's own, as deep as the plan says
    cat = [lay for lay in top["layers"] if lay.get("node") == "cat0"][0]
    assert st["external"][0]["tokens"] == cat["fifo_depths"][1]
    capsys.readouterr()
    assert cli(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"streamed plan: II {top['ii']} cycles per input pixel" in text
    over = [ln for ln in text.splitlines() if ln.startswith("over the budget: ")]
    assert len(over) == 1 and f"BRAM {st['bram']['total']:,} > 2" in over[0], text
    assert f"external memory: FIFO {st['external'][0]['fifo']} (cat0" in text


# -- one full tiny_unet frame through Verilator --------------------------------------------
MODELS = Path("/work/shared/models")
if not MODELS.exists():
    MODELS = Path(__file__).resolve().parents[4] / "shared" / "models"


@pytest.mark.slow
@pytest.mark.xdist_group("sim")
def test_tiny_unet_full_frame_rtl(tmp_path_factory) -> None:
    """tiny_unet_ch_last (256x256x3, 4 levels, 40 Convs): one full frame golden == rtl bit
    for bit, with input gaps and output backpressure, latency and II as compiled. The
    build goes to MODELCIRCUIT_SIM_CACHE when set (it is reused), else a temp folder."""
    import os

    from modelcircuit.sim import rtl

    sim_cache = os.environ.get("MODELCIRCUIT_SIM_CACHE") or tmp_path_factory.mktemp("sim")

    path = MODELS / "tiny_unet_ch_last.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    if not rtl.available("verilator"):
        pytest.skip("no verilator")
    c = mc_compile(load_onnx(str(path)))
    t = c.graph.tensor(c.graph.inputs[0])
    x = np.random.default_rng(0).integers(t.dtype.qmin, t.dtype.qmax + 1, (1, *t.shape))
    t0 = time.monotonic()
    r = rtl.execute(c, x, reuse=free_fold_plan(c), cache_dir=sim_cache, gaps=0.02,
                    backpressure=0.02)
    ch = r["checks"]
    assert r["ok"] and ch["bit_exact"] and ch["latency_ok"] and ch["ii_ok"], ch
    assert r["latency_frames"] == r["latency_frames_expected"][:1]
    print(f"tiny_unet frame: {time.monotonic() - t0:.0f} s, latency {r['latency']}")


def free_fold_plan(c) -> dict[str, int]:
    """Every pointwise Conv folded as far as its level allows at no cost in throughput (a
    level-L layer sees 4**-L of the pixels: reuse up to ~4**L within the top level's
    frame time), depthwise Convs at reuse 1 (folded, their block-diagonal Dense would hold
    the zeros). II 1 per pixel; the Verilog is about half that of reuse 1 everywhere."""
    from modelcircuit.hdl.flow.fit import candidates
    from modelcircuit.hdl.flow.stream_time import base_cycles, busy_fn, plan_at
    from modelcircuit.hdl.plan.size import dense_weights

    g = c.graph
    nodes = {n.name: n for n in g.nodes}
    dense = dense_weights(g)
    busy = {k: busy_fn(g, nodes[k], {}) for k in dense}
    plan = plan_at({k: candidates(*w.shape) for k, w in dense.items()}, busy, base_cycles(g))
    return {k: 1 if int(nodes[k].get("group", 1) or 1) > 1 else r for k, r in plan.items()}
