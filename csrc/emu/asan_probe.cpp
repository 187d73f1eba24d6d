// Runs the emulated kernels under AddressSanitizer on heap buffers of exactly
// the problem's size, so that a load or store past the end of the last row
// is reported (a GPU would read whatever lies there, silently).
//
//   fused_norm_asan_probe DTYPE ROWS HIDDEN OFFSET [DTYPE ROWS HIDDEN OFFSET ...]
//
// DTYPE is the fused_norm::DType number (0 float32, 1 float64, 2 float16,
// 3 bfloat16). OFFSET (bytes, a multiple of the element size below 16) places
// every operand that far past a 16-byte boundary, so that the 8- and 4-byte
// vector paths run too; each buffer still ends where its allocation ends.
// Every problem runs in every scheduling order. Exit status 0 when every
// launch succeeded; the sanitizer aborts the process on a bad access.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fused_norm.h"
#include "numeric_types.h"

extern "C" int fused_norm_emulated_forward(const void* x, const void* weight, const void* bias, void* y, int64_t rows,
                                           int64_t hidden, double eps, int dtype);
extern "C" void simt_set_order(int order);
extern "C" void simt_set_seed(uint64_t seed);
extern "C" size_t simt_last_error_message(char* out, size_t cap);

namespace {

size_t element_bytes(int dtype) { return dtype == 1 ? 8 : dtype == 0 ? 4 : 2; }

// Values in [-2, 2) from a fixed linear congruential sequence, stored as `dtype`.
void fill(void* data, size_t n, int dtype, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const float v = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) * 4.0f - 2.0f;
    switch (dtype) {
      case 0: static_cast<float*>(data)[i] = v; break;
      case 1: static_cast<double*>(data)[i] = v; break;
      case 2: static_cast<fused_norm::Half*>(data)[i] = fused_norm::to_half(v); break;
      default: static_cast<fused_norm::BFloat16*>(data)[i] = fused_norm::to_bfloat16(v); break;
    }
  }
}

// `bytes` of data starting `offset` bytes into a block malloc'd for exactly
// offset + bytes (malloc aligns to 16): the sanitizer's redzone sits right after the data.
char* allocate(size_t bytes, size_t offset, std::vector<void*>& blocks) {
  blocks.push_back(std::malloc(offset + bytes));
  return static_cast<char*>(blocks.back()) + offset;
}

constexpr int kOrders = 5;  // simt::Order: round robin, warp ahead, reverse, random, stress

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || (argc - 1) % 4 != 0) {
    std::fprintf(stderr, "usage: %s DTYPE ROWS HIDDEN OFFSET [DTYPE ROWS HIDDEN OFFSET ...]\n", argv[0]);
    return 2;
  }
  for (int a = 1; a < argc; a += 4) {
    const int dtype = std::atoi(argv[a]);
    const int64_t rows = std::atoll(argv[a + 1]);
    const int64_t hidden = std::atoll(argv[a + 2]);
    const size_t offset = std::strtoull(argv[a + 3], nullptr, 10);
    const size_t bytes = element_bytes(dtype);
    if (offset >= 16 || offset % bytes != 0) {
      std::fprintf(stderr, "OFFSET %zu: expected a multiple of %zu below 16\n", offset, bytes);
      return 2;
    }
    std::vector<void*> blocks;
    void* x = allocate(rows * hidden * bytes, offset, blocks);
    void* w = allocate(hidden * bytes, offset, blocks);
    void* b = allocate(hidden * bytes, offset, blocks);
    void* y = allocate(rows * hidden * bytes, offset, blocks);
    fill(x, rows * hidden, dtype, 1);
    fill(w, hidden, dtype, 2);
    fill(b, hidden, dtype, 3);
    for (int order = 0; order < kOrders; ++order) {
      simt_set_order(order);
      simt_set_seed(static_cast<uint64_t>(a) * 7919u + 1u);
      const int rc = fused_norm_emulated_forward(x, w, b, y, rows, hidden, 1e-6, dtype);
      if (rc != 0) {
        char message[1024];
        simt_last_error_message(message, sizeof message);
        std::fprintf(stderr, "dtype %d rows %lld hidden %lld offset %zu order %d: error %d: %s\n", dtype,
                     static_cast<long long>(rows), static_cast<long long>(hidden), offset, order, rc, message);
        return 1;
      }
    }
    for (void* block : blocks) std::free(block);
    std::printf("ok dtype %d rows %lld hidden %lld offset %zu\n", dtype, static_cast<long long>(rows),
                static_cast<long long>(hidden), offset);
  }
  return 0;
}
