// CPU kernel of the fused RMS norm: two passes over each row (sum of squares,
// then the scaled write), no intermediate tensor, no framework calls.
//
// The op is memory-bound once the tensor leaves the caches: each element is
// read twice (the second read hits L1/L2, a row is at most a few hundred KB)
// and written once. Both passes run at vector width: the loops are written
// with GCC vector types of the version's width (64, 32 or 16 bytes), so that
// no lane-at-a-time path is left to the auto-vectoriser, and the row's tail
// goes through the same vector code on a zero-padded copy.
//
// Results are bit-identical across versions, row blocking and thread counts:
// the sum of squares keeps kLanes partial sums, partial e accumulating the
// elements at position e of each kLanes-element chunk, in order, whatever the
// vector width; the lanes then fold pairwise in a fixed order. No
// -ffast-math (it would change rounding) and no FMA contraction (the build
// passes -ffp-contract=off).
#include "fused_norm.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "numeric_types.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// Declares the x86 conversion builtins used by the versions that have them;
// the kernel itself uses no intrinsic wrapper functions (they could not be
// inlined into the multi-versioned entry points' helpers).
#include <immintrin.h>
#endif

// Vector values pass between always-inlined helpers; their by-value ABI
// (what -Wpsabi warns about) never reaches a real call.
#pragma GCC diagnostic ignored "-Wpsabi"

// Portable delivered builds must not use -march=native, yet the inner loops
// should use the widest vectors the running CPU has. Each entry point is
// written three times with GCC's function multi-versioning (AVX-512, AVX2,
// baseline), each instantiating the kernel at its own vector width; the
// loader resolves the best version once (an ifunc), so the hot loop pays
// nothing. A build without versions uses the width its flags allow.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && !defined(FUSED_NORM_NO_CLONES)
#define FUSED_NORM_CPU_VERSIONS 1
#else
#define FUSED_NORM_CPU_VERSIONS 0
#endif

namespace fused_norm {
namespace {

#if defined(__AVX512F__)
constexpr int kBuildVectorBytes = 64;
#elif defined(__AVX2__)
constexpr int kBuildVectorBytes = 32;
#else
constexpr int kBuildVectorBytes = 16;
#endif

// Whether the code at vector width B converts float16 in hardware: F16C's
// vcvtph2ps/vcvtps2ph at 32 bytes (x86-64-v3 has F16C) and AVX-512F's zmm
// forms at 64. The baseline version converts in software.
#if FUSED_NORM_CPU_VERSIONS
template <int B>
constexpr bool kHardwareHalf = B >= 32;
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
template <int B>
constexpr bool kHardwareHalf =
#if defined(__AVX512F__)
    B == 64 ||
#endif
#if defined(__F16C__)
    B == 32 ||
#endif
    false;
#else
template <int B>
constexpr bool kHardwareHalf = false;
#endif

// Vectors of `Bytes` bytes (16: xmm, 32: ymm, 64: zmm).
template <int Bytes>
struct Vec {
  typedef float f32 __attribute__((vector_size(Bytes)));
  typedef double f64 __attribute__((vector_size(Bytes)));
  typedef uint32_t u32 __attribute__((vector_size(Bytes)));
  typedef int32_t i32 __attribute__((vector_size(Bytes)));
  typedef int16_t i16 __attribute__((vector_size(Bytes)));
};

// Vectors move between memory and registers as one unaligned load or store
// of the whole vector (vmovups / movdqu), through a copy of the vector type
// with alignment 1 that may alias any element type the buffer holds. Not
// memcpy: GCC expands a 32- or 64-byte memcpy store piecewise under generic
// tuning (the vector spilled to the stack, then copied out 16 bytes at a
// time), and a full-width load of data just stored that way cannot take it
// from the store buffer: it waits for both halves to reach the cache.
template <typename V>
struct Unaligned {
  typedef V type __attribute__((aligned(1), may_alias));
};

template <typename V, typename T>
inline __attribute__((always_inline)) V load_vector(const T* p) {
  return *reinterpret_cast<const typename Unaligned<V>::type*>(p);
}

template <typename V, typename T>
inline __attribute__((always_inline)) void store_vector(T* p, const V& v) {
  *reinterpret_cast<typename Unaligned<V>::type*>(p) = v;
}

// Where the output outgrows the last-level cache it cannot stay cached for
// whoever reads it next, and an ordinary store first reads each output line
// from memory (write-allocate) only to overwrite all of it. A non-temporal
// store (movntps) writes whole lines without that read: a third less memory
// traffic for a kernel that reads x once from memory and writes y once. It
// needs the vector's own alignment: write_rows streams a row from its first
// cache line boundary on (streams_output says which problems stream), and
// the rows end with a store fence.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
constexpr bool kCanStream = true;
#else
constexpr bool kCanStream = false;
#endif

template <bool Stream, typename V, typename T>
inline __attribute__((always_inline)) void put_vector(T* p, const V& v) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if constexpr (Stream) {
    using f32 = typename Vec<static_cast<int>(sizeof(V))>::f32;
    const f32 bits = (f32)v;  // a vector cast between equal sizes keeps the bits
    float* out = reinterpret_cast<float*>(p);
    if constexpr (sizeof(V) == 64) {
      __builtin_ia32_movntps512(out, bits);
    } else if constexpr (sizeof(V) == 32) {
      __builtin_ia32_movntps256(out, bits);
    } else {
      __builtin_ia32_movntps(out, bits);
    }
    return;
  }
#endif
  store_vector(p, v);
}

template <typename V, typename S>
inline __attribute__((always_inline)) V splat(S s) {
  return V{} + s;
}

// IEEE binary16 in the low 16 bits of each lane -> float; the vector form of
// to_float(Half), same bits for every input.
template <int B>
inline __attribute__((always_inline)) typename Vec<B>::f32 half_bits_to_float(typename Vec<B>::u32 h) {
  using u32 = typename Vec<B>::u32;
  using i32 = typename Vec<B>::i32;
  using f32 = typename Vec<B>::f32;
  const u32 sign = (h & 0x8000u) << 16;
  const u32 magnitude = h & 0x7fffu;
  // Subnormal or zero: mantissa * 2^-24 through an integer conversion (a
  // denormals-are-zero mode cannot flush it).
  const f32 subnormal = __builtin_convertvector((i32)magnitude, f32) * 0x1.0p-24f;
  u32 normal = (magnitude << 13) + (112u << 23);
  normal |= (u32)((i32)magnitude >= 0x7c00) & 0x7f800000u;
  const u32 out = (i32)magnitude < 0x400 ? (u32)subnormal : normal;
  return (f32)(out | sign);
}

// float -> binary16 bits in the low 16 bits of each lane; the vector form of
// to_half (round to nearest even, overflow to inf, NaN quiet 0x7e00).
template <int B>
inline __attribute__((always_inline)) typename Vec<B>::u32 float_to_half_bits(typename Vec<B>::f32 f) {
  using u32 = typename Vec<B>::u32;
  using i32 = typename Vec<B>::i32;
  using f32 = typename Vec<B>::f32;
  const u32 x = (u32)f;
  const u32 sign = (x >> 16) & 0x8000u;
  const u32 ax = x & 0x7fffffffu;
  const i32 sax = (i32)ax;  // non-negative: signed compares are exact
  u32 out = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;
  const u32 subnormal = (u32)((f32)ax + 0.5f) - 0x3f000000u;
  out = sax < 0x38800000 ? subnormal : out;
  out = sax >= 0x477ff000 ? splat<u32>(0x7c00u) : out;
  out = sax > 0x7f800000 ? splat<u32>(0x7e00u) : out;
  return out | sign;
}

// float -> bfloat16 bits in the low 16 bits of each lane; the vector form of
// to_bfloat16 (round to nearest even, NaN made quiet).
template <int B>
inline __attribute__((always_inline)) typename Vec<B>::u32 float_to_bfloat16_bits(typename Vec<B>::f32 f) {
  using u32 = typename Vec<B>::u32;
  using i32 = typename Vec<B>::i32;
  const u32 x = (u32)f;
  const u32 rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (i32)(x & 0x7fffffffu) > 0x7f800000 ? (x >> 16) | 0x0040u : rounded;
}

// float16 <-> float in hardware, one float vector of B bytes at a time
// (B / 4 halves). Instantiated only in code compiled for an instruction set
// that has the conversion (kHardwareHalf), where the builtins expand.
template <int B>
struct HardwareHalf;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
template <>
struct HardwareHalf<32> {
  typedef int16_t halves __attribute__((vector_size(16)));
  static inline __attribute__((always_inline)) Vec<32>::f32 to_float(halves h) {
    return __builtin_ia32_vcvtph2ps256(h);
  }
  static inline __attribute__((always_inline)) halves to_half(Vec<32>::f32 f) {
    return __builtin_ia32_vcvtps2ph256(f, 0);  // 0: round to nearest even, whatever MXCSR says
  }
};

template <>
struct HardwareHalf<64> {
  typedef int16_t halves __attribute__((vector_size(32)));
  static inline __attribute__((always_inline)) Vec<64>::f32 to_float(halves h) {
    return __builtin_ia32_vcvtph2ps512_mask(h, Vec<64>::f32{}, static_cast<uint16_t>(0xffff), 4);
  }
  static inline __attribute__((always_inline)) halves to_half(Vec<64>::f32 f) {
    return __builtin_ia32_vcvtps2ph512_mask(f, 0, halves{}, static_cast<uint16_t>(0xffff));
  }
};
#endif

// float -> bfloat16 in hardware: AVX512-BF16's vcvtne2ps2bf16 converts two
// float vectors into one of 32 bfloat16 (the second argument's 16 first).
// GCC 10-12 name and type the result as a vector of short, GCC 13 on as one
// of __bf16 (and __has_builtin does not see either); both are the same 64
// bytes. Not in x86-64-v4, so it runs only where the x86-64-v4 version has
// asked the CPU (or a build's own flags enable it).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#if __GNUC__ >= 13
#define FUSED_NORM_BF16_PAIR(odd, even) __builtin_ia32_cvtne2ps2bf16_v32bf(odd, even)
#elif __GNUC__ >= 10
#define FUSED_NORM_BF16_PAIR(odd, even) __builtin_ia32_cvtne2ps2bf16_v32hi(odd, even)
#endif
#endif
#if defined(FUSED_NORM_BF16_PAIR) && (FUSED_NORM_CPU_VERSIONS || (defined(__AVX512BF16__) && defined(__AVX512DQ__)))
#define FUSED_NORM_BF16_HARDWARE 1
#else
#define FUSED_NORM_BF16_HARDWARE 0
#endif

// bfloat16 stored through vcvtne2ps2bf16: the same two bytes as BFloat16, a
// type of its own so that the kernel instantiated for it (at 64 bytes only)
// is the one whose stores use the instruction.
struct BFloat16ByHardware {
  uint16_t bits;
};

}  // namespace

