#!/usr/bin/env bash
# The evidence issue 30 asks for: `.ci/run` from a fresh clone with an empty HOME, N times in
# a row, while a CPU-bound job runs beside it. Not part of CI (each run is a whole CI run).
#   .ci/fresh_clone_runs.sh COMMIT [N=3] [PREFIX=/tmp/ci_fresh]
# Per run: PREFIX_i/ci.log (everything .ci/run printed), PREFIX_i/summary.txt (commit, exit
# status, wall time, load average, the last lines). The clone is of this checkout's repository
# with ../shared linked beside it; HOME is an empty folder, so the YoWASP, modelcircuit and
# pip caches start cold.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
C=${1:?commit}; N=${2:-3}; PFX=${3:-/tmp/ci_fresh}
python3 -c "while True: pass" & LOAD=$!
trap 'kill $LOAD' EXIT
for i in $(seq 1 "$N"); do
  D=${PFX}_$i; rm -rf "$D"; mkdir -p "$D/home" "$D/ws"
  [ -d "$REPO/../shared" ] && ln -s "$(cd "$REPO/../shared" && pwd)" "$D/ws/shared"
  git clone -q "$REPO" "$D/ws/main" && (cd "$D/ws/main" && git checkout -q "$C")
  t0=$(date +%s)
  (cd "$D/ws/main" && HOME=$D/home XDG_CACHE_HOME= PIP_CACHE_DIR=$D/home/.pipcache .ci/run) \
    > "$D/ci.log" 2>&1
  rc=$?
  { echo "run $i commit $C rc=$rc wall=$(( $(date +%s) - t0 ))s" \
         "load=$(cut -d' ' -f1-3 /proc/loadavg) end=$(date -u +%H:%M)"; tail -3 "$D/ci.log"; } \
    > "$D/summary.txt"
  cat "$D/summary.txt"
  rm -rf "$D/ws/main/.venv" "$D/home"
done
