// Vectorised conversions between float32 and the 16-bit float types for contiguous copies (the casts
// of mixed precision: .to(kBFloat16), .to(kFloat16) and back). Each gives exactly the bits of the
// scalar conversions in core/half.h, round to nearest even with the same NaN: bf16 by the scalar
// routine's integer steps on 16 lanes (not vcvtneps2bf16, which flushes denormals to zero); f16 by
// the F16C instructions, whose rounding is the same, with NaNs replaced by the scalar routine's.
#include "cpu/half/convert_16bit.h"

#include <cstring>

#include "cpu/loops/parallel.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TG_HAVE_AVX512_CONVERT 1
#include <immintrin.h>
#endif

namespace tapegrad::cpu {

namespace {

#ifdef TG_HAVE_AVX512_CONVERT

#define TG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// Every lane: the zero-masked intrinsics are the plain instructions, without the undefined
// pass-through that GCC 12 warns about in the unmasked ones.
constexpr __mmask16 kAll = 0xFFFF;

TG_AVX512 __mmask16 lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

TG_AVX512 __m256i bf16_of(__m512i u) {
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, u, 16), _mm512_set1_epi32(1));
  __m512i rounded =
      _mm512_maskz_srli_epi32(kAll, _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc0));
  return _mm512_maskz_cvtepi32_epi16(kAll, rounded);
}

TG_AVX512 void floats_to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
    _mm256_mask_storeu_epi16(y + i, m, bf16_of(u));
  }
}

TG_AVX512 void bf16_to_floats(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(kAll, _mm256_maskz_loadu_epi16(m, x + i));
    _mm512_mask_storeu_epi32(y + i, m, _mm512_maskz_slli_epi32(kAll, wide, 16));
  }
}

TG_AVX512 void floats_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m256i h = _mm512_maskz_cvtps_ph(kAll, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // NaN: the scalar routine's sign | 0x7e00, not the instruction's payload-keeping quiet NaN.
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi16(h, 15), _mm256_set1_epi16(1));
    const __m256i canonical = _mm256_or_si256(_mm256_slli_epi16(sign, 15), _mm256_set1_epi16(0x7e00));
    h = _mm256_mask_mov_epi16(h, nan, canonical);
    _mm256_mask_storeu_epi16(y + i, m, h);
  }
}

TG_AVX512 void f16_to_floats(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, x + i);
    __m512i out = _mm512_castps_si512(_mm512_maskz_cvtph_ps(kAll, h));
    // NaN: the scalar routine keeps the payload as it is; the instruction quiets a signalling one.
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(kAll, h), mant = _mm512_and_si512(wide, _mm512_set1_epi32(0x3ff));
    const __mmask16 nan =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(wide, _mm512_set1_epi32(0x7c00)), _mm512_set1_epi32(0x7c00)) &
        _mm512_cmpneq_epi32_mask(mant, _mm512_setzero_si512());
    const __m512i sign = _mm512_maskz_slli_epi32(kAll, _mm512_and_si512(wide, _mm512_set1_epi32(0x8000)), 16);
    const __m512i kept =
        _mm512_or_si512(_mm512_or_si512(sign, _mm512_set1_epi32(0x7f800000)), _mm512_maskz_slli_epi32(kAll, mant, 13));
    out = _mm512_mask_mov_epi32(out, nan, kept);
    _mm512_mask_storeu_epi32(y + i, m, out);
  }
}

bool have_avx512() {
  static const bool yes =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
}

#endif  // TG_HAVE_AVX512_CONVERT

// The conversion of n contiguous elements, or nullptr where this build or CPU has none.
using Convert = void (*)(const void*, void*, int64_t);

template <class S, class D, void (*F)(const S*, D*, int64_t)>
void typed(const void* x, void* y, int64_t n) {
  F(static_cast<const S*>(x), static_cast<D*>(y), n);
}

Convert conversion(DType from, DType to) {
#ifdef TG_HAVE_AVX512_CONVERT
  if (!have_avx512()) return nullptr;
  if (from == kFloat32 && to == kBFloat16) return typed<float, uint16_t, floats_to_bf16>;
  if (from == kBFloat16 && to == kFloat32) return typed<uint16_t, float, bf16_to_floats>;
  if (from == kFloat32 && to == kFloat16) return typed<float, uint16_t, floats_to_f16>;
  if (from == kFloat16 && to == kFloat32) return typed<uint16_t, float, f16_to_floats>;
#else
  (void)from, (void)to;
#endif
  return nullptr;
}

template <class H>
void widen_scalar(const char* src, int64_t stride, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    H h;
    std::memcpy(&h, src + i * stride, sizeof(H));
    dst[i] = static_cast<float>(h);
  }
}

template <class H>
void narrow_scalar(const float* src, char* dst, int64_t stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const H h(src[i]);
    std::memcpy(dst + i * stride, &h, sizeof(H));
  }
}

}  // namespace

void widen_16bit(DType from, const char* src, int64_t stride, float* dst, int64_t n) {
  TG_ASSERT(from == kBFloat16 || from == kFloat16, "widen_16bit: not a 16-bit float type: ", from);
  if (stride == 2) {
    if (const Convert convert = conversion(from, kFloat32)) return convert(src, dst, n);
  }
  if (from == kBFloat16) {
    widen_scalar<BFloat16>(src, stride, dst, n);
  } else {
    widen_scalar<Half>(src, stride, dst, n);
  }
}

void narrow_16bit(DType to, const float* src, char* dst, int64_t stride, int64_t n) {
  TG_ASSERT(to == kBFloat16 || to == kFloat16, "narrow_16bit: not a 16-bit float type: ", to);
  if (stride == 2) {
    if (const Convert convert = conversion(kFloat32, to)) return convert(src, dst, n);
  }
  if (to == kBFloat16) {
    narrow_scalar<BFloat16>(src, dst, stride, n);
  } else {
    narrow_scalar<Half>(src, dst, stride, n);
  }
}

bool copy_16bit_contiguous(const Tensor& src, const Tensor& dst) {
  if (!src.is_contiguous() || !dst.is_contiguous() || src.numel() != dst.numel()) return false;
  const Convert convert = conversion(src.dtype(), dst.dtype());
  if (convert == nullptr) return false;
  const char* x = static_cast<const char*>(src.data_ptr());
  char* y = static_cast<char*>(dst.data_ptr());
  const size_t in = dtype_size(src.dtype()), out = dtype_size(dst.dtype());
  parallel_for(0, src.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    convert(x + static_cast<size_t>(b) * in, y + static_cast<size_t>(b) * out, e - b);
  });
  return true;
}

}  // namespace tapegrad::cpu
