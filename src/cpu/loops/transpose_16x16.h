// A 16 x 16 transpose of 32-bit elements held in sixteen zmm registers (AVX-512F): the bf16 kernels'
// register transposes (cpu/gemm/sbgemm.cpp) and the blocked transposes' 16 x 16 blocks
// (cpu/loops/transpose.cpp). Bits are moved, not values.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace tapegrad::cpu {

// Row i of r becomes column i. (The zero-masked forms with every lane set are the plain
// instructions; GCC 12 warns about the plain intrinsics' undefined pass-through.)
__attribute__((target("avx512f"))) inline void transpose_16x16(__m512i r[16]) {
  constexpr __mmask16 all = 0xFFFF;
  constexpr __mmask8 all8 = 0xFF;
  __m512i t[16], u[16], v[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_maskz_unpacklo_epi32(all, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_maskz_unpackhi_epi32(all, r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_maskz_unpacklo_epi64(all8, t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_maskz_unpackhi_epi64(all8, t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_maskz_unpacklo_epi64(all8, t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_maskz_unpackhi_epi64(all8, t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      v[8 * i + j] = _mm512_maskz_shuffle_i32x4(all, u[8 * i + j], u[8 * i + 4 + j], 0x88);
      v[8 * i + 4 + j] = _mm512_maskz_shuffle_i32x4(all, u[8 * i + j], u[8 * i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_maskz_shuffle_i32x4(all, v[j], v[8 + j], 0x88);
    r[8 + j] = _mm512_maskz_shuffle_i32x4(all, v[j], v[8 + j], 0xdd);
  }
}

}  // namespace tapegrad::cpu

#endif
