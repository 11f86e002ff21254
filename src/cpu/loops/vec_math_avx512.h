// Note [activations in AVX-512 registers]: vec_math.h's float exp, sigmoid and tanh written once
// more with AVX-512 intrinsics, for the loops that spend their time in them (the LSTM's forward
// cell: five of them an element). GCC's own vectorisation of the scalar functions (inside
// TG_VECTOR_CLONES) builds 2^n from integer shifts and adds, rounds n through integer moves and
// keeps more values live; here 2^n is one vscalefps of the float n, and the clamp of a sigmoid's
// argument, never above 0, has one side. Every operation is the scalar function's, in its order and
// with the multiply-adds GCC contracts there (x log2(e) + 1.5 * 2^23, the Cody-Waite steps, the
// polynomials, p r^2 + r before the + 1), and vscalefps rounds a subnormal result once as the two
// scalings by powers of two do. So the bits are those of the AVX-512 clone of the scalar loop as the
// release build compiles it: for every one of the 2^32 floats
// (tools/checks/vec_math_avx512_exhaustive.cpp), and a test checks 2^20 of them and the special
// values. (GCC fuses those multiply-adds from -O2 only; at -O1, as in the sanitizer builds, the
// compiler's loops round each product and give other bits in the last place, these the same.) On a Xeon core the
// forward cell of 4096 elements took 8.4-9.4 instead of 11.3-12.0 us, and in one process the steps of lstm_small:64
// got 1.7-2.1% faster, lstm_row:64 2.0%, lstm_small:16 1.5%, char_lstm:32 1.7%.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TG_HAVE_VEC_MATH_AVX512 1
#include <immintrin.h>

#include <cstdint>

namespace tapegrad::cpu::vec512 {

#define TG_AVX512_INLINE inline __attribute__((target("avx512f"), always_inline))

// Whether this CPU runs them (AVX-512F).
inline bool available() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

// The first min(count, 16) lanes, for a loop's last vector.
TG_AVX512_INLINE __mmask16 lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

// Runs body(j, mask) for each vector of 16 lanes of [0, n): the full vectors with a constant mask of
// every lane, which the compiler turns into plain loads and stores, then the last one's lanes. A
// masked load of what a store just wrote is not forwarded from the store but waits for it to reach
// the cache. Inside the training step, where each pass of the LSTM cell reads what the product or
// the pass before it wrote, the forward cell masked throughout took 1.15 times as long, and a
// backward cell 1.7 times (docs/benchmarks.md). The body is a lambda with TG_AVX512_LAMBDA.
#define TG_AVX512_LAMBDA __attribute__((target("avx512f"), always_inline))
template <class Body>
TG_AVX512_INLINE void for_each_vector(int64_t n, Body body) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) body(j, __mmask16(0xFFFF));
  if (j < n) body(j, lanes(n - j));
}

// vec::exp. minps/maxps return their second operand when either is NaN, so x goes second and a NaN
// passes the clamps as the scalar comparisons let it. (The zero-masked forms with every lane set are
// the plain instructions; GCC 12 warns about the plain intrinsics' undefined pass-through.)
TG_AVX512_INLINE __m512 exp(__m512 x) {
  constexpr __mmask16 all = 0xFFFF;
  x = _mm512_maskz_min_ps(all, _mm512_set1_ps(88.8f), x);
  x = _mm512_maskz_max_ps(all, _mm512_set1_ps(-104.0f), x);
  const __m512 shifter = _mm512_set1_ps(12582912.0f);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), shifter), shifter);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(all, p, n);
}

// vec::sigmoid: exp(-|x|), never above 1.
TG_AVX512_INLINE __m512 sigmoid(__m512 x) {
  const __m512 e = exp(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  const __m512 positive = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(positive, negative, e, positive);
}

// vec::tanh: the exponential form above 0.625, the odd polynomial below, the sign of x.
TG_AVX512_INLINE __m512 tanh(__m512 x) {
  const __m512 a = _mm512_abs_ps(x);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 big =
      _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(exp(_mm512_add_ps(a, a)), one)));
  const __m512 z = _mm512_mul_ps(a, a);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), a, a);
  const __mmask16 use_big = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.625f), _CMP_GT_OQ);
  const __m512i magnitude = _mm512_castps_si512(_mm512_mask_blend_ps(use_big, small, big));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_or_si512(magnitude, sign));
}

}  // namespace tapegrad::cpu::vec512

#endif
