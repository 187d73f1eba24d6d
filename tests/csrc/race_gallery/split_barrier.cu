// The even and the odd threads of a block take different branches of an
// `if`, each with a __syncthreads() of its own. CUDA allows __syncthreads()
// in conditional code only where the whole block takes the same branch:
// threads at two different barriers may hang or pass each other's barrier.
// The fix moves the one barrier after the branches.
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 64;

__global__ void barrier_in_each_branch(const int* in, int* out) {
  __shared__ int slot[kThreads];
  const int t = threadIdx.x;
  if (t % 2 == 0) {
    slot[t] = in[t] + 1;
    __syncthreads();  // gallery: barrier
  } else {
    slot[t] = in[t] - 1;
    __syncthreads();  // gallery: barrier
  }
  out[t] = slot[kThreads - 1 - t];
}

__global__ void barrier_after_the_branches(const int* in, int* out) {
  __shared__ int slot[kThreads];
  const int t = threadIdx.x;
  if (t % 2 == 0) {
    slot[t] = in[t] + 1;
  } else {
    slot[t] = in[t] - 1;
  }
  __syncthreads();
  out[t] = slot[kThreads - 1 - t];
}

extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  std::vector<int> in(kThreads), out(kThreads, -1);
  for (int t = 0; t < kThreads; ++t) in[t] = 7 * t + 3;
  fused_norm::launch_kernel(correct ? barrier_after_the_branches : barrier_in_each_branch, dim3(1), dim3(kThreads), 0,
                            nullptr, in.data(), out.data());
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  for (int t = 0; t < kThreads; ++t) {
    const int u = kThreads - 1 - t;
    if (out[t] != in[u] + (u % 2 == 0 ? 1 : -1)) return -1;
  }
  return 0;
}
