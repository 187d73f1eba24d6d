#!/usr/bin/env bash
# `invoke gpu-check` on a GPU machine that reaches no package registry, with the
# Python, torch and CUDA toolkit that machine already has (a build must match
# the torch that loads it, so the lock's torch is not installed there).
#
#   scripts/gpu_check_offline.sh bundle [DIR]     # here, with a registry: what it lacks, into DIR
#   scripts/gpu_check_offline.sh run DIR OUT [gpu-check options]    # there
#
# The bundle (default build/gpu-bundle) holds the wheels of the pure-Python
# packages a CUDA machine's image usually lacks (invoke, liger-kernel), at the
# versions requirements/cuda.txt pins, and the pinned ONNX Runtime headers that
# the build would otherwise fetch from npm. `run` installs the wheels into a
# private folder (nothing of the machine's own Python changes), points the
# build at the bundle's headers and runs gpu-check with its results in OUT.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLED_PACKAGES=(invoke liger-kernel)

pinned() {  # the exact pin of one package in the CUDA variant's lock
  grep -m1 -E "^$1==" "$repo/requirements/cuda.txt" | sed -E 's/ .*//'
}

bundle() {
  local dir=${1:-$repo/build/gpu-bundle} python=$repo/.venv/bin/python specs=() name spec
  [[ -x $python ]] || { echo "gpu_check_offline: make the environment first (scripts/create_env.sh)" >&2; exit 2; }
  for name in "${BUNDLED_PACKAGES[@]}"; do
    spec=$(pinned "$name")
    [[ -n $spec ]] || { echo "gpu_check_offline: $name is not pinned in requirements/cuda.txt" >&2; exit 2; }
    specs+=("$spec")
  done
  rm -rf "$dir" && mkdir -p "$dir/wheels" "$dir/cache"
  # Pure-Python wheels: any Python 3 installs them, whatever the machine's version.
  "$python" -m pip download -q --no-deps --only-binary=:all: -d "$dir/wheels" "${specs[@]}"
  # The headers' cache entry as the build keeps it (manifest and digests) under the bundle's cache root:
  # copied from this machine's cache when it is there, else fetched; verified either way.
  (cd "$repo" && "$python" - "$dir/cache" <<'EOF'
import os
import shutil
import sys
from pathlib import Path

from env.builder import ort_headers

entry = Path("ort-headers") / ort_headers.npm_source_id()
if (ort_headers.cache_root() / entry).is_dir():
    shutil.copytree(ort_headers.cache_root() / entry, Path(sys.argv[1]) / entry)
os.environ["FUSEDBENCH_CACHE"] = sys.argv[1]
print(ort_headers.npm_headers().summary())
EOF
  )
  echo "bundle: $dir ($(du -sh "$dir" | cut -f1)):" "$dir"/wheels/*.whl
}

run() {
  [[ $# -ge 2 ]] || { echo "usage: $0 run DIR OUT [gpu-check options]" >&2; exit 2; }
  local dir out site status=0
  dir=$(cd "$1" && pwd) out=$2
  shift 2
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$dir"/wheels/*.whl
  cd "$repo"
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" FUSEDBENCH_CACHE="$dir/cache" \
    python3 -m invoke gpu-check --out "$out" "$@" || status=$?
  rm -rf "$site"
  return "$status"
}

case ${1:-} in
  bundle) shift; bundle "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 bundle [DIR] | run DIR OUT [gpu-check options]" >&2; exit 2 ;;
esac
