#!/usr/bin/env bash
# Runs on the GPU host, in the repo root, after the wheelhouse is installed (CONTRIBUTING.md, "The GPU host").
# Steps: tests (gpu-marked), bench (`zarr-dask-gpu bench`), xarray (a reduction through each of
# xarray's front doors, benchmarks/xarray_bench.py), timeline and timeline8 (per-phase task timeline
# of A at 32 and 8 CUDA connections, benchmarks/timeline.py), data (writes the bench's datasets named
# in DATA, default B: python3 -m zarr_dask_gpu.bench.datasets), timelines (of the datasets in
# TIMELINES, default "B C D", written by bench or data), ncu (the zstd kernels under Nsight Compute,
# in the bench's first row of NCU_DATASET, default A), sanitize
# (memcheck and racecheck on the decoders: MEMCHECK_TESTS, RACECHECK_TESTS), scratch (a task's peak
# memory), remote (loopback HTTP), scaling (multi-GPU), dl (the state-dict benchmark; needs
# safetensors), torch (the torch and training-loader tests, CPU and GPU), loader (the training loader
# against torch's DataLoader, benchmarks/loader_bench.py) and compare (dataset A's default row for
# the source trees in COMPARE_TREES, in turns: benchmarks/compare_trees.py). Logs and JSON go to $OUT
# (default /tmp/out).
# STEPS picks the steps (default: tests bench timeline scratch); each has its own timeout: choose
# steps that fit one device call (10 minutes).
# Usage: [STEPS="tests bench"] [BENCH_ARGS="--datasets A,B"] [SCALING_ARGS="--variants read-slots=0"]
#        [TIMELINE_ARGS="--rows-per-block 256 --cold"]
#        bash scripts/gpu_check.sh [pytest args...]
set -uo pipefail
OUT=${OUT:-/tmp/out}
STEPS=${STEPS:-tests bench timeline scratch}
# python3 -m and pytest import the package from this tree: carry its built C extension along
if ! compgen -G "zarr_dask_gpu/_preads*.so" >/dev/null; then
  echo "error: zarr_dask_gpu/_preads*.so missing: build it (pip install -e .) and carry it" >&2
  exit 1
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
declare -A rc
step() {  # name, timeout, command...
    local name=$1 limit=$2
    shift 2
    [[ " $STEPS " == *" $name "* ]] || return 0
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    rc[$name]=${PIPESTATUS[0]}
}
step tests "${TEST_TIMEOUT:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=60 "$@"
# shellcheck disable=SC2086  # BENCH_ARGS holds several words
step bench "${BENCH_TIMEOUT:-300}" python3 -m zarr_dask_gpu.cli bench --json "$OUT/bench.json" --chart "$OUT/performance.png" ${BENCH_ARGS:-}
step xarray "${XARRAY_TIMEOUT:-200}" python3 benchmarks/xarray_bench.py --json "$OUT/xarray.json"
# shellcheck disable=SC2086  # TIMELINE_ARGS holds several words
step timeline "${TIMELINE_TIMEOUT:-200}" python3 benchmarks/timeline.py ${TIMELINE_ARGS:-}
step timeline8 "${TIMELINE_TIMEOUT:-200}" env CUDA_DEVICE_MAX_CONNECTIONS=8 python3 benchmarks/timeline.py
# shellcheck disable=SC2086  # DATA holds several words
step data "${DATA_TIMEOUT:-180}" python3 -m zarr_dask_gpu.bench.datasets ${DATA:-B}
# shellcheck disable=SC2016  # expanded by the inner bash
step timelines "${TIMELINE_TIMEOUT:-200}" bash -c 'for d in ${TIMELINES:-B C D}; do python3 benchmarks/timeline.py --path /tmp/bench-a.zarr-$d | grep -v "^    thread"; done'
# the decoders under compute-sanitizer, cupy's pools off (ZDG_CUPY_POOL=0, tests/conftest.py) so that
# each buffer is its own allocation and a read past its end is seen: memcheck on the decoder tests and
# the fuzz corpus, racecheck on the kernels that share memory; any report fails the step
# shellcheck disable=SC2016,SC2086  # expanded by the inner bash; the test lists hold several words
step sanitize "${SANITIZE_TIMEOUT:-480}" env ZDG_CUPY_POOL=0 bash -c '
  cs="compute-sanitizer --error-exitcode 97 --print-limit 20"
  export ZDG_DAMAGE_EVERY=${ZDG_DAMAGE_EVERY:-20}  # every 20th case of the corpus: memcheck is slow
  $cs --tool memcheck --leak-check no python3 -m pytest -q -m gpu -p no:cacheprovider -o faulthandler_timeout=300 \
    ${MEMCHECK_TESTS:-tests/gpu/test_gpu_zstd.py tests/gpu/test_gpu_inflate.py tests/gpu/test_validate.py tests/gpu/test_memory.py tests/gpu/test_concurrency.py tests/gpu/test_process.py tests/gpu/test_readers.py tests/gpu/test_blosc.py tests/codecs/test_damage.py::test_reads_agree_with_the_reference} || exit $?
  $cs --tool racecheck python3 -m pytest -q -m gpu -p no:cacheprovider \
    ${RACECHECK_TESTS:-tests/gpu/test_gpu_zstd.py::test_frames_as_libzstd_reads_them tests/gpu/test_gpu_inflate.py::test_the_kernel_accepts_in_one_batch_only_what_the_reference_decodes_alike tests/gpu/test_validate.py::test_the_warps_lz4_walk_agrees_with_one_threads tests/gpu/test_blosc.py::test_blosc_blocks_unshuffled_in_place_read_as_zarr_does}'
