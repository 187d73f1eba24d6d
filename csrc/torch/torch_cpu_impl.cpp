// CPU kernels of the myops norms (fused_norm, fused_norm_out, fused_add_norm,
// fused_add_norm_inplace): checks, then rows split over ATen's intra-op thread
// pool, each chunk run by the core.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

#include "slowdown.h"
#include "torch_adapter.h"

namespace fused_norm_torch {
namespace {

void run_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& y, double eps,
             bool y_just_allocated) {
  fused_norm::NormProblem p = make_problem(x, weight, bias, y, eps);
  p.output_just_allocated = y_just_allocated;
  at::parallel_for(0, p.rows, fused_norm::cpu_rows_per_task(p, at::get_num_threads()),
                   [&p](int64_t begin, int64_t end) { fused_norm::cpu_forward_rows(p, begin, end); });
}

at::Tensor fused_norm_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  // Nothing unless built with FUSED_NORM_SLOWDOWN_PERCENT.
  const fused_norm::CallSlowdown slowdown(x, fused_norm::SlowdownEntry::kCall);
  check_norm_args("fused_norm", x, weight, bias, eps);
  // Non-contiguous inputs are copied once; the kernel needs dense rows.
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  run_cpu(xc, weight.contiguous(), bias.contiguous(), y, eps, /*y_just_allocated=*/true);
  return y;
}

void fused_norm_out_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                        const at::Tensor& out) {
  const fused_norm::CallSlowdown slowdown(x, fused_norm::SlowdownEntry::kOut);  // as above
  check_norm_args("fused_norm_out", x, weight, bias, eps);
  check_out_arg(out, x, weight, bias);
  run_cpu(x.contiguous(), weight.contiguous(), bias.contiguous(), out, eps, /*y_just_allocated=*/false);
}

void run_add_cpu(const fused_norm::AddNormProblem& p) {
  at::parallel_for(0, p.norm.rows, fused_norm::cpu_rows_per_task(p.norm, at::get_num_threads()),
                   [&p](int64_t begin, int64_t end) { fused_norm::cpu_add_forward_rows(p, begin, end); });
}

std::tuple<at::Tensor, at::Tensor> fused_add_norm_cpu(const at::Tensor& x, const at::Tensor& residual,
                                                      const at::Tensor& weight, const at::Tensor& bias, double eps) {
  check_add_norm_args("fused_add_norm", x, residual, weight, bias, eps);
  const auto options = x.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor y = at::empty(x.sizes(), options);
  at::Tensor residual_out = at::empty(x.sizes(), options);
  // The contiguous copies (where an input is strided) live as long as the call.
  const at::Tensor xc = x.contiguous(), rc = residual.contiguous(), wc = weight.contiguous(), bc = bias.contiguous();
  fused_norm::AddNormProblem p = make_add_problem(xc, rc, wc, bc, y, residual_out, eps);
  p.norm.output_just_allocated = true;
  run_add_cpu(p);
  return {y, residual_out};
}

void fused_add_norm_inplace_cpu(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                const at::Tensor& bias, double eps) {
  check_add_norm_args("fused_add_norm_inplace", x, residual, weight, bias, eps);
  check_add_norm_inplace_args(x, residual, weight, bias);
  run_add_cpu(make_add_problem(x, residual, weight.contiguous(), bias.contiguous(), x, residual, eps));
}

}  // namespace
}  // namespace fused_norm_torch

TORCH_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("fused_norm", &fused_norm_torch::fused_norm_cpu);
  m.impl("fused_norm_out", &fused_norm_torch::fused_norm_out_cpu);
  m.impl("fused_add_norm", &fused_norm_torch::fused_add_norm_cpu);
  m.impl("fused_add_norm_inplace", &fused_norm_torch::fused_add_norm_inplace_cpu);
}
