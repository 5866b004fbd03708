#!/usr/bin/env bash
# The GPU device check of issue 28, as ONE command for a session lent an H200 (the `device`
# tool; 15 minutes of device time in all, so this fits 480 s and a second try fits too).
# Each step is time-boxed with `timeout` against one overall budget, so a hang costs its own
# box and not the rest; everything lands in $OUT (8 files at most come back: env.txt,
# tests.log, verify.log, verify.json, serve.log, bench.log, bench.json, summary.json).
#
#   steps  env      nvidia-smi, versions, CuPy's view of the device, onnxruntime's providers
#          tests    every `gpu`-marked test outside tests/serve (slow ones too)
#          verify   `modelcircuit verify --backends golden,gpu` on the bundled digits MLP and
#                   CNN and on the shared MLPs/CNNs (../shared/models, or its carried copy)
#          serve    the serve gpu test (`serve --backend gpu`: bit-exact, fidelity full)
#          bench    bench/gpu.py (ours vs torch eager / torch CUDA graph / ORT CUDA EP)
#
# --dry (or DRY=1) runs every step's plumbing here, without CUDA: gpu-emu instead of gpu,
# the gpu tests collected, the serve gpu-emu tests, bench/gpu.py --dry. tests/
# test_device_check.py runs it end to end; a broken script is caught before a GPU is lent.
#
# RECIPE (once, here, in the root of the checkout the session was started in; what the GPU
# machine lacks: the [serve] extra, amaranth, and ../shared, which does not travel):
#   bash bench/device_check.sh --prepare
# which does exactly this (by hand if you prefer):
#   x=$(git rev-parse --git-path info/exclude); echo /.whl/ >>$x; echo /.devmodels/ >>$x
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl starlette==1.10.0 uvicorn==0.55.0 amaranth==0.5.10 jschon==0.11.1 pyvcd==0.4.2 rfc3986==2.0.0
#   rm -rf .devmodels && cp -r ../shared/models .devmodels   # a travelling copy, never committed
# Then ONE device call (timeout_s 540; carry [".whl", ".devmodels"]):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; bash bench/device_check.sh
# Read $OUT/summary.json first; then give_back unless rerunning at once.
set -uo pipefail

MODE=gpu
case "${1:-}" in
  --dry) MODE=dry ;;
  --prepare) MODE=prepare ;;
  "") ;;
  *) echo "error: unknown option ${1} (use --dry or --prepare)" >&2; exit 2 ;;
esac
[[ "${DRY:-0}" == 1 && $MODE == gpu ]] && MODE=dry
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}

if [[ $MODE == prepare ]]; then
  x=$(git rev-parse --git-path info/exclude) || exit 2
  mkdir -p "$(dirname "$x")"
  for p in /.whl/ /.devmodels/; do grep -qxF "$p" "$x" 2>/dev/null || echo "$p" >>"$x"; done
  rm -rf .whl && mkdir -p .whl
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -d .whl starlette==1.10.0 uvicorn==0.55.0 amaranth==0.5.10 jschon==0.11.1 pyvcd==0.4.2 rfc3986==2.0.0 \
    || exit 1
  rm -rf .devmodels
  if [[ -d ../shared/models ]]; then cp -r ../shared/models .devmodels
  else echo "note: ../shared/models is absent: the shared-model steps will skip there"; fi
  ls .whl; du -sh .whl .devmodels 2>/dev/null
  echo "carry [\".whl\", \".devmodels\"]; see this file's header for the run command"
  exit 0
fi

OUT=${OUT:-bench/results/device}
BUDGET=${BUDGET:-480}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ -d .devmodels ]]; then export MODELCIRCUIT_SHARED_MODELS="$PWD/.devmodels"; fi
MODELS=${MODELCIRCUIT_SHARED_MODELS:-$PWD/../shared/models}
GPU=gpu
[[ $MODE == dry ]] && GPU=gpu-emu
START=$SECONDS

