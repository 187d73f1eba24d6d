// The myops custom ops, shared by every execution provider.
//
//   Y = fused_norm(X, weight, bias; epsilon)
//   X: [..., hidden]; weight, bias: [hidden]; Y: X's shape and dtype.
//   Y[r, :] = X[r, :] * rsqrt(mean(X[r, :]^2) + epsilon) * weight + bias
//
//   Y, S = fused_add_norm(X, residual, weight, bias; epsilon)
//   S = X + residual (rounded to the dtype), Y = fused_norm(S, weight, bias)
//
// What is common to all providers lives here: each op's signature (a Kind),
// the `epsilon` attribute (read by name), shape inference, argument
// validation and the allocation of the outputs through ORT. A provider
// supplies only a Backend, with a Run for each kind of call it serves:
//
//   struct MyBackend {
//     static constexpr const char* kExecutionProvider = "CUDAExecutionProvider";
//     // Runs the validated call; the outputs are already allocated by ORT.
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
#include "ort/include/fused_norm_ort/fused_norm_ort.h"  // the names hosts see: domain, ops, attribute
#include "ort_debug_dump.h"

namespace fused_norm_ort {

// One validated call: the core's operands, and where ORT allocated Y (a
// device provider launches on the device that holds Y).
struct NormCall {
  fused_norm::NormProblem problem;
  OrtMemoryInfoDeviceType y_device_type = OrtMemoryInfoDeviceType_CPU;
  int y_device_id = 0;
};

// One validated call of fused_add_norm: the core's operands and where Y is.
struct AddNormCall {
  fused_norm::AddNormProblem problem;
  OrtMemoryInfoDeviceType y_device_type = OrtMemoryInfoDeviceType_CPU;
  int y_device_id = 0;
};

// Reads the float attribute `epsilon` by name; a missing or non-float
// attribute is an error (it fails session creation: the model is malformed).
// `op` names the op in the message.
OrtStatusPtr ReadEpsilon(const OrtKernelInfo* info, float* epsilon, const char* op = kOpName) noexcept;

// Validates one call (ranks, lengths, dtypes, epsilon), allocates Y through
// ORT's allocator for this node, and fills `call` with the raw pointers and
// Y's device. Never reads tensor data, so it serves device tensors as well.
Ort::Status PrepareNormCall(Ort::KernelContext& context, float epsilon, NormCall& call);

// The same for fused_add_norm: residual must have X's shape and dtype; Y and
// S are both allocated through ORT.
Ort::Status PrepareAddNormCall(Ort::KernelContext& context, float epsilon, AddNormCall& call);

// Type and shape inference: each of the `outputs` outputs gets X's dtype and
// shape (symbolic dims kept). Runs while ORT resolves and optimises the
// graph, with no data. Never fails on bad inputs: the Prepare functions
// report those when the session runs. When X's shape is unknown nothing is
// set, and ORT types the outputs after the last untyped input (bias) - equal
// to X's dtype in any graph the kernel accepts.
OrtStatusPtr InferNormOutputShape(OrtShapeInferContext* context, size_t outputs = 1) noexcept;

// What differs between the ops: name, arity, how a call is prepared and how
// the debug dump writes it.
struct FusedNormKind {
  using Call = NormCall;
  static constexpr const char* kName = kOpName;
  static constexpr size_t kInputs = 3;
  static constexpr size_t kOutputs = 1;
  static Ort::Status Prepare(Ort::KernelContext& context, float epsilon, Call& call) {
    return PrepareNormCall(context, epsilon, call);
  }
  static const fused_norm::NormProblem& Norm(const Call& call) { return call.problem; }
  static void Dump(DebugDump& dump, Ort::KernelContext& context, const Call& call) {
    dump.Write(context, call.problem);
  }
};

struct FusedAddNormKind {
  using Call = AddNormCall;
  static constexpr const char* kName = kAddOpName;
  static constexpr size_t kInputs = 4;
  static constexpr size_t kOutputs = 2;
  static Ort::Status Prepare(Ort::KernelContext& context, float epsilon, Call& call) {
    return PrepareAddNormCall(context, epsilon, call);
  }
  static const fused_norm::NormProblem& Norm(const Call& call) { return call.problem.norm; }
  static void Dump(DebugDump& dump, Ort::KernelContext& context, const Call& call) {
    dump.Write(context, call.problem.norm, call.problem.residual, call.problem.residual_out);
  }
};

// Converts the exception being handled into an OrtStatus (call in catch blocks).
OrtStatusPtr StatusFromCurrentException() noexcept;

// "[2, 3, 4]": a shape as error messages and the debug dump's meta.json (JSON) write it.
std::string ShapeString(const std::vector<int64_t>& shape);

// One kernel instance per node: holds the node's epsilon.
template <typename Backend, typename Kind = FusedNormKind>
class NormKernel {
 public:
  NormKernel(float epsilon, std::unique_ptr<DebugDump> dump) : epsilon_(epsilon), dump_(std::move(dump)) {}