template <>
struct Numeric<BFloat16ByHardware> {
  using acc_t = float;
};

namespace {

// A group is one vector of stored elements (B bytes of T), loaded as
// kAccPerGroup vectors of the accumulation type. element(a, l) says which of
// the group's elements lane l of accumulation vector a holds. The software
// 16-bit conversions put the even elements in vector 0 and the odd ones in
// vector 1 (shifts and masks, no shuffles); the hardware float16 conversion
// reads the group's first and second halves.
template <typename T, int B>
struct Groups;

template <int B>
struct Groups<float, B> {
  using acc_v = typename Vec<B>::f32;
  static constexpr int kAccPerGroup = 1;
  static constexpr int element(int, int l) { return l; }
  static inline __attribute__((always_inline)) void load(const float* p, acc_v* out) { out[0] = load_vector<acc_v>(p); }
  template <bool Stream>
  static inline __attribute__((always_inline)) void store(float* p, const acc_v* in) {
    put_vector<Stream>(p, in[0]);
  }
};

template <int B>
struct Groups<double, B> {
  using acc_v = typename Vec<B>::f64;
  static constexpr int kAccPerGroup = 1;
  static constexpr int element(int, int l) { return l; }
  static inline __attribute__((always_inline)) void load(const double* p, acc_v* out) {
    out[0] = load_vector<acc_v>(p);
  }
  template <bool Stream>
  static inline __attribute__((always_inline)) void store(double* p, const acc_v* in) {
    put_vector<Stream>(p, in[0]);
  }
};

template <int B>
struct Groups<BFloat16, B> {
  using acc_v = typename Vec<B>::f32;
  using u32 = typename Vec<B>::u32;
  static constexpr int kAccPerGroup = 2;
  static constexpr int element(int a, int l) { return l * 2 + a; }
  static inline __attribute__((always_inline)) void load(const BFloat16* p, acc_v* out) {
    const u32 bits = load_vector<u32>(p);
    out[0] = (acc_v)(bits << 16);
    out[1] = (acc_v)(bits & 0xffff0000u);
  }
  template <bool Stream>
  static inline __attribute__((always_inline)) void store(BFloat16* p, const acc_v* in) {
    const u32 bits = float_to_bfloat16_bits<B>(in[0]) | (float_to_bfloat16_bits<B>(in[1]) << 16);
    put_vector<Stream>(p, bits);
  }
};

#if FUSED_NORM_BF16_HARDWARE
// Loads and lanes as BFloat16's (so the sums are the same); stores convert
// in hardware, which rounds to nearest even and quiets a NaN exactly as
// to_bfloat16 does, but flushes subnormal floats to zero. A group holding a
// subnormal takes the software rounding instead, so every version writes
// the same bits; outputs that small are rare, and the branch is predicted.
template <>
struct Groups<BFloat16ByHardware, 64> {
  using Software = Groups<BFloat16, 64>;
  using acc_v = Vec<64>::f32;
  using i16 = Vec<64>::i16;
  static constexpr int kAccPerGroup = Software::kAccPerGroup;
  static constexpr int element(int a, int l) { return Software::element(a, l); }

  static inline __attribute__((always_inline)) void load(const BFloat16ByHardware* p, acc_v* out) {
    Software::load(reinterpret_cast<const BFloat16*>(p), out);
  }

  template <bool Stream>
  static inline __attribute__((always_inline)) void store(BFloat16ByHardware* p, const acc_v* in) {
    constexpr int kSubnormal = 0x20;  // vfpclassps category: denormal
    const unsigned subnormal_lanes = __builtin_ia32_fpclassps512_mask(in[0], kSubnormal, 0xffff) |
                                     __builtin_ia32_fpclassps512_mask(in[1], kSubnormal, 0xffff);
    if (__builtin_expect(subnormal_lanes != 0, 0)) {
      Software::template store<Stream>(reinterpret_cast<BFloat16*>(p), in);
      return;
    }
    // Lanes 0-15: the even elements (in[0]), 16-31: the odd ones; back to memory order.
    const i16 converted = (i16)FUSED_NORM_BF16_PAIR(in[1], in[0]);
    put_vector<Stream>(p, __builtin_shufflevector(converted, converted, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22,
                                                  7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31));
  }
};
#endif

template <int B>
struct Groups<Half, B> {
  using acc_v = typename Vec<B>::f32;
  using u32 = typename Vec<B>::u32;
  using i16 = typename Vec<B>::i16;
  static constexpr bool kHardware = kHardwareHalf<B>;
  static constexpr int kAccPerGroup = 2;
  static constexpr int kHalvesPerAcc = B / 4;
  static constexpr int element(int a, int l) { return kHardware ? a * kHalvesPerAcc + l : l * 2 + a; }

  static inline __attribute__((always_inline)) void load(const Half* p, acc_v* out) {
    if constexpr (kHardware) {
      using H = HardwareHalf<B>;
      out[0] = H::to_float(load_vector<typename H::halves>(p));
      out[1] = H::to_float(load_vector<typename H::halves>(p + kHalvesPerAcc));
    } else {
      const u32 bits = load_vector<u32>(p);
      out[0] = half_bits_to_float<B>(bits & 0xffffu);
      out[1] = half_bits_to_float<B>(bits >> 16);
    }
  }

  // CanNaN false: the caller knows every value is finite or infinite
  // (HalfFinite), and the hardware's result needs no NaN rewrite.
  template <bool Stream, bool CanNaN = true>
  static inline __attribute__((always_inline)) void store(Half* p, const acc_v* in) {
    if constexpr (kHardware) {
      using H = HardwareHalf<B>;
      const i16 bits = join_halves(H::to_half(in[0]), H::to_half(in[1]));
      if constexpr (!CanNaN) {
        put_vector<Stream>(p, bits);
        return;
      }
      // The hardware keeps a NaN's payload; to_half (and torch) store the
      // one quiet NaN 0x7e00 with the sign, so every version writes the
      // same bits.
      const i16 magnitude = bits & 0x7fff;
      put_vector<Stream>(p, magnitude > 0x7c00 ? (bits & static_cast<int16_t>(0x8000)) | 0x7e00 : bits);
    } else {
      const u32 bits = float_to_half_bits<B>(in[0]) | (float_to_half_bits<B>(in[1]) << 16);
      put_vector<Stream>(p, bits);
    }
  }

 private:
  template <typename Part>
  static inline __attribute__((always_inline)) i16 join_halves(Part lo, Part hi) {
    if constexpr (B == 32) {
      return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    } else {
      return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                     21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
    }
  }
};

// float16 rows none of whose outputs can be NaN: Half's bytes, loads and
// lanes, stored without the NaN rewrite. write_block proves it per block of
// rows (its comment says how), and only where the conversion is in
// hardware: there the rewrite took a sixth of the kernel's time in the
// caches (docs/cpu-kernel.md).
struct HalfFinite {
  uint16_t bits;
};

}  // namespace

template <>
struct Numeric<HalfFinite> {
  using acc_t = float;
};

