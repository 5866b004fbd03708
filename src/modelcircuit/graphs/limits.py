"""Explicit limits on what a model may declare, checked before anything is read or allocated.

A model file is untrusted input: a few bytes can declare a 100000 x 100000 weight, a
ConstantOfShape of a billion elements or a million nodes. The importer (onnx_import.py)
compares every declared size with these limits first and refuses with a GraphError that
names the limit and its value. They are far above what this project's models need (the jet
tagger: ~4k weights; the digits MLP: ~60k) and far below what would exhaust a machine.

Read them as module attributes (`limits.MAX_NODES`), never copy them at import time, so a
test can lower one with monkeypatch.
"""

from __future__ import annotations

# protobuf refuses to parse a message over 2 GiB; a model file cannot be bigger.
MAX_MODEL_BYTES = 2 * 1024**3

# One tensor: a weight, a folded constant or a per-sample activation. 2**24 elements is a
# 4096 x 4096 layer: 64 MiB as float32, 128 MiB as the float64 the graph keeps (measured: it
# imports in 2 s and compiles at fixed<16,6> in ~35 s, 2.7 GiB resident).
MAX_TENSOR_ELEMENTS = 2**24

# All constants of a model together (initializers, Constant nodes, folded values and the
# importer's own copies): 2**26 elements, 512 MiB as float64.
MAX_TOTAL_CONSTANT_ELEMENTS = 2**26

# Nodes of the ONNX graph. The compiler's passes are written for small graphs and some are
# quadratic in the node count (measured: a chain of 2,000 Gemm/Relu nodes compiles at
# fixed<16,6> in ~15 s, 10,000 Relu nodes in ~50 s). Real models here have tens of nodes.
MAX_NODES = 2_000

# Dimensions of one tensor (ONNX shapes in practice: at most 6).
MAX_RANK = 8

# Multiply-adds of one MatMul/Gemm folded at import time (constants only): ~1 s in numpy.
MAX_FOLD_MACS = 2**28

# -- HDL backend: the circuit to elaborate (hdl/size.check_circuit_size) --------------------
# Checked from the graph and the reuse plan before any elaboration. Each can be raised with
# an environment variable (hdl/size.HDL_LIMIT_ENV), e.g. MODELCIRCUIT_MAX_PRODUCTS=100000.
# Measured (2 busy cores, Amaranth 0.5, builtin yosys): elaboration + Verilog cost about
# 2 ms per product of a fully parallel Dense (64x64 at R=1: 2,681 products, 9 s) and about
# 4 us per coefficient ROM bit of a folded one (1024x512 at R=1024, 4.7 Mbit: 17 s). At R=1
# the digits MLP has 3,275 products (13 s), the jet tagger 4,244 (21 s), FINN's TFC_2W2A
# 22,355 (40 s, the largest the test suite exports); a 4096 x 4096 layer 16.7M (hours).

# Products per model (R=1: one per non-zero weight, a multiplier, shift or shift-add term;
# R>1: one per time-shared lane) plus element-wise operations. FINN's TFC_1W2A at R=1 has
# 59,008 (export ~100 s here) and must still export: 2.2x that, a few minutes at most.
MAX_HDL_PRODUCTS = 131_072

# Bits of coefficient ROM (folded layers) and lookup tables per model: over the block RAM of
# every profile (ecp5-85k 3.7 Mbit, xczu3eg 7.6 Mbit); about 30 s.
MAX_HDL_ROM_BITS = 2**23

# Entries of one Dense weight matrix, zeros included (lowering walks every one at any
# reuse): a 1024 x 1024 layer.
MAX_HDL_DENSE_WEIGHTS = 2**20
