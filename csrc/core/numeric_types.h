// 16-bit floating-point storage types for the framework-free kernel core.
//
// The core must not include torch or ONNX Runtime headers, yet it has to read
// the same bytes as at::Half / at::BFloat16 (torch) and Ort::Float16_t /
// Ort::BFloat16_t (ORT). All four are a bare uint16_t, so the core defines its
// own layout-compatible structs and the adapters reinterpret their pointers.
// Arithmetic always happens in float; these types only load and store.
#pragma once

#include <cstdint>
#include <cstring>

namespace fused_norm {

struct Half {
  uint16_t bits;
};

struct BFloat16 {
  uint16_t bits;
};

static_assert(sizeof(Half) == 2 && alignof(Half) == 2, "Half must be a bare uint16_t");
static_assert(sizeof(BFloat16) == 2 && alignof(BFloat16) == 2, "BFloat16 must be a bare uint16_t");

namespace detail {

inline float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t bits_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace detail

// IEEE binary16 -> binary32, exact for every input (subnormals, inf, NaN).
inline float to_float(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t magnitude = h.bits & 0x7fffu;
  uint32_t out;
  if (magnitude < 0x0400u) {
    // Subnormal or zero: value = mantissa * 2^-24, exact in float. Done with
    // an integer conversion so that a denormals-are-zero FPU mode cannot
    // flush it.
    out = detail::bits_from_float(static_cast<float>(magnitude) * 0x1.0p-24f);
  } else {
    // Normal: move the 15 bits into float position and rebias the exponent
    // from 15 to 127 (add 112 << 23). Inf / NaN need an all-ones exponent.
    out = (magnitude << 13) + (112u << 23);
    if (magnitude >= 0x7c00u) out |= 0x7f800000u;
  }
  return detail::float_from_bits(out | sign);
}

// binary32 -> binary16 with round-to-nearest-even, overflow to inf, NaN kept quiet.
inline Half to_half(float f) {
  const uint32_t x = detail::bits_from_float(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return Half{static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (ax >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {
    // |f| < 2^-14: the result is a half subnormal (unit 2^-24). Adding 0.5
    // makes the float ulp exactly 2^-24, so the FPU's own ties-to-even
    // rounding produces the subnormal mantissa in the low bits.
    const uint32_t r = detail::bits_from_float(detail::float_from_bits(ax) + 0.5f) - 0x3f000000u;
    return Half{static_cast<uint16_t>(sign | r)};
  }
  // Normal range: rebias the exponent (127 -> 15, i.e. subtract 112 << 23)
  // and round the 13 dropped mantissa bits half-to-even; a carry out of the
  // mantissa correctly bumps the exponent.
  const uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd;
  return Half{static_cast<uint16_t>(sign | (ax >> 13))};
}

inline float to_float(BFloat16 b) { return detail::float_from_bits(static_cast<uint32_t>(b.bits) << 16); }

// binary32 -> bfloat16 with round-to-nearest-even; NaN stays a quiet NaN.
inline BFloat16 to_bfloat16(float f) {
  const uint32_t x = detail::bits_from_float(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((x >> 16) | 0x0040u)};
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(rounded >> 16)};
}

// Element type -> accumulation type and conversions, used by the kernels.
template <typename T>
struct Numeric;

template <>
struct Numeric<float> {
  static constexpr const char* kName = "float32";
  using acc_t = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};

template <>
struct Numeric<double> {
  static constexpr const char* kName = "float64";
  using acc_t = double;
  static double load(double v) { return v; }
  static double store(double v) { return v; }
};

template <>
struct Numeric<Half> {
  static constexpr const char* kName = "float16";
  using acc_t = float;
  static float load(Half v) { return to_float(v); }
  static Half store(float v) { return to_half(v); }
};

template <>
struct Numeric<BFloat16> {
  static constexpr const char* kName = "bfloat16";
  using acc_t = float;
  static float load(BFloat16 v) { return to_float(v); }
  static BFloat16 store(float v) { return to_bfloat16(v); }
};

}  // namespace fused_norm
