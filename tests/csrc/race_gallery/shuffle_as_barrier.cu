// Each warp's lane 0 stores the warp's first value in shared memory, and a
// warp sum by shuffles follows before every lane reads it. The shuffles make
// every lane wait for lane 0, but they move registers only: the CUDA
// programming guide promises memory ordering for __syncwarp(), not for
// shuffles, so the other lanes may read the slot before lane 0's store.
#include <vector>

#include "cuda_launch.h"

constexpr int kThreads = 64;

template <bool kSyncWarp>
__device__ int sum_plus_first(const int* in) {
  __shared__ int first[kThreads / 32];
  const int t = threadIdx.x;
  const int warp = t / warpSize;
  int v = in[t];
  if (t % warpSize == 0) first[warp] = v;  // gallery: write
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (kSyncWarp) __syncwarp();
  return v + first[warp];  // gallery: read
}

__global__ void first_read_across_shuffles(const int* in, int* out) { out[threadIdx.x] = sum_plus_first<false>(in); }

__global__ void first_read_after_syncwarp(const int* in, int* out) { out[threadIdx.x] = sum_plus_first<true>(in); }

extern "C" __attribute__((visibility("default"))) int gallery_run(int correct) {
  std::vector<int> in(kThreads), out(kThreads, -1);
  for (int t = 0; t < kThreads; ++t) in[t] = 5 * t - 40;
  fused_norm::launch_kernel(correct ? first_read_after_syncwarp : first_read_across_shuffles, dim3(1), dim3(kThreads),
                            0, nullptr, in.data(), out.data());
  if (const cudaError_t e = cudaGetLastError()) return static_cast<int>(e);
  for (int t = 0; t < kThreads; ++t) {
    const int base = t - t % 32;
    int sum = 0;
    for (int l = 0; l < 32; ++l) sum += in[base + l];
    if (out[t] != sum + in[base]) return -1;
  }
  return 0;
}
