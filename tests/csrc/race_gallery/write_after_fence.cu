// The last block to finish sums every block's partial result, as in the
// CUDA programming guide's __threadfence() example, but here the partial is
// written after the fence, between it and the ticket. A fence orders only
// what its thread did before it: the ticket's atomic publishes nothing the
// thread wrote after the fence, so the last block may read a partial that is
// not yet visible to it. The partials go through the cache-hint stores and
// loads (__stcg, __ldcg) as a kernel's streaming accesses would.
#include <cmath>
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 32;
constexpr int kBlocks = 4;

template <bool kWriteFirst>
__device__ void sum_and_publish(const float* x, float* partials, unsigned* count, bool* is_last) {
  float s = 0.0f;
  for (int k = 0; k < kThreads; ++k) s += x[blockIdx.x * kThreads + k];
  if (kWriteFirst) __stcg(&partials[blockIdx.x], s);
  __threadfence();
  if (!kWriteFirst) __stcg(&partials[blockIdx.x], s);  // gallery: write
  const unsigned ticket = atomicInc(count, gridDim.x);
  *is_last = ticket == gridDim.x - 1;
}

template <bool kWriteFirst>
__device__ void sum_partials(const float* partials, float* total) {
  float s = 0.0f;
  for (unsigned b = 0; b < gridDim.x; ++b) s += __ldcg(&partials[b]);  // gallery: read
  *total = s;
}

__global__ void partial_written_after_fence(const float* x, float* partials, unsigned* count, float* total) {
  __shared__ bool is_last;
  if (threadIdx.x == 0) sum_and_publish<false>(x, partials, count, &is_last);
  __syncthreads();
  if (is_last && threadIdx.x == 0) sum_partials<false>(partials, total);
}

__global__ void partial_written_before_fence(const float* x, float* partials, unsigned* count, float* total) {
  __shared__ bool is_last;
  if (threadIdx.x == 0) sum_and_publish<true>(x, partials, count, &is_last);
  __syncthreads();
  if (is_last && threadIdx.x == 0) sum_partials<true>(partials, total);
}

extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  std::vector<float> x(kThreads * kBlocks), partials(kBlocks, -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i % 9);
  unsigned count = 0;
  float total = -1.0f;
  fused_norm::launch_kernel(correct ? partial_written_before_fence : partial_written_after_fence, dim3(kBlocks),
                            dim3(kThreads), 0, nullptr, x.data(), partials.data(), &count, &total);
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  float s = 0.0f;
  for (float v : x) s += v;
  return std::fabs(total - s) <= 1e-4f && count == kBlocks ? 0 : -1;  // one ticket per block
}
