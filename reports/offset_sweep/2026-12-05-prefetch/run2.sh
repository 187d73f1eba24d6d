#!/bin/bash
# Builds core_ab (HEAD's kernel = before, working tree = after) and core_timing (after), runs them pinned.
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
for case in "1024 1024 9 float32" "4096 2048 9 float32" "16384 4096 3 float32" "4096 2048 5 bfloat16" "2048 4096 5 float16"; do
  echo "== core_ab $case"; taskset -c 1 $B/core_ab $case
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
