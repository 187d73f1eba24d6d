// A C++ host of the fused_norm_ort package: runs a custom-route model and
// checks its output against a float64 reference computed in Python.
//
//   package_client MODEL.onnx X.f32 REFERENCE.f64 DIMS ATOL RTOL
//
// DIMS is the input's shape ("2,8,64"); X.f32 holds the input (float32, raw,
// row-major) and REFERENCE.f64 the float64 model's output for it. The
// library comes from the CMake package (FUSED_NORM_ORT_LIBRARY, set by
// csrc/ort/examples/CMakeLists.txt from the imported target). Every element
// must satisfy |y - reference| <= ATOL + RTOL * |reference|.
//
// Exit status: 0 all elements within tolerance; 1 some are not; 2 an ORT or
// usage error (the message says which).
#include <fused_norm_ort/fused_norm_ort.h>
#include <onnxruntime_cxx_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef FUSED_NORM_ORT_LIBRARY
#error "FUSED_NORM_ORT_LIBRARY (the library's path) must be defined; CMakeLists.txt sets it from the package"
#endif

namespace {

template <typename T>
std::vector<T> ReadRaw(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<T> values(count);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * sizeof(T)));
  if (in.gcount() != static_cast<std::streamsize>(count * sizeof(T)) || in.peek() != EOF) {
    throw std::runtime_error(path + " must hold exactly " + std::to_string(count) + " values of " +
                             std::to_string(sizeof(T)) + " bytes");
  }
  return values;
}

std::vector<int64_t> ParseDims(const std::string& text) {
  std::vector<int64_t> dims;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const int64_t dim = std::stoll(part);
    if (dim < 0) throw std::invalid_argument("DIMS must be non-negative, got " + text);
    dims.push_back(dim);
  }
  if (dims.empty()) throw std::invalid_argument("DIMS must name at least one dimension");
  return dims;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s MODEL.onnx X.f32 REFERENCE.f64 DIMS ATOL RTOL\n", argv[0]);
    return 2;
  }
  try {
    const std::vector<int64_t> dims = ParseDims(argv[4]);
    const double atol = std::stod(argv[5]), rtol = std::stod(argv[6]);
    size_t count = 1;
    for (const int64_t d : dims) count *= static_cast<size_t>(d);
    std::vector<float> x = ReadRaw<float>(argv[2], count);
    const std::vector<double> reference = ReadRaw<double>(argv[3], count);

    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "package_client");
    Ort::SessionOptions options;
    options.RegisterCustomOpsLibrary(FUSED_NORM_ORT_LIBRARY);
    Ort::Session session(env, argv[1], options);

    Ort::AllocatorWithDefaultOptions allocator;
    const Ort::AllocatedStringPtr input_name = session.GetInputNameAllocated(0, allocator);
    const Ort::AllocatedStringPtr output_name = session.GetOutputNameAllocated(0, allocator);
    const char* input_names[] = {input_name.get()};
    const char* output_names[] = {output_name.get()};
    Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    Ort::Value input = Ort::Value::CreateTensor<float>(memory, x.data(), x.size(), dims.data(), dims.size());
    std::vector<Ort::Value> outputs = session.Run(Ort::RunOptions{nullptr}, input_names, &input, 1, output_names, 1);

    const size_t produced = outputs[0].GetTensorTypeAndShapeInfo().GetElementCount();
    if (produced != count) {
      std::fprintf(stderr, "the model produced %zu elements, the reference holds %zu\n", produced, count);
      return 2;
    }
    const float* y = outputs[0].GetTensorData<float>();
    size_t beyond = 0;
    double worst = 0.0;
    for (size_t i = 0; i < count; ++i) {
      const double diff = std::fabs(static_cast<double>(y[i]) - reference[i]);
      if (!(diff <= atol + rtol * std::fabs(reference[i]))) ++beyond;  // a NaN counts as beyond
      if (!(diff <= worst)) worst = diff;
    }
    std::printf("%s with %s (domain %s): %zu elements, max |y - reference| = %.3g, %zu beyond %g + %g * |reference|\n",
                argv[1], FUSED_NORM_ORT_LIBRARY, fused_norm_ort::kDomain, count, worst, beyond, atol, rtol);
    return beyond == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "package_client: %s\n", error.what());
    return 2;
  }
}
