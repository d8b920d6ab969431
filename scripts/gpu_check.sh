#!/usr/bin/env bash
# Runs on the GPU host, in the repo root, after the wheelhouse is installed (README: "GPU machine"):
# the gpu-marked tests, `zarr-dask-gpu bench`, the overlap diagnosis and the thread-safety probe. Logs and JSON go to $OUT (default /tmp/out).
# Usage: bash scripts/gpu_check.sh [pytest args...]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
timeout "${TEST_TIMEOUT:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=60 "$@" 2>&1 | tee "$OUT/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}
# shellcheck disable=SC2086  # BENCH_ARGS holds several words
timeout "${BENCH_TIMEOUT:-300}" python3 -m zarr_dask_gpu.cli bench --json "$OUT/bench.json" --chart "$OUT/performance.png" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
timeout "${DIAG_TIMEOUT:-120}" python3 benchmarks/diagnose_overlap.py 2>&1 | tee "$OUT/diagnose.log"
diag_rc=${PIPESTATUS[0]}
timeout "${PROBE_TIMEOUT:-260}" python3 benchmarks/probe_threads.py 2>&1 | tee "$OUT/threads.log"
echo "gpu tests rc=$tests_rc, benchmark rc=$bench_rc, diagnosis rc=$diag_rc, thread probe rc=${PIPESTATUS[0]}"
exit $(( tests_rc || bench_rc ))
