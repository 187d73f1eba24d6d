// Runs the CPU kernel core (csrc/core/fused_norm_cpu.cpp, linked in) on
// random problems and writes every output byte to stdout, so that builds of
// the core for different instruction sets can be compared bit for bit
// (tests/csrc/test_cpu_versions.py).
//
//   cpu_versions_probe SEED
//
// Every dtype; row lengths below, at and past each vector width and the
// 32-lane chunk; rows split into two calls at a point that is not a
// multiple of the row block, as threads split them. Then the values where
// conversions differ most easily: rows holding one NaN (signalling, or
// negative with a payload) or one infinity, subnormal 16-bit inputs, and
// weights that push outputs past the 16-bit range or into its subnormals;
// through both entries (the norm, and the residual add + norm with its sum).
// Then each other way an output turns NaN (a NaN weight or bias, inf - inf,
// 0 * inf) beside ordinary rows in one block: float16 skips its NaN rewrite
// for blocks that cannot produce one, and must not skip it for these.
// Outputs start at a cache line or 3, 6 or 9 elements past one, in turns:
// where the kernel streams its stores (run with FUSED_NORM_LLC_BYTES=1: every
// problem whose rows are whole cache lines) a row's elements before its
// first line boundary take ordinary stores and the rest streaming ones. The
// number of problems that streamed goes to stderr.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/fused_norm.h"
#include "platform/cpu_caches.h"

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

int streamed_problems = 0;
int output_buffers = 0;

// An output buffer of `bytes` 0xff bytes inside `storage`, at a cache line
// or 3, 6 or 9 elements of `element_bytes` past one (in turns).
unsigned char* output_buffer(std::vector<unsigned char>& storage, size_t bytes, size_t element_bytes) {
  const size_t phase = static_cast<size_t>(output_buffers++ % 4) * 3 * element_bytes;
  storage.assign(bytes + 64 + phase, 0xff);
  const uintptr_t address = reinterpret_cast<uintptr_t>(storage.data());
  return storage.data() + (64 - address % 64) % 64 + phase;
}

void count_streaming(const NormProblem& p) { streamed_problems += cpu_streams_output(p) ? 1 : 0; }

size_t element_size(DType dtype) { return dtype == DType::kFloat64 ? 8 : dtype == DType::kFloat32 ? 4 : 2; }

// A NaN of each dtype given by its bits: `quiet` false gives a signalling NaN
// with a payload, true a negative quiet NaN with a payload. The low
// element_size bytes of the 64-bit value are the element (x86-64 is little-endian).
void write_nan(DType dtype, unsigned char* p, bool quiet) {
  uint64_t bits = 0;
  switch (dtype) {
    case DType::kFloat32: bits = quiet ? 0xffc01234u : 0x7f800101u; break;
    case DType::kFloat64: bits = quiet ? 0xfff8000000001234ull : 0x7ff0000000000101ull; break;
    case DType::kFloat16: bits = quiet ? 0xfe37u : 0x7c05u; break;
    case DType::kBFloat16: bits = quiet ? 0xffd3u : 0x7f85u; break;
  }
  std::memcpy(p, &bits, element_size(dtype));
}

// Rows 0-2 hold one NaN or infinity each at a random position, rows 3-5 are
// tiny (subnormals of the 16-bit type), the rest ordinary; the weights are
// ordinary, huge (outputs overflow float16) or tiny (outputs in the 16-bit
// type's subnormals, with a zero bias). bfloat16's subnormals are float's
// (below 1.2e-38), where the hardware conversion would flush to zero.
// Runs the norm and the residual add + norm and writes y, then the add's y
// and sum.
void special_values(DType dtype, int64_t hidden, std::mt19937_64& rng) {
  const size_t esize = element_size(dtype);
  const int64_t rows = 9;
  const bool bfloat16 = dtype == DType::kBFloat16;
  const float tiny_row = bfloat16 ? 3e-39f : 3e-6f;
  const float tiny_weight = bfloat16 ? 1e-39f : 2e-6f;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> position(0, hidden - 1);
  std::vector<unsigned char> x(rows * hidden * esize), r(rows * hidden * esize), w(hidden * esize), b(hidden * esize);
  for (int64_t row = 0; row < rows; ++row) {
    const float scale = row >= 3 && row < 6 ? tiny_row : 1.0f;
    for (int64_t i = 0; i < hidden; ++i) {
      write_element(dtype, &x[(row * hidden + i) * esize], scale * normal(rng));
      write_element(dtype, &r[(row * hidden + i) * esize], scale * normal(rng));
    }
  }
  write_nan(dtype, &x[position(rng) * esize], false);
  write_nan(dtype, &r[(hidden + position(rng)) * esize], true);
  write_element(dtype, &x[(2 * hidden + position(rng)) * esize], -INFINITY);
  for (int64_t i = 0; i < hidden; ++i) {
    const int kind = static_cast<int>(i % 3);
    const float magnitude = kind == 0 ? 1.0f : kind == 1 ? 3e4f : tiny_weight;
    write_element(dtype, &w[i * esize], magnitude * (1.0f + 0.1f * normal(rng)));
    write_element(dtype, &b[i * esize], kind == 2 ? 0.0f : 0.1f * normal(rng));
  }
  std::vector<unsigned char> y_storage, sum(x.size(), 0xff);
  unsigned char* y = output_buffer(y_storage, x.size(), esize);
  NormProblem norm{x.data(), w.data(), b.data(), y, rows, hidden, 1e-6, dtype, false, cpu_caches()};
  count_streaming(norm);
  cpu_forward_rows(norm, 0, 5);
  cpu_forward_rows(norm, 5, rows);
  std::fwrite(y, 1, x.size(), stdout);
  std::memset(y, 0xff, x.size());
  AddNormProblem add{norm, r.data(), sum.data()};
  count_streaming(add.norm);
  cpu_add_forward_rows(add, 0, 5);
  cpu_add_forward_rows(add, 5, rows);
  std::fwrite(y, 1, x.size(), stdout);
  std::fwrite(sum.data(), 1, sum.size(), stdout);
}