namespace {

template <int B>
struct Groups<HalfFinite, B> {
  using Half16 = Groups<Half, B>;
  using acc_v = typename Half16::acc_v;
  static constexpr int kAccPerGroup = Half16::kAccPerGroup;
  static constexpr int element(int a, int l) { return Half16::element(a, l); }
  static inline __attribute__((always_inline)) void load(const HalfFinite* p, acc_v* out) {
    Half16::load(reinterpret_cast<const Half*>(p), out);
  }
  template <bool Stream>
  static inline __attribute__((always_inline)) void store(HalfFinite* p, const acc_v* in) {
    Half16::template store<Stream, false>(reinterpret_cast<Half*>(p), in);
  }
};

// The layout of one element type at one vector width.
template <typename T, int B>
struct Layout {
  using G = Groups<T, B>;
  using acc_t = typename Numeric<T>::acc_t;
  using acc_v = typename G::acc_v;
  static constexpr int kGroup = B / static_cast<int>(sizeof(T));  // elements per group
  static constexpr int kAccLanes = B / static_cast<int>(sizeof(acc_t));
  // Partial sums: 128 bytes of accumulators (two 64-byte vectors' worth),
  // enough independent adds to hide their latency at every width.
  static constexpr int kLanes = 128 / static_cast<int>(sizeof(acc_t));
  static constexpr int kGroupsPerChunk = kLanes / kGroup;
  static constexpr int kAccVecs = kGroupsPerChunk * G::kAccPerGroup;
  static_assert(kLanes % kGroup == 0 && kAccVecs * kAccLanes == kLanes, "a chunk is whole groups");
};

// Adds the squares of one chunk (kLanes elements) into the partial sums.
template <typename T, int B>
inline __attribute__((always_inline)) void add_squares(const T* __restrict p, typename Layout<T, B>::acc_v* acc) {
  using L = Layout<T, B>;
  constexpr int A = L::G::kAccPerGroup;
#pragma GCC unroll 16
  for (int g = 0; g < L::kGroupsPerChunk; ++g) {
    typename L::acc_v v[A];
    L::G::load(p + g * L::kGroup, v);
#pragma GCC unroll 2
    for (int a = 0; a < A; ++a) acc[g * A + a] += v[a] * v[a];
  }
}

// A vector of `Bytes` bytes of E (float or double).
template <typename E, int Bytes>
struct VecOf {
  typedef E type __attribute__((vector_size(Bytes)));
};

// Lanes [Offset, Offset + n) of v as a vector of n lanes.
template <int Offset, typename V, int... I>
inline __attribute__((always_inline)) auto lanes_of(V v, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(v, v, (Offset + I)...);
}

// The pairwise fold of one vector's lanes: lanes [0, n/2) += [n/2, n) until
// one is left. Halves stay in registers down to 16 bytes (an extract and a
// vector add per level); the last two or four lanes add as scalars.
template <typename E, int Bytes>
inline __attribute__((always_inline)) E fold_lanes(typename VecOf<E, Bytes>::type v) {
  constexpr int n = Bytes / static_cast<int>(sizeof(E));
  if constexpr (Bytes > 16) {
    using Half = std::make_integer_sequence<int, n / 2>;
    const typename VecOf<E, Bytes / 2>::type low = lanes_of<0>(v, Half{}), high = lanes_of<n / 2>(v, Half{});
    return fold_lanes<E, Bytes / 2>(low + high);
  } else if constexpr (n == 4) {
    return (v[0] + v[2]) + (v[1] + v[3]);
  } else {
    static_assert(n == 2, "16 bytes of float or double");
    return v[0] + v[1];
  }
}

// Whether the layout's accumulation vectors, in order, hold the partial sums
// in order (acc[i] lane l is partial i * kAccLanes + l), or, with two of
// them per group, the group's even and odd partial sums.
template <typename T, int B>
constexpr bool accumulators_in_order() {
  using L = Layout<T, B>;
  for (int a = 0; a < L::G::kAccPerGroup; ++a) {
    for (int l = 0; l < L::kAccLanes; ++l) {
      if (L::G::element(a, l) != a * L::kAccLanes + l) return false;
    }
  }
  return true;
}

template <typename T, int B>
constexpr bool accumulators_even_odd() {
  using L = Layout<T, B>;
  if (L::G::kAccPerGroup != 2) return false;
  for (int a = 0; a < 2; ++a) {
    for (int l = 0; l < L::kAccLanes; ++l) {
      if (L::G::element(a, l) != 2 * l + a) return false;
    }
  }
  return true;
}

// 1 / sqrt(mean + eps) from the partial sums of squares of one row.
//
// The partial sums fold pairwise in a fixed order, so that results do not
// depend on the version, the row blocking or the thread count: with
// partial[e] the sum of the elements at position e of every chunk, each
// level adds partial[j + w] into partial[j] for j < w, w = kLanes / 2, ...,
// 1. Done on the accumulation vectors as they are, the same adds in the same
// order: the levels that span vectors add vector n/2 + i into vector i; then
// each vector folds its own lanes, and with the even/odd layout the two
// results add last (partial[0] + partial[1]).
template <typename T, int B>
inline __attribute__((always_inline)) typename Numeric<T>::acc_t fold_inv_rms(typename Layout<T, B>::acc_v* acc,
                                                                              typename Numeric<T>::acc_t inv_hidden,
                                                                              typename Numeric<T>::acc_t eps) {
  using L = Layout<T, B>;
  using acc_t = typename L::acc_t;
  constexpr bool in_order = accumulators_in_order<T, B>();
  static_assert(in_order || accumulators_even_odd<T, B>(), "a layout the fold knows");
  constexpr int kLeft = in_order ? 1 : 2;  // vectors left once the levels across vectors are done
#pragma GCC unroll 8
  for (int n = L::kAccVecs; n > kLeft; n /= 2) {
#pragma GCC unroll 16
    for (int i = 0; i < n / 2; ++i) acc[i] += acc[i + n / 2];
  }
  acc_t sum = fold_lanes<acc_t, B>(acc[0]);
  if constexpr (!in_order) sum += fold_lanes<acc_t, B>(acc[1]);
  return acc_t(1) / std::sqrt(sum * inv_hidden + eps);
}

// 1 / sqrt(mean(x^2) + eps) of one row.
template <typename T, int B>
inline __attribute__((always_inline)) typename Numeric<T>::acc_t row_inv_rms(const T* __restrict xr, int64_t hidden,
                                                                             typename Numeric<T>::acc_t inv_hidden,
                                                                             typename Numeric<T>::acc_t eps) {
  using L = Layout<T, B>;
  typename L::acc_v acc[L::kAccVecs] = {};
  int64_t i = 0;
  for (; i + L::kLanes <= hidden; i += L::kLanes) add_squares<T, B>(xr + i, acc);
  if (i < hidden) {
    // The last partial chunk, zero-padded: +0 (all bits clear in every
    // element type) adds nothing to a partial sum.
    T pad[L::kLanes] = {};
    std::memcpy(pad, xr + i, static_cast<size_t>(hidden - i) * sizeof(T));
    add_squares<T, B>(pad, acc);
  }
  return fold_inv_rms<T, B>(acc, inv_hidden, eps);
}

// s = x + r for one chunk (kLanes elements), added in the accumulation type
// and stored rounded to T; then the squares of the stored chunk, re-read, go
// into the partial sums, so the statistics are those of s as stored. No
// __restrict: s may be r (the residual updated in place).
template <typename T, int B>
inline __attribute__((always_inline)) void add_store_squares(const T* x, const T* r, T* s,
                                                             typename Layout<T, B>::acc_v* acc) {
  using L = Layout<T, B>;
  constexpr int A = L::G::kAccPerGroup;
#pragma GCC unroll 16
  for (int g = 0; g < L::kGroupsPerChunk; ++g) {
    typename L::acc_v xv[A], rv[A];
    L::G::load(x + g * L::kGroup, xv);
    L::G::load(r + g * L::kGroup, rv);
#pragma GCC unroll 2
    for (int a = 0; a < A; ++a) xv[a] += rv[a];
    L::G::template store<false>(s + g * L::kGroup, xv);
  }
  add_squares<T, B>(s, acc);
}

// Writes s = x + r of one row and returns 1 / sqrt(mean(s^2) + eps): the
// value row_inv_rms gives for the stored s, bit for bit (same chunks, same
// lanes, same fold).
template <typename T, int B>
inline __attribute__((always_inline)) typename Numeric<T>::acc_t row_add_inv_rms(const T* x, const T* r, T* s,
                                                                                 int64_t hidden,
                                                                                 typename Numeric<T>::acc_t inv_hidden,
                                                                                 typename Numeric<T>::acc_t eps) {
  using L = Layout<T, B>;
  typename L::acc_v acc[L::kAccVecs] = {};
  int64_t i = 0;
  for (; i + L::kLanes <= hidden; i += L::kLanes) add_store_squares<T, B>(x + i, r + i, s + i, acc);
  if (i < hidden) {
    // Zero-padded copies: 0 + 0 stores +0, whose square adds nothing.
    const size_t tail_bytes = static_cast<size_t>(hidden - i) * sizeof(T);
    T xpad[L::kLanes] = {}, rpad[L::kLanes] = {}, spad[L::kLanes];
    std::memcpy(xpad, x + i, tail_bytes);
    std::memcpy(rpad, r + i, tail_bytes);
    add_store_squares<T, B>(xpad, rpad, spad, acc);
    std::memcpy(s + i, spad, tail_bytes);
  }
  return fold_inv_rms<T, B>(acc, inv_hidden, eps);
}

// y = x * inv_rms * w + b for one group of `Rows` rows (row j at x + j * hidden),
// with the group's weight and bias already in float (wv, bv).
template <typename T, int B, int Rows, bool Stream>
inline __attribute__((always_inline)) void write_group_scaled(const T* __restrict x,
                                                              const typename Layout<T, B>::acc_v* wv,
                                                              const typename Layout<T, B>::acc_v* bv, T* __restrict y,
                                                              int64_t hidden,
                                                              const typename Numeric<T>::acc_t* inv_rms) {
  using L = Layout<T, B>;
  constexpr int A = L::G::kAccPerGroup;
#pragma GCC unroll 4
  for (int j = 0; j < Rows; ++j) {
    typename L::acc_v v[A];
    L::G::load(x + j * hidden, v);
#pragma GCC unroll 2
    for (int a = 0; a < A; ++a) v[a] = v[a] * inv_rms[j] * wv[a] + bv[a];
    L::G::template store<Stream>(y + j * hidden, v);
  }
}

// The same, loading (and converting) the group's weight and bias from w and b.
template <typename T, int B, int Rows, bool Stream>
inline __attribute__((always_inline)) void write_group(const T* __restrict x, const T* __restrict w,
                                                       const T* __restrict b, T* __restrict y, int64_t hidden,
                                                       const typename Numeric<T>::acc_t* inv_rms) {
  using L = Layout<T, B>;
  constexpr int A = L::G::kAccPerGroup;
  typename L::acc_v wv[A], bv[A];
  L::G::load(w, wv);
  L::G::load(b, bv);
  write_group_scaled<T, B, Rows, Stream>(x, wv, bv, y, hidden, inv_rms);
}

constexpr int64_t kCacheLineBytes = 64;

// Elements [k, k + count) of `Rows` rows, fewer than a cache line's worth,
// through zero-padded copies with ordinary stores; only the valid elements
// are copied out. The same arithmetic per element as the whole groups.
template <typename T, int B, int Rows>
inline __attribute__((always_inline)) void write_part(const T* __restrict x, const T* __restrict w,
                                                      const T* __restrict b, T* __restrict y, int64_t hidden,
                                                      const typename Numeric<T>::acc_t* inv_rms, int64_t k,
                                                      int64_t count) {
  using L = Layout<T, B>;
  constexpr int kLine = static_cast<int>(kCacheLineBytes / static_cast<int64_t>(sizeof(T)));
  constexpr int kPad = kLine > L::kGroup ? kLine : L::kGroup;  // a multiple of kGroup
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  T wpad[kPad] = {}, bpad[kPad] = {}, xpad[Rows * kPad] = {}, ypad[Rows * kPad];
  std::memcpy(wpad, w + k, bytes);
  std::memcpy(bpad, b + k, bytes);
  for (int j = 0; j < Rows; ++j) std::memcpy(xpad + j * kPad, x + j * hidden + k, bytes);
  for (int g = 0; g < count; g += L::kGroup) {
    write_group<T, B, Rows, false>(xpad + g, wpad + g, bpad + g, ypad + g, kPad, inv_rms);
  }
  for (int j = 0; j < Rows; ++j) std::memcpy(y + j * hidden + k, ypad + j * kPad, bytes);
}

// Whether write_rows walks its rows from the end. Walking forward, the loads
// of x, weight and bias run ahead of the stores of y still in the store
// queue, and a load whose address agrees in its low 12 bits with such a
// store (4 KiB aliasing) waits as if it read it: with y d bytes after a
// loaded stream's offset into a page, the load of column c + d meets the
// store of column c. Walking backward the load of column c - d would have
// to meet it, which takes y just before the stream. So: backward where y
// starts up to kAliasBytes after x's, weight's or bias's offset and not up
// to kAliasBytes before any of them. Measured with
// bench/experiments/core_timing.cpp (float32, 1 thread, 1024x1024):
// forward, 0.26-0.30 ns per element with y 64 bytes after x, 0.20-0.24 at
// 128 and 256 bytes, against 0.11-0.12 from 512 bytes on; with weight and
// bias 64 bytes after y 0.25 against 0.16.
constexpr int64_t kAliasBytes = 1024;

// Both address effects this file schedules around repeat every 4 KiB: a load
// is held against a queued store by the low 12 bits of the two addresses
// (4 KiB aliasing), and the L1's 64 sets of 64-byte lines repeat every 4 KiB.
constexpr int64_t kAddressPeriodBytes = 4096;

// How many bytes `later` lies after `earlier` modulo 4 KiB, in [0, 4096).
// Unsigned wrap-around keeps it exact: 2^64 is a multiple of 4096.
inline int64_t bytes_after(uintptr_t later, uintptr_t earlier) {
  return static_cast<int64_t>((later - earlier) % kAddressPeriodBytes);
}

// Whether a and b lie less than a cache line apart modulo 4 KiB, either way
// round: their lines share an L1 set, and a store to one holds a load of the
// other.
inline bool within_a_line(uintptr_t a, uintptr_t b) {
  const int64_t apart = bytes_after(a, b);
  return apart < kCacheLineBytes || kAddressPeriodBytes - apart < kCacheLineBytes;
}

template <typename T>
inline __attribute__((always_inline)) bool writes_backward(const T* x, const T* w, const T* b, const T* y) {
  bool after_one = false, before_one = false;
  for (const T* loaded : {x, w, b}) {
    const int64_t after = bytes_after(reinterpret_cast<uintptr_t>(y), reinterpret_cast<uintptr_t>(loaded));
    after_one = after_one || (after > 0 && after <= kAliasBytes);
    before_one = before_one || (after > 0 && after >= kAddressPeriodBytes - kAliasBytes);
  }
  return after_one && !before_one;
}

// The element at which write_rows' whole groups start in every row: 0, or,
// where y streams, the first cache line boundary of the row (streamed rows
// are whole lines, so every row has the same one).
template <typename T, bool Stream>
inline __attribute__((always_inline)) int64_t first_group_element(const T* y) {
  if constexpr (Stream) {
    const auto phase = static_cast<int64_t>(reinterpret_cast<uintptr_t>(y) % kCacheLineBytes);
    return phase == 0 ? 0 : (kCacheLineBytes - phase) / static_cast<int64_t>(sizeof(T));
  } else {
    return 0;
  }
}

// Weight and bias of a 16-bit type in float, converted once per call (per
// pool task) instead of once per block of rows and group: the model's
// weight is the same for every row. Held on the stack, in the layout of
// write_rows' whole groups (group i's kAccPerGroup vectors at i *
// kAccPerGroup, from first_group_element on), so each group reads its float
// vectors where it would have converted; the conversion is exact, so the
// products are the same bits. Rows of at most kAffineInFloatElements
// elements: both arrays take 8 KiB at most, a quarter of a 32 KiB L1, beside
// the block's rows; longer rows convert per group as before. At 2048
// elements (16 KiB) bfloat16 at 4096x2048 took 1.06-1.26x the time of the
// per-group conversion with y 256 bytes or more after x (1 thread, the
// previous and this kernel alternating in one process): with four 4 KiB
// rows of x the block filled the L1.
constexpr int64_t kAffineInFloatElements = 1024;

// And tasks of at least kAffineInFloatMinRows rows: converting for a few
// blocks saves a few conversions and costs the buffer's stores and loads
// (8x512 bfloat16 took 1.07-1.09x the time of the per-group conversion).
constexpr int64_t kAffineInFloatMinRows = 16;

template <typename T>
constexpr bool kConvertsAffine = sizeof(T) == 2;

template <typename T, int B>
struct AffineInFloat {
  using L = Layout<T, B>;
  using acc_v = typename L::acc_v;
  static constexpr int64_t kVectors = kAffineInFloatElements / L::kAccLanes;
  acc_v w[kVectors];
  acc_v b[kVectors];

