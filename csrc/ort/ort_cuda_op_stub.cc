// AddCudaOps for builds without CUDA (no nvcc, no CUDA runtime, or an
// onnxruntime whose CUDA execution provider cannot run here): registers
// nothing, so the library offers fused_norm and fused_add_norm on the CPU
// provider only. CUDA builds compile ort_cuda_op.cc instead of this file (see
// env/builder/ort_library.py); keeping the choice in the build rather than in
// #ifdefs keeps the entry point identical in both builds.
#include "ort_ops.h"

namespace fused_norm_ort {

void AddCudaOps(Ort::CustomOpDomain& /*domain*/) {}

}  // namespace fused_norm_ort
