// Runs the CPU kernel core (csrc/core/fused_norm_cpu.cpp, linked in) on
// random problems and writes every output byte to stdout, so that builds of
// the core for different instruction sets can be compared bit for bit
// (tests/csrc/test_cpu_versions.py).
//
//   cpu_versions_probe SEED
//
// Every dtype; row lengths below, at and past each vector width and the
// 32-lane chunk; rows split into two calls at a point that is not a
// multiple of the row block, as threads split them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/fused_norm.h"

using namespace fused_norm;

namespace {

void write_element(DType dtype, unsigned char* p, float value) {
  switch (dtype) {
    case DType::kFloat32: std::memcpy(p, &value, 4); break;
    case DType::kFloat64: {
      const double d = value;
      std::memcpy(p, &d, 8);
      break;
    }
    case DType::kFloat16: {
      const Half h = to_half(value);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kBFloat16: {
      const BFloat16 b = to_bfloat16(value);
      std::memcpy(p, &b, 2);
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cpu_versions_probe SEED\n");
    return 2;
  }
  std::mt19937_64 rng(std::strtoull(argv[1], nullptr, 10));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.01f, 10.0f);
  const int64_t hiddens[] = {1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 768, 1023, 4097, 5001};
  for (DType dtype : kDTypes) {
    const size_t esize = dtype == DType::kFloat64 ? 8 : dtype == DType::kFloat32 ? 4 : 2;
    for (int64_t hidden : hiddens) {
      const int64_t rows = 7;
      std::vector<unsigned char> x(rows * hidden * esize), w(hidden * esize), b(hidden * esize),
          y(rows * hidden * esize);
      for (int64_t i = 0; i < rows * hidden; ++i) write_element(dtype, &x[i * esize], normal(rng) * scale(rng));
      for (int64_t i = 0; i < hidden; ++i) {
        write_element(dtype, &w[i * esize], 1.0f + 0.1f * normal(rng));
        write_element(dtype, &b[i * esize], 0.1f * normal(rng));
      }
      std::memset(y.data(), 0xff, y.size());
      NormProblem p{x.data(), w.data(), b.data(), y.data(), rows, hidden, 1e-6, dtype};
      cpu_forward_rows(p, 0, 3);
      cpu_forward_rows(p, 3, rows);
      std::fwrite(y.data(), 1, y.size(), stdout);
    }
  }
  return 0;
}
