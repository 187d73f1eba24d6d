// Lanes pass values to their neighbour through shared memory, with a
// __ballot_sync() between the store and the load where __syncwarp() belongs.
// All lanes do meet at the vote, but a vote only exchanges predicates: the
// CUDA programming guide promises memory ordering for __syncwarp(), not for
// votes, so the load may still miss the neighbour's store.
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 64;

__global__ void exchange_across_a_vote(const int* in, int* out) {
  __shared__ int slot[kThreads];
  const int t = threadIdx.x;
  const int lane = t % warpSize;
  const int base = t - lane;
  slot[t] = in[t] * 2;  // gallery: write
  const unsigned positive = __ballot_sync(0xffffffffu, in[t] > 0);
  out[t] = slot[base + (lane + 1) % warpSize] + static_cast<int>(positive & 0u);  // gallery: read
}

__global__ void exchange_across_a_syncwarp(const int* in, int* out) {
  __shared__ int slot[kThreads];
  const int t = threadIdx.x;
  const int lane = t % warpSize;
  const int base = t - lane;
  slot[t] = in[t] * 2;
  const unsigned positive = __ballot_sync(0xffffffffu, in[t] > 0);
  __syncwarp();
  out[t] = slot[base + (lane + 1) % warpSize] + static_cast<int>(positive & 0u);
}

extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  std::vector<int> in(kThreads), out(kThreads, -1);
  for (int t = 0; t < kThreads; ++t) in[t] = 3 * t + 1;
  fused_norm::launch_kernel(correct ? exchange_across_a_syncwarp : exchange_across_a_vote, dim3(1), dim3(kThreads), 0,
                            nullptr, in.data(), out.data());
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  for (int t = 0; t < kThreads; ++t) {
    if (out[t] != 2 * in[t - t % 32 + (t % 32 + 1) % 32]) return -1;
  }
  return 0;
}