  // Converts the whole groups of w and b from element `start` on; false (and
  // nothing converted) where the row is longer than the buffer holds.
  inline __attribute__((always_inline)) bool convert(const T* __restrict wt, const T* __restrict bt, int64_t hidden,
                                                     int64_t start) {
    if (hidden > kAffineInFloatElements) return false;
    constexpr int A = L::G::kAccPerGroup;
    int64_t i = 0;
    for (int64_t k = start; k + L::kGroup <= hidden; k += L::kGroup, i += A) {
      L::G::load(wt + k, w + i);
      L::G::load(bt + k, b + i);
    }
    return true;
  }
};

// The first pass of a block reads its rows of x from wherever they are (L3 or
// memory past L2), and the second pass computes from L1 with those streams
// idle: the two do not overlap, and the hardware prefetchers, which follow
// demand misses and stop at each 4 KiB page, start over with every row. So
// the scaled write of one block asks for the next block's rows of x into L2
// as it goes, one prefetch per row and cache line of the column it writes:
// the next first pass then reads from L2. Only where x and y come from memory
// (prefetches_next_block); a prefetch never faults and changes no result.
template <typename T, int B, int Rows>
inline __attribute__((always_inline)) void prefetch_group_line(const T* ahead, int64_t k, int64_t hidden) {
  constexpr int64_t kGroupBytes = B;  // a group is one vector of stored elements
  if constexpr (kGroupBytes < 64) {
    if ((k * static_cast<int64_t>(sizeof(T))) % 64 >= kGroupBytes) return;  // one group per line asks
  }
#pragma GCC unroll 4
  for (int j = 0; j < Rows; ++j) __builtin_prefetch(ahead + j * hidden + k, 0, 2);
}

// write_rows' whole groups, group g ascending, or descending from the last
// (writes_backward): the same arithmetic on each element either way. One loop
// per source of weight and bias, so that neither tests the other's.
template <typename T, int B, int Rows, bool Stream, bool Prefetch>
inline __attribute__((always_inline)) void write_groups(const T* __restrict x, const T* __restrict w,
                                                        const T* __restrict b, T* __restrict y, int64_t hidden,
                                                        const typename Numeric<T>::acc_t* inv_rms,
                                                        const typename Layout<T, B>::acc_v* wf,
                                                        const typename Layout<T, B>::acc_v* bf, const T* ahead,
                                                        int64_t start, int64_t groups, bool backward) {
  using L = Layout<T, B>;
  constexpr int A = L::G::kAccPerGroup;
  bool converted = false;
  if constexpr (kConvertsAffine<T>) converted = wf != nullptr;
  if (converted) {
    for (int64_t n = 0; n < groups; ++n) {
      const int64_t g = backward ? groups - 1 - n : n;
      const int64_t k = start + g * L::kGroup;
      if constexpr (Prefetch) prefetch_group_line<T, B, Rows>(ahead, k, hidden);
      write_group_scaled<T, B, Rows, Stream>(x + k, wf + g * A, bf + g * A, y + k, hidden, inv_rms);
    }
  } else {
    for (int64_t n = 0; n < groups; ++n) {
      const int64_t g = backward ? groups - 1 - n : n;
      const int64_t k = start + g * L::kGroup;
      if constexpr (Prefetch) prefetch_group_line<T, B, Rows>(ahead, k, hidden);
      write_group<T, B, Rows, Stream>(x + k, w + k, b + k, y + k, hidden, inv_rms);
    }
  }
}

// The scaled write of `Rows` consecutive rows in one sweep, so that each
// weight/bias vector is loaded once for all of them (a third less L1 traffic
// for cache-resident sizes). The last partial group goes through write_part.
// Streamed rows are whole cache lines (streams_output) that may start inside
// one: the elements before the first line boundary go through write_part
// too, so that every streamed vector is aligned. With `wf` and `bf` (16-bit
// types, AffineInFloat) the whole groups read weight and bias in float.
template <typename T, int B, int Rows, bool Stream, bool Prefetch = false>
inline __attribute__((always_inline)) void write_rows(const T* __restrict x, const T* __restrict w,
                                                      const T* __restrict b, T* __restrict y, int64_t hidden,
                                                      const typename Numeric<T>::acc_t* inv_rms,
                                                      const typename Layout<T, B>::acc_v* wf = nullptr,
                                                      const typename Layout<T, B>::acc_v* bf = nullptr,
                                                      const T* ahead = nullptr) {
  using L = Layout<T, B>;
  const int64_t start = first_group_element<T, Stream>(y);
  if (start > 0) write_part<T, B, Rows>(x, w, b, y, hidden, inv_rms, 0, start < hidden ? start : hidden);
  const int64_t groups = hidden > start ? (hidden - start) / L::kGroup : 0;
  const bool backward = writes_backward(x, w, b, y);
  write_groups<T, B, Rows, Stream, Prefetch>(x, w, b, y, hidden, inv_rms, wf, bf, ahead, start, groups, backward);
  const int64_t k = start + groups * L::kGroup;
  if (k < hidden) write_part<T, B, Rows>(x, w, b, y, hidden, inv_rms, k, hidden - k);
}

// Whether no element of n float16 values is infinite or NaN (an all-ones
// exponent), a vector of them at a time, the last through a zero-padded copy.
template <int B>
inline __attribute__((always_inline)) bool halves_finite(const Half* p, int64_t n) {
  using i16 = typename Vec<B>::i16;
  constexpr int kPer = B / 2;
  i16 special = {};
  int64_t i = 0;
  for (; i + kPer <= n; i += kPer) special |= (load_vector<i16>(p + i) & 0x7c00) == 0x7c00;
  if (i < n) {
    Half pad[kPer] = {};
    std::memcpy(pad, p + i, static_cast<size_t>(n - i) * sizeof(Half));
    special |= (load_vector<i16>(pad) & 0x7c00) == 0x7c00;
  }
  const i16 none = {};
  return std::memcmp(&special, &none, sizeof special) == 0;
}

// Whether write_block may take float16's stores without the NaN rewrite for
// this weight and bias: where the conversion is in hardware and both are
// finite. False for every other type.
template <typename T, int B>
inline __attribute__((always_inline)) bool affine_allows_finite_stores(const T* w, const T* b, int64_t hidden) {
  if constexpr (std::is_same_v<T, Half> && kHardwareHalf<B>) {
    return halves_finite<B>(w, hidden) && halves_finite<B>(b, hidden);
  } else {
    return false;
  }
}

// write_rows for one block of rows. In float16 no output of the block can be
// NaN when weight and bias are finite and every row's inv_rms is finite and
// positive: then the row's sum of squares was finite, so every x is finite
// (a square of float16 is at most 65504^2, no float sum of them overflows),
// |x * inv_rms| stays below 65504 * 2^75 and times a finite float16 weight
// below 2^107, and adding a finite bias gives a finite float; its float16
// is finite or infinite, never NaN. Such blocks store without the rewrite.
template <typename T, int B, int Rows, bool Stream, bool Prefetch = false>
inline __attribute__((always_inline)) void write_block(const T* __restrict x, const T* __restrict w,
                                                       const T* __restrict b, T* __restrict y, int64_t hidden,
                                                       const typename Numeric<T>::acc_t* inv_rms, bool affine_finite,
                                                       const typename Layout<T, B>::acc_v* wf = nullptr,
                                                       const typename Layout<T, B>::acc_v* bf = nullptr,
                                                       const T* ahead = nullptr) {
  if constexpr (std::is_same_v<T, Half> && kHardwareHalf<B>) {
    bool finite = affine_finite;
    for (int j = 0; j < Rows; ++j) finite = finite && std::isfinite(inv_rms[j]) && inv_rms[j] > 0.0f;
    if (finite) {
      using F = const HalfFinite*;
      write_rows<HalfFinite, B, Rows, Stream, Prefetch>(reinterpret_cast<F>(x), reinterpret_cast<F>(w),
                                                        reinterpret_cast<F>(b), reinterpret_cast<HalfFinite*>(y),
                                                        hidden, inv_rms, wf, bf, reinterpret_cast<F>(ahead));
      return;
    }
  }
  write_rows<T, B, Rows, Stream, Prefetch>(x, w, b, y, hidden, inv_rms, wf, bf, ahead);
}

// Weight and bias for a task's write blocks: their whole groups in float
// where the type is 16 bits and the row fits AffineInFloat, else read from
// memory per group (null pointers).
template <typename T, int B, bool Stream>
struct TaskAffine {
  using acc_v = typename Layout<T, B>::acc_v;
  struct Nothing {};
  std::conditional_t<kConvertsAffine<T>, AffineInFloat<T, B>, Nothing> in_float;
  const acc_v* wf = nullptr;
  const acc_v* bf = nullptr;

