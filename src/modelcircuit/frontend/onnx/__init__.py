"""ONNX import and export.

    importer.py  the walk over the ONNX graph (load_onnx, import_model)
    state.py     ImportState: what the walk knows so far, shared with every handler module
    io.py        reading the file, decoding tensors (sizes checked first), names for messages
    checks.py    the model's and each node's structure and schema
    fold.py      nodes on constants, evaluated at import time
    handlers.py  the handler table of the ops
    layout.py    ops that only move values (Reshape, Transpose, Concat, Gather …)
    channels.py  channels-first frames kept as channels-last storage
    spatial.py   Conv, pools, Resize
    quant.py     Quant, BipolarQuant, QuantizeLinear/DequantizeLinear
    export.py    Graph -> ONNX (float models, for comparison with onnxruntime)
"""
