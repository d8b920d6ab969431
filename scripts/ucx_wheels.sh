#!/usr/bin/env bash
# UCX communication (distributed-ucxx and what it loads) for an offline CUDA 13 GPU host, for the UCX
# rows of benchmarks/scaling.py. The wheels are unpacked into one tree, cut to what Python loads (no
# headers, static libraries or perftest; copies of one shared library become links to it) and packed
# as .whl-ucx/ucx.tar.xz (about 6 MiB, against 53 MiB of wheels). .whl-x2/ gets hard links to .whl's
# wheels, but for those the scaling run does not load (nvCOMP's Python API, safetensors), and to the
# tarball, so that it fits the device tool's 64 MiB carry. On the GPU host (CONTRIBUTING.md, "The GPU host"):
#   pip install ... --target /tmp/site .whl-x2/*.whl && python3 -m tarfile -e .whl-x2/ucx.tar.xz /tmp/site
# Usage: bash scripts/ucx_wheels.sh [python]   (after ../shared/gpu/wheels.sh has filled .whl/)
set -euo pipefail
PY=${1:-python3}
OUT=.whl-ucx
rm -rf "$OUT" .whl-x2 && mkdir -p "$OUT"
tmp=$(mktemp -d)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    -d "$tmp/wheels" distributed-ucxx-cu13==0.52.0 ucxx-cu13==0.52.0 libucxx-cu13==0.52.0 libucx-cu13==1.21.0 \
    rmm-cu13==26.10.0 librmm-cu13==26.10.0
for w in "$tmp"/wheels/*.whl; do "$PY" -m zipfile -e "$w" "$tmp/site"; done
cd "$tmp/site"
rm -rf librmm/include libucxx/include libucx/include ucxx/include libucx/share
find . \( -name '*.a' -o -name '*.la' -o -name '*perftest*' \) -exec rm -rf {} +
# a wheel cannot hold links, so libfoo.so, .so.0 and .so.0.0.0 are three copies of one library
"$PY" - <<'EOF'
import hashlib
import os

first = {}
for root, _, files in os.walk("."):
    for name in sorted((f for f in files if ".so" in f), key=len):
        path = os.path.join(root, name)
        with open(path, "rb") as f:
            key = root, hashlib.sha256(f.read()).hexdigest()
        if key in first:
            os.remove(path)
            os.symlink(first[key], path)
        else:
            first[key] = name
EOF
cd - >/dev/null
tar -C "$tmp/site" -cf - . | xz -9 -T0 >"$OUT/ucx.tar.xz"
rm -rf "$tmp"
mkdir .whl-x2 && ln .whl/*.whl "$OUT/ucx.tar.xz" .whl-x2/ && rm -f .whl-x2/nvidia_nvcomp_cu13-* .whl-x2/safetensors-*
du -sh "$OUT" .whl-x2
