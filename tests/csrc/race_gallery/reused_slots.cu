// Each row's warp sums go through one shared slot per warp, read by every
// thread after a barrier. With one set of slots for every row, a warp that
// runs ahead into the next row overwrites its slot before a slower warp has
// read it for the previous row. The twin alternates two sets: a warp can only
// reach the next use of a set after passing the barrier of the other.
#include <cmath>
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 3;

__device__ float warp_total(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void one_slot_set_for_every_row(const float* x, float* out) {
  __shared__ float sums[kWarps];
  const int t = threadIdx.x;
  for (int row = 0; row < kRows; ++row) {
    const float v = warp_total(x[row * kThreads + t]);
    if (t % 32 == 0) sums[t / 32] = v;  // gallery: write
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += sums[w];  // gallery: read
    out[row * kThreads + t] = total;
  }
}

__global__ void alternating_slot_sets(const float* x, float* out) {
  __shared__ float sums[2][kWarps];
  const int t = threadIdx.x;
  for (int row = 0; row < kRows; ++row) {
    const float v = warp_total(x[row * kThreads + t]);
    if (t % 32 == 0) sums[row % 2][t / 32] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += sums[row % 2][w];
    out[row * kThreads + t] = total;
  }
}

extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  std::vector<float> x(kRows * kThreads), out(x.size(), -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) - 1.5f;
  fused_norm::launch_kernel(correct ? alternating_slot_sets : one_slot_set_for_every_row, dim3(1), dim3(kThreads), 0,
                            nullptr, x.data(), out.data());
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  for (int r = 0; r < kRows; ++r) {
    float s = 0.0f;
    for (int t = 0; t < kThreads; ++t) s += x[r * kThreads + t];
    for (int t = 0; t < kThreads; ++t) {
      if (std::fabs(out[r * kThreads + t] - s) > 1e-4f) return -1;
    }
  }
  return 0;
}
