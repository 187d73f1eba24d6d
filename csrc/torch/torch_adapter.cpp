// The torch adapter's shared part: argument checks and the view of tensors
// as the core's NormProblem, used by the CPU and the CUDA impls.
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

#include "../platform/cpu_caches.h"
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

// Whether an element of the sub-tensor of `t` that starts at byte address
// `base` and spans dims [dim, t.dim()) lies in the bytes [begin, end). Exact
// for any strides (torch's are >= 0): a sub-tensor whose address span misses
// the range is skipped whole, and the innermost dim is an arithmetic
// progression, tested in O(1). Dense tensors sharing no bytes with the range
// cost one span test; the walk only descends where the spans meet.
bool has_element_in(const at::Tensor& t, uint64_t base, int64_t dim, uint64_t begin, uint64_t end) {
  const uint64_t esize = static_cast<uint64_t>(t.element_size());
  uint64_t last = base;  // address of the sub-tensor's last element
  for (int64_t d = dim; d < t.dim(); ++d) last += static_cast<uint64_t>((t.size(d) - 1) * t.stride(d)) * esize;
  if (last + esize <= begin || base >= end) return false;
  if (dim == t.dim()) return true;  // a single element, inside the range
  const uint64_t step = static_cast<uint64_t>(t.stride(dim)) * esize;
  if (dim == t.dim() - 1) {
    // Elements base + i * step, i in [0, size): the first one at or past
    // `begin` (elements start on element boundaries of a shared storage).
    if (step == 0 || base >= begin) return true;  // the span meets the range, and base or every element is in it
    const uint64_t i = (begin - base + step - 1) / step;
    return i < static_cast<uint64_t>(t.size(dim)) && base + i * step < end;
  }
  for (int64_t i = 0; i < t.size(dim); ++i) {
    if (has_element_in(t, base + static_cast<uint64_t>(i) * step, dim + 1, begin, end)) return true;
  }
  return false;
}

// Whether writing the contiguous `out` would change an element of `input`,
// whatever input's strides: only a shared byte counts. (at::get_overlap_status
// answers "too hard" for every non-dense tensor, which would reject a strided
// weight that shares nothing with out.)
bool writes_into(const at::Tensor& out, const at::Tensor& input) {
  if (out.numel() == 0 || input.numel() == 0 || !input.is_alias_of(out)) return false;
  const auto begin = reinterpret_cast<uint64_t>(out.const_data_ptr());
  const uint64_t end = begin + static_cast<uint64_t>(out.numel() * out.element_size());
  return has_element_in(input, reinterpret_cast<uint64_t>(input.const_data_ptr()), 0, begin, end);
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
  TORCH_CHECK_VALUE(x.dim() >= 1, op,
                    ": x must have at least 1 dimension (the normalised last one), got a 0-dim tensor");
  TORCH_CHECK_TYPE(is_supported_dtype(x.scalar_type()), op, ": x must be float32, float64, float16 or bfloat16, got ",
                   x.scalar_type());
  check_param(op, "weight", weight, x);
  check_param(op, "bias", bias, x);
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0.0, op, ": eps must be a finite number >= 0, got ", eps);
}

void check_out_arg(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  constexpr const char* op = "fused_norm_out";
  TORCH_CHECK_VALUE(out.sizes() == x.sizes(), op, ": out must have the shape of x ", x.sizes(), ", got ", out.sizes());
  TORCH_CHECK_TYPE(out.scalar_type() == x.scalar_type(), op, ": out must have the dtype of x (", x.scalar_type(),
                   "), got ", out.scalar_type());
  TORCH_CHECK(out.device() == x.device(), op, ": out must be on the device of x (", x.device(), "), got ",
              out.device());
  TORCH_CHECK_VALUE(out.is_contiguous(), op, ": out must be contiguous (it is written in place, row by row)");
  for (const at::Tensor* input : {&x, &weight, &bias}) {
    TORCH_CHECK_VALUE(!writes_into(out, *input), op,
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
  p.caches = fused_norm::cpu_caches();
  return p;
}

void check_add_norm_args(const char* op, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                         const at::Tensor& bias, double eps) {
  check_norm_args(op, x, weight, bias, eps);
  TORCH_CHECK_VALUE(residual.sizes() == x.sizes(), op, ": residual must have the shape of x ", x.sizes(), ", got ",
                    residual.sizes());
  TORCH_CHECK_TYPE(residual.scalar_type() == x.scalar_type(), op, ": residual must have the dtype of x (",
                   x.scalar_type(), "), got ", residual.scalar_type());
  TORCH_CHECK(residual.device() == x.device(), op, ": residual must be on the device of x (", x.device(), "), got ",
              residual.device());
}

void check_add_norm_inplace_args(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                 const at::Tensor& bias) {
  constexpr const char* op = "fused_add_norm_inplace";
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"x", &x}, {"residual", &residual}}) {
    TORCH_CHECK_VALUE(t->is_contiguous(), op, ": ", name,
                      " must be contiguous (it is overwritten in place, row by row)");
    TORCH_CHECK_VALUE(!writes_into(*t, weight) && !writes_into(*t, bias), op, ": ", name,
                      " must not share memory with weight or bias (they are read for every row)");
  }
  TORCH_CHECK_VALUE(!writes_into(x, residual), op,
                    ": x and residual must not share memory (x receives the norm, residual the sum)");
}

fused_norm::AddNormProblem make_add_problem(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                            const at::Tensor& bias, const at::Tensor& y, const at::Tensor& residual_out,
                                            double eps) {
  TORCH_INTERNAL_ASSERT(residual.is_contiguous() && residual_out.is_contiguous());
  fused_norm::AddNormProblem p;
  p.norm = make_problem(x, weight, bias, y, eps);
  p.residual = residual.const_data_ptr();
  p.residual_out = residual_out.mutable_data_ptr();
  return p;
}

}  // namespace fused_norm_torch