# step NAME LOG CAP CMD...: run CMD under timeout min(CAP, what the budget has left), its
# output appended to $OUT/LOG; one JSON line per step into $WORK/steps.jsonl.
step() {
  local name=$1 log=$2 cap=$3; shift 3
  local left=$((BUDGET - (SECONDS - START) - 15)) t0=$SECONDS rc status
  local box=$((cap < left ? cap : left))
  if ((box < 5)); then
    echo "{\"step\": \"$name\", \"status\": \"skipped\", \"reason\": \"budget spent\", \"seconds\": 0}" >>"$WORK/steps.jsonl"
    echo "== $name: skipped (budget spent)"
    return 0
  fi
  echo "== $name (box ${box}s) $*" | tee -a "$OUT/$log"
  timeout -k 5 "$box" "$@" >>"$OUT/$log" 2>&1
  rc=$?
  case $rc in 0) status=pass ;; 124 | 137) status=timeout ;; *) status=fail ;; esac
  echo "{\"step\": \"$name\", \"status\": \"$status\", \"rc\": $rc, \"box_s\": $box, \"seconds\": $((SECONDS - t0)), \"log\": \"$log\"}" >>"$WORK/steps.jsonl"
  echo "== $name: $status (rc $rc, $((SECONDS - t0)) s)" | tee -a "$OUT/$log"
}

skip() {  # skip NAME REASON
  echo "{\"step\": \"$1\", \"status\": \"skipped\", \"reason\": \"$2\", \"seconds\": 0}" >>"$WORK/steps.jsonl"
  echo "== $1: skipped ($2)"
}

