// Times the CPU kernel core alone, without a framework, for schedule
// experiments on the kernel (docs/cpu-kernel.md quotes its numbers):
//
//   norm ROWS HIDDEN [REPS] [DTYPE]    the norm against memcpy into the same
//                                      output, for outputs starting d bytes
//                                      after the input in a page; DTYPE
//                                      float32 (default), bfloat16 or float16;
//                                      in float32 also the two passes' floor
//                                      (two_pass_rows)
//   add  ROWS HIDDEN [REPS] [OFFSET]   the residual add + norm in place against
//                                      its two-call form (residual += x, then
//                                      the norm of the residual into x), with
//                                      the residual OFFSET bytes into a page
//   copy ROWS HIDDEN [REPS]            a copy of ROWS x HIDDEN floats three
//                                      ways: memcpy, 64-byte vector stores and
//                                      64-byte streaming stores (movntps, past
//                                      the caches); what the kernel's stores
//                                      can reach at each size
//
// Every buffer starts at a page boundary (the moved one at its offset), so
// a run is repeatable. Build it with the kernel's own flags and run it
// pinned, nothing else running (float32, 1 thread):
//
//   g++ -std=c++17 -O3 -ffp-contract=off -Icsrc csrc/core/fused_norm_cpu.cpp
//       csrc/platform/cpu_caches.cpp bench/experiments/core_timing.cpp -o build/core_timing
//   taskset -c 1 build/core_timing norm 1024 1024 31
//
// Each repetition times a block of calls of each contender back to back
// (blocks of about 0.4 MB of output, so one block lasts well above the
// clock's resolution); printed are the medians over repetitions.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fused_norm.h"
#include "core/numeric_types.h"
#include "platform/cpu_caches.h"

namespace {

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Page-aligned, populated memory with room for an offset of up to a page.
float* page_aligned(size_t bytes) {
  void* p = mmap(nullptr, bytes + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  return static_cast<float*>(p);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A copy at 64-byte vectors with ordinary stores, and with streaming stores
// (a store fence after them, as the kernel's tasks end). n is a multiple of
// 16 and y is page-aligned; x86-64 with AVX-512 only, as add_into.
__attribute__((target("avx512f"))) void copy_vectors(float* __restrict y, const float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, _mm512_loadu_ps(x + i));
}

__attribute__((target("avx512f"))) void copy_streaming(float* __restrict y, const float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; i += 16) _mm512_stream_ps(y + i, _mm512_loadu_ps(x + i));
  _mm_sfence();
}

// The least a norm of float32 rows does, for a floor beside the norm: each
// row read once for its sum of squares, then read again, scaled and written;
// no weight, no bias, no blocking, no streaming. hidden is a multiple of 32.
// Where the rows sit in the caches the copy reads x once and this reads it
// twice, so its share of the copy bounds what any schedule of the norm's two
// passes reaches there.
__attribute__((target("avx512f"))) void two_pass_rows(float* __restrict y, const float* __restrict x, int64_t rows,
                                                      int64_t hidden) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * hidden;
    float* out = y + r * hidden;
    __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
    for (int64_t i = 0; i < hidden; i += 32) {
      const __m512 a = _mm512_loadu_ps(row + i), b = _mm512_loadu_ps(row + i + 16);
      even = _mm512_fmadd_ps(a, a, even);
      odd = _mm512_fmadd_ps(b, b, odd);
    }
    const float mean = _mm512_reduce_add_ps(_mm512_add_ps(even, odd)) / static_cast<float>(hidden);
    const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(mean + 1e-6f));
    for (int64_t i = 0; i < hidden; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(row + i), scale));
  }
}

// The two-call form's add at the widest vectors GCC can give it here.
__attribute__((target("avx512f"))) void add_into(float* __restrict r, const float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i) r[i] += x[i];
}

// Weight and bias at page boundaries too: with rows of 4 KiB the kernel's
// time depends on where every buffer starts in a page, so none is left to
// the heap.
struct Inputs {
  float* weight;
  float* bias;
  Inputs(int64_t hidden, std::mt19937& rng)
      : weight(page_aligned(hidden * sizeof(float))), bias(page_aligned(hidden * sizeof(float))) {
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < hidden; ++i) {
      weight[i] = 1.0f + 0.1f * normal(rng);
      bias[i] = 0.1f * normal(rng);
    }
  }
};

