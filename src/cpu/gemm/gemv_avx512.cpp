// Note [register-blocked matrix-vector products]: y = M^T x with M row-major is a sum of rows of M
// scaled by the entries of x. The portable loop (gemm.cpp, serial_gemv_columns) adds four scaled
// rows at a time into y in memory, so every pass loads and stores all of y again: at batch 1 an
// LSTM step of H = 128 (y of 512 floats, 160 rows) spends as many memory operations on y as on M.
// Here a block of up to 256 columns of y lives in sixteen zmm registers while every row of M
// streams past: each element of M is loaded once, y once at the end, and sixteen independent
// multiply-add chains keep both FMA units busy. The weights (328 KiB for that LSTM) stay in L2
// between steps, so the product runs at L2 bandwidth instead of at the store port's rate.
// Each y[j] is one chain, rows in order, one rounding per multiply-add: the result does not depend
// on how the columns are blocked.
#include "cpu/gemm/gemv_avx512.h"

#include <algorithm>
#include <utility>

#include "tapegrad/core/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TG_HAVE_AVX512_GEMV 1
#include <immintrin.h>
#endif

namespace tapegrad::cpu {

#ifdef TG_HAVE_AVX512_GEMV

namespace {

#define TG_AVX512 __attribute__((target("avx512f")))

constexpr int kMaxVectors = 16;  // of the 32 zmm registers: y's block, leaving room for loads

TG_AVX512 inline __mmask16 lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

// Columns [0, 16 * (V - 1) + tail) of y from the block of M starting at `mat`; tail in 1..16.
template <int V>
TG_AVX512 void columns_block(int64_t rows, float alpha, const float* mat, int64_t lead, const float* x, float beta,
                             float* y, int64_t tail) {
  const __mmask16 last = lanes(tail);
  __m512 acc[V];
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = mat + i * lead;
    const __m512 xi = _mm512_set1_ps(x[i]);
#pragma GCC unroll 16
    for (int v = 0; v < V - 1; ++v) acc[v] = _mm512_fmadd_ps(xi, _mm512_loadu_ps(row + 16 * v), acc[v]);
    acc[V - 1] = _mm512_fmadd_ps(xi, _mm512_maskz_loadu_ps(last, row + 16 * (V - 1)), acc[V - 1]);
  }
  const __m512 a = _mm512_set1_ps(alpha), b = _mm512_set1_ps(beta);
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
    const __mmask16 m = v == V - 1 ? last : __mmask16(0xFFFF);
    __m512 out = _mm512_mul_ps(a, acc[v]);
    if (beta != 0.0f) out = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m, y + 16 * v), out);
    _mm512_mask_storeu_ps(y + 16 * v, m, out);
  }
}

using BlockFn = void (*)(int64_t, float, const float*, int64_t, const float*, float, float*, int64_t);

template <int... V>
constexpr BlockFn block_for(int vectors, std::integer_sequence<int, V...>) {
  constexpr BlockFn table[] = {columns_block<V + 1>...};
  return table[vectors - 1];
}

// Note [segmented columns]: an LSTM step split by hidden units gives each thread units [u0, u1) of
// every gate, so its columns of the product are `segments` blocks, one per gate. One pass over the
// rows feeds all of them from sixteen registers (four gates of up to four vectors each); the rows
// come from two vectors, x_t and h_{t-1}, read in place in that order. The matrix is best packed so
// that the rows of a thread's blocks follow one another (Note [unit panels] in
// kernels/lstm_weight_layout.h): then the whole product is one sequential stream, which L2 feeds
// about 1.6 times as fast as 1 KiB pieces of rows 2 KiB apart. Each y[j] is still one chain over
// the rows in order, so the result has gemv_columns_avx512's bits (alpha = 1: acc * 1 = acc).
template <int S, int V>
TG_AVX512 void segmented_block(int64_t rows1, const float* x1, int64_t rows2, const float* x2, int64_t stride,
                               const float* mat, int64_t lead, float beta, float* y, int64_t y_stride, int64_t tail,
                               bool from_y, const float* addend) {
  const __mmask16 last = lanes(tail);
  __m512 acc[S * V];
#pragma GCC unroll 16
  for (int v = 0; v < S * V; ++v) acc[v] = _mm512_setzero_ps();
  if (from_y) {  // a chain carried on: y holds its accumulators
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        acc[s * V + v] = _mm512_maskz_loadu_ps(v == V - 1 ? last : __mmask16(0xFFFF), y + s * y_stride + 16 * v);
  }
  for (int64_t i = 0; i < rows1 + rows2; ++i) {
    const float* row = mat + i * lead;
    const __m512 xi = _mm512_set1_ps(i < rows1 ? x1[i] : x2[i - rows1]);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const float* seg = row + s * stride;
#pragma GCC unroll 4
      for (int v = 0; v < V - 1; ++v)
        acc[s * V + v] = _mm512_fmadd_ps(xi, _mm512_loadu_ps(seg + 16 * v), acc[s * V + v]);
      acc[s * V + V - 1] = _mm512_fmadd_ps(xi, _mm512_maskz_loadu_ps(last, seg + 16 * (V - 1)), acc[s * V + V - 1]);
    }
  }
  const __m512 b = _mm512_set1_ps(beta);
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __mmask16 m = v == V - 1 ? last : __mmask16(0xFFFF);
      float* out = y + s * y_stride + 16 * v;
      __m512 r = acc[s * V + v];
      if (addend != nullptr) {
        r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, addend + s * y_stride + 16 * v));
      } else if (beta != 0.0f) {
        r = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m, out), r);
      }
      _mm512_mask_storeu_ps(out, m, r);
    }
  }
}

