// Lanes pass values to their neighbour through shared memory. Without
// __syncwarp() between the store and the load, lane i may read its
// neighbour's slot before the neighbour has stored it: since Volta the lanes
// of a warp are not guaranteed to run in lockstep.
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 64;

__global__ void exchange_without_syncwarp(const int* in, int* out) {
  __shared__ int slot[kThreads];
  const int t = threadIdx.x;
  const int lane = t % warpSize;
  const int base = t - lane;
  slot[t] = in[t] * 2;                          // gallery: write
  out[t] = slot[base + (lane + 1) % warpSize];  // gallery: read
}

__global__ void exchange_with_syncwarp(const int* in, int* out) {
  __shared__ int slot[kThreads];
  const int t = threadIdx.x;
  const int lane = t % warpSize;
  const int base = t - lane;
  slot[t] = in[t] * 2;
  __syncwarp();
  out[t] = slot[base + (lane + 1) % warpSize];
}

extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  std::vector<int> in(kThreads), out(kThreads, -1);
  for (int t = 0; t < kThreads; ++t) in[t] = 3 * t + 1;
  fused_norm::launch_kernel(correct ? exchange_with_syncwarp : exchange_without_syncwarp, dim3(1), dim3(kThreads), 0,
                            nullptr, in.data(), out.data());
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  for (int t = 0; t < kThreads; ++t) {
    if (out[t] != 2 * in[t - t % 32 + (t % 32 + 1) % 32]) return -1;
  }
  return 0;
}
