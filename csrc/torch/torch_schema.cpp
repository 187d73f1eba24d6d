// The ops' schemas, written once. Kernels for each device live in their own
// files (torch_cpu_impl.cpp, torch_cuda_impl.cpp) and register with
// TORCH_LIBRARY_IMPL, as does the autograd kernel (torch_autograd.cpp). Only
// the fake kernels are registered from Python (ops/op.py), which
// set_python_module points the dispatcher at.
#include <torch/library.h>

TORCH_LIBRARY(myops, m) {
  m.set_python_module("ops.op");
  m.def("fused_norm(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor");
  // Out variant: writes into a caller-owned buffer (no allocation per call,
  // so no page faults for large outputs). It returns nothing, the form
  // torch.compile's auto-functionalisation handles for mutating custom ops.
  m.def("fused_norm_out(Tensor x, Tensor weight, Tensor bias, float eps, Tensor(a!) out) -> ()");
  // The residual add folded into the norm: returns (y, x + residual), y the
  // norm of that sum. A pre-norm model carries the sum on as its residual stream.
  m.def("fused_add_norm(Tensor x, Tensor residual, Tensor weight, Tensor bias, float eps) -> (Tensor, Tensor)");
  // In place, as inference engines run it: x receives y and residual receives
  // x + residual; nothing is allocated. Declared mutating both, so
  // torch.compile functionalises it.
  m.def("fused_add_norm_inplace(Tensor(a!) x, Tensor(b!) residual, Tensor weight, Tensor bias, float eps) -> ()");
}