  OrtStatusPtr ComputeV2(OrtKernelContext* raw_context) noexcept {
    try {
      Ort::KernelContext context(raw_context);
      typename Kind::Call call;
      Ort::Status status = Kind::Prepare(context, epsilon_, call);
      if (!status.IsOK()) return status.release();
      const fused_norm::NormProblem& norm = Kind::Norm(call);
      if (norm.rows == 0 || norm.hidden == 0) return nullptr;  // empty outputs: nothing to write
      Ort::Status run = Backend::Run(context, call);
      if (dump_ && run.IsOK()) Kind::Dump(*dump_, context, call);  // null unless a debug dump was asked for
      return run.release();
    } catch (...) {
      return StatusFromCurrentException();
    }
  }

 private:
  float epsilon_;
  std::unique_ptr<DebugDump> dump_;
};

template <typename Backend, typename Kind = FusedNormKind>
struct NormOp : Ort::CustomOpBase<NormOp<Backend, Kind>, NormKernel<Backend, Kind>, /*WithStatus=*/true> {
  NormOp() {
    // Our own shape-inference callback instead of CustomOpBase's, whose
    // Ort::ShapeInferContext wrapper is constructed outside any try block.
    OrtCustomOp::InferOutputShapeFn = [](const OrtCustomOp*, OrtShapeInferContext* context) -> OrtStatusPtr {
      return InferNormOutputShape(context, Kind::kOutputs);
    };
  }

  const char* GetName() const { return Kind::kName; }
  const char* GetExecutionProviderType() const { return Backend::kExecutionProvider; }

  // All inputs are type-agnostic (UNDEFINED): ORT then accepts any element
  // type when the session is created, and the kernel checks the dtypes when
  // it runs, so an unsupported one (int32) becomes a clear error from
  // session.run instead of "no kernel found" at load time.
  size_t GetInputTypeCount() const { return Kind::kInputs; }
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; }

  size_t GetOutputTypeCount() const { return Kind::kOutputs; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; }
  // ORT refuses a REQUIRED output of undefined type unless exactly one input
  // is undefined (it could not tell which input's type the output takes).
  // Declared optional, it is accepted, and InferNormOutputShape gives it X's
  // type; the kernel still requires every output to be present.
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t) const {
    return OrtCustomOpInputOutputCharacteristic::INPUT_OUTPUT_OPTIONAL;
  }

  OrtStatusPtr CreateKernelV2(const OrtApi& /*api*/, const OrtKernelInfo* info, void** kernel) const noexcept {
    try {
      float epsilon = 0.0f;
      if (OrtStatusPtr status = ReadEpsilon(info, &epsilon, Kind::kName)) return status;
      *kernel = new NormKernel<Backend, Kind>(epsilon, DebugDump::ForKernel(info, Backend::kExecutionProvider));
      return nullptr;
    } catch (...) {
      return StatusFromCurrentException();
    }
  }
};

}  // namespace fused_norm_ort
