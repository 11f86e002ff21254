// float32 to bfloat16 rounding in AVX-512 registers, with the bits of core/half.h's scalar rounding,
// for the kernels that round their results as they store them (sbgemm.cpp, sbgemm_amx.cpp).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace tapegrad::cpu {

// 16 floats rounded to bf16 as core/half.h rounds them (to nearest even, NaN as 0x7fc0, no flush of
// denormals), so a rounded product's output has the bits of its float32 result's .to(kBFloat16).
// (vcvtneps2bf16 would flush denormals to zero.)
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m256i round_to_bf16(__m512 x) {
  constexpr __mmask16 all = 0xFFFF;
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(all, u, 16), _mm512_set1_epi32(1));
  __m512i rounded =
      _mm512_maskz_srli_epi32(all, _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc0));
  return _mm512_maskz_cvtepi32_epi16(all, rounded);
}

}  // namespace tapegrad::cpu

#endif
