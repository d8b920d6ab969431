#!/usr/bin/env bash
# Wheels for UCX communication (distributed-ucxx and what it loads) on an offline CUDA 13 GPU host, for
# the UCX rows of benchmarks/scaling.py, into .whl-ucx/. libucx's wheel is cut to its shared libraries
# (no static libraries, perftest, headers or examples: 42 -> 19 MiB), and .whl-x2/ gets hard links to
# .whl and .whl-ucx without the wheels the scaling run does not load (nvCOMP's Python API, safetensors),
# so that it fits the device tool's 64 MiB carry. Carry .whl-x2 and install it as .whl (README).
# Usage: bash scripts/ucx_wheels.sh [python]   (after ../shared/gpu/wheels.sh has filled .whl/)
set -euo pipefail
PY=${1:-python3}
OUT=.whl-ucx
rm -rf "$OUT" .whl-x2 && mkdir -p "$OUT"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    -d "$OUT" distributed-ucxx-cu13==0.52.0 ucxx-cu13==0.52.0 libucxx-cu13==0.52.0 libucx-cu13==1.21.0 \
    rmm-cu13==26.10.0 librmm-cu13==26.10.0
wheel=$(ls "$OUT"/libucx_cu13-*.whl)
tmp=$(mktemp -d)
"$PY" -m zipfile -e "$wheel" "$tmp"
find "$tmp" \( -name '*.a' -o -name '*.la' -o -name '*.so.0.0.0' \) -delete
rm -rf "$tmp"/libucx/{bin,share,include} "$tmp"/libucx/lib/{cmake,pkgconfig} "$tmp"/libucx/lib/ucx/*perftest*
"$PY" scripts/repack_wheel.py "$tmp" "$wheel"
rm -rf "$tmp"
mkdir .whl-x2 && ln .whl/*.whl "$OUT"/*.whl .whl-x2/ && rm -f .whl-x2/nvidia_nvcomp_cu13-* .whl-x2/safetensors-*
du -sh "$OUT" .whl-x2
