// Shared pieces of the torch adapter: argument checks and the conversion of
// tensors into the core's NormProblem and AddNormProblem. Used by the CPU and
// the CUDA impls.
#pragma once

#include <ATen/core/Tensor.h>

#include "../core/fused_norm.h"

namespace fused_norm_torch {

// User-facing checks of fused_norm / fused_norm_out arguments; each failure
// names the argument and what was expected. The fake kernels in ops/op.py
// raise the same messages for symbolic tensors.
void check_norm_args(const char* op, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

// Checks that `out` can receive the result for `x` without a copy.
void check_out_arg(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Views contiguous x / weight / bias / y as a NormProblem over
// [x.numel() / hidden, hidden] rows.
fused_norm::NormProblem make_problem(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                     const at::Tensor& y, double eps);

// User-facing checks of fused_add_norm / fused_add_norm_inplace arguments:
// those of the norm, and residual with x's shape, dtype and device.
void check_add_norm_args(const char* op, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                         const at::Tensor& bias, double eps);

// Checks that x and residual can be overwritten in place (y into x, x + residual
// into residual): both contiguous, sharing no memory with each other or with
// weight and bias.
void check_add_norm_inplace_args(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                 const at::Tensor& bias);

// Views contiguous operands as an AddNormProblem (y may be x and
// residual_out may be residual: the in-place form).
fused_norm::AddNormProblem make_add_problem(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                            const at::Tensor& bias, const at::Tensor& y, const at::Tensor& residual_out,
                                            double eps);

}  // namespace fused_norm_torch
