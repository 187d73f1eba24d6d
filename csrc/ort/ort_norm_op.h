// The myops::fused_norm custom op, shared by every execution provider.
//
//   Y = fused_norm(X, weight, bias; epsilon)
//   X: [..., hidden]; weight, bias: [hidden]; Y: X's shape and dtype.
//   Y[r, :] = X[r, :] * rsqrt(mean(X[r, :]^2) + epsilon) * weight + bias
//
// What is common to all providers lives here: the op's signature, the
// `epsilon` attribute (read by name), shape inference, argument validation and
// the allocation of Y through ORT. A provider supplies only a Backend:
//
//   struct MyBackend {
//     static constexpr const char* kExecutionProvider = "CUDAExecutionProvider";
//     // Runs the validated call; Y is already allocated by ORT.
//     static Ort::Status Run(Ort::KernelContext& context, const NormCall& call);
//   };
//   void AddMyOps(Ort::CustomOpDomain& domain) {
//     static NormOp<MyBackend> op;  // must outlive every session
//     domain.Add(&op);
//   }
//
// Every callback ORT calls through the C boundary returns errors as an
// OrtStatus and never lets an exception escape: an exception crossing the C
// ABI terminates the process.
#pragma once

#include <onnxruntime_cxx_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/fused_norm.h"
#include "ort_debug_dump.h"

namespace fused_norm_ort {

inline constexpr const char* kDomain = "myops";
inline constexpr const char* kOpName = "fused_norm";
inline constexpr const char* kEpsilonAttribute = "epsilon";

// One validated call: the core's operands, and where ORT allocated Y (a
// device provider launches on the device that holds Y).
struct NormCall {
  fused_norm::NormProblem problem;
  OrtMemoryInfoDeviceType y_device_type = OrtMemoryInfoDeviceType_CPU;
  int y_device_id = 0;
};

// Reads the float attribute `epsilon` by name; a missing or non-float
// attribute is an error (it fails session creation: the model is malformed).
OrtStatusPtr ReadEpsilon(const OrtKernelInfo* info, float* epsilon) noexcept;

// Validates one call (ranks, lengths, dtypes, epsilon), allocates Y through
// ORT's allocator for this node, and fills `call` with the raw pointers and
// Y's device. Never reads tensor data, so it serves device tensors as well.
Ort::Status PrepareNormCall(Ort::KernelContext& context, float epsilon, NormCall& call);

// Type and shape inference: Y gets X's dtype and shape (symbolic dims kept).
// Runs while ORT resolves and optimises the graph, with no data. Never fails
// on bad inputs: PrepareNormCall reports those when the session runs. When
// X's shape is unknown nothing is set, and ORT types Y after the last untyped
// input (bias) - equal to X's dtype in any graph the kernel accepts.
OrtStatusPtr InferNormOutputShape(OrtShapeInferContext* context) noexcept;

// Converts the exception being handled into an OrtStatus (call in catch blocks).
OrtStatusPtr StatusFromCurrentException() noexcept;

// "[2, 3, 4]": a shape as error messages and the debug dump's meta.json (JSON) write it.
std::string ShapeString(const std::vector<int64_t>& shape);

// One kernel instance per node: holds the node's epsilon.
template <typename Backend>
class NormKernel {
 public:
  NormKernel(float epsilon, std::unique_ptr<DebugDump> dump) : epsilon_(epsilon), dump_(std::move(dump)) {}

  OrtStatusPtr ComputeV2(OrtKernelContext* raw_context) noexcept {
    try {
      Ort::KernelContext context(raw_context);
      NormCall call;
      Ort::Status status = PrepareNormCall(context, epsilon_, call);
      if (!status.IsOK()) return status.release();
      if (call.problem.rows == 0 || call.problem.hidden == 0) return nullptr;  // empty Y: nothing to write
      Ort::Status run = Backend::Run(context, call);
      if (dump_ && run.IsOK()) dump_->Write(context, call.problem);  // null unless a debug dump was asked for
      return run.release();
    } catch (...) {
      return StatusFromCurrentException();
    }
  }

 private:
  float epsilon_;
  std::unique_ptr<DebugDump> dump_;
};

template <typename Backend>
struct NormOp : Ort::CustomOpBase<NormOp<Backend>, NormKernel<Backend>, /*WithStatus=*/true> {
  NormOp() {
    // Our own shape-inference callback instead of CustomOpBase's, whose
    // Ort::ShapeInferContext wrapper is constructed outside any try block.
    OrtCustomOp::InferOutputShapeFn = [](const OrtCustomOp*, OrtShapeInferContext* context) -> OrtStatusPtr {
      return InferNormOutputShape(context);
    };
  }

  const char* GetName() const { return kOpName; }
  const char* GetExecutionProviderType() const { return Backend::kExecutionProvider; }

  // All three inputs are type-agnostic (UNDEFINED): ORT then accepts any
  // element type when the session is created, and the kernel checks the
  // dtypes when it runs, so an unsupported one (int32) becomes a clear error
  // from session.run instead of "no kernel found" at load time.
  size_t GetInputTypeCount() const { return 3; }
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; }

  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; }
  // ORT refuses a REQUIRED output of undefined type unless exactly one input
  // is undefined (it could not tell which input's type the output takes).
  // Declared optional, it is accepted, and InferNormOutputShape gives it X's
  // type; the kernel still requires Y to be present.
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t) const {
    return OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_OPTIONAL;
  }

  OrtStatusPtr CreateKernelV2(const OrtApi& /*api*/, const OrtKernelInfo* info, void** kernel) const noexcept {
    try {
      float epsilon = 0.0f;
      if (OrtStatusPtr status = ReadEpsilon(info, &epsilon)) return status;
      *kernel = new NormKernel<Backend>(epsilon, DebugDump::ForKernel(info, Backend::kExecutionProvider));
      return nullptr;
    } catch (...) {
      return StatusFromCurrentException();
    }
  }
};

}  // namespace fused_norm_ort