env_report() {
  date -u
  echo "mode: $MODE  budget: ${BUDGET}s  models: $MODELS"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || true
  $PY - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for m in ("numpy", "onnx", "onnxruntime", "cupy", "torch", "jinja2", "starlette", "amaranth"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:  # noqa: BLE001
        print(m, "-", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
try:
    import onnxruntime as ort
    print("onnxruntime providers", ort.get_available_providers())
except Exception as e:  # noqa: BLE001
    print("onnxruntime providers -", e)
try:
    import cupy as cp
    print("cupy CUDA runtime", cp.cuda.runtime.runtimeGetVersion(),
          "driver", cp.cuda.runtime.driverGetVersion(),
          "nvrtc", cp.cuda.nvrtc.getVersion())
    p = cp.cuda.runtime.getDeviceProperties(0)
    print("device", p["name"], f"sm_{p['major']}{p['minor']}", p["multiProcessorCount"], "SMs")
except Exception as e:  # noqa: BLE001
    print("cupy device -", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
try:
    from modelcircuit.gpu_backend.runtime import device_info
    print("modelcircuit device_info", device_info(0))
except Exception as e:  # noqa: BLE001
    print("modelcircuit device_info -", e)
EOF
}
export -f env_report
export MODE BUDGET MODELS PY

echo "device_check: mode $MODE, budget ${BUDGET}s, OUT=$OUT"
step env env.txt 30 bash -c env_report

# -- every gpu-marked test (serve's has its own step) -------------------------------------
mapfile -t GPU_FILES < <(grep -rlE "mark\.gpu|marks=pytest\.mark\.gpu" tests --include='test_*.py' | grep -v '^tests/serve/' | sort)
PYTEST=($PY -m pytest -p no:cacheprovider -o addopts= -q -m gpu -rfEs --durations=10)
if ((${#GPU_FILES[@]} == 0)); then
  skip tests "no gpu-marked test files found"
elif [[ $MODE == dry ]]; then
  step tests tests.log 90 "${PYTEST[@]}" --collect-only "${GPU_FILES[@]}"
else
  step tests tests.log 150 "${PYTEST[@]}" "${GPU_FILES[@]}"
fi

# -- verify golden == gpu ------------------------------------------------------------------
VMODELS=("digits_mlp=src/modelcircuit/data/digits_mlp.onnx" "digits_cnn=src/modelcircuit/data/digits_cnn.onnx")
if [[ -d $MODELS ]]; then
  for m in three_layer_keras three_layer_pytorch two_layer_keras qkeras_jettagging TFC_2W2A \
           conv1d_small_keras conv2d_small_keras; do
    [[ -f $MODELS/$m.onnx ]] && VMODELS+=("$m=$MODELS/$m.onnx")
  done
else
  skip verify:shared "no shared models at $MODELS (run --prepare here and carry .devmodels)"
fi
VARGS=()
[[ $MODE == dry ]] && VARGS=(--vectors 8)
[[ -n ${VERIFY_ONLY:-} ]] && VMODELS=("${VMODELS[@]:0:$VERIFY_ONLY}")  # tests: fewer models
VSTART=$SECONDS
for nm in "${VMODELS[@]}"; do
  name=${nm%%=*} path=${nm#*=}
  if ((SECONDS - VSTART > 150)); then skip "verify:$name" "verify's 150 s share spent"; continue; fi
  step "verify:$name" verify.log 45 $PY -m modelcircuit.cli verify "$path" \
    --backends "golden,$GPU" "${VARGS[@]}" --json "$WORK/verify_$name.json"
done

# -- serve --------------------------------------------------------------------------------
if [[ $MODE == dry ]]; then
  step serve serve.log 90 $PY -m pytest -p no:cacheprovider -o addopts= -q -rfEs \
    tests/serve/test_serve.py -k "gpu"
else
  step serve serve.log 60 $PY -m pytest -p no:cacheprovider -o addopts= -q -rfEs -m gpu \
    tests/serve/test_serve.py
fi

# -- bench ---------------------------------------------------------------------------------
BARGS=()
[[ $MODE == dry ]] && BARGS=(--dry)
[[ -n ${BENCH_MODELS:-} ]] && BARGS+=(--models "$BENCH_MODELS")  # tests: fewer models
left=$((BUDGET - (SECONDS - START) - 25))
step bench bench.log 240 $PY bench/gpu.py --json "$OUT/bench.json" "${BARGS[@]}" \
  --budget $((left > 240 ? 220 : (left > 30 ? left - 20 : 10)))

# -- summary -------------------------------------------------------------------------------
$PY - "$WORK" "$OUT" "$MODE" "$BUDGET" "$((SECONDS - START))" <<'EOF'
import json, re, sys
from pathlib import Path
work, out, mode, budget, total = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
steps = [json.loads(line) for line in (work / "steps.jsonl").read_text().splitlines() if line.strip()]
verify = {}
for p in sorted(work.glob("verify_*.json")):
    try:
        verify[p.stem[len("verify_"):]] = json.loads(p.read_text())
    except ValueError as e:
        verify[p.stem[len("verify_"):]] = {"unreadable": str(e)}
(out / "verify.json").write_text(json.dumps(verify, indent=1) + "\n")
for s in steps:  # the pytest tally line of each pytest step, for the summary
    log = out / s.get("log", "-")
    if s["step"] in ("tests", "serve") and log.is_file():
        tally = [ln for ln in log.read_text(errors="replace").splitlines()
                 if re.search(r"\d+ (passed|failed|error|skipped|tests? collected|deselected)", ln)]
        s["tally"] = tally[-1].strip("= ") if tally else None
        if mode == "gpu" and s["status"] == "pass" and "passed" not in (s["tally"] or ""):
            s["status"], s["reason"] = "fail", "no gpu test ran (all skipped: no CUDA device?)"
for s in steps:
    if s["step"].startswith("verify:") and s["step"][7:] in verify:
        rep = verify[s["step"][7:]]
        s["bit_exact"] = rep.get("bit_exact")
        note = (rep.get("notes") or {}).get("gpu-emu" if mode == "dry" else "gpu") or {}
        s["ran_on"] = note.get("what")
        if mode == "gpu" and note.get("device") is not True and s["status"] == "pass":
            # verify's gpu backend falls back to the emulator where it finds no device
            s["status"], s["reason"] = "fail", f"gpu backend ran on: {note.get('what')}"
bench = out / "bench.json"
if bench.is_file():
    try:
        b = json.loads(bench.read_text())
        steps[-1]["bench_counts"] = b.get("counts")
        steps[-1]["acceptance"] = b.get("acceptance")
        if mode == "gpu" and b.get("cuda") != "ok" and steps[-1]["status"] == "pass":
            steps[-1]["status"], steps[-1]["reason"] = "fail", f"bench saw no CUDA: {b.get('cuda')}"
    except ValueError:
        pass
counts = {}
for s in steps:
    counts[s["status"]] = counts.get(s["status"], 0) + 1
summary = {"mode": mode, "budget_s": budget, "total_s": total, "counts": counts,
           "ok": not any(s["status"] in ("fail", "timeout") for s in steps), "steps": steps}
(out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
print(f"device_check {mode}: {counts} in {total} s (budget {budget} s) -> {out}/summary.json")
for s in steps:
    extra = s.get("tally") or s.get("reason") or ("bit-exact" if s.get("bit_exact") else "")
    print(f"  {s['step']:26} {s['status']:8} {s.get('seconds', 0):4} s  {extra}")
sys.exit(0 if summary["ok"] else 1)
EOF
