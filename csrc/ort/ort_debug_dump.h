// Debug dump of myops::fused_norm and fused_add_norm calls: off by default,
// for finding which call of which node went wrong in a deployed graph.
//
// Turned on per session, read once when ORT creates each node's kernel:
//   * session config entry  myops.fused_norm.dump_dir = FOLDER   (first), or
//   * environment variable  FUSEDBENCH_ORT_DUMP_DIR = FOLDER.
// When on, every call of the node writes one folder
//   FOLDER/<node name>__p<pid>k<kernel>/call-<n>/   (n = 1, 2, ... per kernel)
// holding x.npy, weight.npy, bias.npy, y.npy, epsilon.npy (numpy .npy files;
// bfloat16 is stored as its raw uint16 bits; a fused_add_norm call adds
// residual.npy and s.npy) and meta.json (op, node, call, epsilon, dtype,
// shapes). A call folder is written under a temporary name
// and renamed when complete, so a reader never sees half a call.
// `invoke dump-replay FOLDER` replays every call through the PyTorch op.
//
// Off costs one null-pointer test per call: the kernel holds no DebugDump.
// The CPU provider only (the dump reads tensor memory on the host).
#pragma once

#include <onnxruntime_cxx_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/fused_norm.h"

namespace fused_norm_ort {

inline constexpr const char* kDumpDirConfigKey = "myops.fused_norm.dump_dir";
inline constexpr const char* kDumpDirEnvVar = "FUSEDBENCH_ORT_DUMP_DIR";

class DebugDump {
 public:
  // The dump for one kernel, or nullptr when dumping is off (the usual case).
  // Never throws: a setting it cannot honour is reported on stderr and ignored.
  static std::unique_ptr<DebugDump> ForKernel(const OrtKernelInfo* info, const char* execution_provider) noexcept;

  // Writes one completed call. Errors go to stderr; the call itself never fails because of the dump.
  // A fused_add_norm call also passes its residual input and its sum output.
  void Write(Ort::KernelContext& context, const fused_norm::NormProblem& problem, const void* residual = nullptr,
             const void* sum = nullptr) noexcept;

 private:
  explicit DebugDump(std::string folder) : folder_(std::move(folder)) {}

  std::string folder_;  // FOLDER/<node>__p<pid>k<kernel>
  std::atomic<uint64_t> calls_{0};
};

}  // namespace fused_norm_ort