  inline __attribute__((always_inline)) TaskAffine(const T* w, const T* b, const T* y, int64_t hidden, int64_t rows) {
    if constexpr (kConvertsAffine<T>) {
      if (rows >= kAffineInFloatMinRows && in_float.convert(w, b, hidden, first_group_element<T, Stream>(y)))
        wf = in_float.w, bf = in_float.b;
    }
  }
};

constexpr int kRowBlock = 4;

// The scaled write of a block of R rows reads R rows of x, weight and bias
// and writes R rows of y, all at the same column: each stream's line at a
// column falls in the L1 set of its address's bits 6-11. Where rows are a
// multiple of 4 KiB, every row of x falls in the same sets, and so does y
// where it starts near x's offset into a page: the layout two fresh tensors
// of one large size get from the allocator (each its own mapping, at the
// same offset). Then a block of four rows puts 4 + 4 + 2 = 10 lines in one
// set, past the L1's 8 ways, and lines of the block are evicted before the
// next column reads them again.
// At most 6 of the block's lines in one set: 8 (x and y rows alone, weight
// and bias elsewhere) measured as slow as 10 at 1024x1024 float32 (0.175 ns
// per element against 0.12-0.13 for pairs), the other ways being taken by
// whatever else the loop touches (the first pass's next rows, the stack).
constexpr int kL1Ways = 8;  // the L1 data cache of AMD Zen 3-5 and of Intel cores up to Skylake (later: 12)
constexpr int kBlockLinesPerSet = kL1Ways - 2;

// How many of the streams starting at `starts` (byte addresses, `count` of
// them) at most share an L1 set at every column: those starting less than a
// line apart modulo 4 KiB (within_a_line).
inline int most_in_one_set(const uintptr_t* starts, int count) {
  int most = 0;
  for (int i = 0; i < count; ++i) {
    int same = 0;
    for (int j = 0; j < count; ++j) same += within_a_line(starts[j], starts[i]);
    most = same > most ? same : most;
  }
  return most;
}

// Whether, in a block of `rows` rows, the store of some row's column meets
// the load of a later row's same column in its low 12 bits (4 KiB
// aliasing): y's row j less than a line from x's row j + m modulo 4 KiB, for
// some m in 1..rows-1. A block writes row j's vector of a column, then
// loads row j + 1's: that load waits on the queued store as if it read it.
inline bool rows_alias_in_block(uintptr_t x, uintptr_t y, uintptr_t row_bytes, int rows) {
  for (int m = 1; m < rows; ++m) {
    if (within_a_line(y, x + m * row_bytes)) return true;
  }
  return false;
}

// The most rows (4, 2 or 1) a write block can take with no L1 set holding
// more than kBlockLinesPerSet of its lines: x's and y's rows (y's only where
// its stores are ordinary: streamed lines bypass the L1), weight and bias.
// Where `clear_of_aliasing`, y's rows must also not alias a later row of x in
// the block (rows_alias_in_block). Streamed: at the allocator's natural
// layout (y at x's offset into a page), past the last-level cache, the
// blocks of four this rule replaces with single rows took 1.16x the time at
// 4096x2048 float32, 1.05x at 16384x4096, 2.4x at 4096x2048 bfloat16 and
// 1.4-1.5x in float16. Ordinary float32 stores: the pairs (or fours) it
// replaces took 1.12-1.16x the time at the natural layout with rows of
// 4 KiB (1024x1024, 512x2048) and 1.12x with rows of 2 KiB (2048x512), and
// 1.09-1.27x where y sits 1-3 KiB into x's page with rows of 2-3 KiB. In
// 16 bits in the caches the conversions hide the wait: pairs for fours took
// 1.04x the time in float16 at 1024x1024 at the natural layout, so 16-bit
// ordinary stores keep the set rule alone. (Zen 4, 1 thread,
// bench/experiments/core_ab.cpp.) Only the starts' offsets into a page (and
// the row length's) matter.
inline int count_block_rows(uintptr_t x, uintptr_t w, uintptr_t b, uintptr_t y, uintptr_t row_bytes, bool stream,
                            bool clear_of_aliasing) {
  for (const int rows : {kRowBlock, 2}) {
    if (clear_of_aliasing && rows_alias_in_block(x, y, row_bytes, rows)) continue;
    uintptr_t starts[2 * kRowBlock + 2];
    int count = 0;
    starts[count++] = w;
    starts[count++] = b;
    for (int j = 0; j < rows; ++j) {
      starts[count++] = x + j * row_bytes;
      if (!stream) starts[count++] = y + j * row_bytes;
    }
    if (most_in_one_set(starts, count) <= kBlockLinesPerSet) return rows;
  }
  return 1;
}

// count_block_rows for this problem, remembered for the last layout seen:
// counting takes about as long as the whole kernel on a 16 KiB problem, and
// a caller usually hands the same buffers (or the same offsets) again. The
// layout's five 12-bit page offsets and the stream flag make the key, the
// answer sits in the top bits; threads that race only count again. The bits
// written do not depend on the blocking.
template <typename T, bool Stream>
inline int write_block_rows(const T* x, const T* w, const T* b, const T* y, int64_t hidden) {
  static std::atomic<uint64_t> last{0};
  constexpr uint64_t kPage = static_cast<uint64_t>(kAddressPeriodBytes) - 1;
  const auto offset = [](const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) & kPage; };
  const uint64_t row_bytes = static_cast<uint64_t>(hidden) * sizeof(T);
  const uint64_t key = offset(x) | offset(w) << 12 | offset(b) << 24 | offset(y) << 36 | (row_bytes & kPage) << 48 |
                       uint64_t{Stream} << 60;
  const uint64_t seen = last.load(std::memory_order_relaxed);
  if ((seen & ((uint64_t{1} << 61) - 1)) == key && (seen >> 61) != 0) return static_cast<int>(seen >> 61);
  constexpr bool kClearOfAliasing = Stream || sizeof(T) == 4;
  const int rows =
      count_block_rows(reinterpret_cast<uintptr_t>(x), reinterpret_cast<uintptr_t>(w), reinterpret_cast<uintptr_t>(b),
                       reinterpret_cast<uintptr_t>(y), row_bytes, Stream, kClearOfAliasing);
  last.store(key | static_cast<uint64_t>(rows) << 61, std::memory_order_relaxed);
  return rows;
}

