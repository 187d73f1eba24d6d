#!/usr/bin/env bash
# `invoke gpu-check` on a GPU machine that reaches no package registry, with the
# Python, torch and CUDA toolkit that machine already has (a build must match
# the torch that loads it, so the lock's torch is not installed there).
#
#   scripts/gpu_check_offline.sh bundle [DIR] [--no-ort-gpu]   # here, with a registry: what it lacks, into DIR
#   scripts/gpu_check_offline.sh split WHEEL DIR               # parts of a wheel at hand (bundle does this itself)
#   scripts/gpu_check_offline.sh plan [DIR]                    # the calls that carry the bundle there
#   scripts/gpu_check_offline.sh receive DIR K                 # there: part K of the ONNX Runtime GPU wheel into the stage
#   scripts/gpu_check_offline.sh unpack DIR                    # there: reassemble, check the hash, install; prints the folder
#   scripts/gpu_check_offline.sh run DIR OUT [gpu-check options]    # there: unpack (if the bundle has parts), then gpu-check
#
# The bundle (default build/gpu-bundle) holds the wheels of the pure-Python
# packages a CUDA machine's image usually lacks (invoke, liger-kernel), at the
# versions requirements/cuda.txt pins, and the pinned ONNX Runtime headers that
# the build would otherwise fetch from npm. `run` installs the wheels into a
# private folder (nothing of the machine's own Python changes), points the
# build at the bundle's headers and runs gpu-check with its results in OUT.
#
# ONNX Runtime's CUDA build (onnxruntime-gpu at the lock's version, for the GPU
# machine's Python, $FUSEDBENCH_GPU_PYTHON, default 3.12) is larger than what
# one call to that machine can carry beside the tree. `bundle` downloads it,
# checks its sha256 against the lock's hashes, and splits it into DIR-parts/
# part-NN files sized so that the tree, the bundle and one part fit in
# $FUSEDBENCH_CARRY_MIB (default 64) MiB; DIR/ort-gpu/manifest records the
# wheel's and every part's sha256. One call per part runs `receive DIR K`,
# which copies part K into the stage ($FUSEDBENCH_ORT_STAGE, default
# /tmp/fusedbench-ort-gpu) after checking that parts 0..K-1 are still there; a
# machine handed back between calls comes back with an empty /tmp, and the
# script then says so and says to start over from part 0. The last call's
# `run` reassembles the wheel, checks its sha256, installs it into a folder of
# the stage and puts that folder first on the Python path of gpu-check.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLED_PACKAGES=(invoke liger-kernel)
ORT_GPU_PACKAGE=onnxruntime-gpu
# Platform tags to try for the wheel, newest first: PyPI's onnxruntime-gpu wheels are manylinux_2_28.
ORT_GPU_PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64)
stage=${FUSEDBENCH_ORT_STAGE:-/tmp/fusedbench-ort-gpu}

die() {  # message, exit code
  echo "gpu_check_offline: $1" >&2
  exit "${2:-2}"
}

pinned() {  # the exact pin of one package in the CUDA variant's lock
  grep -m1 -E "^$1==" "$repo/requirements/cuda.txt" | sed -E 's/ .*//'
}

