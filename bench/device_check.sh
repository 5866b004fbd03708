#!/usr/bin/env bash
# One short device check for a session that is lent a GPU (the `device` tool): installs
# nothing, runs the `gpu`-marked tests and bench/gpu.py, and leaves results under $OUT.
# The GPU machine has cupy-cuda13x, torch and onnxruntime; carry the project's other wheels
# as .whl (see the device tool's README) and pass: carry=[".whl"], and start the command with
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src
# then: bash bench/device_check.sh
set -uo pipefail
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-}:src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python3 -m pytest tests/gpu_backend -m gpu -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/gpu_tests.log"
timeout 420 python3 bench/gpu.py --json "$OUT/gpu.json" 2>&1 | tee "$OUT/gpu_bench.log"
