// Framework-free interface of the fused RMS norm kernels.
//
//   y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight + bias
//
// and of the fused residual add + norm, which normalises x + residual and
// also returns that sum (AddNormProblem).
//
// Everything here works on raw pointers and sizes so that the torch adapter
// (csrc/torch) and the ONNX Runtime custom-op library (csrc/ort) run the very
// same math. Adapters validate arguments, allocate outputs, choose threads or
// streams, and then call into this interface; nothing here allocates.
#pragma once

#include <cstdint>

#include "numeric_types.h"

namespace fused_norm {

enum class DType : int { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 3 };

// Every supported dtype, for adapters that map their own type enum onto it.
inline constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};

// An element type carried as a value, so that a generic lambda can name it:
// `[](auto tag) { using T = typename decltype(tag)::type; ... }`.
template <typename T>
struct TypeTag {
  using type = T;
};

inline bool is_known_dtype(DType dtype) {
  for (DType d : kDTypes) {
    if (d == dtype) return true;
  }
  return false;
}

// The one place where a run-time DType becomes a compile-time element type:
// calls f(TypeTag<T>{}) with T = float, double, Half or BFloat16 and returns
// its result. The CPU and CUDA entry points and both adapters dispatch
// through it, so a new dtype is added here and nowhere else.
// `dtype` must be one of kDTypes (is_known_dtype); entry points check that
// before calling, since a DType can only be out of range through a cast.
template <typename F>
decltype(auto) visit(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat64: return f(TypeTag<double>{});
    case DType::kFloat16: return f(TypeTag<Half>{});
    case DType::kBFloat16: return f(TypeTag<BFloat16>{});
    case DType::kFloat32:
    default: return f(TypeTag<float>{});
  }
}

// "float32", "float64", "float16", "bfloat16".
inline const char* dtype_name(DType dtype) {
  if (!is_known_dtype(dtype)) return "unknown";
  return visit(dtype, [](auto tag) { return Numeric<typename decltype(tag)::type>::kName; });
}

// The cache sizes the CPU kernel plans with, in bytes of one instance; 0
// where not known. The core never asks the machine: the caller passes them
// (csrc/platform/cpu_caches.h reads what the OS reports).
struct CpuCaches {
  int64_t level2 = 0;      // one core's L2: sizes the thread split (cpu_rows_per_task)
  int64_t last_level = 0;  // one instance of the last-level cache: decides the streamed stores
};

// One call's operands. All tensors are dense, row-major, of element type
// `dtype`; x and y are [rows, hidden], weight and bias are [hidden].
struct NormProblem {
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  int64_t rows = 0;
  int64_t hidden = 0;
  double eps = 0.0;
  DType dtype = DType::kFloat32;
  // y was allocated for this call. A large block then is usually fresh
  // pages, which the first touch maps zeroed into the cache: ordinary
  // stores write into those lines, where streaming ones would first push
  // the zeros out to memory (cpu_streams_output).
  bool output_just_allocated = false;
  // Only the CPU kernel reads them; the default (nothing known) never
  // streams and splits rows by task size alone.
  CpuCaches caches;
};

// One call of the fused residual add + norm (myops::fused_add_norm):
//
//   s = x + residual, rounded to the dtype (the residual stream a model carries on)
//   residual_out = s
//   y = s * rsqrt(mean(s^2) + eps) * weight + bias
//
// y is the norm of the stored residual_out, computed by the same reduction
// and scaled write as NormProblem's, so fused_add_norm(x, r) equals
// fused_norm(x + r) bit for bit. `norm` holds x (norm.x), weight, bias, y
// (norm.y) and the sizes. In place is allowed: residual_out may be residual
// and y may be x, because a row is read whole before it is written; y must
// not overlap residual_out, and no output may overlap weight or bias.
struct AddNormProblem {
  NormProblem norm;
  const void* residual = nullptr;
  void* residual_out = nullptr;
};

// --- CPU --------------------------------------------------------------------

// Normalises rows [row_begin, row_end) of `p`. Thread-safe for disjoint row
// ranges, so each framework splits rows over its own thread pool
// (at::parallel_for in torch, KernelContext::ParallelFor in ONNX Runtime).
// Statistics accumulate in float for 16/32-bit types and in double for
// float64. The binary carries AVX-512 / AVX2 / baseline clones of the inner
// loops and picks one at load time, so no -march flag is needed.
void cpu_forward_rows(const NormProblem& p, int64_t row_begin, int64_t row_end);

// The fused residual add + norm of rows [row_begin, row_end): the add folded
// into the first pass's loads, the same reduction and scaled write as
// cpu_forward_rows. Thread-safe for disjoint row ranges.
void cpu_add_forward_rows(const AddNormProblem& p, int64_t row_begin, int64_t row_end);

// Whether both CPU entry points write p's y with non-temporal stores, past
// the caches: where x and y together take more than 3/4 of one instance of
// the last-level cache (p.caches.last_level; never where it is 0), every
// row of y is whole cache lines (from its first line boundary on; the
// elements before it take ordinary stores), y is not x (in place, each line
// of y is in the cache already, read as x) and not just allocated. It
// changes how y reaches memory, never its bits.
bool cpu_streams_output(const NormProblem& p);

// Rows per parallel task, so that a task touches about 32K elements: below
// that the cost of waking a thread exceeds the work (same constant as
// at::internal::GRAIN_SIZE).
int64_t cpu_rows_per_task(int64_t hidden);

// Rows per parallel task of `p` on `threads` threads, so that the split
// follows the cache: where every thread gets work (at least `threads` tasks
// of cpu_rows_per_task(hidden) rows) and one thread's share of x and y fits
// a core's L2 (p.caches.level2; never where it is 0), one contiguous share
// per thread, so that each core keeps the same rows in its own L2 from call
// to call, whatever order a pool hands tasks out in; else
// cpu_rows_per_task(hidden). Each row's bits do not depend on the split.
int64_t cpu_rows_per_task(const NormProblem& p, int64_t threads);

// --- CUDA (csrc/core/fused_norm_cuda.cu; present only in CUDA builds) --------

// Launches the forward kernel on `stream` (a cudaStream_t) of the current
// device. Returns 0 on success or a cudaError_t. An error already pending on
// this thread before the launch (left by earlier work: a faulted kernel, an
// unchecked failed call) is returned without launching, with
// `*error_was_pending` set, so that adapters do not report it as this op's
// launch failure; a pending non-sticky error is cleared by reading it.
int cuda_forward(const NormProblem& p, void* stream, bool* error_was_pending = nullptr);

// The fused residual add + norm on `stream`, with cuda_forward's return
// values and pending-error rule. The same kernel families as the norm, with
// the add folded into each row's loads: residual_out = x + residual rounded
// to the dtype (bit for bit the CPU op's sum), y the norm of that stored sum
// (within the dtype's tolerance of the CPU op: nvcc fuses multiply-adds). In
// place (y = x, residual_out = residual) every element is read before the
// thread that reads it writes it, and no other thread touches it.
int cuda_add_forward(const AddNormProblem& p, void* stream, bool* error_was_pending = nullptr);

}  // namespace fused_norm
