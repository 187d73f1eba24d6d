// Provider-independent parts of the myops ops (fused_norm, fused_add_norm):
// attribute, validation, output allocation, shape inference, error conversion.
#include "ort_norm_op.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "core/numeric_types.h"
#include "platform/cpu_caches.h"

namespace fused_norm_ort {
namespace {

// ORT's 16-bit float types and the core's are all a bare uint16_t, so the
// adapter passes ORT's buffers to the core as they are.
static_assert(sizeof(Ort::Float16_t) == sizeof(fused_norm::Half), "Ort::Float16_t must be 16 bits");
static_assert(sizeof(Ort::BFloat16_t) == sizeof(fused_norm::BFloat16), "Ort::BFloat16_t must be 16 bits");

const char* ElementTypeName(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return "int8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return "uint8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return "int16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return "uint16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return "uint32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return "uint64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return "bool";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING: return "string";
    default: return "a non-float type";
  }
}

// ORT's element type of each core element type.
template <typename T>
struct OrtElement {
  using type = T;  // float, double
};
template <>
struct OrtElement<fused_norm::Half> {
  using type = Ort::Float16_t;
};
template <>
struct OrtElement<fused_norm::BFloat16> {
  using type = Ort::BFloat16_t;
};

// The core dtype of ONNX element type `type`, if the core supports it.
bool ToCoreDType(ONNXTensorElementDataType type, fused_norm::DType* dtype) {
  for (const fused_norm::DType d : fused_norm::kDTypes) {
    const ONNXTensorElementDataType ort_type = fused_norm::visit(d, [](auto tag) {
      return Ort::TypeToTensorType<typename OrtElement<typename decltype(tag)::type>::type>::type;
    });
    if (ort_type == type) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

Ort::Status InvalidArgument(const std::string& message, const char* op = kOpName) {
  return Ort::Status((std::string(op) + ": " + message).c_str(), ORT_INVALID_ARGUMENT);
}

// One input, as a tensor: its element type and shape. The dims are the
// OrtValue's own array, valid while the call runs: reading them allocates
// nothing, where a TensorTypeAndShapeInfo per input and output allocated
// four objects and four vectors per call.
struct TensorFacts {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  const int64_t* dims = nullptr;
  size_t rank = 0;

  int64_t Last() const { return dims[rank - 1]; }
  bool SameShape(const TensorFacts& other) const {
    return rank == other.rank && std::equal(dims, dims + rank, other.dims);
  }
  std::vector<int64_t> Shape() const { return std::vector<int64_t>(dims, dims + rank); }
};

// The element type and shape of a tensor value, without allocating.
Ort::Status TypeAndDims(const OrtValue* value, TensorFacts* facts) {
  return Ort::Status(
      Ort::GetApi().GetTensorElementTypeAndShapeDataReference(value, &facts->type, &facts->dims, &facts->rank));
}

Ort::Status ReadTensorFacts(const Ort::ConstValue& value, const char* name, TensorFacts* facts,
                            const char* op = kOpName) {
  if (!value) return InvalidArgument(std::string("input ") + name + " is missing", op);
  if (!value.IsTensor()) return InvalidArgument(std::string("input ") + name + " must be a tensor", op);
  return TypeAndDims(value, facts);
}

Ort::Status CheckVector(const TensorFacts& facts, const char* name, int64_t hidden, const char* op = kOpName) {
  if (facts.rank != 1 || facts.dims[0] != hidden) {
    std::ostringstream out;
    out << name << " must be 1-D of length " << hidden << " (the last dimension of X), got shape "
        << ShapeString(facts.Shape());
    return InvalidArgument(out.str(), op);
  }
  return Ort::Status{nullptr};
}

// X's checks shared by both ops: a tensor of rank >= 1 and a supported dtype,
// weight and bias [hidden] of its dtype, epsilon finite and >= 0.
Ort::Status CheckNormOperands(const TensorFacts& xf, const TensorFacts& wf, const TensorFacts& bf, float epsilon,
                              const char* op, fused_norm::DType* dtype) {
  if (xf.rank == 0) {
    return InvalidArgument("X must have rank >= 1 (its last dimension is normalised), got a 0-d tensor", op);
  }
  if (!ToCoreDType(xf.type, dtype)) {
    return InvalidArgument(std::string("X has unsupported dtype ") + ElementTypeName(xf.type) +
                               "; supported: float32, float64, float16, bfloat16",
                           op);
  }
  if (wf.type != xf.type || bf.type != xf.type) {
    return InvalidArgument(std::string("X, weight and bias must share one dtype, got X ") + ElementTypeName(xf.type) +
                               ", weight " + ElementTypeName(wf.type) + ", bias " + ElementTypeName(bf.type),
                           op);
  }
  const int64_t hidden = xf.Last();
  if (Ort::Status s = CheckVector(wf, "weight", hidden, op); !s.IsOK()) return s;
  if (Ort::Status s = CheckVector(bf, "bias", hidden, op); !s.IsOK()) return s;
  if (!std::isfinite(epsilon) || epsilon < 0.0f) {
    std::ostringstream out;
    out << "attribute epsilon must be finite and >= 0, got " << epsilon;
    return InvalidArgument(out.str(), op);
  }
  return Ort::Status{nullptr};
}

// Output `index` of X's shape, allocated by ORT for this node, checked to have X's dtype.
Ort::Status AllocateLikeX(Ort::KernelContext& context, size_t index, const char* name, const TensorFacts& xf,
                          const char* op, Ort::UnownedValue* out) {
  *out = context.GetOutput(index, xf.dims, xf.rank);
  if (!*out) return InvalidArgument(std::string("ORT did not provide the output ") + name, op);
  TensorFacts declared;
  if (Ort::Status s = TypeAndDims(*out, &declared); !s.IsOK()) return s;
  if (declared.type != xf.type) {
    // Only a model that declares the output with another dtype than X gets here.
    return InvalidArgument(std::string("the graph declares ") + name + " as " + ElementTypeName(declared.type) +
                               " but X is " + ElementTypeName(xf.type) + "; " + name + " must have X's dtype",
                           op);
  }
  return Ort::Status{nullptr};
}

int64_t RowsOf(const TensorFacts& facts) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < facts.rank; ++i) rows *= facts.dims[i];
  return rows;
}

// The core's view of a validated norm's operands (both ops normalise X, or the sum, with weight and bias into Y).
fused_norm::NormProblem NormOperands(const Ort::ConstValue& x, const Ort::ConstValue& weight,
                                     const Ort::ConstValue& bias, Ort::UnownedValue& y, const TensorFacts& xf,
                                     float epsilon, fused_norm::DType dtype) {
  fused_norm::NormProblem problem;
  problem.x = x.GetTensorRawData();
  problem.weight = weight.GetTensorRawData();
  problem.bias = bias.GetTensorRawData();
  problem.y = y.GetTensorMutableRawData();
  problem.rows = RowsOf(xf);
  problem.hidden = xf.Last();
  problem.eps = static_cast<double>(epsilon);
  problem.dtype = dtype;
  problem.caches = fused_norm::cpu_caches();
  return problem;
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

OrtStatusPtr StatusFromCurrentException() noexcept {
  try {
    throw;
  } catch (const Ort::Exception& error) {
    return Ort::Status(error).release();
  } catch (const std::exception& error) {
    return Ort::Status(error).release();
  } catch (...) {
    return Ort::Status("fused_norm: unknown C++ exception", ORT_FAIL).release();
  }
}

OrtStatusPtr ReadEpsilon(const OrtKernelInfo* info, float* epsilon, const char* op) noexcept {
  try {
    const OrtApi& api = Ort::GetApi();
    if (OrtStatusPtr status = api.KernelInfoGetAttribute_float(info, kEpsilonAttribute, epsilon)) {
      const std::string reason = api.GetErrorMessage(status);
      api.ReleaseStatus(status);
      return Ort::Status((std::string(op) +
                          ": the node needs a float attribute 'epsilon' (added to mean(X^2) before the "
                          "rsqrt); reading it failed: " +
                          reason)
                             .c_str(),
                         ORT_INVALID_ARGUMENT)
          .release();
    }
    return nullptr;
  } catch (...) {
    return StatusFromCurrentException();
  }
}

Ort::Status PrepareNormCall(Ort::KernelContext& context, float epsilon, NormCall& call) {
  if (context.GetInputCount() != 3) {
    return InvalidArgument("expects 3 inputs (X, weight, bias), got " + std::to_string(context.GetInputCount()));
  }
  if (context.GetOutputCount() != 1) return InvalidArgument("the node must have its output Y");

  const Ort::ConstValue x = context.GetInput(0);
  const Ort::ConstValue weight = context.GetInput(1);
  const Ort::ConstValue bias = context.GetInput(2);
  TensorFacts xf, wf, bf;
  if (Ort::Status s = ReadTensorFacts(x, "X", &xf); !s.IsOK()) return s;
  if (Ort::Status s = ReadTensorFacts(weight, "weight", &wf); !s.IsOK()) return s;
  if (Ort::Status s = ReadTensorFacts(bias, "bias", &bf); !s.IsOK()) return s;
  fused_norm::DType dtype;
  if (Ort::Status s = CheckNormOperands(xf, wf, bf, epsilon, kOpName, &dtype); !s.IsOK()) return s;

  // Y comes from ORT's allocator for this node (its arena, on the provider's
  // device), never from malloc/cudaMalloc of ours.
  Ort::UnownedValue y{nullptr};
  if (Ort::Status s = AllocateLikeX(context, 0, "Y", xf, kOpName, &y); !s.IsOK()) return s;

  const Ort::ConstMemoryInfo y_memory = y.GetTensorMemoryInfo();
  call.y_device_type = y_memory.GetDeviceType();
  call.y_device_id = y_memory.GetDeviceId();
  call.problem = NormOperands(x, weight, bias, y, xf, epsilon, dtype);
  return Ort::Status{nullptr};
}

Ort::Status PrepareAddNormCall(Ort::KernelContext& context, float epsilon, AddNormCall& call) {
  constexpr const char* op = kAddOpName;
  if (context.GetInputCount() != 4) {
    return InvalidArgument(
        "expects 4 inputs (X, residual, weight, bias), got " + std::to_string(context.GetInputCount()), op);
  }
  if (context.GetOutputCount() != 2) return InvalidArgument("the node must have both outputs (Y, S)", op);

  const Ort::ConstValue x = context.GetInput(0);
  const Ort::ConstValue residual = context.GetInput(1);
  const Ort::ConstValue weight = context.GetInput(2);
  const Ort::ConstValue bias = context.GetInput(3);
  TensorFacts xf, rf, wf, bf;
  if (Ort::Status s = ReadTensorFacts(x, "X", &xf, op); !s.IsOK()) return s;
  if (Ort::Status s = ReadTensorFacts(residual, "residual", &rf, op); !s.IsOK()) return s;
  if (Ort::Status s = ReadTensorFacts(weight, "weight", &wf, op); !s.IsOK()) return s;
  if (Ort::Status s = ReadTensorFacts(bias, "bias", &bf, op); !s.IsOK()) return s;
  fused_norm::DType dtype;
  if (Ort::Status s = CheckNormOperands(xf, wf, bf, epsilon, op, &dtype); !s.IsOK()) return s;
  if (rf.type != xf.type || !rf.SameShape(xf)) {
    return InvalidArgument(std::string("residual must have X's dtype and shape ") + ElementTypeName(xf.type) +
                               ShapeString(xf.Shape()) + ", got " + ElementTypeName(rf.type) + ShapeString(rf.Shape()),
                           op);
  }

  Ort::UnownedValue y{nullptr}, sum{nullptr};
  if (Ort::Status s = AllocateLikeX(context, 0, "Y", xf, op, &y); !s.IsOK()) return s;
  if (Ort::Status s = AllocateLikeX(context, 1, "S", xf, op, &sum); !s.IsOK()) return s;

  const Ort::ConstMemoryInfo y_memory = y.GetTensorMemoryInfo();
  call.y_device_type = y_memory.GetDeviceType();
  call.y_device_id = y_memory.GetDeviceId();
  call.problem.norm = NormOperands(x, weight, bias, y, xf, epsilon, dtype);
  call.problem.residual = residual.GetTensorRawData();
  call.problem.residual_out = sum.GetTensorMutableRawData();
  return Ort::Status{nullptr};
}

OrtStatusPtr InferNormOutputShape(OrtShapeInferContext* context, size_t outputs) noexcept {
  try {
    const OrtApi& api = Ort::GetApi();
    // Owned by the context: must not be released.
    OrtTensorTypeAndShapeInfo* x_info = nullptr;
    if (OrtStatusPtr status = api.ShapeInferContext_GetInputTypeShape(context, 0, &x_info)) return status;
    size_t rank = 0;
    if (OrtStatusPtr status = api.GetDimensionsCount(x_info, &rank)) return status;
    // ORT reports an unknown rank as rank 0, and a real 0-d X is an error at
    // run time anyway: in both cases Y's shape stays unknown.
    if (rank == 0) return nullptr;
    std::vector<int64_t> dims(rank);
    std::vector<const char*> symbols(rank, nullptr);
    if (OrtStatusPtr status = api.GetDimensions(x_info, dims.data(), rank)) return status;
    if (OrtStatusPtr status = api.GetSymbolicDimensions(x_info, symbols.data(), rank)) return status;
    for (size_t i = 0; i < rank; ++i) {
      // A dim with neither a value nor a name would be written back as the
      // value -1, which ORT then refuses to merge with a declared shape.
      // Leave Y's shape unknown rather than state a wrong one.
      if (dims[i] < 0 && (symbols[i] == nullptr || symbols[i][0] == '\0')) return nullptr;
    }
    // X's own type-and-shape: every output gets both its dims and its element type.
    for (size_t index = 0; index < outputs; ++index) {
      if (OrtStatusPtr status = api.ShapeInferContext_SetOutputTypeShape(context, index, x_info)) return status;
    }
    return nullptr;
  } catch (...) {
    return StatusFromCurrentException();
  }
}

}  // namespace fused_norm_ort