// The ways an output turns NaN other than a NaN in x: a NaN in the weight,
// a NaN in the bias, an infinite weight meeting the opposite infinite bias,
// and a row of zeros with eps 0 (0 * inf). Row 1 is that row; the others are
// ordinary, so that a block of rows holds both kinds. Each case runs the
// norm over every row; the zero row also goes through the residual add +
// norm (residual = x). Then eps 0 without the zero row, where every output
// is finite.
void nan_sources(DType dtype, int64_t hidden, std::mt19937_64& rng) {
  const size_t esize = element_size(dtype);
  const int64_t rows = 6;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> position(0, hidden - 1);
  std::vector<unsigned char> x(rows * hidden * esize), w(hidden * esize), b(hidden * esize);
  for (int64_t i = 0; i < rows * hidden; ++i)
    write_element(dtype, &x[i * esize], (i / hidden == 1) ? 0.0f : normal(rng));
  std::vector<unsigned char> y_storage, sum(x.size(), 0xff);
  unsigned char* y = output_buffer(y_storage, x.size(), esize);
  for (int kind = 0; kind < 5; ++kind) {
    for (int64_t i = 0; i < hidden; ++i) {
      write_element(dtype, &w[i * esize], 1.0f + 0.1f * normal(rng));
      write_element(dtype, &b[i * esize], 0.1f * normal(rng));
    }
    const int64_t at = position(rng);
    if (kind == 0) write_nan(dtype, &w[at * esize], false);
    if (kind == 1) write_nan(dtype, &b[at * esize], true);
    if (kind == 2) {
      write_element(dtype, &w[at * esize], INFINITY);
      write_element(dtype, &b[at * esize], -INFINITY);
    }
    NormProblem norm{x.data(), w.data(), b.data(), y, rows, hidden, kind >= 3 ? 0.0 : 1e-6, dtype, false, cpu_caches()};
    if (kind == 4) norm.x = x.data() + 2 * hidden * esize, norm.rows = rows - 2;  // rows 2-5: no zero row
    std::memset(y, 0xff, x.size());
    count_streaming(norm);
    cpu_forward_rows(norm, 0, norm.rows);
    std::fwrite(y, 1, x.size(), stdout);
    if (kind == 3) {
      std::memset(y, 0xff, x.size());
      AddNormProblem add{norm, x.data(), sum.data()};
      count_streaming(add.norm);
      cpu_add_forward_rows(add, 0, rows);
      std::fwrite(y, 1, x.size(), stdout);
      std::fwrite(sum.data(), 1, sum.size(), stdout);
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
  const int64_t hiddens[] = {1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 768, 1023, 2047, 2049, 4097, 5001};
  for (DType dtype : kDTypes) {
    const size_t esize = element_size(dtype);
    for (int64_t hidden : hiddens) {
      const int64_t rows = 7;
      std::vector<unsigned char> x(rows * hidden * esize), w(hidden * esize), b(hidden * esize), y_storage;
      unsigned char* y = output_buffer(y_storage, x.size(), esize);
      for (int64_t i = 0; i < rows * hidden; ++i) write_element(dtype, &x[i * esize], normal(rng) * scale(rng));
      for (int64_t i = 0; i < hidden; ++i) {
        write_element(dtype, &w[i * esize], 1.0f + 0.1f * normal(rng));
        write_element(dtype, &b[i * esize], 0.1f * normal(rng));
      }
      NormProblem p{x.data(), w.data(), b.data(), y, rows, hidden, 1e-6, dtype, false, cpu_caches()};
      count_streaming(p);
      cpu_forward_rows(p, 0, 3);
      cpu_forward_rows(p, 3, rows);
      std::fwrite(y, 1, x.size(), stdout);
    }
    for (int64_t hidden : {17, 768, 5001}) special_values(dtype, hidden, rng);
    for (int64_t hidden : {17, 768}) nan_sources(dtype, hidden, rng);
  }
  std::fprintf(stderr, "streamed problems: %d\n", streamed_problems);
  return 0;
}
