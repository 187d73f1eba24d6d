// Times the CPU kernel core against the kernel of a previous commit in one
// process, alternating the two (which goes first alternates too), at
// controlled layouts: x, weight and bias at page boundaries and y `d`
// bytes into a page ("y moved"), or x and y at page boundaries and weight
// and bias `d` bytes into theirs ("wb moved"). Prints, per d, each kernel's
// median time per element and the median of the per-repetition ratio
// new / previous, so a machine that other work shares still gives ratios.
//
//   mkdir -p build/before && git show REV:csrc/core/fused_norm_cpu.cpp > build/before/fused_norm_cpu.cpp
//   git show REV:csrc/core/fused_norm.h > build/before/fused_norm.h
//   git show REV:csrc/core/numeric_types.h > build/before/numeric_types.h
//   g++ -std=c++17 -O3 -ffp-contract=off -Wno-psabi -Dfused_norm=fused_norm_before
//       -c build/before/fused_norm_cpu.cpp -o build/before.o
//   g++ -std=c++17 -O3 -ffp-contract=off -Wno-psabi -c csrc/core/fused_norm_cpu.cpp -o build/new.o
//   g++ -std=c++17 -O3 -Icsrc bench/experiments/core_ab.cpp csrc/platform/cpu_caches.cpp build/new.o build/before.o
//       -o build/core_ab
//   taskset -c 1 build/core_ab ROWS HIDDEN REPS float32|bfloat16|float16 [wb]
//
// The previous kernel is its own source renamed into its own namespace
// (-Dfused_norm=...), with its own header. Its NormProblem must be a prefix
// of this one's (the previous kernel is handed this one's problem): true
// of every kernel since the cache sizes joined the end of NormProblem, and
// of the one before, which read the cache sizes itself.
#include <sys/mman.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "core/fused_norm.h"
#include "platform/cpu_caches.h"
namespace fused_norm_before {
struct NormProblem;
void cpu_forward_rows(const NormProblem& p, int64_t b, int64_t e);
}  // namespace fused_norm_before
static double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static char* pages(size_t bytes) {
  void* p = mmap(nullptr, bytes + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  return static_cast<char*>(p);
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
int main(int argc, char** argv) {
  const int64_t rows = std::atoll(argv[1]), hidden = std::atoll(argv[2]);
  const int reps = std::atoi(argv[3]);
  const std::string dt = argv[4];
  const bool wb_moved = argc > 5 && std::string(argv[5]) == "wb";  // move weight and bias instead of y
  using fused_norm::DType;
  const DType dtype = dt == "bfloat16" ? DType::kBFloat16 : dt == "float16" ? DType::kFloat16 : DType::kFloat32;
  const size_t es = dtype == DType::kFloat32 ? 4 : 2, n = rows * hidden, bytes = n * es;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  char* x = pages(bytes);
  char* yp = pages(bytes);
  char* wp = pages(hidden * es);
  char* bp = pages(hidden * es);
  for (size_t i = 0; i < n; ++i) {
    const float v = normal(rng);
    if (es == 4)
      reinterpret_cast<float*>(x)[i] = v;
    else if (dtype == DType::kBFloat16)
      reinterpret_cast<fused_norm::BFloat16*>(x)[i] = fused_norm::to_bfloat16(v);
    else
      reinterpret_cast<fused_norm::Half*>(x)[i] = fused_norm::to_half(v);
  }
  const int calls = static_cast<int>(std::max<size_t>(1, 2000000 / bytes));
  std::printf("%s %lldx%lld %s, %d calls a block, %d reps; new/before time ratio (median), ns per element\n",
              wb_moved ? "weight+bias moved" : "y moved", (long long)rows, (long long)hidden, dt.c_str(), calls, reps);
  for (int d : {0, 64, 128, 192, 256, 512, 1024, 2048, 3072, 3968, 4032}) {
    char* y = wb_moved ? yp : yp + d;
    char* w = wb_moved ? wp + d : wp;
    char* b = wb_moved ? bp + d : bp;
    for (int64_t i = 0; i < hidden; ++i) {
      const float wv = 1.0f + 0.1f * normal(rng), bv = 0.1f * normal(rng);
      if (es == 4)
        reinterpret_cast<float*>(w)[i] = wv, reinterpret_cast<float*>(b)[i] = bv;
      else if (dtype == DType::kBFloat16)
        reinterpret_cast<fused_norm::BFloat16*>(w)[i] = fused_norm::to_bfloat16(wv),
        reinterpret_cast<fused_norm::BFloat16*>(b)[i] = fused_norm::to_bfloat16(bv);
      else
        reinterpret_cast<fused_norm::Half*>(w)[i] = fused_norm::to_half(wv),
        reinterpret_cast<fused_norm::Half*>(b)[i] = fused_norm::to_half(bv);
    }
    fused_norm::NormProblem p{x, w, b, y, rows, hidden, 1e-6, dtype, false, fused_norm::cpu_caches()};
    const auto& old = *reinterpret_cast<const fused_norm_before::NormProblem*>(&p);
    std::vector<double> tn, tb, ratio;
    for (int rep = 0; rep < reps + 2; ++rep) {
      const bool new_first = rep % 2 == 0;
      double a = 0, c = 0;
      for (int k = 0; k < 2; ++k) {
        const bool run_new = (k == 0) == new_first;
        const double t0 = now_ns();
        for (int i = 0; i < calls; ++i)
          run_new ? fused_norm::cpu_forward_rows(p, 0, rows) : fused_norm_before::cpu_forward_rows(old, 0, rows);
        const double t = (now_ns() - t0) / calls / n;
        (run_new ? a : c) = t;
      }
      if (rep >= 2) tn.push_back(a), tb.push_back(c), ratio.push_back(a / c);
    }
    std::printf("  d=%4d  new %.3f  before %.3f  new/before %.2f\n", d, median(tn), median(tb), median(ratio));
  }
}
