// Which CUDA kernel normalises a problem, and with which launch shape.
//
// Plain host C++17 with no CUDA headers, so that the choice can be compiled
// and tested on a machine without nvcc or a GPU (tests/helpers/cuda_plan_probe.cpp),
// and so that the kernel file and the tests share one table of variants.
//
// The kernel is memory-bound (about 1 FLOP per byte moved), so the variants
// differ only in how they keep enough 16-byte loads in flight and how much of
// a row each thread holds:
//   kWarpRows      one warp per row, kWarpRowsPerBlock rows per block; each
//                  lane holds `chunks` (1, 2 or 4) vectors of the row in
//                  registers. For short rows, where a whole block per row
//                  would leave most threads idle.
//   kBlockRows     one block per row, `threads` chosen at run time (64..1024),
//                  each thread holds kBlockRowsChunks vectors. Long rows get
//                  more threads, so x is still read from DRAM exactly once.
//   kStreamingRows one block of 1024 threads per row, two passes over the row
//                  (the second re-reads x, normally from L2). Only for rows too
//                  long to sit in the registers of one block.
// A "vector" is `vec` elements: 16 bytes when every pointer is 16-byte aligned
// and the row length is a multiple of 16 / sizeof(T), else one element.
#pragma once

#include <cstdint>

namespace fused_norm {
namespace cuda_plan {

enum class Kernel : int { kWarpRows = 0, kBlockRows = 1, kStreamingRows = 2 };

constexpr int kWarpSize = 32;
constexpr int kWarpRowsPerBlock = 4;  // 128-thread blocks: enough blocks to spread 1K rows over 132 SMs
constexpr int kWarpRowsThreads = kWarpSize * kWarpRowsPerBlock;
constexpr int kWarpRowsChunkVariants[] = {1, 2, 4};
constexpr int kWarpRowsMaxChunks = 4;
constexpr int kBlockRowsChunks = 4;
constexpr int kMaxThreads = 1024;
constexpr int kMinBlockThreads = 64;
constexpr int kVectorBytes = 16;
// gridDim.x limit; kernels loop over rows, so any row count is covered.
constexpr int64_t kMaxGridX = 2147483647;

inline const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kWarpRows:
      return "warp_rows_kernel";
    case Kernel::kBlockRows:
      return "block_rows_kernel";
    case Kernel::kStreamingRows:
      return "streaming_rows_kernel";
  }
  return "unknown";
}

struct LaunchPlan {
  Kernel kernel = Kernel::kWarpRows;
  int vec = 1;             // elements per load/store
  int chunks = 0;          // compile-time vectors per thread (0: streaming loop)
  int threads = 0;         // blockDim.x, a multiple of 32
  int rows_per_block = 1;
  int64_t blocks = 0;      // gridDim.x (already clamped to kMaxGridX)
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `elem_bytes` = sizeof(T); `aligned16` = x, weight, bias and y all start on
// a 16-byte boundary. Requires rows > 0 and hidden > 0.
inline LaunchPlan make_plan(int64_t rows, int64_t hidden, int elem_bytes, bool aligned16) {
  LaunchPlan plan;
  const int wide = kVectorBytes / elem_bytes;
  plan.vec = (aligned16 && hidden % wide == 0) ? wide : 1;
  const int64_t nvec = hidden / plan.vec;

  if (nvec <= int64_t{kWarpSize} * kWarpRowsMaxChunks) {
    plan.kernel = Kernel::kWarpRows;
    plan.chunks = kWarpRowsMaxChunks;
    for (int c : kWarpRowsChunkVariants) {
      if (nvec <= int64_t{kWarpSize} * c) {
        plan.chunks = c;
        break;
      }
    }
    plan.threads = kWarpRowsThreads;
    plan.rows_per_block = kWarpRowsPerBlock;
  } else if (nvec <= int64_t{kMaxThreads} * kBlockRowsChunks) {
    plan.kernel = Kernel::kBlockRows;
    plan.chunks = kBlockRowsChunks;
    const int64_t threads = ceil_div(ceil_div(nvec, kBlockRowsChunks), kWarpSize) * kWarpSize;
    plan.threads = static_cast<int>(threads < kMinBlockThreads ? kMinBlockThreads : threads);
  } else {
    plan.kernel = Kernel::kStreamingRows;
    plan.chunks = 0;
    plan.threads = kMaxThreads;
  }
  const int64_t blocks = ceil_div(rows, plan.rows_per_block);
  plan.blocks = blocks < kMaxGridX ? blocks : kMaxGridX;
  return plan;
}

}  // namespace cuda_plan
}  // namespace fused_norm
