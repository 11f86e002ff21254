// 16-bit floating-point types and their conversions to and from f32 (round to nearest even). Ops on
// them compute in float and round each result once (docs/amp.md).
#pragma once

#include <cstdint>
#include <cstring>

namespace tapegrad {

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float value);
  operator float() const;
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float value);
  operator float() const;
};

namespace detail {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

inline BFloat16::BFloat16(float value) {
  uint32_t u = detail::float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    bits = 0x7fc0;  // quiet NaN
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
}
inline BFloat16::operator float() const {
  return detail::bits_float(static_cast<uint32_t>(bits) << 16);
}

inline Half::Half(float value) {
  uint32_t f = detail::float_bits(value);
  uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t abs = f & 0x7fffffffu;
  if (abs > 0x7f800000u) {
    bits = static_cast<uint16_t>(sign | 0x7e00u);
  } else if (abs >= 0x477ff000u) {  // rounds to >= 65520: infinity
    bits = static_cast<uint16_t>(sign | 0x7c00u);
  } else if (abs < 0x38800000u) {              // subnormal or zero in half
    float a = detail::bits_float(abs) + 0.5f;  // aligns the mantissa so the FPU rounds for us
    bits = static_cast<uint16_t>(sign | (detail::float_bits(a) - 0x3f000000u));
  } else {
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
    bits = static_cast<uint16_t>(sign | (abs >> 13));
  }
}

inline Half::operator float() const {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0x1f) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float m = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -m : m;
  }
  return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace tapegrad
