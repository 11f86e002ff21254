// Fast, accurate float exp, tanh and sigmoid for the CPU loops. libm's versions are calls the
// compiler cannot vectorise (and a float argument to an unqualified exp/tanh even goes through the
// double routines), so a loop of them ran at ~3-25 ns per element. These are branch-free inline
// functions with no libm calls: a plain loop over arrays vectorises, and inside TG_VECTOR_CLONES
// functions it runs on AVX-512 or AVX2+FMA where the CPU has them.
//
// Accuracy (float, checked against double-precision libm over a dense sweep of all floats in
// tests/cpu/test_vec_math.cpp): relative error below 2e-7 (2-3 ulp) wherever the result is a normal
// float; subnormal results round once, so they are within one subnormal step; overflow gives inf,
// underflow 0, and NaN, +-inf and -0 behave as in libm. Double precision goes to libm unchanged:
// the gradchecks run in f64 and keep its full accuracy.
//
// The selects below are meant to compile to blends: the CPU backend is built without trapping math
// (Note [CPU loops without trapping math] in CMakeLists.txt), else GCC masks each formula to the
// lanes that select it and repeats the divisions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// Compiles a function three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the
// baseline, and lets the dynamic loader pick one for the CPU it runs on (an ifunc), so the
// installed library stays portable while hot loops use the widest vectors available.
// Not under ThreadSanitizer: its runtime is not ready when the loader runs ifunc resolvers.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__) && !defined(__SANITIZE_THREAD__)
#define TG_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TG_VECTOR_CLONES
#endif

// For the bodies that TG_VECTOR_CLONES functions call: a body the inliner leaves out of line is
// compiled once, for the baseline, and the clones would call that instead of vectorising it.
#if defined(__GNUC__)
#define TG_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define TG_ALWAYS_INLINE inline
#endif

namespace tapegrad::cpu::vec {

namespace detail {

TG_ALWAYS_INLINE uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

TG_ALWAYS_INLINE float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// 2^n for n in [-126, 127], built from its exponent bits.
TG_ALWAYS_INLINE float pow2(int32_t n) {
  return float_of(static_cast<uint32_t>(n + 127) << 23);
}

}  // namespace detail

// exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2] (Cody-Waite split of
// ln 2, exact for |n| <= 150), exp(r) by a degree-7 polynomial (Cephes' expf, ~1 ulp).
TG_ALWAYS_INLINE float exp(float x) {
  // Clamp to where the result is still inf or 0 after scaling; NaN compares false and passes.
  x = x > 88.8f ? 88.8f : x;
  x = x < -104.0f ? -104.0f : x;
  // Round x / ln 2 to an integer by adding 1.5 * 2^23: the integer lands in the low mantissa bits,
  // with no float-to-int conversion (undefined for NaN, and a branch in scalar code).
  constexpr float kShifter = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kShifter;
  const float n = shifted - kShifter;
  const int32_t n_int = static_cast<int32_t>(detail::bits_of(shifted) - detail::bits_of(kShifter));
  float r = x - n * 0.693359375f;  // ln 2 = 0.693359375 - 2.12194440e-4 + ...; n * 0.693359375 is exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // Scale by 2^n as 2^(n/2) * 2^(n - n/2): both factors are normal floats for n in [-150, 128], so a
  // subnormal result is rounded once and a result past FLT_MAX becomes inf.
  const int32_t half = n_int >> 1;
  return p * detail::pow2(half) * detail::pow2(n_int - half);
}

// tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)) for |x| > 0.625, where that has no cancellation;
// below, an odd polynomial (Cephes' tanhf). Both are computed and one selected, without a branch.
TG_ALWAYS_INLINE float tanh(float x) {
  const float a = std::fabs(x);
  const float big = 1.0f - 2.0f / (vec::exp(a + a) + 1.0f);  // exp overflows to inf: 1 - 0 = 1
  const float z = a * a;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * a + a;  // NaN lands here and stays NaN
  const float magnitude = a > 0.625f ? big : small;
  return detail::float_of(detail::bits_of(magnitude) | (detail::bits_of(x) & 0x80000000u));
}

// sigmoid(x) = 1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below: exp(-|x|) never
// overflows, and very negative x keeps its relative accuracy down to the subnormals.
TG_ALWAYS_INLINE float sigmoid(float x) {
  const float e = vec::exp(-std::fabs(x));
  const float positive = 1.0f / (1.0f + e);
  return x < 0.0f ? e * positive : positive;
}

// Double precision: libm, full accuracy.
inline double exp(double x) {
  return std::exp(x);
}
inline double tanh(double x) {
  return std::tanh(x);
}
inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// The activations above as a policy for the shared formulas in src/math (see math/lstm.h).
struct FastActivations {
  template <class T>
  static T sigmoid_of(T x) {
    return vec::sigmoid(x);
  }
  template <class T>
  static T tanh_of(T x) {
    return vec::tanh(x);
  }
};

}  // namespace tapegrad::cpu::vec
