// A tree reduction whose first step reads the upper half of a buffer twice
// the block's size, of which the threads only filled the lower half: on a GPU
// that half holds whatever the previous block left there.
#include <cmath>
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 64;

__global__ void tree_sum_reads_unwritten_half(const float* x, float* out) {
  __shared__ float buf[2 * kThreads];
  const int t = threadIdx.x;
  buf[t] = x[blockIdx.x * kThreads + t];
  __syncthreads();
  for (int stride = kThreads; stride > 0; stride /= 2) {
    if (t < stride) buf[t] += buf[t + stride];  // gallery: read
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

__global__ void tree_sum(const float* x, float* out) {
  __shared__ float buf[2 * kThreads];
  const int t = threadIdx.x;
  buf[t] = x[blockIdx.x * kThreads + t];
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) buf[t] += buf[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  constexpr int kBlocks = 2;
  std::vector<float> x(kThreads * kBlocks), out(kBlocks, -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 11) * 0.25f;
  fused_norm::launch_kernel(correct ? tree_sum : tree_sum_reads_unwritten_half, dim3(kBlocks), dim3(kThreads), 0,
                            nullptr, x.data(), out.data());
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  for (int b = 0; b < kBlocks; ++b) {
    float s = 0.0f;
    for (int k = 0; k < kThreads; ++k) s += x[b * kThreads + k];
    if (!(std::fabs(out[b] - s) <= 1e-4f)) return -1;
  }
  return 0;
}
