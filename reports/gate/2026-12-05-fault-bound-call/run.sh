#!/usr/bin/env bash
# Builds in alternating fresh processes, ROUNDS rounds: NAME=BUILD_DIR:TREE ... ; prints one line per process.
#   bash run.sh 16 base=build/ab/<sha>/build:build/ab/<sha>/src new=build:. > results.txt
#   python ratios.py results.txt base new
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=$1
shift
for _ in $(seq "$rounds"); do
    for side in "$@"; do
        name=${side%%=*} dirs=${side#*=}
        line=$(MALLOC_MMAP_THRESHOLD_=131072 FUSEDBENCH_BUILD_DIR=${dirs%%:*} PYTHONPATH=${dirs#*:} \
            python "$here/call_timing.py" 1 8x128x1024 | tail -n 1)
        echo "$name $line"
    done
done
