// Note [dividing by the bias correction without a division] (src/math/optim.h), checked for every
// float: sqrt(v) / c against the product with c's reciprocal and its one FMA correction, for every
// x in [2^-80, 2^70) and 0 (the range sqrt(v) of a float v takes lies inside), and 68 divisors c:
// sqrt(1 - beta2^t) for five beta2 and thirteen t, and a few others. Prints the mismatches (none).
// About 90 s on two cores with AVX-512:
//
//   g++ -O2 -march=native -fopenmp -Isrc tools/checks/adam_division_exhaustive.cpp -o /tmp/check && /tmp/check
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "math/optim.h"

int main() {
  std::vector<float> divisors;
  for (double beta2 : {0.999, 0.99, 0.9999, 0.9, 0.95})
    for (int t : {1, 2, 3, 4, 5, 7, 10, 20, 50, 100, 1000, 10000, 100000})
      divisors.push_back(static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t))));
  for (float c : {1.0f, 0.3f, 0.7071068f}) divisors.push_back(c);
  long long total = 0;
  for (float c : divisors) {
    tapegrad::math::AdamConstants<float> constants{};
    constants.bias_correction2_sqrt = c;
    constants.bias_correction2_sqrt_recip = 1.0f / c;
    const __m512 vc = _mm512_set1_ps(c), vr = _mm512_set1_ps(constants.bias_correction2_sqrt_recip);
    long long mismatches = 0;
#pragma omp parallel for reduction(+ : mismatches) schedule(static)
    for (int64_t high = 0; high < (int64_t{1} << 15); ++high) {
      for (uint32_t low = 0; low < (1u << 16); low += 16) {
        const __m512i bits = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>((uint32_t(high) << 16) | low)),
                                              _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        const __m512 x = _mm512_castsi512_ps(bits);
        // The same three operations as divided_by_bias_correction, sixteen at a time.
        const __m512 q = _mm512_mul_ps(x, vr);
        const __m512 got = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, vc, x), vr, q);
        const __m512 want = _mm512_div_ps(x, vc);
        const __mmask16 in_range = _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1p70f), _CMP_LT_OQ) &
                                   (_mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1p-80f), _CMP_GE_OQ) |
                                    _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ));
        const __mmask16 differ =
            _mm512_cmp_epi32_mask(_mm512_castps_si512(want), _mm512_castps_si512(got), _MM_CMPINT_NE) & in_range;
        mismatches += __builtin_popcount(differ);
      }
    }
    // And the scalar function itself on a few values, so that the vector form above is its form.
    for (float x : {0.0f, 1.0f, 3.7e-23f, 1.8e19f, 0.123456f})
      mismatches += tapegrad::math::divided_by_bias_correction(x, constants) != x / c;
    std::printf("c = %.9g: %lld mismatches\n", c, mismatches);
    total += mismatches;
  }
  std::printf("%lld mismatches in all\n", total);
  return total == 0 ? 0 : 1;
}
