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
//   kStreamingRows one block of kStreamingThreads threads per row, two passes
//                  over the row (the second re-reads x, normally from L2). Only
//                  for rows too long to sit in the registers of one block.
// A "vector" is `vec` elements moved as one machine word: the widest of 16, 8
// and 4 bytes (or one element) at which x and y share their phase, i.e. the
// largest power of two dividing the distance between their addresses. Each
// row is split where x reaches that alignment: a scalar head (fewer than
// `vec` elements, on the first threads), a body of whole vectors, a scalar
// tail. So an odd row length, or x and y both at an odd element offset, keeps
// 16-byte accesses for the body; only x and y at different phases step down.
// Rows start at different phases when the row length is not a multiple of
// `vec`, so the kernels compute the head per row.
//
// Register and occupancy targets on sm_90 (64K registers and 2048 threads per
// SM), checked from the machine code by tests/csrc/test_cuda_machine_code.py:
//   warp_rows     8 blocks of 128 threads per SM (__launch_bounds__: <= 64 registers);
//   block_rows    <= 48 registers: 5 blocks of 256 threads (the 4096 x 8192
//                 bf16 shape), 1280 threads x 64 bytes of x in flight per SM;
//   streaming     2 blocks of 512 threads per SM, so one block's loads run
//                 while another waits at its row's barrier.
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
constexpr int kWarpRowsMinBlocksPerSm = 8;
constexpr int kBlockRowsChunks = 4;
// block_rows' register cap (nvcc __maxnreg__): 5 blocks of 256 threads.
// One-element vectors hold fewer bytes: 40 registers, 6 blocks.
constexpr int kBlockRowsMaxRegisters = 48;
constexpr int kBlockRowsScalarMaxRegisters = 40;
constexpr int kStreamingThreads = 512;
constexpr int kStreamingMinBlocksPerSm = 2;
constexpr int kMaxThreads = 1024;
constexpr int kMinBlockThreads = 64;
constexpr int kVectorBytes = 16;
// Vector widths in bytes, widest first; each kernel is instantiated for each
// width at least one element wide, plus one element.
constexpr int kVectorWidths[] = {16, 8, 4};
// The add + norm's register kernels hold two input vectors per chunk (x and
// residual): twice the bytes in flight per thread, in twice the registers.
// Where that does not fit the norm's caps in one load round without spills,
// they run fewer blocks per SM and still keep more bytes in flight than the
// norm's targets above:
//   add block_rows (vectors): <= 64 registers, 4 blocks of 256 threads, 1024
//                  threads x 128 bytes = 128 KB per SM (the norm: 80 KB); at
//                  48 ptxas adds 16-byte float and float64 vectors before
//                  their last loads are issued (two rounds);
//   add warp_rows, 4 chunks of 16-byte vectors (128 bytes of x and residual
//                  per lane, 32 registers; at 64 the 16-bit ones spill):
//                  6 blocks of 128 threads (<= 80 registers), 768 threads x
//                  128 bytes = 96 KB per SM (the norm: 64 KB).
constexpr int kAddBlockRowsMaxRegisters = 64;
constexpr int kAddWideWarpRowsMinBlocksPerSm = 6;

constexpr int add_block_rows_max_registers(int vec) {
  return vec == 1 ? kBlockRowsScalarMaxRegisters : kAddBlockRowsMaxRegisters;
}
constexpr int add_warp_rows_min_blocks(int elem_bytes, int vec, int chunks) {
  return vec * elem_bytes == kVectorBytes && chunks == kWarpRowsMaxChunks ? kAddWideWarpRowsMinBlocksPerSm
                                                                          : kWarpRowsMinBlocksPerSm;
}
// gridDim.x limit; kernels loop over rows, so any row count is covered.
constexpr int64_t kMaxGridX = 2147483647;

inline const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kWarpRows: return "warp_rows_kernel";
    case Kernel::kBlockRows: return "block_rows_kernel";
    case Kernel::kStreamingRows: return "streaming_rows_kernel";
  }
  return "unknown";
}

struct LaunchPlan {
  Kernel kernel = Kernel::kWarpRows;
  int vec = 1;      // elements per load/store
  int chunks = 0;   // compile-time vectors per thread (0: streaming loop)
  int threads = 0;  // blockDim.x, a multiple of 32
  int rows_per_block = 1;
  int64_t blocks = 0;  // gridDim.x (already clamped to kMaxGridX)
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Largest power of two (at most kVectorBytes) dividing `address`.
inline int alignment_of(uint64_t address) {
  int alignment = kVectorBytes;
  while (alignment > 1 && address % static_cast<uint64_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

// Elements per vector: the widest kVectorWidths entry that is at least one
// element and fits `alignment`; else 1.
inline int vector_elements(int elem_bytes, int alignment) {
  for (int bytes : kVectorWidths) {
    if (bytes >= elem_bytes && bytes <= alignment) return bytes / elem_bytes;
  }
  return 1;
}

// `elem_bytes` = sizeof(T); `alignment` = the largest power of two (<= 16)
// dividing the distance between x and y (alignment_of of their addresses'
// bitwise XOR): the widest access both can share at one element index.
// Weight and bias do not enter it: the kernels read them at x's phase, with
// vectors in the rows where their phase matches and element by element in
// the others. Requires rows > 0 and hidden > 0.
inline LaunchPlan make_plan(int64_t rows, int64_t hidden, int elem_bytes, int alignment) {
  LaunchPlan plan;
  plan.vec = vector_elements(elem_bytes, alignment);
  // Whole vectors in a row's body (at most; one fewer where a head is split
  // off). The head and the tail, each shorter than a vector, go to the first
  // threads, which every variant has.
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
    plan.threads = kStreamingThreads;
  }
  const int64_t blocks = ceil_div(rows, plan.rows_per_block);
  plan.blocks = blocks < kMaxGridX ? blocks : kMaxGridX;
  return plan;
}

}  // namespace cuda_plan
}  // namespace fused_norm