// Whether the scaled write streams its output past the caches (put_vector):
// where x and y together take more than 3/4 of the last-level cache, so y
// would leave it before anyone read it, and its rows are whole cache lines,
// so that every row starts at the same point of a line and, past write_rows'
// head, every version's vectors are aligned and each streamed line is
// written whole. Not in place (y's lines are in the cache,
// just read as x) and not into a just-allocated y (NormProblem). Decided for the whole problem, so every
// thread's rows and every version decide alike; the bits written do not
// depend on it. The 3/4, measured on a Zen 5 VM (32 MiB L3, fp32, 1 thread,
// bench/experiments/core_timing.cpp): streaming took 1.2-1.5x the time of ordinary
// stores at 4 MiB of y, 0.85-1.25x at 8 MiB, 1.1-1.2x at 10 MiB, 0.75-1.05x
// at 12 MiB and 0.55-0.8x from 16 MiB to 128 MiB.
bool streams_output(const NormProblem& p, int64_t element_bytes) {
  const int64_t cache = p.caches.last_level;
  const int64_t footprint = 2 * p.rows * p.hidden * element_bytes;  // x and y
  return kCanStream && cache > 0 && 4 * footprint > 3 * cache && (p.hidden * element_bytes) % kCacheLineBytes == 0 &&
         p.y != p.x && !p.output_just_allocated;
}

// Whether the scaled write prefetches the next block's rows of x
// (prefetch_group_line): where x and y together outgrow the last-level
// cache, so the next first pass would read from memory. Never where its size
// is not known (0). Measured on the Zen 4 VM (32 MiB L3, 1 MiB L2, 1 thread,
// the kernel with and without alternating in one process,
// bench/experiments/core_ab.cpp, y at 11 offsets): 4096x2048 float32 (64 MiB
// of x and y) took 0.80-1.01x the time (0.84 at the natural layout),
// 16384x4096 0.81-0.98x (0.82); from L3 it cost instead: 1024x1024 float32
// 1.01-1.07x, bfloat16 1.02x, and 4096x2048 bfloat16 (32 MiB) 0.97-1.08x.
inline bool prefetches_next_block(const NormProblem& p, int64_t element_bytes) {
  const int64_t footprint = 2 * p.rows * p.hidden * element_bytes;  // x and y
  return p.caches.last_level > 0 && footprint > p.caches.last_level;
}

// Orders the non-temporal stores of a task before the task reports done:
// they are weakly ordered, and another thread reads y after the pool joins.
inline __attribute__((always_inline)) void fence_streamed_stores() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_ia32_sfence();
#endif
}

// The norm of `Rows` rows at a time from row r while whole blocks remain;
// returns the first row left. Each block's scales come first, in a loop
// unrolled whole, so that the scaled write's loop holds vector work only.
// With Prefetch, each block but the last asks for the next one's rows of x.
template <typename T, int B, int Rows, bool Stream, bool Prefetch>
inline __attribute__((always_inline)) int64_t normalise_blocks(const NormProblem& p, int64_t r, int64_t row_end,
                                                               bool affine_finite,
                                                               const TaskAffine<T, B, Stream>& affine) {
  using acc_t = typename Numeric<T>::acc_t;
  const T* __restrict x = static_cast<const T*>(p.x);
  const T* __restrict weight = static_cast<const T*>(p.weight);
  const T* __restrict bias = static_cast<const T*>(p.bias);
  T* __restrict y = static_cast<T*>(p.y);
  const int64_t hidden = p.hidden;
  const acc_t eps = static_cast<acc_t>(p.eps);
  const acc_t inv_hidden = acc_t(1) / static_cast<acc_t>(hidden);
  for (; r + Rows <= row_end; r += Rows) {
    acc_t inv_rms[Rows];
#pragma GCC unroll 4
    for (int j = 0; j < Rows; ++j) inv_rms[j] = row_inv_rms<T, B>(x + (r + j) * hidden, hidden, inv_hidden, eps);
    if (Prefetch && r + Rows < row_end) {
      write_block<T, B, Rows, Stream, true>(x + r * hidden, weight, bias, y + r * hidden, hidden, inv_rms,
                                            affine_finite, affine.wf, affine.bf, x + (r + Rows) * hidden);
    } else {
      write_block<T, B, Rows, Stream>(x + r * hidden, weight, bias, y + r * hidden, hidden, inv_rms, affine_finite,
                                      affine.wf, affine.bf);
    }
  }
  return r;
}

