// The debug dump (see ort_debug_dump.h): .npy writer, folder naming, the per-call write.
#include "ort_debug_dump.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "ort_norm_op.h"

namespace fused_norm_ort {
namespace {

namespace fs = std::filesystem;

std::atomic<uint64_t> g_kernels{0};  // kernel serial within this process: two sessions' nodes never share a folder

struct NpyType {
  const char* descr;  // numpy dtype string
  size_t size;
  const char* name;  // the dtype as meta.json names it
};

NpyType NpyTypeOf(fused_norm::DType dtype) {
  switch (dtype) {
    case fused_norm::DType::kFloat32: return {"<f4", 4, "float32"};
    case fused_norm::DType::kFloat64: return {"<f8", 8, "float64"};
    case fused_norm::DType::kFloat16: return {"<f2", 2, "float16"};
    case fused_norm::DType::kBFloat16: return {"<u2", 2, "bfloat16"};  // numpy has no bfloat16: raw bits
  }
  return {"|u1", 1, "unknown"};
}

std::string ShapeTuple(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '(';
  for (size_t i = 0; i < shape.size(); ++i) out << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  out << ')';
  return out.str();
}

// numpy's .npy format version 1.0: magic, header length, a dict literal padded to 64 bytes, raw data.
void WriteNpy(const fs::path& path, const char* descr, const std::vector<int64_t>& shape, const void* data,
              size_t bytes) {
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + ShapeTuple(shape) + ", }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(reinterpret_cast<const char*>(magic), 8);
  const uint16_t length = static_cast<uint16_t>(header.size());
  const unsigned char length_le[2] = {static_cast<unsigned char>(length & 0xff),
                                      static_cast<unsigned char>(length >> 8)};
  out.write(reinterpret_cast<const char*>(length_le), 2);
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) throw std::runtime_error("could not write " + path.string());
}

std::string SafeName(const std::string& name) {
  std::string safe = name.empty() ? "unnamed" : name;
  for (char& c : safe)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
  return safe;
}

// The dump folder, or "" when dumping is off.
std::string DumpSetting(const OrtKernelInfo* info) {
  try {
    Ort::KeyValuePairs entries = Ort::ConstKernelInfo(info).GetConfigEntries();
    if (const char* value = entries.GetValue(kDumpDirConfigKey); value && *value) return value;
  } catch (...) {
    // A runtime without config entries for kernels: the environment variable still works.
  }
  const char* env = std::getenv(kDumpDirEnvVar);
  return env && *env ? env : "";
}

}  // namespace

std::unique_ptr<DebugDump> DebugDump::ForKernel(const OrtKernelInfo* info, const char* execution_provider) noexcept {
  try {
    const std::string folder = DumpSetting(info);
    if (folder.empty()) return nullptr;
    if (std::strcmp(execution_provider, "CPUExecutionProvider") != 0) {
      std::fprintf(stderr,
                   "fused_norm: debug dump requested (%s) but it serves the CPU provider only; not dumping %s\n",
                   folder.c_str(), execution_provider);
      return nullptr;
    }
    const std::string node = SafeName(Ort::ConstKernelInfo(info).GetNodeName());
    std::ostringstream name;
    name << node << "__p" << ::getpid() << "k" << g_kernels.fetch_add(1);
    const fs::path kernel_folder = fs::path(folder) / name.str();
    fs::create_directories(kernel_folder);
    return std::unique_ptr<DebugDump>(new DebugDump(kernel_folder.string()));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fused_norm: debug dump disabled: %s\n", error.what());
    return nullptr;
  }
}

void DebugDump::Write(Ort::KernelContext& context, const fused_norm::NormProblem& problem, const void* residual,
                      const void* sum) noexcept {
  const uint64_t call = calls_.fetch_add(1) + 1;
  try {
    const std::vector<int64_t> x_shape = context.GetInput(0).GetTensorTypeAndShapeInfo().GetShape();
    const NpyType type = NpyTypeOf(problem.dtype);
    const size_t elements = static_cast<size_t>(problem.rows) * static_cast<size_t>(problem.hidden);
    char call_name[32];
    std::snprintf(call_name, sizeof call_name, "call-%06llu", static_cast<unsigned long long>(call));
    const fs::path final_folder = fs::path(folder_) / call_name;
    const fs::path tmp = fs::path(folder_) / (std::string(".") + call_name + ".tmp");
    fs::create_directories(tmp);
    const std::vector<int64_t> vector_shape = {problem.hidden};
    WriteNpy(tmp / "x.npy", type.descr, x_shape, problem.x, elements * type.size);
    WriteNpy(tmp / "weight.npy", type.descr, vector_shape, problem.weight, problem.hidden * type.size);
    WriteNpy(tmp / "bias.npy", type.descr, vector_shape, problem.bias, problem.hidden * type.size);
    WriteNpy(tmp / "y.npy", type.descr, x_shape, problem.y, elements * type.size);
    if (residual != nullptr) WriteNpy(tmp / "residual.npy", type.descr, x_shape, residual, elements * type.size);
    if (sum != nullptr) WriteNpy(tmp / "s.npy", type.descr, x_shape, sum, elements * type.size);
    const float epsilon = static_cast<float>(problem.eps);
    WriteNpy(tmp / "epsilon.npy", "<f4", {}, &epsilon, sizeof epsilon);
    {
      std::ofstream meta(tmp / "meta.json");
      char eps_text[32];
      std::snprintf(eps_text, sizeof eps_text, "%.9g", static_cast<double>(epsilon));
      meta << "{\"op\": \"" << (residual != nullptr ? kAddOpName : kOpName) << "\", \"node\": \""
           << fs::path(folder_).filename().string() << "\", \"call\": " << call << ", \"epsilon\": " << eps_text
           << ", \"dtype\": \"" << type.name << "\", \"x_shape\": " << ShapeString(x_shape)
           << ", \"hidden\": " << problem.hidden << "}\n";
    }
    fs::rename(tmp, final_folder);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fused_norm: debug dump of call %llu in %s failed: %s\n",
                 static_cast<unsigned long long>(call), folder_.c_str(), error.what());
  }
}

}  // namespace fused_norm_ort
