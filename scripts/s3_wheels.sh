#!/usr/bin/env bash
# Wheels for the S3 tests on an offline GPU host (moto in server mode, s3fs and their dependencies),
# at the versions the development environment has, into .whl-s3/. botocore's service models are cut
# to S3, STS and IAM (about 1 MiB instead of 15), so .whl and .whl-s3 fit the device tool's 64 MiB
# carry. On the host: pip install --no-deps --target /tmp/s3site .whl-s3/*.whl and put /tmp/s3site
# after the main site on PYTHONPATH.
# Usage: bash scripts/s3_wheels.sh [python with the test extra installed]
set -euo pipefail
PY=${1:-python3}
OUT=.whl-s3
PKGS="moto s3fs fsspec aiobotocore botocore boto3 s3transfer jmespath werkzeug flask flask-cors
xmltodict responses jinja2 markupsafe itsdangerous blinker click python-dateutil six aioitertools
wrapt pyyaml py-partiql-parser jsonpath-ng cryptography cffi pycparser"
pins=()
for p in $PKGS; do
    v=$("$PY" -m pip show "$p" 2>/dev/null | sed -n 's/^Version: //p')
    [ -n "$v" ] || { echo "$p is not installed in $PY: install the test extra first" >&2; exit 1; }
    pins+=("$p==$v")
done
rm -rf "$OUT" && mkdir -p "$OUT"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$OUT" "${pins[@]}"
wheel=$(ls "$OUT"/botocore-*.whl)
tmp=$(mktemp -d)
"$PY" -m zipfile -e "$wheel" "$tmp"
find "$tmp/botocore/data" -mindepth 1 -maxdepth 1 -type d ! -name s3 ! -name sts ! -name iam \
    ! -name s3control -exec rm -rf {} +
"$PY" scripts/repack_wheel.py "$tmp" "$wheel"
rm -rf "$tmp"
du -sh "$OUT"