// The element type the norm is timed in: its size, and float values stored
// as it (rounded to nearest even, as the op's own stores round).
struct Element {
  fused_norm::DType dtype;
  size_t bytes;
  void store(void* base, size_t i, float v) const {
    if (dtype == fused_norm::DType::kBFloat16) {
      static_cast<fused_norm::BFloat16*>(base)[i] = fused_norm::to_bfloat16(v);
    } else if (dtype == fused_norm::DType::kFloat16) {
      static_cast<fused_norm::Half*>(base)[i] = fused_norm::to_half(v);
    } else {
      static_cast<float*>(base)[i] = v;
    }
  }
};

bool parse_element(const std::string& name, Element* out) {
  for (const Element e : {Element{fused_norm::DType::kFloat32, 4}, Element{fused_norm::DType::kBFloat16, 2},
                          Element{fused_norm::DType::kFloat16, 2}}) {
    if (name == fused_norm::dtype_name(e.dtype)) {
      *out = e;
      return true;
    }
  }
  return false;
}

void time_norm(int64_t rows, int64_t hidden, int reps, const Element& e) {
  const size_t n = static_cast<size_t>(rows * hidden), bytes = n * e.bytes;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  void* x = page_aligned(bytes);
  char* y_pages = reinterpret_cast<char*>(page_aligned(bytes));
  for (size_t i = 0; i < n; ++i) e.store(x, i, normal(rng));
  Inputs in(hidden, rng);
  void* weight = page_aligned(hidden * e.bytes);
  void* bias = page_aligned(hidden * e.bytes);
  for (int64_t i = 0; i < hidden; ++i) {
    e.store(weight, i, in.weight[i]);
    e.store(bias, i, in.bias[i]);
  }
  const int calls = static_cast<int>(std::max<size_t>(1, 400000 / bytes));
  std::printf("norm %lldx%lld %s, %d calls a block, ns per element\n", static_cast<long long>(rows),
              static_cast<long long>(hidden), fused_norm::dtype_name(e.dtype), calls);
  for (int d : {0, 64, 128, 512, 1024, 2048, 3072, 4032}) {
    void* y = y_pages + d;
    fused_norm::NormProblem p{x, weight, bias, y, rows, hidden, 1e-6, e.dtype, false, fused_norm::cpu_caches()};
    const bool floor = e.dtype == fused_norm::DType::kFloat32 && hidden % 32 == 0;
    std::vector<double> op, copy, two_pass;
    for (int rep = 0; rep < reps + 2; ++rep) {  // the first two warm up
      const double t0 = now_ns();
      for (int i = 0; i < calls; ++i) fused_norm::cpu_forward_rows(p, 0, rows);
      const double t1 = now_ns();
      for (int i = 0; i < calls; ++i) std::memcpy(y, x, bytes);
      const double t2 = now_ns();
      for (int i = 0; floor && i < calls; ++i)
        two_pass_rows(static_cast<float*>(y), static_cast<float*>(x), rows, hidden);
      const double t3 = now_ns();
      if (rep >= 2) {
        op.push_back((t1 - t0) / calls / n);
        copy.push_back((t2 - t1) / calls / n);
        two_pass.push_back((t3 - t2) / calls / n);
      }
    }
    std::printf("  d=%4d  op %.3f  copy %.3f  copy/op %.0f %%", d, median(op), median(copy),
                100 * median(copy) / median(op));
    if (floor) {
      std::printf("  two passes %.3f  copy/two passes %.0f %%", median(two_pass),
                  100 * median(copy) / median(two_pass));
    }
    std::printf("\n");
  }
}

