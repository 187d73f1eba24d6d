// myops::fused_norm on ONNX Runtime's CPU execution provider.
//
// Validation and the allocation of Y are shared with every provider
// (ort_norm_op.h); this file only splits the rows over ORT's intra-op thread
// pool and calls the same kernel core as the torch op.
#include <cstdint>

#include "core/fused_norm.h"
#include "ort_norm_op.h"
#include "ort_ops.h"

namespace fused_norm_ort {
namespace {

// What each pool task needs: task i normalises rows
// [i * rows_per_task, min(rows, (i + 1) * rows_per_task)).
struct RowTasks {
  const fused_norm::NormProblem* problem;
  int64_t rows_per_task;
};

void RunRowTask(void* user_data, size_t task) noexcept {
  const auto& work = *static_cast<const RowTasks*>(user_data);
  const int64_t begin = static_cast<int64_t>(task) * work.rows_per_task;
  const int64_t end = begin + work.rows_per_task < work.problem->rows ? begin + work.rows_per_task : work.problem->rows;
  fused_norm::cpu_forward_rows(*work.problem, begin, end);
}

struct CpuBackend {
  static constexpr const char* kExecutionProvider = "CPUExecutionProvider";

  static Ort::Status Run(Ort::KernelContext& context, const NormCall& call) {
    const fused_norm::NormProblem& problem = call.problem;
    // Tasks of about 32K elements (cpu_rows_per_task): smaller ones cost more
    // to hand to a thread than they take to compute.
    const int64_t rows_per_task = fused_norm::cpu_rows_per_task(problem.hidden);
    const int64_t tasks = (problem.rows + rows_per_task - 1) / rows_per_task;
    if (tasks <= 1) {
      fused_norm::cpu_forward_rows(problem, 0, problem.rows);
      return Ort::Status{nullptr};
    }
    RowTasks work{&problem, rows_per_task};
    // ORT's pool of this session (intra_op_num_threads); runs inline when the
    // session has none. num_batch 0 lets ORT group tasks as it sees fit.
    context.ParallelFor(&RunRowTask, static_cast<size_t>(tasks), 0, &work);
    return Ort::Status{nullptr};
  }
};

}  // namespace

void AddCpuOps(Ort::CustomOpDomain& domain) {
  static NormOp<CpuBackend> op;
  domain.Add(&op);
}

}  // namespace fused_norm_ort
