#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <cmath>

#include "torch_adapter.h"

namespace fused_norm_torch {
namespace {

bool is_supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

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
  switch (x.scalar_type()) {
    case at::kFloat:
      p.dtype = fused_norm::DType::kFloat32;
      break;
    case at::kDouble:
      p.dtype = fused_norm::DType::kFloat64;
      break;
    case at::kHalf:
      p.dtype = fused_norm::DType::kFloat16;
      break;
    case at::kBFloat16:
      p.dtype = fused_norm::DType::kBFloat16;
      break;
    default:
      TORCH_INTERNAL_ASSERT(false, "dtype was validated by check_norm_args");
  }
  return p;
}

}  // namespace fused_norm_torch
