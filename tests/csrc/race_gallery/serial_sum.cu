// Thread 0 sums the block's partials serially into one shared slot, which
// every thread then reads: without a second barrier, the other threads may
// read the slot before thread 0 has written it (on a GPU they usually do).
#include <cmath>
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 128;
constexpr int kBlocks = 2;

__global__ void serial_sum_read_without_barrier(const float* x, float* out) {
  __shared__ float partial[kThreads];
  __shared__ float total;
  const int t = threadIdx.x;
  const int i = blockIdx.x * kThreads + t;
  partial[t] = x[i];
  __syncthreads();
  if (t == 0) {
    float s = 0.0f;
    for (int k = 0; k < kThreads; ++k) s += partial[k];
    total = s;  // gallery: write
  }
  out[i] = partial[t] / total;  // gallery: read
}

__global__ void serial_sum_read_after_barrier(const float* x, float* out) {
  __shared__ float partial[kThreads];
  __shared__ float total;
  const int t = threadIdx.x;
  const int i = blockIdx.x * kThreads + t;
  partial[t] = x[i];
  __syncthreads();
  if (t == 0) {
    float s = 0.0f;
    for (int k = 0; k < kThreads; ++k) s += partial[k];
    total = s;
  }
  __syncthreads();
  out[i] = partial[t] / total;
}

// 0: the kernel ran and every output is right; -1: a wrong output; else the CUDA error.
extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  std::vector<float> x(kThreads * kBlocks), out(x.size(), -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + static_cast<float>(i % 7);
  fused_norm::launch_kernel(correct ? serial_sum_read_after_barrier : serial_sum_read_without_barrier, dim3(kBlocks),
                            dim3(kThreads), 0, nullptr, x.data(), out.data());
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  for (int b = 0; b < kBlocks; ++b) {
    float s = 0.0f;
    for (int k = 0; k < kThreads; ++k) s += x[b * kThreads + k];
    for (int k = 0; k < kThreads; ++k) {
      if (std::fabs(out[b * kThreads + k] - x[b * kThreads + k] / s) > 1e-6f) return -1;
    }
  }
  return 0;
}