void time_add(int64_t rows, int64_t hidden, int reps, int offset) {
  const size_t n = static_cast<size_t>(rows * hidden), bytes = n * sizeof(float);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  float* x = page_aligned(bytes);
  float* r = reinterpret_cast<float*>(reinterpret_cast<char*>(page_aligned(bytes)) + offset);
  Inputs in(hidden, rng);
  for (size_t i = 0; i < n; ++i) x[i] = normal(rng);
  fused_norm::NormProblem norm{nullptr, in.weight, in.bias, nullptr, rows, hidden, 1e-6, fused_norm::DType::kFloat32};
  norm.caches = fused_norm::cpu_caches();
  fused_norm::AddNormProblem fused{norm, r, r};
  fused.norm.x = fused.norm.y = x;
  fused_norm::NormProblem second = norm;  // the two-call form's norm: of the residual, into x
  second.x = r;
  second.y = x;
  const int calls = static_cast<int>(std::max<size_t>(1, 400000 / bytes));
  std::vector<double> one, two;
  for (int rep = 0; rep < reps + 2; ++rep) {
    for (size_t i = 0; i < n; ++i) r[i] = 0.5f * x[i];  // in place grows r: start afresh
    const double t0 = now_ns();
    for (int i = 0; i < calls; ++i) fused_norm::cpu_add_forward_rows(fused, 0, rows);
    const double t1 = now_ns();
    for (int i = 0; i < calls; ++i) {
      add_into(r, x, n);
      fused_norm::cpu_forward_rows(second, 0, rows);
    }
    const double t2 = now_ns();
    if (rep >= 2) {
      one.push_back((t1 - t0) / calls / 1e3);
      two.push_back((t2 - t1) / calls / 1e3);
    }
  }
  std::printf("add %lldx%lld, residual %d bytes into a page: fused %.1f us, two calls %.1f us, two/fused %.2f\n",
              static_cast<long long>(rows), static_cast<long long>(hidden), offset, median(one), median(two),
              median(two) / median(one));
}

// GB/s counted as bytes read plus bytes written, medians over repetitions;
// the three copies take turns within each repetition.
void time_copy(int64_t rows, int64_t hidden, int reps) {
  const size_t n = static_cast<size_t>(rows * hidden), bytes = n * sizeof(float);
  float* x = page_aligned(bytes);
  float* y = page_aligned(bytes);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000) * 0.5f;
  const int calls = static_cast<int>(std::max<size_t>(1, 400000 / bytes));
  std::vector<double> plain, vectors, streaming;
  for (int rep = 0; rep < reps + 2; ++rep) {  // the first two warm up
    const double t0 = now_ns();
    for (int i = 0; i < calls; ++i) std::memcpy(y, x, bytes);
    const double t1 = now_ns();
    for (int i = 0; i < calls; ++i) copy_vectors(y, x, n);
    const double t2 = now_ns();
    for (int i = 0; i < calls; ++i) copy_streaming(y, x, n);
    const double t3 = now_ns();
    if (rep >= 2) {
      plain.push_back(2.0 * bytes * calls / (t1 - t0));
      vectors.push_back(2.0 * bytes * calls / (t2 - t1));
      streaming.push_back(2.0 * bytes * calls / (t3 - t2));
    }
  }
  std::printf("copy %lldx%lld (%.1f MiB), GB/s read + written: memcpy %.1f, vector stores %.1f, streaming %.1f\n",
              static_cast<long long>(rows), static_cast<long long>(hidden), bytes / 1048576.0, median(plain),
              median(vectors), median(streaming));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc < 4 || (mode != "norm" && mode != "add" && mode != "copy")) {
    std::fprintf(stderr, "usage: %s norm|add|copy ROWS HIDDEN [REPS] [OFFSET (add) | DTYPE (norm)]\n", argv[0]);
    return 2;
  }
  const int64_t rows = std::atoll(argv[2]), hidden = std::atoll(argv[3]);
  const int reps = argc > 4 ? std::atoi(argv[4]) : 31;
  const std::string fifth = argc > 5 ? argv[5] : "";
  const int offset = mode == "add" && argc > 5 ? std::atoi(argv[5]) : 0;
  Element element{fused_norm::DType::kFloat32, 4};
  if (mode == "norm" && argc > 5 && !parse_element(fifth, &element)) {
    std::fprintf(stderr, "DTYPE must be float32, bfloat16 or float16, got %s\n", fifth.c_str());
    return 2;
  }
  if (rows < 1 || hidden < 1 || reps < 1 || offset < 0 || offset >= 4096 || offset % 4 != 0) {
    std::fprintf(stderr, "ROWS, HIDDEN and REPS must be >= 1 and OFFSET a multiple of 4 in [0, 4096)\n");
    return 2;
  }
  if (mode == "norm") {
    time_norm(rows, hidden, reps, element);
  } else if (mode == "copy") {
    if ((rows * hidden) % 16 != 0) {
      std::fprintf(stderr, "copy: ROWS x HIDDEN must be a multiple of 16\n");
      return 2;
    }
    time_copy(rows, hidden, reps);
  } else {
    time_add(rows, hidden, reps, offset);
  }
  return 0;
}
