// The fused norm's CUDA kernels, built by the host compiler with the SIMT
// emulator, behind one C function for ctypes (tests/helpers/emulated_kernels.py)
// and for the AddressSanitizer probe (asan_probe.cpp).
//
// The kernels themselves come from csrc/core/fused_norm_cuda.cu, compiled in
// its own translation unit with simt.h force-included; this file only calls
// the same host entry point the torch and ONNX Runtime adapters call.
#include <cstdint>

#include "fused_norm.h"

extern "C" __attribute__((visibility("default"))) int fused_norm_emulated_forward(
    const void* x, const void* weight, const void* bias, void* y, int64_t rows, int64_t hidden, double eps,
    int dtype) {
  fused_norm::NormProblem p;
  p.x = x;
  p.weight = weight;
  p.bias = bias;
  p.y = y;
  p.rows = rows;
  p.hidden = hidden;
  p.eps = eps;
  p.dtype = static_cast<fused_norm::DType>(dtype);
  return fused_norm::cuda_forward(p, nullptr);
}
