#!/bin/bash
# The kernel of REV (default HEAD) against the working tree's, alternating in one process (core_ab), then the
# working tree's against memcpy (core_timing), pinned to CPU 1. Run from the repository, nothing else running:
#   REV=23cceb7 bash reports/offset_sweep/2026-12-05-prefetch/run.sh                      # core_ab.txt's cases
#   REV=23cceb7 bash reports/offset_sweep/2026-12-05-prefetch/run.sh "2048 4096 9 float16"  # chosen core_ab cases
set -e
cd "$(git rev-parse --show-toplevel)"
B=build/core_ab_work; rm -rf $B; mkdir -p $B/before
REV=${REV:-HEAD}
for f in csrc/core/fused_norm_cpu.cpp csrc/core/fused_norm.h csrc/core/numeric_types.h; do git show $REV:$f > $B/before/$(basename $f); done
F="-std=c++17 -O3 -ffp-contract=off -Wno-psabi"
g++ $F -Dfused_norm=fused_norm_before -c $B/before/fused_norm_cpu.cpp -o $B/before.o &
g++ $F -c csrc/core/fused_norm_cpu.cpp -o $B/new.o &
wait
g++ -std=c++17 -O3 -Icsrc bench/experiments/core_ab.cpp csrc/platform/cpu_caches.cpp $B/new.o $B/before.o -o $B/core_ab
g++ $F -Icsrc csrc/core/fused_norm_cpu.cpp csrc/platform/cpu_caches.cpp bench/experiments/core_timing.cpp -o $B/core_timing
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $# -gt 0 ]; then cases=("$@"); else
  cases=("1024 1024 9 float32" "4096 2048 9 float32" "16384 4096 3 float32" "4096 2048 5 bfloat16" "2048 4096 5 float16")
fi
for case in "${cases[@]}"; do
  echo "== core_ab $case"; taskset -c 1 $B/core_ab $case
done
[ $# -gt 0 ] && exit 0
for case in "1024 1024 15" "4096 2048 9" "16384 4096 3"; do
  echo "== core_timing norm $case (after)"; taskset -c 1 $B/core_timing norm $case
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
