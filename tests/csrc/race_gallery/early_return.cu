// Threads past the end of the data return before the block's barrier, which
// is legal since Volta: exited threads no longer count at __syncthreads().
// The last live thread then reads its right neighbour's slot, which belongs
// to a thread that returned and never wrote it.
#include <cmath>
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 64;
constexpr int kLength = 50;

__global__ void neighbour_of_an_exited_thread(const float* x, float* out, int n) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  if (t >= n) return;
  tile[t] = x[t];
  __syncthreads();
  out[t] = tile[t] + tile[t + 1];  // gallery: read
}

__global__ void neighbour_within_the_data(const float* x, float* out, int n) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  if (t >= n) return;
  tile[t] = x[t];
  __syncthreads();
  out[t] = tile[t] + (t + 1 < n ? tile[t + 1] : 0.0f);
}

extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  std::vector<float> x(kLength), out(kLength, -1.0f);
  for (int i = 0; i < kLength; ++i) x[i] = static_cast<float>(i) * 0.5f;
  fused_norm::launch_kernel(correct ? neighbour_within_the_data : neighbour_of_an_exited_thread, dim3(1),
                            dim3(kThreads), 0, nullptr, x.data(), out.data(), kLength);
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  for (int i = 0; i < kLength; ++i) {
    const float want = x[i] + (i + 1 < kLength ? x[i + 1] : 0.0f);
    if (!(std::fabs(out[i] - want) <= 1e-6f)) return -1;
  }
  return 0;
}
