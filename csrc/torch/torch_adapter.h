// Shared pieces of the torch adapter: argument checks and the conversion of
// tensors into the core's NormProblem. Used by the CPU and the CUDA impls.
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

}  // namespace fused_norm_torch
