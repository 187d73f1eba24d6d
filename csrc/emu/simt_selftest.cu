// A kernel that calls each emulated intrinsic once and records what it saw,
// so that tests/csrc/test_simt_emulator.py can hold the emulator to CUDA's
// documented semantics (shuffle widths and edges, votes, counting barriers,
// atomics, built-in variables of 2-D blocks and grids), and a kernel whose
// threads partly exit before votes and barriers.
#include <cuda_runtime.h>

#include "cuda_launch.h"

constexpr int kFields = 13;

// in, out: one int (out: kFields ints) per thread of the grid, in linear order
// (block (x, y) is number x + y * gridDim.x; a thread's number in its block is
// threadIdx.x + threadIdx.y * blockDim.x). sum: one int, incremented atomically.
__global__ void intrinsics_kernel(const int* in, int* out, int* sum) {
  const int block_threads = blockDim.x * blockDim.y;
  const int t = threadIdx.x + threadIdx.y * blockDim.x;
  const int g = (blockIdx.x + blockIdx.y * gridDim.x) * block_threads + t;
  const int lane = t % warpSize;
  const int v = in[g];
  int* o = out + g * kFields;
  o[0] = __shfl_sync(0xffffffffu, v, (lane * 7) % 32);
  o[1] = __shfl_sync(0xffffffffu, v, 3, 8);
  o[2] = __shfl_down_sync(0xffffffffu, v, 5);
  o[3] = __shfl_up_sync(0xffffffffu, v, 3, 16);
  o[4] = __shfl_xor_sync(0xffffffffu, v, 9);
  o[5] = static_cast<int>(__ballot_sync(0xffffffffu, v & 1));
  o[6] = __any_sync(0xffffffffu, v % 10 == 7) + 2 * __all_sync(0xffffffffu, v >= 50);
  o[7] = __syncthreads_count(v & 1);
  o[8] = __syncthreads_or(v % 100 == 7) + 2 * __syncthreads_and(v >= 50);
  // Lanes 0-15 and 16-31 shuffle within their own half-warp masks.
  const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  o[9] = __shfl_xor_sync(half, v, 1);
  __syncwarp();
  atomicAdd(sum, v);
  o[10] = blockIdx.x * 1000 + blockIdx.y * 100 + threadIdx.x * 10 + threadIdx.y;
  o[11] = gridDim.x * 1000 + gridDim.y * 100 + blockDim.x * 10 + blockDim.y;
  o[12] = __shfl_xor_sync(0xffffffffu, v, 8, 8);  // width 8: a target in a later segment gives the own value
}

constexpr int kExitFields = 4;

// Threads t with t % 3 == 0 return first; the others vote and meet at barriers,
// where only live threads count (one int per thread of in, kExitFields per thread of out).
__global__ void exits_kernel(const int* in, int* out) {
  const int t = threadIdx.x;
  if (t % 3 == 0) return;
  const int v = in[t];
  int* o = out + t * kExitFields;
  o[0] = __all_sync(0xffffffffu, v >= 50);
  o[1] = __any_sync(0xffffffffu, v % 10 == 7);
  o[2] = __syncthreads_count(v & 1);
  o[3] = __syncthreads_and(v >= 50);
}

extern "C" __attribute__((visibility("default"))) int simt_selftest_exits(const int* in, int* out, int threads) {
  fused_norm::launch_kernel(exits_kernel, dim3(1), dim3(threads), 0, nullptr, in, out);
  return static_cast<int>(cudaGetLastError());
}

extern "C" __attribute__((visibility("default"))) int simt_selftest(const int* in, int* out, int* sum, int block_x,
                                                                    int block_y, int grid_x, int grid_y) {
  fused_norm::launch_kernel(intrinsics_kernel, dim3(grid_x, grid_y), dim3(block_x, block_y), 0, nullptr, in, out, sum);
  return static_cast<int>(cudaGetLastError());
}
