#!/usr/bin/env bash
# Wheels of the stores users bring (Icechunk, obstore, VirtualiZarr with kerchunk, h5py and netCDF4,
# universal-pathlib) and their dependencies, and zlib-ng (the host's inflate), for an offline GPU host
# (which has fsspec and msgpack), at
# the versions the development environment has, into .whl-stores/. On the host: pip install --no-deps
# --target /tmp/site .whl-stores/*.whl beside the main wheelhouse (.whl, ../shared/gpu/wheels.sh).
# It also squeezes .whl (LZMA, nvCOMP's nvlzcat left out) so that both fit one device call's carry.
# Usage: bash scripts/store_wheels.sh [python with the test extra installed]
set -euo pipefail
PY=${1:-.venv/bin/python}
OUT=.whl-stores
PKGS="icechunk obstore virtualizarr kerchunk h5py netCDF4 cftime certifi obspec-utils obspec ujson
universal-pathlib pathlib-abc zlib-ng"
pins=()
for p in $PKGS; do
    v=$("$PY" -m pip show "$p" 2>/dev/null | sed -n 's/^Version: //p')
    [ -n "$v" ] || { echo "$p is not installed in $PY: install the test extra first" >&2; exit 1; }
    pins+=("$p==$v")
done
rm -rf "$OUT" && mkdir -p "$OUT"
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 any; do plat+=(--platform "$p"); done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${plat[@]}" -d "$OUT" "${pins[@]}"
# both wheelhouses must fit the device tool's 64 MiB carry beside the tree: LZMA, and nvCOMP without
# its command-line tool
python3 scripts/repack_wheel.py --squeeze "$OUT"/*.whl
if compgen -G ".whl/nvidia_libnvcomp*.whl" >/dev/null; then
    python3 scripts/repack_wheel.py --squeeze --drop '*/bin/nvlzcat' .whl/*.whl
fi
du -sh "$OUT" .whl 2>/dev/null || du -sh "$OUT"
