// The fused norm's CUDA kernels, built by the host compiler with the SIMT
// emulator, behind C functions for ctypes (tests/helpers/emulated_kernels.py)
// and for the AddressSanitizer probe (asan_probe.cpp).
//
// The kernels themselves come from csrc/core/fused_norm_cuda.cu, compiled in
// its own translation unit with simt.h force-included; this file only calls
// the same host entry point the torch and ONNX Runtime adapters call.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "fused_norm.h"

extern "C" __attribute__((visibility("default"))) int fused_norm_emulated_forward(const void* x, const void* weight,
                                                                                  const void* bias, void* y,
                                                                                  int64_t rows, int64_t hidden,
                                                                                  double eps, int dtype) {
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

// The fused residual add + norm through fused_norm::cuda_add_forward; y may
// be x and residual_out may be residual (the in-place form).
extern "C" __attribute__((visibility("default"))) int fused_norm_emulated_add_forward(
    const void* x, const void* residual, const void* weight, const void* bias, void* residual_out, void* y,
    int64_t rows, int64_t hidden, double eps, int dtype) {
  fused_norm::AddNormProblem p;
  p.norm.x = x;
  p.norm.weight = weight;
  p.norm.bias = bias;
  p.norm.y = y;
  p.norm.rows = rows;
  p.norm.hidden = hidden;
  p.norm.eps = eps;
  p.norm.dtype = static_cast<fused_norm::DType>(dtype);
  p.residual = residual;
  p.residual_out = residual_out;
  return fused_norm::cuda_add_forward(p, nullptr);
}

// The 16-bit conversions exactly as the kernels call them (Elem<Half> and
// Elem<BFloat16> in fused_norm_cuda.cu: CUDA's own header functions, here on
// their host path), so a test can compare them bit for bit with torch's.
// dtype 2: float16, 3: bfloat16. Returns -1 for another dtype.
extern "C" __attribute__((visibility("default"))) int fused_norm_emulated_to_float(int dtype, const uint16_t* in,
                                                                                   float* out, int64_t n) {
  if (dtype != 2 && dtype != 3) return -1;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = dtype == 2 ? __half2float(__ushort_as_half(in[i])) : __bfloat162float(__ushort_as_bfloat16(in[i]));
  }
  return 0;
}

extern "C" __attribute__((visibility("default"))) int fused_norm_emulated_from_float(int dtype, const float* in,
                                                                                     uint16_t* out, int64_t n) {
  if (dtype != 2 && dtype != 3) return -1;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = dtype == 2 ? __half_as_ushort(__float2half_rn(in[i])) : __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
  }
  return 0;
}
