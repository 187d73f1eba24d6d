// CPU kernel of the fused RMS norm: two passes over each row (sum of squares,
// then the scaled write), no intermediate tensor, no framework calls.
//
// The op is memory-bound once the tensor leaves the caches: each element is
// read twice (the second read hits L1/L2, a row is at most a few hundred KB)
// and written once. Both passes must run at vector width: the sum of squares
// keeps kLanes independent partial sums, which lets the compiler vectorise
// the reduction without -ffast-math (never used: it would change rounding)
// and hides the add latency.
#include "fused_norm.h"

#include <cmath>

#include "numeric_types.h"

// Portable delivered builds must not use -march=native, yet the inner loops
// should use the widest vectors the running CPU has. GCC's target_clones
// compiles each entry point three times and resolves the best clone once,
// when the library is loaded (an ifunc), so the hot loop pays nothing.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(FUSED_NORM_NO_CLONES)
#define FUSED_NORM_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FUSED_NORM_CPU_CLONES
#endif

namespace fused_norm {
namespace {

// 1 / sqrt(mean(x^2) + eps) of one row.
template <typename T>
inline __attribute__((always_inline)) typename Numeric<T>::acc_t row_inv_rms(const T* __restrict xr, int64_t hidden,
                                                                            typename Numeric<T>::acc_t inv_hidden,
                                                                            typename Numeric<T>::acc_t eps) {
  using N = Numeric<T>;
  using acc_t = typename N::acc_t;
  // Two 64-byte vectors' worth of partial sums.
  constexpr int kLanes = 128 / sizeof(acc_t);
  acc_t partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= hidden; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const acc_t v = N::load(xr[i + j]);
      partial[j] += v * v;
    }
  }
  acc_t tail = 0;
  for (; i < hidden; ++i) {
    const acc_t v = N::load(xr[i]);
    tail += v * v;
  }
  // Pairwise fold of the lanes: a fixed order, so results do not depend on
  // the clone, the row blocking or the thread count.
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) partial[j] += partial[j + width];
  }
  return acc_t(1) / std::sqrt((partial[0] + tail) * inv_hidden + eps);
}

// The scaled write is where the loads are: x, weight and bias per element.
// Writing kRowBlock rows in one sweep loads each weight/bias vector once for
// all of them, which cuts L1 traffic by a third for cache-resident sizes.
constexpr int kRowBlock = 4;

template <typename T>
inline __attribute__((always_inline)) void normalise_rows(const T* __restrict x,       // [rows, hidden]
                                                          const T* __restrict weight,  // [hidden]
                                                          const T* __restrict bias,    // [hidden]
                                                          T* __restrict y,             // [rows, hidden]
                                                          int64_t row_begin, int64_t row_end, int64_t hidden,
                                                          double eps) {
  using N = Numeric<T>;
  using acc_t = typename N::acc_t;
  const acc_t eps_acc = static_cast<acc_t>(eps);
  const acc_t inv_hidden = acc_t(1) / static_cast<acc_t>(hidden);

  int64_t r = row_begin;
  for (; r + kRowBlock <= row_end; r += kRowBlock) {
    const T* xr = x + r * hidden;
    T* yr = y + r * hidden;
    acc_t inv_rms[kRowBlock];
    for (int j = 0; j < kRowBlock; ++j) inv_rms[j] = row_inv_rms(xr + j * hidden, hidden, inv_hidden, eps_acc);
    for (int64_t k = 0; k < hidden; ++k) {
      const acc_t w = N::load(weight[k]);
      const acc_t b = N::load(bias[k]);
      for (int j = 0; j < kRowBlock; ++j) {
        yr[j * hidden + k] = N::store(N::load(xr[j * hidden + k]) * inv_rms[j] * w + b);
      }
    }
  }
  for (; r < row_end; ++r) {
    const T* xr = x + r * hidden;
    T* yr = y + r * hidden;
    const acc_t inv_rms = row_inv_rms(xr, hidden, inv_hidden, eps_acc);
    for (int64_t k = 0; k < hidden; ++k) {
      yr[k] = N::store(N::load(xr[k]) * inv_rms * N::load(weight[k]) + N::load(bias[k]));
    }
  }
}

// One non-template entry point per dtype (overloads on the type tag):
// target_clones applies to concrete functions, and the always_inline template
// above is compiled inside each clone with that clone's instruction set.
#define FUSED_NORM_CPU_ENTRY(T)                                                                          \
  FUSED_NORM_CPU_CLONES void clone_rows(TypeTag<T>, const NormProblem& p, int64_t begin, int64_t end) { \
    normalise_rows(static_cast<const T*>(p.x), static_cast<const T*>(p.weight),                         \
                   static_cast<const T*>(p.bias), static_cast<T*>(p.y), begin, end, p.hidden, p.eps);   \
  }
FUSED_NORM_CPU_ENTRY(float)
FUSED_NORM_CPU_ENTRY(double)
FUSED_NORM_CPU_ENTRY(Half)
FUSED_NORM_CPU_ENTRY(BFloat16)
#undef FUSED_NORM_CPU_ENTRY

}  // namespace

void cpu_forward_rows(const NormProblem& p, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end || p.hidden <= 0 || !is_known_dtype(p.dtype)) return;
  visit(p.dtype, [&](auto tag) { clone_rows(tag, p, row_begin, row_end); });
}

int64_t cpu_rows_per_task(int64_t hidden) {
  constexpr int64_t kElementsPerTask = 32768;
  if (hidden <= 0) return 1;
  const int64_t rows = kElementsPerTask / hidden;
  return rows > 0 ? rows : 1;
}

}  // namespace fused_norm
