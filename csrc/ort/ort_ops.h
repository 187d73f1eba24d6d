// Per-execution-provider registration of the myops::fused_norm kernels.
//
// ort_library.cc builds the `myops` domain once and hands it to each of these
// functions; each adds the op objects of its provider. The CPU kernel lives in
// ort_cpu_op.cc. The CUDA kernel lives in ort_cuda_op.cc in CUDA builds and
// ort_cuda_op_stub.cc (adds nothing) otherwise, so the entry point needs no
// #ifdef. Op objects must outlive every session: each function keeps its ops in
// function-local statics.
#pragma once

#include <onnxruntime_cxx_api.h>

namespace fused_norm_ort {

void AddCpuOps(Ort::CustomOpDomain& domain);
void AddCudaOps(Ort::CustomOpDomain& domain);

}  // namespace fused_norm_ort
