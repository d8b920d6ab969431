#!/usr/bin/env bash
# Builds an offline wheelhouse for air-gapped GPU nodes: this package's wheel and every dependency,
# with the gpu extra, for Linux x86_64 CPython (3.12 by default). Run from the repository root:
#   bash deploy/wheelhouse/make_wheelhouse.sh [DEST] [PYTHON_VERSION]
# Then on the node:  pip install --no-index --find-links DEST "zarr-dask-gpu[gpu]"
set -euo pipefail
dest=${1:-wheelhouse}
pyver=${2:-3.12}
python=${PYTHON:-python3}
mkdir -p "$dest"
"$python" -m pip wheel -q --no-deps -w "$dest" .
requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
"$python" - "$requirements" <<'PY'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"] + project["optional-dependencies"]["gpu"]
open(sys.argv[1], "w").write("\n".join(deps) + "\n")
PY
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do plat+=(--platform "$p"); done
"$python" -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp \
  "${plat[@]}" -d "$dest" -r "$requirements"
echo "wheelhouse: $dest ($(find "$dest" -name '*.whl' | wc -l) wheels, $(du -sh "$dest" | cut -f1))"
