// myops::fused_norm and myops::fused_add_norm on ONNX Runtime's CPU
// execution provider.
//
// Validation and the allocation of the outputs are shared with every provider
// (ort_norm_op.h); this file only splits the rows over ORT's intra-op thread
// pool and calls the same kernel core as the torch ops.
#include <cstdint>

#include "core/fused_norm.h"
#include "ort_norm_op.h"
#include "ort_ops.h"

namespace fused_norm_ort {
namespace {

// The core's row function for each kind of problem.
void RunRows(const fused_norm::NormProblem& p, int64_t begin, int64_t end) {
  fused_norm::cpu_forward_rows(p, begin, end);
}
void RunRows(const fused_norm::AddNormProblem& p, int64_t begin, int64_t end) {
  fused_norm::cpu_add_forward_rows(p, begin, end);
}

// What each pool task needs: task i runs rows
// [i * rows_per_task, min(rows, (i + 1) * rows_per_task)).
template <typename Problem>
struct RowTasks {
  const Problem* problem;
  int64_t rows;
  int64_t rows_per_task;
};

template <typename Problem>
void RunRowTask(void* user_data, size_t task) noexcept {
  const auto& work = *static_cast<const RowTasks<Problem>*>(user_data);
  const int64_t begin = static_cast<int64_t>(task) * work.rows_per_task;
  const int64_t end = begin + work.rows_per_task < work.rows ? begin + work.rows_per_task : work.rows;
  RunRows(*work.problem, begin, end);
}

// Tasks of about 32K elements (cpu_rows_per_task): smaller ones cost more to
// hand to a thread than they take to compute.
template <typename Problem>
Ort::Status RunOnPool(Ort::KernelContext& context, const Problem& problem, const fused_norm::NormProblem& norm) {
  const int64_t rows_per_task = fused_norm::cpu_rows_per_task(norm.hidden);
  const int64_t tasks = (norm.rows + rows_per_task - 1) / rows_per_task;
  if (tasks <= 1) {
    RunRows(problem, 0, norm.rows);
    return Ort::Status{nullptr};
  }
  RowTasks<Problem> work{&problem, norm.rows, rows_per_task};
  // ORT's pool of this session (intra_op_num_threads); runs inline when the
  // session has none. num_batch 0 lets ORT group tasks as it sees fit.
  context.ParallelFor(&RunRowTask<Problem>, static_cast<size_t>(tasks), 0, &work);
  return Ort::Status{nullptr};
}

struct CpuBackend {
  static constexpr const char* kExecutionProvider = "CPUExecutionProvider";

  static Ort::Status Run(Ort::KernelContext& context, const NormCall& call) {
    return RunOnPool(context, call.problem, call.problem);
  }
  static Ort::Status Run(Ort::KernelContext& context, const AddNormCall& call) {
    return RunOnPool(context, call.problem, call.problem.norm);
  }
};

}  // namespace

void AddCpuOps(Ort::CustomOpDomain& domain) {
  static NormOp<CpuBackend> op;
  static NormOp<CpuBackend, FusedAddNormKind> add_op;
  domain.Add(&op);
  domain.Add(&add_op);
}

}  // namespace fused_norm_ort
