"""hls4ml's bit-accurate C simulation of an ONNX CNN, run in a separate Python environment
that has hls4ml (>= 1.3) and qonnx installed (bench/cnn.py calls this script with that
environment's interpreter: HLS4ML_PYTHON=/path/to/venv/bin/python).

usage: python hls4ml_peer.py MODEL.onnx INPUTS.npy PRECISION OUT_DIR
Writes OUT_DIR/y.npy (hls4ml's predictions) and prints one JSON line: compile and predict
seconds, frames per second. io_stream, Vitis backend, reuse 1, uniform default precision.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def main(model: str, inputs: str, precision: str, out: str) -> None:
    import hls4ml
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.transformation.gemm_to_matmul import GemmToMatMul
    from qonnx.util.cleanup import cleanup_model

    m = cleanup_model(ModelWrapper(model))
    m = cleanup_model(m.transform(ConvertToChannelsLastAndClean()).transform(GemmToMatMul()))
    cfg = hls4ml.utils.config.config_from_onnx_model(
        m, granularity="name", backend="Vitis", default_precision=precision)
    # hls4ml 1.3's default ("stable") io_stream Softmax answers a uniform 0.0996 on every class
    # for this model (its traced Dense output is right); the "latency" one is coarse but usable
    for name in cfg["LayerName"]:
        if name.startswith("Softmax"):
            cfg["LayerName"][name]["Implementation"] = "latency"
    hm = hls4ml.converters.convert_from_onnx_model(
        m, output_dir=f"{out}/prj", io_type="io_stream", backend="Vitis", hls_config=cfg)
    t0 = time.perf_counter()
    hm.compile()
    t1 = time.perf_counter()
    x = np.load(inputs).astype(np.float32)
    y = np.asarray(hm.predict(np.ascontiguousarray(x)))
    t2 = time.perf_counter()
    np.save(f"{out}/y.npy", y.reshape(len(x), -1))
    print(json.dumps({"hls4ml": hls4ml.__version__, "compile_s": t1 - t0,
                      "predict_s": t2 - t1, "frames_per_s": len(x) / (t2 - t1)}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
