#!/usr/bin/env bash
# The one command of a device call (see scripts/gpu_check.py for the plan):
#   run(command="bash scripts/gpu_check.sh --label <sha>", carry=["build/device-carry"], timeout_s=590)
# Runs gpu_check.py with the machine's own python3 (the one holding a CUDA
# torch), unbuffered, and keeps its whole output in $OUT/gpu_check.log too.
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
out="${OUT:-$PWD/build/gpu-check}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
"${PYTHON:-python3}" scripts/gpu_check.py --out "$out" "$@" 2>&1 | tee "$out/gpu_check.log"