lock_hashes() {  # every sha256 the lock accepts for one package, one a line
  awk -v name="$1==" '
    index($0, name) == 1 { inside = 1; next }
    inside && /--hash=sha256:/ { sub(/.*--hash=sha256:/, ""); sub(/[ \\].*/, ""); print; next }
    inside { exit }' "$repo/requirements/cuda.txt"
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

manifest_value() {  # DIR KEY
  local manifest=$1/ort-gpu/manifest
  [[ -f $manifest ]] || die "$1 has no ONNX Runtime GPU parts (no ort-gpu/manifest): make the bundle with parts"
  sed -n "s/^$2=//p" "$manifest"
}

# Bytes that travel with every call beside one part: the tree (tracked and untracked, not ignored) and the bundle.
carried_bytes() {
  local dir=$1 tree base
  tree=$(git -C "$repo" ls-files -z --cached --others --exclude-standard | (cd "$repo" && xargs -0 -r stat -c %s 2>/dev/null) | awk '{s += $1} END {print s + 0}')
  base=$(du -sb "$dir" | cut -f1)
  echo $((tree + base))
}

# Split WHEEL into DIR-parts and write DIR/ort-gpu/manifest.
split_wheel() {
  local wheel=$1 dir=$2 parts=$2-parts budget carried part_bytes count i sha
  budget=$(( ${FUSEDBENCH_CARRY_MIB:-64} * 1024 * 1024 ))
  mkdir -p "$dir/ort-gpu"
  : > "$dir/ort-gpu/manifest"  # counted in what every call carries
  carried=$(carried_bytes "$dir")
  # 4 MiB of room for the manifest's lines and for files the tree gains before the calls are made.
  part_bytes=${FUSEDBENCH_PART_BYTES:-$(( budget - carried - 4 * 1024 * 1024 ))}
  (( part_bytes > 0 )) || die "the tree and the bundle ($carried bytes) leave no room for a part in $budget bytes"
  rm -rf "$parts" && mkdir -p "$parts"
  split -b "$part_bytes" -d -a 2 "$wheel" "$parts/part-"
  count=$(find "$parts" -name 'part-*' | wc -l)
  sha=$(sha256_of "$wheel")
  {
    echo "wheel=$(basename "$wheel")"
    echo "sha256=$sha"
    echo "bytes=$(stat -c %s "$wheel")"
    echo "part_bytes=$part_bytes"
    echo "parts=$count"
    for ((i = 0; i < count; i++)); do printf 'part_%02d=%s\n' "$i" "$(sha256_of "$(printf '%s/part-%02d' "$parts" "$i")")"; done
  } > "$dir/ort-gpu/manifest"
  echo "ort-gpu: $(basename "$wheel") ($(stat -c %s "$wheel") bytes, sha256 $sha) in $count parts of at most $part_bytes bytes in $parts (tree and bundle: $carried bytes)"
}

ort_gpu_parts() {
  local dir=$1 python=$2 spec pyver download platform wheel sha
  spec=$(pinned "$ORT_GPU_PACKAGE")
  [[ -n $spec ]] || die "$ORT_GPU_PACKAGE is not pinned in requirements/cuda.txt"
  pyver=${FUSEDBENCH_GPU_PYTHON:-3.12}
  download=$(mktemp -d)
  for platform in "${ORT_GPU_PLATFORMS[@]}"; do
    if "$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --platform "$platform" \
      -d "$download" "$spec" 2>/dev/null; then
      break
    fi
  done
  wheel=$(find "$download" -name '*.whl' | head -1)
  [[ -n $wheel ]] || die "no $spec wheel for Python $pyver on ${ORT_GPU_PLATFORMS[*]} in the package index"
  sha=$(sha256_of "$wheel")
  lock_hashes "$ORT_GPU_PACKAGE" | grep -qx "$sha" ||
    die "$(basename "$wheel") has sha256 $sha, which requirements/cuda.txt does not list for $spec"
  echo "ort-gpu: $(basename "$wheel"): sha256 $sha is one of the lock's hashes for $spec"
  split_wheel "$wheel" "$dir"
  rm -rf "$download"
}

bundle() {
  local dir=$repo/build/gpu-bundle ort_gpu=1 python specs=() name spec arg
  for arg in "$@"; do
    case $arg in
      --no-ort-gpu) ort_gpu=0 ;;
      -*) die "bundle: unknown option $arg" ;;
      *) dir=$arg ;;
    esac
  done
  python=${FUSEDBENCH_ENV:-$repo/.venv}/bin/python
  [[ -x $python ]] || die "make the environment first (scripts/create_env.sh)"
  for name in "${BUNDLED_PACKAGES[@]}"; do
    spec=$(pinned "$name")
    [[ -n $spec ]] || die "$name is not pinned in requirements/cuda.txt"
    specs+=("$spec")
  done
  rm -rf "$dir" "$dir-parts" && mkdir -p "$dir/wheels" "$dir/cache"
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
  (( ort_gpu )) && ort_gpu_parts "$dir" "$python"
  echo "bundle: $dir ($(du -sh "$dir" | cut -f1)):" "$dir"/wheels/*.whl
  (( ort_gpu )) && plan "$dir"
  return 0
}

# The calls that carry the bundle to a warm GPU machine, one part each, back to back.
plan() {
  local dir=${1:-$repo/build/gpu-bundle} count rel i
  count=$(manifest_value "$dir" parts)
  rel=$(realpath --relative-to="$repo" "$dir")
  echo "calls (each carries $rel and $rel-parts/part-NN; issue them back to back, the machine stays warm briefly):"
  for ((i = 0; i < count; i++)); do
    if ((i < count - 1)); then
      printf '  %d. carry %s %s-parts/part-%02d: scripts/gpu_check_offline.sh receive %s %d\n' \
        $((i + 1)) "$rel" "$rel" "$i" "$rel" "$i"
    else
      printf '  %d. carry %s %s-parts/part-%02d: scripts/gpu_check_offline.sh receive %s %d && scripts/gpu_check_offline.sh run %s %s/gpu-check [gpu-check options]\n' \
        $((i + 1)) "$rel" "$rel" "$i" "$rel" "$i" "$rel" "\$OUT"
    fi
  done
}

# Fails, saying to start over, unless parts 0..$2-1 are in the stage with their recorded sha256.
check_staged() {
  local dir=$1 upto=$2 i want missing=()
  for ((i = 0; i < upto; i++)); do
    want=$(manifest_value "$dir" "$(printf 'part_%02d' "$i")")
    local part
    part=$(printf '%s/part-%02d' "$stage" "$i")
    if [[ ! -f $part ]] || [[ $(sha256_of "$part") != "$want" ]]; then missing+=("$i"); fi
  done
  if ((${#missing[@]})); then
    die "part(s) ${missing[*]} of the ONNX Runtime GPU wheel are missing from $stage (or changed): the machine was handed back since the earlier calls and this is a fresh one. Start over from part 0 (receive $dir 0), issuing the calls back to back" 3
  fi
}

receive() {
  [[ $# -eq 2 ]] || die "usage: $0 receive DIR K"
  local dir=$1 k=$2 count part want
  count=$(manifest_value "$dir" parts)
  if ! [[ $k =~ ^[0-9]+$ ]] || ((k >= count)); then die "receive: K must be 0..$((count - 1)), got $k"; fi
  part=$(printf '%s-parts/part-%02d' "$dir" "$k")
  [[ -f $part ]] || die "receive: $part was not carried with this call (carry it beside $dir)"
  if ((k == 0)); then rm -rf "$stage"; fi
  mkdir -p "$stage"
  check_staged "$dir" "$k"
  want=$(manifest_value "$dir" "$(printf 'part_%02d' "$k")")
  [[ $(sha256_of "$part") == "$want" ]] || die "receive: $part does not have the sha256 the manifest records"
  cp "$part" "$stage/"
  echo "receive: part $((k + 1)) of $count in $stage"
}

# Reassemble the wheel in the stage, check its sha256, install it into $stage/site; print that folder.
unpack() {
  [[ $# -eq 1 ]] || die "usage: $0 unpack DIR"
  local dir=$1 count wheel want got
  count=$(manifest_value "$dir" parts)
  check_staged "$dir" "$count"
  wheel=$stage/$(manifest_value "$dir" wheel)
  cat "$stage"/part-?? > "$wheel"
  want=$(manifest_value "$dir" sha256)
  got=$(sha256_of "$wheel")
  [[ $got == "$want" ]] || die "unpack: the reassembled $(basename "$wheel") has sha256 $got, the bundle recorded $want" 3
  echo "unpack: $(basename "$wheel") reassembled from $count parts, sha256 $got as recorded" >&2
  rm -rf "$stage/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$stage/site" "$wheel" >&2
  rm -f "$wheel" "$stage"/part-??  # what stays: the installed package
  echo "$stage/site"
}

run() {
  [[ $# -ge 2 ]] || { echo "usage: $0 run DIR OUT [gpu-check options]" >&2; exit 2; }
  local dir out site ort_site="" status=0
  dir=$(cd "$1" && pwd) out=$2
  shift 2
  if [[ -f $dir/ort-gpu/manifest ]]; then
    ort_site=$(unpack "$dir")
    echo "run: onnxruntime-gpu from $ort_site, ahead of the machine's own onnxruntime"
  fi
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$dir"/wheels/*.whl
  cd "$repo"
  PYTHONPATH="${ort_site:+$ort_site:}$site${PYTHONPATH:+:$PYTHONPATH}" FUSEDBENCH_CACHE="$dir/cache" \
    python3 -m invoke gpu-check --out "$out" "$@" || status=$?
  rm -rf "$site"
  return "$status"
}

case ${1:-} in
  bundle) shift; bundle "$@" ;;
  split)
    shift
    [[ $# -eq 2 && -f ${1:-} ]] || die "usage: $0 split WHEEL DIR"
    split_wheel "$@"
    ;;
  plan) shift; plan "$@" ;;
  receive) shift; receive "$@" ;;
  unpack) shift; unpack "$@" ;;
  run) shift; run "$@" ;;
  *)
    echo "usage: $0 bundle [DIR] [--no-ort-gpu] | split WHEEL DIR | plan [DIR] | receive DIR K | unpack DIR |" \
      "run DIR OUT [gpu-check options]" >&2
    exit 2
    ;;
esac
