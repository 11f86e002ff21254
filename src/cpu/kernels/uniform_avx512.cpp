// Note [vectorised Philox]: dropout draws one uniform number per element, and one Philox 4x32-10
// per number (element i of a draw is philox4x32_10(offset + i, seed), so that CUDA, the CPU and
// any thread split give the same mask). Scalar, ten rounds of two 32 x 32 -> 64-bit products cost
// about 4 ns per element: a character LSTM's dropout mask was 6% of its bf16 step. Here sixteen
// counters go through the rounds together (vpmuludq for the even and the odd lanes' full
// products, vpmulld for the low halves), and the conversion to [low, high) repeats the scalar
// one's steps: 24 bits to float, then (high - low) * u + low in double with the product rounded
// before the sum (the _round_ intrinsics are never contracted into an FMA), then to float, then
// the step down from high.
#include "cpu/kernels/uniform_avx512.h"

#include <cmath>

#include "math/philox.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TG_HAVE_UNIFORM_AVX512 1
#include <immintrin.h>
#endif

namespace tapegrad::cpu {

#ifdef TG_HAVE_UNIFORM_AVX512

#define TG_AVX512 __attribute__((target("avx512f,avx512dq")))

namespace {

// lo = low 32 bits of a * m per lane, hi = the high 32 bits.
TG_AVX512 inline void mulhilo(__m512i a, __m512i m, __m512i* lo, __m512i* hi) {
  // (The zero-masked forms with every lane set are the plain instructions; GCC 12 warns about the
  // plain intrinsics' undefined pass-through.)
  constexpr __mmask8 all = 0xFF;
  const __m512i even = _mm512_maskz_mul_epu32(all, a, m);                                   // lanes 0, 2, ...
  const __m512i odd = _mm512_maskz_mul_epu32(all, _mm512_maskz_srli_epi64(all, a, 32), m);  // lanes 1, 3, ...
  *lo = _mm512_mullo_epi32(a, m);
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_maskz_srli_epi64(all, even, 32), odd);
}

// The first word of philox4x32_10 for sixteen counters whose high halves are all c1.
TG_AVX512 inline __m512i philox_word0(__m512i c0, uint32_t c1_scalar, uint64_t key) {
  __m512i c1 = _mm512_set1_epi32(static_cast<int>(c1_scalar)), c2 = _mm512_setzero_si512(), c3 = c2;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u)),
                m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    __m512i lo0, hi0, lo1, hi1;
    mulhilo(c0, m0, &lo0, &hi0);
    mulhilo(c2, m1, &lo1, &hi1);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}

// float((double(u) * scale) + base), the product rounded before the sum, for 8 lanes.
TG_AVX512 inline __m256 scaled(__m256 u, __m512d scale, __m512d base) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  constexpr __mmask8 all = 0xFF;
  const __m512d product = _mm512_maskz_mul_round_pd(all, scale, _mm512_maskz_cvtps_pd(all, u), kNearest);
  return _mm512_maskz_cvtpd_ps(all, _mm512_maskz_add_round_pd(all, product, base, kNearest));
}

TG_AVX512 void uniform_block(float* out, uint64_t first, __mmask16 keep, double low, double high, uint64_t seed) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first))), lanes);
  const __m512i word = philox_word0(c0, static_cast<uint32_t>(first >> 32), seed);
  // uniform_float: the top 24 bits, exactly, times 2^-24.
  const __m512 u = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_srli_epi32(0xFFFF, word, 8)),
                                 _mm512_set1_ps(1.0f / 16777216.0f));
  const __m512d scale = _mm512_set1_pd(high - low), base = _mm512_set1_pd(low);
  const __m512 v = _mm512_maskz_insertf32x8(
      0xFFFF, _mm512_castps256_ps512(scaled(_mm512_maskz_extractf32x8_ps(0xFF, u, 0), scale, base)),
      scaled(_mm512_maskz_extractf32x8_ps(0xFF, u, 1), scale, base), 1);
  const float top = static_cast<float>(high), below_top = std::nextafterf(top, static_cast<float>(low));
  const __mmask16 under = _mm512_cmp_ps_mask(v, _mm512_set1_ps(top), _CMP_LT_OQ);
  _mm512_mask_storeu_ps(out, keep, _mm512_mask_blend_ps(under, _mm512_set1_ps(below_top), v));
}

}  // namespace

bool have_uniform_f32_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return yes;
}

void uniform_f32_avx512(float* out, int64_t begin, int64_t end, double low, double high, uint64_t seed,
                        uint64_t offset) {
  for (int64_t i = begin; i < end; i += 16) {
    const uint64_t first = offset + static_cast<uint64_t>(i);
    const int64_t count = end - i < 16 ? end - i : 16;
    // The sixteen counters must share their high half; across a 2^32 boundary, the scalar path.
    if (static_cast<uint32_t>(first) > 0xFFFFFFFFu - 15u) {
      for (int64_t j = 0; j < count; ++j)
        out[i - begin + j] = math::uniform_f32(math::philox4x32_10(first + static_cast<uint64_t>(j), seed), low, high);
      continue;
    }
    const __mmask16 keep = count == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
    uniform_block(out + (i - begin), first, keep, low, high, seed);
  }
}

#else

bool have_uniform_f32_avx512() {
  return false;
}

void uniform_f32_avx512(float* out, int64_t begin, int64_t end, double low, double high, uint64_t seed,
                        uint64_t offset) {
  for (int64_t i = begin; i < end; ++i)
    out[i - begin] = math::uniform_f32(math::philox4x32_10(offset + static_cast<uint64_t>(i), seed), low, high);
}

#endif

}  // namespace tapegrad::cpu
