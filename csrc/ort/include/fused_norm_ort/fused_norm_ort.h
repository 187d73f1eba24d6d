// fused_norm_ort: an ONNX Runtime custom-op library with two ops in domain "myops".
//
//   Y = myops::fused_norm(X, weight, bias; epsilon)
//   Y, S = myops::fused_add_norm(X, residual, weight, bias; epsilon)
//
//   X: [..., hidden] of float32, float64, float16 or bfloat16; weight, bias:
//   [hidden] of X's dtype; residual: X's shape and dtype; epsilon: a float
//   attribute, finite and >= 0. Y[r, :] = X[r, :] * rsqrt(mean(X[r, :]^2) +
//   epsilon) * weight + bias; S = X + residual, and fused_add_norm's Y is
//   the norm of S. Y and S have X's shape and dtype. CPU provider always;
//   the CUDA provider where the library was built with CUDA.
//
// Register the library with a session's options, by path (ONNX Runtime
// dlopens it and calls RegisterCustomOps):
//
//   Ort::SessionOptions options;
//   options.RegisterCustomOpsLibrary("/path/to/lib/libfused_norm_ort.so");
//   Ort::Session session(env, "model.onnx", options);
//
// or, linked into the host, through its entry point:
//
//   Ort::ThrowOnError(RegisterCustomOps(options, OrtGetApiBase()));
//
// With CMake: find_package(fused_norm_ort CONFIG REQUIRED) gives the
// imported target fused_norm_ort::fused_norm_ort (this header's folder and
// the library); $<TARGET_FILE:fused_norm_ort::fused_norm_ort> is the path to
// register. The library needs a runtime serving the ONNX Runtime C API
// version it was built against, or a newer one.
//
// Errors never cross the C boundary as exceptions: a malformed node or a bad
// input fails session creation or Run with an ORT status (INVALID_ARGUMENT)
// whose message starts with the op's name and names the operand.
#pragma once

struct OrtApiBase;
struct OrtSessionOptions;
struct OrtStatus;

namespace fused_norm_ort {

inline constexpr const char* kDomain = "myops";
inline constexpr const char* kOpName = "fused_norm";
inline constexpr const char* kAddOpName = "fused_add_norm";
// The node attribute both ops read (float).
inline constexpr const char* kEpsilonAttribute = "epsilon";
inline constexpr const char* kLibraryFileName = "libfused_norm_ort.so";

}  // namespace fused_norm_ort

// The library's one exported symbol: adds domain "myops" with both ops to
// `options`. Returns nullptr, or an error status for the caller to release.
extern "C" OrtStatus* RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base);
