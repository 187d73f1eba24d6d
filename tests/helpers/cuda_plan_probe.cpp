// Host-only probe of the CUDA launch plan (csrc/core/fused_norm_cuda_plan.h),
// compiled with the plain C++ compiler by tests/test_cuda_compile.py: the
// kernel choice is checked on machines without nvcc or a GPU.
//
//   cuda_plan_probe --variants
//       one JSON object: the compile-time variants the .cu must instantiate
//   cuda_plan_probe < cases
//       for each input line "rows hidden elem_bytes alignment" (alignment: the
//       largest power of two <= 16 dividing every pointer), one JSON line with
//       the plan make_plan() returns
#include <cstdio>
#include <cstring>

#include "core/fused_norm_cuda_plan.h"

namespace plan = fused_norm::cuda_plan;

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--variants") == 0) {
    std::printf("{\"%s\": [", plan::kernel_name(plan::Kernel::kWarpRows));
    bool first = true;
    for (int c : plan::kWarpRowsChunkVariants) {
      std::printf("%s%d", first ? "" : ", ", c);
      first = false;
    }
    std::printf("], \"%s\": [%d], \"%s\": [null], \"vector_bytes\": %d, \"vector_widths\": [",
                plan::kernel_name(plan::Kernel::kBlockRows), plan::kBlockRowsChunks,
                plan::kernel_name(plan::Kernel::kStreamingRows), plan::kVectorBytes);
    first = true;
    for (int w : plan::kVectorWidths) {
      std::printf("%s%d", first ? "" : ", ", w);
      first = false;
    }
    std::printf("], \"max_threads\": %d, \"streaming_threads\": %d}\n", plan::kMaxThreads, plan::kStreamingThreads);
    return 0;
  }
  long long rows = 0, hidden = 0;
  int elem_bytes = 0, alignment = 0;
  while (std::scanf("%lld %lld %d %d", &rows, &hidden, &elem_bytes, &alignment) == 4) {
    const plan::LaunchPlan p = plan::make_plan(rows, hidden, elem_bytes, alignment);
    std::printf(
        "{\"rows\": %lld, \"hidden\": %lld, \"elem_bytes\": %d, \"alignment\": %d, \"kernel\": \"%s\", \"vec\": %d, "
        "\"chunks\": %d, \"threads\": %d, \"rows_per_block\": %d, \"blocks\": %lld}\n",
        rows, hidden, elem_bytes, alignment, plan::kernel_name(p.kernel), p.vec, p.chunks, p.threads, p.rows_per_block,
        static_cast<long long>(p.blocks));
  }
  return 0;
}
