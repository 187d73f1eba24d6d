// Entry point of libfused_norm_ort.so, the ONNX Runtime custom-op library that
// registers domain `myops`, op `fused_norm`, for every execution provider this
// build supports. Load it with SessionOptions.register_custom_ops_library
// (Python) or Ort::SessionOptions::RegisterCustomOpsLibrary (C++).
//
// The only exported symbol (see exports.lds). ORT calls it once per session
// options it is registered with; it must return errors as an OrtStatus, never
// throw.
#include <exception>
#include <string>

#include "ort_norm_op.h"
#include "ort_ops.h"

namespace {

// Built once per process and never destroyed: sessions keep pointers to the
// domain and to its ops for as long as they live.
Ort::CustomOpDomain& FusedNormDomain() {
  static Ort::CustomOpDomain domain = [] {
    Ort::CustomOpDomain d(fused_norm_ort::kDomain);
    fused_norm_ort::AddCpuOps(d);
    fused_norm_ort::AddCudaOps(d);
    return d;
  }();
  return domain;
}

}  // namespace

extern "C" ORT_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                                const OrtApiBase* api_base) {
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == nullptr) {
    // The runtime is older than the headers we were built with. API 1 exists
    // in every runtime and already has CreateStatus, so we can still say so.
    const std::string message = std::string("libfused_norm_ort was built against ONNX Runtime C API version ") +
                                std::to_string(ORT_API_VERSION) + ", which onnxruntime " +
                                api_base->GetVersionString() +
                                " does not provide; rebuild it against this runtime's headers (invoke build)";
    return api_base->GetApi(1)->CreateStatus(ORT_FAIL, message.c_str());
  }
  Ort::InitApi(api);
  try {
    Ort::UnownedSessionOptions(options).Add(FusedNormDomain());
    return nullptr;
  } catch (...) {
    return fused_norm_ort::StatusFromCurrentException();
  }
}