using SegmentedFn = void (*)(int64_t, const float*, int64_t, const float*, int64_t, const float*, int64_t, float,
                             float*, int64_t, int64_t, bool, const float*);

template <int S, int... V>
constexpr SegmentedFn segmented_for(int vectors, std::integer_sequence<int, V...>) {
  constexpr SegmentedFn table[] = {segmented_block<S, V + 1>...};
  return table[vectors - 1];
}

}  // namespace

bool gemv_avx512_available() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

namespace {
// Calls block(j, v, tail) for columns [0, cols) cut into blocks of at most max_vectors vectors of
// equal width (in whole vectors), so a width just over a block's does not leave a narrow block
// whose few chains would wait on the multiply-add latency: columns [j, j + 16 (v - 1) + tail).
template <class Block>
void for_each_column_block(int64_t cols, int64_t max_vectors, const Block& block) {
  const int64_t vectors = (cols + 15) / 16;
  const int64_t blocks = (vectors + max_vectors - 1) / max_vectors;
  int64_t j = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t width = std::min(cols, vectors * (b + 1) / blocks * 16) - j;
    const int v = static_cast<int>((width + 15) / 16);
    block(j, v, width - 16 * (v - 1));
    j += width;
  }
}

SegmentedFn segmented_fn(int segments, int v) {
  switch (segments) {
    case 1:
      return segmented_for<1>(v, std::make_integer_sequence<int, kMaxVectors / 1>{});
    case 2:
      return segmented_for<2>(v, std::make_integer_sequence<int, kMaxVectors / 2>{});
    case 3:
      return segmented_for<3>(v, std::make_integer_sequence<int, kMaxVectors / 3>{});
    default:
      return segmented_for<4>(v, std::make_integer_sequence<int, kMaxVectors / 4>{});
  }
}

void segmented_columns(int64_t rows1, const float* x1, int64_t rows2, const float* x2, int segments, int64_t cols,
                       const float* mat, int64_t lead, int64_t stride, float beta, float* y, int64_t y_stride,
                       bool from_y, const float* addend) {
  TG_ASSERT(segments >= 1 && segments <= 4, "gemv_segmented_columns_avx512: ", segments, " segments");
  // Each segment's share of the registers, so that all of them fit.
  for_each_column_block(cols, kMaxVectors / segments, [&](int64_t j, int v, int64_t tail) {
    segmented_fn(segments, v)(rows1, x1, rows2, x2, stride, mat + j, lead, beta, y + j, y_stride, tail, from_y,
                              addend != nullptr ? addend + j : nullptr);
  });
}
}  // namespace

void gemv_columns_avx512(int64_t rows, int64_t cols, float alpha, const float* mat, int64_t lead, const float* x,
                         float beta, float* y) {
  for_each_column_block(cols, kMaxVectors, [&](int64_t j, int v, int64_t tail) {
    block_for(v, std::make_integer_sequence<int, kMaxVectors>{})(rows, alpha, mat + j, lead, x, beta, y + j, tail);
  });
}

void gemv_segmented_columns_avx512(int64_t rows1, const float* x1, int64_t rows2, const float* x2, int segments,
                                   int64_t cols, const float* mat, int64_t lead, int64_t stride, float beta, float* y,
                                   int64_t y_stride) {
  segmented_columns(rows1, x1, rows2, x2, segments, cols, mat, lead, stride, beta, y, y_stride, false, nullptr);
}

void gemv_segmented_columns_continue_avx512(int64_t rows, const float* x, int segments, int64_t cols, const float* mat,
                                            int64_t lead, int64_t stride, const float* addend, float* y,
                                            int64_t y_stride) {
  segmented_columns(rows, x, 0, x, segments, cols, mat, lead, stride, 0.0f, y, y_stride, true, addend);
}

#else

bool gemv_avx512_available() {
  return false;
}

void gemv_columns_avx512(int64_t, int64_t, float, const float*, int64_t, const float*, float, float*) {}
void gemv_segmented_columns_avx512(int64_t, const float*, int64_t, const float*, int, int64_t, const float*, int64_t,
                                   int64_t, float, float*, int64_t) {}
void gemv_segmented_columns_continue_avx512(int64_t, const float*, int, int64_t, const float*, int64_t, int64_t,
                                            const float*, float*, int64_t) {}

#endif

}  // namespace tapegrad::cpu
