// CUDA kernels of the myops norms (fused_norm, fused_norm_out, fused_add_norm,
// fused_add_norm_inplace): the same checks as the CPU impl, then the core's
// CUDA launcher on torch's current stream.
//
// Compiled only into CUDA builds of the extension (env/builder/config.py adds it
// when torch has CUDA); a CPU-only build simply registers no CUDA kernel.
// Only c10's CUDA headers are used (not ATen/cuda/CUDAContext.h, which pulls
// in cuBLAS/cuSPARSE headers) so this file also compiles against the CPU
// wheel's headers for the compile check (env/builder/cuda.py).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>

#include "torch_adapter.h"

namespace fused_norm_torch {
namespace {

// Launches `p` (a NormProblem or an AddNormProblem) on the current stream of
// x's device. Callers hold a CUDAGuard for that device, so the current stream
// is that device's.
template <typename Problem>
void launch(const char* op, const at::Tensor& x, const Problem& p) {
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  bool earlier = false;
  int err = 0;
  if constexpr (std::is_same_v<Problem, fused_norm::AddNormProblem>) {
    err = fused_norm::cuda_add_forward(p, stream, &earlier);
  } else {
    err = fused_norm::cuda_forward(p, stream, &earlier);
  }
  const auto code = static_cast<cudaError_t>(err);
  TORCH_CHECK(err == 0 || !earlier, op, ": not launched: an earlier CUDA error is pending on ", x.device(),
              " (left by a previous operation, not by ", op, "): ", cudaGetErrorName(code), " (",
              cudaGetErrorString(code), ")");
  TORCH_CHECK(err == 0, op, ": CUDA kernel launch failed on ", x.device(), ": ", cudaGetErrorName(code), " (",
              cudaGetErrorString(code), ")");
}

void run_cuda(const char* op, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
              const at::Tensor& y, double eps) {
  launch(op, x, make_problem(x, weight, bias, y, eps));
}

at::Tensor fused_norm_cuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  check_norm_args("fused_norm", x, weight, bias, eps);
  // The dispatcher picks this kernel when any argument is on CUDA; x itself
  // must be (weight and bias were checked to be on x's device).
  TORCH_CHECK(x.is_cuda(), "fused_norm: x must be a CUDA tensor here, got ", x.device());
  // x's device, not whichever is current: y is allocated and the kernel
  // launched there (every operand was checked to live on it).
  const c10::cuda::CUDAGuard guard(x.device());
  // Non-contiguous inputs are copied once; the kernel needs dense rows.
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  run_cuda("fused_norm", xc, weight.contiguous(), bias.contiguous(), y, eps);
  return y;
}

void fused_norm_out_cuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                         const at::Tensor& out) {
  check_norm_args("fused_norm_out", x, weight, bias, eps);
  check_out_arg(out, x, weight, bias);
  TORCH_CHECK(x.is_cuda(), "fused_norm_out: x must be a CUDA tensor here, got ", x.device());
  const c10::cuda::CUDAGuard guard(x.device());
  run_cuda("fused_norm_out", x.contiguous(), weight.contiguous(), bias.contiguous(), out, eps);
}

std::tuple<at::Tensor, at::Tensor> fused_add_norm_cuda(const at::Tensor& x, const at::Tensor& residual,
                                                       const at::Tensor& weight, const at::Tensor& bias, double eps) {
  constexpr const char* op = "fused_add_norm";
  check_add_norm_args(op, x, residual, weight, bias, eps);
  TORCH_CHECK(x.is_cuda(), op, ": x must be a CUDA tensor here, got ", x.device());
  const c10::cuda::CUDAGuard guard(x.device());
  const auto options = x.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor y = at::empty(x.sizes(), options);
  at::Tensor residual_out = at::empty(x.sizes(), options);
  launch(op, x,
         make_add_problem(x.contiguous(), residual.contiguous(), weight.contiguous(), bias.contiguous(), y,
                          residual_out, eps));
  return {y, residual_out};
}

void fused_add_norm_inplace_cuda(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                 const at::Tensor& bias, double eps) {
  constexpr const char* op = "fused_add_norm_inplace";
  check_add_norm_args(op, x, residual, weight, bias, eps);
  check_add_norm_inplace_args(x, residual, weight, bias);
  TORCH_CHECK(x.is_cuda(), op, ": x must be a CUDA tensor here, got ", x.device());
  const c10::cuda::CUDAGuard guard(x.device());
  // y into x and the sum into residual: each element is read by the thread
  // that then writes it (fused_norm.h, cuda_add_forward).
  launch(op, x, make_add_problem(x, residual, weight.contiguous(), bias.contiguous(), x, residual, eps));
}

}  // namespace
}  // namespace fused_norm_torch

TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("fused_norm", &fused_norm_torch::fused_norm_cuda);
  m.impl("fused_norm_out", &fused_norm_torch::fused_norm_out_cuda);
  m.impl("fused_add_norm", &fused_norm_torch::fused_add_norm_cuda);
  m.impl("fused_add_norm_inplace", &fused_norm_torch::fused_add_norm_inplace_cuda);
}