template <typename T, int B, bool Stream, bool Prefetch>
inline __attribute__((always_inline)) void normalise_rows_as(const NormProblem& p, int64_t row_begin, int64_t row_end) {
  const T* x = static_cast<const T*>(p.x);
  const T* weight = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  const T* y = static_cast<const T*>(p.y);
  const bool affine_finite = affine_allows_finite_stores<T, B>(weight, bias, p.hidden);
  const TaskAffine<T, B, Stream> affine(weight, bias, y + row_begin * p.hidden, p.hidden, row_end - row_begin);
  int64_t r = row_begin;
  const int block = write_block_rows<T, Stream>(x, weight, bias, y, p.hidden);
  if (block == kRowBlock) {
    r = normalise_blocks<T, B, kRowBlock, Stream, Prefetch>(p, r, row_end, affine_finite, affine);
  } else if (block == 2) {
    r = normalise_blocks<T, B, 2, Stream, Prefetch>(p, r, row_end, affine_finite, affine);
  }
  normalise_blocks<T, B, 1, Stream, Prefetch>(p, r, row_end, affine_finite, affine);
}

template <typename T, int B, bool Prefetch>
inline __attribute__((always_inline)) void normalise_rows_prefetching_as(const NormProblem& p, int64_t row_begin,
                                                                         int64_t row_end) {
  static_assert(kCacheLineBytes % B == 0, "a streamed row is whole vectors");
  if (streams_output(p, sizeof(T))) {
    normalise_rows_as<T, B, true, Prefetch>(p, row_begin, row_end);
    fence_streamed_stores();
  } else {
    normalise_rows_as<T, B, false, Prefetch>(p, row_begin, row_end);
  }
}

// The kernel without and with the prefetch (prefetches_next_block), each its
// own entry point, chosen before the CPU version: the kernel that most calls
// run is the same machine code as before the prefetch existed. (Tested per
// block, the prefetch made an allocating call at 8x128x1024 float32, where it
// is off, 1.03-1.15x slower; 1025 page faults a call make such a row move
// with where its code sits, reports/gate/2026-12-05-fault-bound-call.)
template <typename T, int B>
inline __attribute__((always_inline)) void normalise_rows(const NormProblem& p, int64_t row_begin, int64_t row_end) {
  normalise_rows_prefetching_as<T, B, false>(p, row_begin, row_end);
}

template <typename T, int B>
inline __attribute__((always_inline)) void normalise_rows_prefetching(const NormProblem& p, int64_t row_begin,
                                                                      int64_t row_end) {
  normalise_rows_prefetching_as<T, B, true>(p, row_begin, row_end);
}

// Rows of at least this many bytes run the residual add + norm one at a
// time. Its first pass touches three rows at once (x, residual, s), so a
// block of four 4 KiB rows is 48 KiB of rows in flight, beyond L1, and the
// second pass reads s back from L2. Measured on a Zen 4 (32 KiB L1), fp32,
// in place, 1 thread (bench/experiments/core_timing.cpp): single rows took 0.63-0.97x
// the time of blocks of four at 1024x1024 and 0.64-0.70x at 512x2048; below
// 4 KiB they gained nothing (0.98-1.24x at 256x768 and 2048x512). The norm
// keeps its blocks at every length: there single rows help only with the
// output just after the input in a page and in cache, and lose 1.05-1.4x
// out of cache.
constexpr int64_t kAddNormSingleRowBytes = 4096;

// The residual add + norm of `Rows` rows at a time from row r while whole
// blocks remain; returns the first row left. The first pass writes
// s = x + residual and sums its squares, the second pass is the same scaled
// write, reading s (just written, still in L1/L2) instead of x.
template <typename T, int B, int Rows, bool Stream>
inline __attribute__((always_inline)) int64_t add_normalise_blocks(const AddNormProblem& p, int64_t r, int64_t row_end,
                                                                   const TaskAffine<T, B, Stream>& affine) {
  using acc_t = typename Numeric<T>::acc_t;
  const T* x = static_cast<const T*>(p.norm.x);
  const T* residual = static_cast<const T*>(p.residual);
  T* s = static_cast<T*>(p.residual_out);
  const T* __restrict weight = static_cast<const T*>(p.norm.weight);
  const T* __restrict bias = static_cast<const T*>(p.norm.bias);
  // y may be x (in place), never s: x is not read in the second pass.
  T* y = static_cast<T*>(p.norm.y);
  const int64_t hidden = p.norm.hidden;
  const acc_t eps = static_cast<acc_t>(p.norm.eps);
  const acc_t inv_hidden = acc_t(1) / static_cast<acc_t>(hidden);
  const bool affine_finite = affine_allows_finite_stores<T, B>(weight, bias, hidden);
  for (; r + Rows <= row_end; r += Rows) {
    acc_t inv_rms[Rows];
    for (int j = 0; j < Rows; ++j) {
      const int64_t offset = (r + j) * hidden;
      inv_rms[j] = row_add_inv_rms<T, B>(x + offset, residual + offset, s + offset, hidden, inv_hidden, eps);
    }
    write_block<T, B, Rows, Stream>(s + r * hidden, weight, bias, y + r * hidden, hidden, inv_rms, affine_finite,
                                    affine.wf, affine.bf);
  }
  return r;
}

template <typename T, int B, bool Stream>
inline __attribute__((always_inline)) void add_normalise_rows_as(const AddNormProblem& p, int64_t row_begin,
                                                                 int64_t row_end) {
  const int64_t hidden = p.norm.hidden;
  const TaskAffine<T, B, Stream> affine(static_cast<const T*>(p.norm.weight), static_cast<const T*>(p.norm.bias),
                                        static_cast<const T*>(p.norm.y) + row_begin * hidden, hidden,
                                        row_end - row_begin);
  int64_t r = row_begin;
  if (hidden * static_cast<int64_t>(sizeof(T)) < kAddNormSingleRowBytes) {
    r = add_normalise_blocks<T, B, kRowBlock, Stream>(p, r, row_end, affine);
  }
  add_normalise_blocks<T, B, 1, Stream>(p, r, row_end, affine);
}

// Only y may stream: the sum s is read back by the second pass.
template <typename T, int B>
inline __attribute__((always_inline)) void add_normalise_rows(const AddNormProblem& p, int64_t row_begin,
                                                              int64_t row_end) {
  static_assert(kCacheLineBytes % B == 0, "a streamed row is whole vectors");
  if (streams_output(p.norm, sizeof(T))) {
    add_normalise_rows_as<T, B, true>(p, row_begin, row_end);
    fence_streamed_stores();
  } else {
    add_normalise_rows_as<T, B, false>(p, row_begin, row_end);
  }
}

// One non-template entry point per op and dtype (overloads on the type tag),
// in one version per instruction-set level: function multi-versioning
// applies to concrete functions, and each version instantiates the
// always_inline kernel at its own vector width.
#if FUSED_NORM_CPU_VERSIONS
// A build of one level (FUSED_NORM_CPU_LEVEL, below) calls its entry points directly, where the loader's choice
// is an indirect call that no optimisation crosses: noipa keeps them so (no constant propagation into them, no
// specialised copies), so their machine code is the delivered version's.
#if defined(FUSED_NORM_CPU_LEVEL)
#define FUSED_NORM_CPU_ENTRY_ATTRIBUTES noipa,
#else
#define FUSED_NORM_CPU_ENTRY_ATTRIBUTES
#endif
#define FUSED_NORM_CPU_V4(NAME, PROBLEM, KERNEL, T)                                                                 \
  __attribute__((FUSED_NORM_CPU_ENTRY_ATTRIBUTES target("arch=x86-64-v4"))) void NAME(TypeTag<T>, const PROBLEM& p, \
                                                                                      int64_t begin, int64_t end) { \
    KERNEL<T, 64>(p, begin, end);                                                                                   \
  }
#define FUSED_NORM_CPU_V3(NAME, PROBLEM, KERNEL, T)                                                                 \
  __attribute__((FUSED_NORM_CPU_ENTRY_ATTRIBUTES target("arch=x86-64-v3"))) void NAME(TypeTag<T>, const PROBLEM& p, \
                                                                                      int64_t begin, int64_t end) { \
    KERNEL<T, 32>(p, begin, end);                                                                                   \
  }
