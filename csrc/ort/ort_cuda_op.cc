// myops::fused_norm for ONNX Runtime's CUDAExecutionProvider: the validation,
// epsilon attribute, shape inference and allocation of Y are NormOp's (shared
// with the CPU op, ort_norm_op.h); this file only launches the core's CUDA
// kernel (csrc/core/fused_norm_cuda.cu) on ORT's compute stream.
//
// Compiled instead of ort_cuda_op_stub.cc in CUDA builds of the library
// (env/build/ort_library.py), and linked with the CUDA runtime.
//
// Memory: the op declares no input/output memory type, so ORT hands the
// kernel X, weight and bias in the CUDA provider's device memory (copying
// host inputs there itself) and allocates Y there. ORT's CUDA provider makes
// its device current before running a node, so the launch targets that
// device.
#include <cuda_runtime_api.h>

#include <string>

#include "core/fused_norm.h"
#include "ort_norm_op.h"
#include "ort_ops.h"

namespace fused_norm_ort {
namespace {

struct CudaBackend {
  static constexpr const char* kExecutionProvider = "CUDAExecutionProvider";

  static Ort::Status Run(Ort::KernelContext& context, const fused_norm::NormProblem& problem) {
    // ORT's stream for this session, so the kernel is ordered with the
    // provider's own copies and kernels (the null stream would serialise
    // against every other stream instead).
    void* stream = context.GetGPUComputeStream();
    const int err = fused_norm::cuda_forward(problem, stream);
    if (err != 0) {
      const auto code = static_cast<cudaError_t>(err);
      const std::string message = std::string(kDomain) + "::" + kOpName + " (CUDAExecutionProvider): kernel launch failed: " +
                                  cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")";
      return Ort::Status(message.c_str(), ORT_EP_FAIL);
    }
    return Ort::Status{nullptr};
  }
};

}  // namespace

void AddCudaOps(Ort::CustomOpDomain& domain) {
  static NormOp<CudaBackend> op;  // must outlive every session
  domain.Add(&op);
}

}  // namespace fused_norm_ort
