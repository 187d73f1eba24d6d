// The op's schema, written once. Kernels for each device live in their own
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
}
