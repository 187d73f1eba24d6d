// The torch adapter's shared part: argument checks and the view of tensors
// as the core's NormProblem, used by the CPU and the CUDA impls.
#include <ATen/MemoryOverlap.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cmath>
#include <optional>

#include "torch_adapter.h"

namespace fused_norm_torch {
namespace {

// torch's scalar type of each core element type (same bytes: the core reads
// at::Half / at::BFloat16 buffers as its own bare-uint16_t structs).
template <typename T>
struct TorchType;
template <>
struct TorchType<float> {
  static constexpr at::ScalarType value = at::kFloat;
};
template <>
struct TorchType<double> {
  static constexpr at::ScalarType value = at::kDouble;
};
template <>
struct TorchType<fused_norm::Half> {
  static_assert(sizeof(c10::Half) == sizeof(fused_norm::Half), "c10::Half must be 16 bits");
  static constexpr at::ScalarType value = at::kHalf;
};
template <>
struct TorchType<fused_norm::BFloat16> {
  static_assert(sizeof(c10::BFloat16) == sizeof(fused_norm::BFloat16), "c10::BFloat16 must be 16 bits");
  static constexpr at::ScalarType value = at::kBFloat16;
};

// The core dtype with torch's scalar type `t`, if the core supports it.
std::optional<fused_norm::DType> core_dtype(at::ScalarType t) {
  for (const fused_norm::DType d : fused_norm::kDTypes) {
    const at::ScalarType torch_type =
        fused_norm::visit(d, [](auto tag) { return TorchType<typename decltype(tag)::type>::value; });
    if (torch_type == t) return d;
  }
  return std::nullopt;
}

bool is_supported_dtype(at::ScalarType t) { return core_dtype(t).has_value(); }

void check_param(const char* op, const char* name, const at::Tensor& param, const at::Tensor& x) {
  TORCH_CHECK_VALUE(param.dim() == 1 && param.size(0) == x.size(-1), op, ": ", name,
                    " must be a 1-D tensor of length x.size(-1) = ", x.size(-1), ", got shape ", param.sizes());
  TORCH_CHECK_TYPE(param.scalar_type() == x.scalar_type(), op, ": ", name, " must have the dtype of x (",
                   x.scalar_type(), "), got ", param.scalar_type());
  TORCH_CHECK(param.device() == x.device(), op, ": ", name, " must be on the device of x (", x.device(), "), got ",
              param.device());
}

}  // namespace

void check_norm_args(const char* op, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                     double eps) {
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": x must have at least 1 dimension (the normalised last one), got a 0-dim tensor");
  TORCH_CHECK_TYPE(is_supported_dtype(x.scalar_type()), op,
                   ": x must be float32, float64, float16 or bfloat16, got ", x.scalar_type());
  check_param(op, "weight", weight, x);
  check_param(op, "bias", bias, x);
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0.0, op, ": eps must be a finite number >= 0, got ", eps);
}

void check_out_arg(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  constexpr const char* op = "fused_norm_out";
  TORCH_CHECK_VALUE(out.sizes() == x.sizes(), op, ": out must have the shape of x ", x.sizes(), ", got ",
                    out.sizes());
  TORCH_CHECK_TYPE(out.scalar_type() == x.scalar_type(), op, ": out must have the dtype of x (", x.scalar_type(),
                   "), got ", out.scalar_type());
  TORCH_CHECK(out.device() == x.device(), op, ": out must be on the device of x (", x.device(), "), got ",
              out.device());
  TORCH_CHECK_VALUE(out.is_contiguous(), op, ": out must be contiguous (it is written in place, row by row)");
  for (const at::Tensor* input : {&x, &weight, &bias}) {
    const auto overlap = at::get_overlap_status(out, *input);
    TORCH_CHECK_VALUE(overlap == at::MemOverlapStatus::No, op,
                      ": out must not share memory with x, weight or bias (the kernel reads a row after "
                      "writing it)");
  }
}

fused_norm::NormProblem make_problem(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                     const at::Tensor& y, double eps) {
  TORCH_INTERNAL_ASSERT(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous() && y.is_contiguous());
  fused_norm::NormProblem p;
  p.x = x.const_data_ptr();
  p.weight = weight.const_data_ptr();
  p.bias = bias.const_data_ptr();
  p.y = y.mutable_data_ptr();
  p.hidden = x.size(-1);
  p.rows = p.hidden > 0 ? x.numel() / p.hidden : 0;
  p.eps = eps;
  const std::optional<fused_norm::DType> dtype = core_dtype(x.scalar_type());
  TORCH_INTERNAL_ASSERT(dtype.has_value(), "dtype was validated by check_norm_args");
  p.dtype = *dtype;
  return p;
}

}  // namespace fused_norm_torch
