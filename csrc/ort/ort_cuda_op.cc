// myops::fused_norm and myops::fused_add_norm for ONNX Runtime's
// CUDAExecutionProvider: the validation, epsilon attribute, shape inference
// and allocation of the outputs are NormOp's (shared with the CPU ops,
// ort_norm_op.h); this file only launches the core's CUDA kernels
// (csrc/core/fused_norm_cuda.cu) on ORT's compute stream.
//
// Compiled instead of ort_cuda_op_stub.cc in CUDA builds of the library
// (env/builder/ort_library.py), and linked with the CUDA runtime.
//
// Memory: the op declares no input/output memory type, so ORT hands the
// kernel its inputs in the CUDA provider's device memory (copying host
// inputs there itself) and allocates the outputs (Y, and S of the add) there. The launch goes to the
// device that holds Y (its memory info), made current for the launch and
// restored after, rather than to whatever device is current on ORT's calling
// thread.
#include <cuda_runtime_api.h>

#include <string>

#include "core/fused_norm.h"
#include "ort_norm_op.h"
#include "ort_ops.h"

namespace fused_norm_ort {
namespace {

struct CudaBackend {
  static constexpr const char* kExecutionProvider = "CUDAExecutionProvider";

  static Ort::Status Run(Ort::KernelContext& context, const NormCall& call) {
    return Launch(context, call, kOpName,
                  [&](void* stream, bool* earlier) { return fused_norm::cuda_forward(call.problem, stream, earlier); });
  }
  static Ort::Status Run(Ort::KernelContext& context, const AddNormCall& call) {
    return Launch(context, call, kAddOpName, [&](void* stream, bool* earlier) {
      return fused_norm::cuda_add_forward(call.problem, stream, earlier);
    });
  }

 private:
  // `forward(stream, &earlier)` launches the call's kernel (cuda_forward or
  // cuda_add_forward) on ORT's stream, with Y's device current.
  template <typename Call, typename Forward>
  static Ort::Status Launch(Ort::KernelContext& context, const Call& call, const char* op, const Forward& forward) {
    if (call.y_device_type != OrtMemoryInfoDeviceType_GPU) {
      return Failure(op, "Y is not in GPU memory (ORT memory info device type " +
                             std::to_string(static_cast<int>(call.y_device_type)) + ")");
    }
    // ORT's stream for this session, so the kernel is ordered with the
    // provider's own copies and kernels. A null stream would mean the legacy
    // default stream, which synchronises with every other stream: refuse it.
    void* stream = context.GetGPUComputeStream();
    if (stream == nullptr)
      return Failure(op, "ONNX Runtime gave no CUDA compute stream; refusing the legacy default stream");
    int previous = 0;
    cudaError_t err = cudaGetDevice(&previous);
    if (err == cudaSuccess && previous != call.y_device_id) err = cudaSetDevice(call.y_device_id);
    if (err != cudaSuccess) {
      return Failure(op, "cannot make Y's device " + std::to_string(call.y_device_id) + " current: " + Describe(err));
    }
    bool earlier = false;
    const auto launch = static_cast<cudaError_t>(forward(stream, &earlier));
    if (previous != call.y_device_id) cudaSetDevice(previous);
    if (launch == cudaSuccess) return Ort::Status{nullptr};
    if (earlier) {
      return Failure(op, "not launched: an earlier CUDA error is pending on device " +
                             std::to_string(call.y_device_id) + " (left by a previous operation): " + Describe(launch));
    }
    return Failure(op, "kernel launch failed on device " + std::to_string(call.y_device_id) + ": " + Describe(launch));
  }

  static std::string Describe(cudaError_t err) {
    return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
  }
  static Ort::Status Failure(const char* op, const std::string& what) {
    const std::string message = std::string(kDomain) + "::" + op + " (CUDAExecutionProvider): " + what;
    return Ort::Status(message.c_str(), ORT_EP_FAIL);
  }
};

}  // namespace

void AddCudaOps(Ort::CustomOpDomain& domain) {
  static NormOp<CudaBackend> op;  // must outlive every session
  static NormOp<CudaBackend, FusedAddNormKind> add_op;
  domain.Add(&op);
  domain.Add(&add_op);
}

}  // namespace fused_norm_ort
