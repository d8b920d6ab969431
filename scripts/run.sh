#!/usr/bin/env bash
# One entry point for a fresh machine: finds a Python >= 3.12, makes .venv, installs what the
# command needs (the gpu extra too when nvidia-smi sees a GPU), and runs it.
#   bash scripts/run.sh demo [demo args]   sample store -> local cluster -> checked read, GB/s
#   bash scripts/run.sh test [pytest args] the test suite (gpu-marked tests skip without a GPU)
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  local c v p
  for c in python3.13 python3.12 python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then  # pyenv shims answer only for the selected version
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.(1[2-9]|[2-9][0-9])(\.|$)' | sort -V -r); do
      p="$(pyenv root)/versions/$v/bin/python3"
      if [ -x "$p" ]; then echo "$p"; return 0; fi
    done
  fi
  return 1
}

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  py=$(find_python) || { echo "error: no Python >= 3.12 found (tried python3.13, python3.12, python3, pyenv)" >&2; exit 1; }
  echo "using $py ($("$py" --version 2>&1)) for .venv"
  rm -rf .venv
  "$py" -m venv .venv
fi
if ! command -v "${CC:-cc}" >/dev/null 2>&1; then  # the package has one C extension (zarr_dask_gpu/_preads.c)
  echo "error: no C compiler (${CC:-cc}) found: install one (gcc, or build-essential on Debian/Ubuntu)" >&2
  exit 1
fi
cmd=${1:-}
extras="xarray"  # the demo's venv runs the README's examples; the tests bring their extra
[ "$cmd" = test ] && extras="test"
if [ "${ZDG_GPU:-auto}" != "0" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  extras="${extras:+$extras,}gpu"
fi
# reinstall only when what the install is made of changed (the package is editable: its Python is live)
sources=$(cat pyproject.toml setup.py zarr_dask_gpu/_preads.c | sha256sum | cut -c1-16)
stamp=.venv/.zarr-dask-gpu-installed  # "<sources> <extra> <extra> ..."
have=$(cat "$stamp" 2>/dev/null || true)
need=0
[ "${have%% *}" = "$sources" ] || need=1
for e in ${extras//,/ }; do [[ " $have " == *" $e "* ]] || need=1; done
if [ $need = 1 ]; then
  echo "installing zarr-dask-gpu${extras:+[$extras]} into .venv (the first time takes a few minutes)..."
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
  kept=""
  [ "${have%% *}" = "$sources" ] && kept=${have#* }
  echo "$sources $kept ${extras//,/ }" > "$stamp"
else
  echo "zarr-dask-gpu${extras:+[$extras]} is installed in .venv and up to date"
fi

shift || true
case "$cmd" in
  demo) exec .venv/bin/zarr-dask-gpu demo "$@" ;;
  test) exec .venv/bin/python -m pytest -q "$@" ;;
  *) echo "usage: bash scripts/run.sh demo|test [args]" >&2; exit 2 ;;
esac
