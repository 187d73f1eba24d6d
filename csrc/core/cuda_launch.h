// One launch function for the CUDA kernels, whichever compiler builds them.
//
//   launch_kernel(kernel, grid, block, shared_bytes, stream, args...)
//
// Under nvcc it is exactly `kernel<<<grid, block, shared_bytes, stream>>>(args...)`.
// Under a host C++ compiler the same kernels run on the CPU in the SIMT
// emulator (csrc/emu/simt.h, force-included by its build), which gives every
// CUDA thread a fiber, so that the kernels' logic (indexing, barriers,
// shuffles, tails, alignment paths) is tested on machines without a GPU.
// Only the launch differs between the two; the kernel bodies are the same text.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#if !defined(__CUDACC__) && !defined(SIMT_EMULATOR)
#error "fused_norm_cuda.cu is compiled by nvcc, or by a host compiler with the SIMT emulator (-include csrc/emu/simt.h)"
#endif

namespace fused_norm {

template <typename... Params, typename... Args>
inline void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                          Args&&... args) {
#if defined(__CUDACC__)
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#else
  ::simt::launch(kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
#endif
}

}  // namespace fused_norm
