#!/bin/bash
# REF's build in the A/B layout, before (<sha>/build) and after (<sha>/src/build), with ccache holding this
# checkout's own build, as CI's gate has it. Usage: bash reports/gate/2026-12-07-ref-build/run.sh [REF]
# (clones the checkout to /tmp/gx; an empty ccache folder /tmp/cc-gate).
set -e
ref=${1:-df0051c761d5f325679b47270a33c7bb5c9c218c}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
export CCACHE_DIR=/tmp/cc-gate
rm -rf "$CCACHE_DIR" /tmp/gx && mkdir -p "$CCACHE_DIR"
git clone -q "$repo" /tmp/gx && cd /tmp/gx
bash scripts/create_env.sh > /tmp/gx-env.log 2>&1
s=$(date +%s); .venv/bin/python -m invoke build > /tmp/gx-build.log 2>&1; echo "HEAD build $(( $(date +%s) - s )) s"
ccache -z > /dev/null
PYTHONPATH=/tmp/gx .venv/bin/python "$here/ref_build.py" "$ref"
ccache -s
