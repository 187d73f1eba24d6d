// A plain ONNX Runtime C++ client for the model exported by the custom route.
//
//   ort_client CUSTOM.onnx REFERENCE.onnx LIBRARY.so [threads=4] [requests_per_thread=200] [seq=8]
//
// Loads CUSTOM.onnx (myops::fused_norm nodes) with the custom-op library, and
// REFERENCE.onnx (the same model exported with standard ONNX ops) without it.
// Every request gets its own input [1, seq, d_model] (d_model read from the
// model); the references are computed first, one request at a time, on the
// reference session. Then `threads` threads share ONE session of the custom
// model (ORT sessions are safe to Run concurrently) and check each answer:
// |custom - reference| <= 1e-4 * (1 + |reference|) elementwise.
//
// Exit status: 0 all requests correct; 1 a mismatch; 2 an ORT or usage error
// (the message says which).
#include <onnxruntime_cxx_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr double kTolerance = 1e-4;  // float32 model, two routes of the same math

struct Request {
  std::vector<float> x;
  std::vector<float> reference;
};

// Realistic activations: a per-feature offset and scale, as a residual stream has.
std::vector<float> MakeInput(uint32_t seed, int64_t seq, int64_t d_model) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.5f, 2.0f);
  std::vector<float> offset(d_model), scale(d_model), x(seq * d_model);
  for (int64_t j = 0; j < d_model; ++j) {
    offset[j] = 0.5f * normal(rng);
    scale[j] = uniform(rng);
  }
  for (int64_t i = 0; i < seq; ++i)
    for (int64_t j = 0; j < d_model; ++j) x[i * d_model + j] = normal(rng) * scale[j] + offset[j];
  return x;
}

std::vector<float> RunOnce(Ort::Session& session, const std::vector<float>& x, const std::vector<int64_t>& shape,
                           const char* input_name, const char* output_name) {
  Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  Ort::Value input =
      Ort::Value::CreateTensor<float>(memory, const_cast<float*>(x.data()), x.size(), shape.data(), shape.size());
  std::vector<Ort::Value> outputs = session.Run(Ort::RunOptions{nullptr}, &input_name, &input, 1, &output_name, 1);
  const float* y = outputs[0].GetTensorData<float>();
  const size_t count = outputs[0].GetTensorTypeAndShapeInfo().GetElementCount();
  return std::vector<float>(y, y + count);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s CUSTOM.onnx REFERENCE.onnx LIBRARY.so [threads] [requests_per_thread] [seq]\n",
                 argv[0]);
    return 2;
  }
  const std::string custom_path = argv[1], reference_path = argv[2], library = argv[3];
  const int threads = argc > 4 ? std::stoi(argv[4]) : 4;
  const int per_thread = argc > 5 ? std::stoi(argv[5]) : 200;
  const int64_t seq = argc > 6 ? std::stoll(argv[6]) : 8;
  try {
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "ort_client");
    Ort::SessionOptions custom_options;
    custom_options.SetIntraOpNumThreads(1);
    custom_options.RegisterCustomOpsLibrary(library.c_str());
    Ort::Session custom(env, custom_path.c_str(), custom_options);
    Ort::SessionOptions reference_options;
    reference_options.SetIntraOpNumThreads(1);
    Ort::Session reference(env, reference_path.c_str(), reference_options);

    Ort::AllocatorWithDefaultOptions allocator;
    const std::string input_name = custom.GetInputNameAllocated(0, allocator).get();
    const std::string output_name = custom.GetOutputNameAllocated(0, allocator).get();
    const std::vector<int64_t> declared = custom.GetInputTypeInfo(0).GetTensorTypeAndShapeInfo().GetShape();
    if (declared.size() != 3 || declared[2] <= 0) {
      std::fprintf(stderr, "error: %s: input must be [batch, seq, d_model] with a fixed d_model\n",
                   custom_path.c_str());
      return 2;
    }
    const int64_t d_model = declared[2];
    const std::vector<int64_t> shape = {1, seq, d_model};

    std::vector<Request> requests(static_cast<size_t>(threads) * per_thread);
    for (size_t r = 0; r < requests.size(); ++r) {
      requests[r].x = MakeInput(static_cast<uint32_t>(r + 1), seq, d_model);
      requests[r].reference = RunOnce(reference, requests[r].x, shape, input_name.c_str(), output_name.c_str());
    }

    std::atomic<int> mismatches{0}, errors{0};
    std::vector<double> worst(threads, 0.0);
    std::vector<std::string> messages(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        // Interleaved: thread t serves requests t, t + threads, ...
        for (int k = 0; k < per_thread; ++k) {
          const Request& request = requests[static_cast<size_t>(k) * threads + t];
          try {
            const std::vector<float> y = RunOnce(custom, request.x, shape, input_name.c_str(), output_name.c_str());
            bool ok = y.size() == request.reference.size();
            for (size_t i = 0; ok && i < y.size(); ++i) {
              const double ref = request.reference[i], diff = std::fabs(static_cast<double>(y[i]) - ref);
              worst[t] = std::max(worst[t], diff);
              ok = diff <= kTolerance * (1.0 + std::fabs(ref));
            }
            if (!ok) mismatches++;
          } catch (const std::exception& error) {
            if (errors++ == 0) messages[t] = error.what();
          }
        }
      });
    }
    for (std::thread& thread : pool) thread.join();
    const double max_diff = *std::max_element(worst.begin(), worst.end());
    for (const std::string& message : messages)
      if (!message.empty()) std::fprintf(stderr, "error: %s\n", message.c_str());
    std::printf(
        "ort_client: %d threads x %d requests on one session (onnxruntime %s): %d mismatches, %d errors, "
        "max |custom - reference| %.3g\n",
        threads, per_thread, Ort::GetVersionString().c_str(), mismatches.load(), errors.load(), max_diff);
    if (errors.load()) return 2;
    return mismatches.load() ? 1 : 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 2;
  }
}