#define FUSED_NORM_CPU_DEFAULT(NAME, PROBLEM, KERNEL, T)                                                     \
  __attribute__((FUSED_NORM_CPU_ENTRY_ATTRIBUTES target("default"))) void NAME(TypeTag<T>, const PROBLEM& p, \
                                                                               int64_t begin, int64_t end) { \
    KERNEL<T, 16>(p, begin, end);                                                                            \
  }
#if FUSED_NORM_BF16_HARDWARE && (!defined(FUSED_NORM_CPU_LEVEL) || FUSED_NORM_CPU_LEVEL == 4)
// AVX512-BF16 is a feature, not an x86-64 level, so the loader cannot pick a
// version by it (GCC versions by `arch=` only); bfloat16's x86-64-v4 version
// asks the CPU and calls the function compiled for it.
bool cpu_has_avx512bf16() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return has;
}

#define FUSED_NORM_CPU_V4_BFLOAT16(NAME, PROBLEM, KERNEL)                                                          \
  __attribute__((target("arch=x86-64-v4,avx512bf16"))) void NAME##_avx512bf16(TypeTag<BFloat16>, const PROBLEM& p, \
                                                                              int64_t begin, int64_t end) {        \
    KERNEL<BFloat16ByHardware, 64>(p, begin, end);                                                                 \
  }                                                                                                                \
  __attribute__((FUSED_NORM_CPU_ENTRY_ATTRIBUTES target("arch=x86-64-v4"))) void NAME(                             \
      TypeTag<BFloat16> tag, const PROBLEM& p, int64_t begin, int64_t end) {                                       \
    if (cpu_has_avx512bf16()) return NAME##_avx512bf16(tag, p, begin, end);                                        \
    KERNEL<BFloat16, 64>(p, begin, end);                                                                           \
  }
#else
#define FUSED_NORM_CPU_V4_BFLOAT16(NAME, PROBLEM, KERNEL) FUSED_NORM_CPU_V4(NAME, PROBLEM, KERNEL, BFloat16)
#endif
// FUSED_NORM_CPU_LEVEL (4, 3 or 1: x86-64-v4, -v3 or the baseline) keeps one level's functions alone, each a
// plain function with that version's own target attribute: the machine code the loader runs on a CPU of that
// level, called directly. Benchmark builds use it: the three versions are most of a build's compile time.
#if !defined(FUSED_NORM_CPU_LEVEL)
#define FUSED_NORM_CPU_ENTRY(NAME, PROBLEM, KERNEL, T) \
  FUSED_NORM_CPU_V4(NAME, PROBLEM, KERNEL, T)          \
  FUSED_NORM_CPU_V3(NAME, PROBLEM, KERNEL, T)          \
  FUSED_NORM_CPU_DEFAULT(NAME, PROBLEM, KERNEL, T)
#define FUSED_NORM_CPU_BFLOAT16_ENTRY(NAME, PROBLEM, KERNEL) \
  FUSED_NORM_CPU_V4_BFLOAT16(NAME, PROBLEM, KERNEL)          \
  FUSED_NORM_CPU_V3(NAME, PROBLEM, KERNEL, BFloat16)         \
  FUSED_NORM_CPU_DEFAULT(NAME, PROBLEM, KERNEL, BFloat16)
#elif FUSED_NORM_CPU_LEVEL == 4
#define FUSED_NORM_CPU_ENTRY(NAME, PROBLEM, KERNEL, T) FUSED_NORM_CPU_V4(NAME, PROBLEM, KERNEL, T)
#define FUSED_NORM_CPU_BFLOAT16_ENTRY(NAME, PROBLEM, KERNEL) FUSED_NORM_CPU_V4_BFLOAT16(NAME, PROBLEM, KERNEL)
#elif FUSED_NORM_CPU_LEVEL == 3
#define FUSED_NORM_CPU_ENTRY(NAME, PROBLEM, KERNEL, T) FUSED_NORM_CPU_V3(NAME, PROBLEM, KERNEL, T)
#define FUSED_NORM_CPU_BFLOAT16_ENTRY(NAME, PROBLEM, KERNEL) FUSED_NORM_CPU_V3(NAME, PROBLEM, KERNEL, BFloat16)
#elif FUSED_NORM_CPU_LEVEL == 1
#define FUSED_NORM_CPU_ENTRY(NAME, PROBLEM, KERNEL, T) FUSED_NORM_CPU_DEFAULT(NAME, PROBLEM, KERNEL, T)
#define FUSED_NORM_CPU_BFLOAT16_ENTRY(NAME, PROBLEM, KERNEL) FUSED_NORM_CPU_DEFAULT(NAME, PROBLEM, KERNEL, BFloat16)
#else
#error "FUSED_NORM_CPU_LEVEL must be 4 (x86-64-v4), 3 (x86-64-v3) or 1 (the x86-64 baseline)"
#endif
#else
// The type a build without versions computes T as: bfloat16 stores in
// hardware where the build's flags enable AVX512-BF16 at 64 bytes.
template <typename T>
struct BuildType {
  using type = T;
};
#if FUSED_NORM_BF16_HARDWARE
template <>
struct BuildType<BFloat16> {
  using type = std::conditional_t<kBuildVectorBytes == 64, BFloat16ByHardware, BFloat16>;
};
#endif
#define FUSED_NORM_CPU_ENTRY(NAME, PROBLEM, KERNEL, T)                     \
  void NAME(TypeTag<T>, const PROBLEM& p, int64_t begin, int64_t end) {    \
    KERNEL<typename BuildType<T>::type, kBuildVectorBytes>(p, begin, end); \
  }
#define FUSED_NORM_CPU_BFLOAT16_ENTRY(NAME, PROBLEM, KERNEL) FUSED_NORM_CPU_ENTRY(NAME, PROBLEM, KERNEL, BFloat16)
#endif
#define FUSED_NORM_CPU_ENTRIES(T)                                                          \
  FUSED_NORM_CPU_ENTRY(clone_rows, NormProblem, normalise_rows, T)                         \
  FUSED_NORM_CPU_ENTRY(clone_prefetching_rows, NormProblem, normalise_rows_prefetching, T) \
  FUSED_NORM_CPU_ENTRY(clone_add_rows, AddNormProblem, add_normalise_rows, T)
FUSED_NORM_CPU_ENTRIES(float)
FUSED_NORM_CPU_ENTRIES(double)
FUSED_NORM_CPU_ENTRIES(Half)
FUSED_NORM_CPU_BFLOAT16_ENTRY(clone_rows, NormProblem, normalise_rows)
FUSED_NORM_CPU_BFLOAT16_ENTRY(clone_prefetching_rows, NormProblem, normalise_rows_prefetching)
FUSED_NORM_CPU_BFLOAT16_ENTRY(clone_add_rows, AddNormProblem, add_normalise_rows)
#undef FUSED_NORM_CPU_ENTRIES
#undef FUSED_NORM_CPU_BFLOAT16_ENTRY
#undef FUSED_NORM_CPU_ENTRY

}  // namespace

void cpu_forward_rows(const NormProblem& p, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end || p.hidden <= 0 || !is_known_dtype(p.dtype)) return;
  visit(p.dtype, [&](auto tag) {
    if (prefetches_next_block(p, static_cast<int64_t>(sizeof(typename decltype(tag)::type)))) {
      clone_prefetching_rows(tag, p, row_begin, row_end);
    } else {
      clone_rows(tag, p, row_begin, row_end);
    }
  });
}

void cpu_add_forward_rows(const AddNormProblem& p, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end || p.norm.hidden <= 0 || !is_known_dtype(p.norm.dtype)) return;
  visit(p.norm.dtype, [&](auto tag) { clone_add_rows(tag, p, row_begin, row_end); });
}

bool cpu_streams_output(const NormProblem& p) {
  if (p.rows <= 0 || p.hidden <= 0 || !is_known_dtype(p.dtype)) return false;
  return visit(p.dtype,
               [&](auto tag) { return streams_output(p, static_cast<int64_t>(sizeof(typename decltype(tag)::type))); });
}

int64_t cpu_rows_per_task(int64_t hidden) {
  constexpr int64_t kElementsPerTask = 32768;
  if (hidden <= 0) return 1;
  const int64_t rows = kElementsPerTask / hidden;
  return rows > 0 ? rows : 1;
}

int64_t cpu_rows_per_task(const NormProblem& p, int64_t threads) {
  const int64_t by_size = cpu_rows_per_task(p.hidden);
  if (threads < 2 || p.rows <= 0 || !is_known_dtype(p.dtype)) return by_size;
  const int64_t tasks = (p.rows + by_size - 1) / by_size;
  if (tasks < threads) return by_size;  // too little work to wake every thread: as the task size says
  const int64_t element_bytes =
      visit(p.dtype, [](auto tag) { return static_cast<int64_t>(sizeof(typename decltype(tag)::type)); });
  const int64_t share = (p.rows + threads - 1) / threads;
  const int64_t l2 = p.caches.level2;
  const bool share_fits_l2 = l2 > 0 && 2 * share * p.hidden * element_bytes <= l2;  // its x and y
  return share_fits_l2 ? share : by_size;
}

}  // namespace fused_norm