# the zstd kernels of the bench's first row under Nsight Compute: occupancy, warp stalls and memory
# traffic, each kernel's first launches
step ncu "${NCU_TIMEOUT:-300}" ncu --clock-control none --kernel-name 'regex:zs_(literals|sequences|copy|resolve_blocks|wave)' \
  --launch-count 6 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats \
  python3 -m zarr_dask_gpu.cli bench --gib 1 --datasets "${NCU_DATASET:-A}" --skip cold,cluster,dask,tensorstore,gds,checksum,variants,stores,virtual
step scratch 60 python3 benchmarks/timeline.py --scratch
step remote "${REMOTE_TIMEOUT:-200}" python3 benchmarks/remote_bench.py
# shellcheck disable=SC2086  # SCALING_ARGS holds several words
step scaling "${SCALING_TIMEOUT:-500}" python3 benchmarks/scaling.py --sizes-gib 4 16 --json "$OUT/scaling.json" ${SCALING_ARGS:-}
step dl "${DL_TIMEOUT:-500}" python3 benchmarks/state_dict_bench.py --gib "${DL_GIB:-4}" --json "$OUT/state_dict.json"
step torch "${TORCH_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -o faulthandler_timeout=60 \
  tests/integration/test_torch.py tests/integration/test_loader.py tests/unit/test_samples.py
# shellcheck disable=SC2086  # LOADER_ARGS holds several words
step loader "${LOADER_TIMEOUT:-500}" python3 benchmarks/loader_bench.py --json "$OUT/loader.json" ${LOADER_ARGS:-}
# shellcheck disable=SC2016  # expanded by the inner bash
step compare "${COMPARE_TIMEOUT:-200}" bash -c \
  'python3 -m zarr_dask_gpu.bench.datasets A && python3 benchmarks/compare_trees.py ${COMPARE_TREES:-.}'
for k in "${!rc[@]}"; do echo "$k rc=${rc[$k]}"; done
exit $(( ${rc[tests]:-0} || ${rc[bench]:-0} || ${rc[xarray]:-0} || ${rc[sanitize]:-0} || ${rc[torch]:-0} ))
