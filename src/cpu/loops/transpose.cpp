// The blocked transposes of transpose.h.
#include "cpu/loops/transpose.h"

#include <algorithm>

#include "cpu/loops/parallel.h"
#include "cpu/loops/transpose_16x16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace tapegrad::cpu {

namespace {

// dst[i, j] = src[i, j] where dst's rows are contiguous and src's columns are: a transpose (e.g.
// an LSTM's [W_ih^T; W_hh^T] laid out once per forward). Element by element, every read of src
// would touch another cache line; in kTile x kTile blocks each line read is used kTile times.
// 768 x 2048 floats: about 10 ms -> 1 ms on two threads. Four-byte elements go through 8 x 8
// register transposes inside each tile where the CPU has AVX (Note [register transposes]).
template <class E>
void transpose_tile(const E* src, int64_t src_cs, E* dst, int64_t dst_rs, int64_t i0, int64_t i1, int64_t j0,
                    int64_t j1) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) dst[i * dst_rs + j] = src[i + j * src_cs];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// Note [register transposes]: an LSTM at batch 1 lays out its weights ([I + H, 4H], 320 KiB for
// lstm_small) on every forward, and element by element that took 37 us of its 480 us training step;
// eight rows of eight floats transposed in registers (the unpack/shuffle/permute network of 24
// shuffles) move them in whole vectors, and the layout takes 18 us. Bytes are moved, not values:
// any 4-byte type (shuffles do not touch the bits, so NaN payloads survive).
__attribute__((target("avx"))) void transpose_8x8(const uint32_t* src, int64_t src_cs, uint32_t* dst, int64_t dst_rs) {
  // Row r of the block in registers is column j0 + r of src: src[(j0 + r) * src_cs + i0 ...].
  __m256 r[8], t[8], u[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + k * src_cs));
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + k * dst_rs), _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + (k + 4) * dst_rs), _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
  }
}

bool have_avx() {
  static const bool avx = __builtin_cpu_supports("avx");
  return avx;
}

// With AVX-512, 16 x 16 blocks: fewer shuffles per element than the 8 x 8 network, and each row
// one 64-byte load and store. On one Zen 5 core the batch-1 LSTM's per-step panels (Note [panels
// laid out in place], lstm_small's 320 KiB) went from 6.7-6.8 to 5.4-5.5 us, and a 768 x 2048
// transpose (lstm_large's [W_ih^T; W_hh^T], laid out every step) from 920-945 to 604-616 us.
__attribute__((target("avx512f"))) void transpose_16x16_block(const uint32_t* src, int64_t src_cs, uint32_t* dst,
                                                              int64_t dst_rs) {
  __m512i r[16];
  for (int k = 0; k < 16; ++k) r[k] = _mm512_loadu_si512(src + k * src_cs);
  transpose_16x16(r);
  for (int k = 0; k < 16; ++k) _mm512_storeu_si512(dst + k * dst_rs, r[k]);
}

bool have_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

template <>
void transpose_tile<uint32_t>(const uint32_t* src, int64_t src_cs, uint32_t* dst, int64_t dst_rs, int64_t i0,
                              int64_t i1, int64_t j0, int64_t j1) {
  int64_t i = i0;
  if (have_avx512() && j1 - j0 >= 16) {
    for (; i + 16 <= i1; i += 16) {
      int64_t j = j0;
      for (; j + 16 <= j1; j += 16) transpose_16x16_block(src + i + j * src_cs, src_cs, dst + i * dst_rs + j, dst_rs);
      for (int64_t ii = i; ii < i + 16; ++ii)
        for (int64_t jj = j; jj < j1; ++jj) dst[ii * dst_rs + jj] = src[ii + jj * src_cs];
    }
  }
  if (have_avx()) {
    for (; i + 8 <= i1; i += 8) {
      int64_t j = j0;
      for (; j + 8 <= j1; j += 8) transpose_8x8(src + i + j * src_cs, src_cs, dst + i * dst_rs + j, dst_rs);
      for (int64_t ii = i; ii < i + 8; ++ii)
        for (int64_t jj = j; jj < j1; ++jj) dst[ii * dst_rs + jj] = src[ii + jj * src_cs];
    }
  }
  for (; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) dst[i * dst_rs + j] = src[i + j * src_cs];
}
#endif

template <class E>
void transpose_blocks(const E* src, int64_t src_cs, E* dst, int64_t dst_rs, int64_t rows, int64_t cols, bool parallel) {
  constexpr int64_t kTile = 32;
  const int64_t row_blocks = (rows + kTile - 1) / kTile;
  const int64_t grain = parallel ? std::max<int64_t>(1, kGrainSize / (kTile * std::max<int64_t>(cols, 1))) : row_blocks;
  parallel_for(0, row_blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t i0 = b0 * kTile; i0 < std::min(rows, b1 * kTile); i0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile);
      for (int64_t j0 = 0; j0 < cols; j0 += kTile)
        transpose_tile(src, src_cs, dst, dst_rs, i0, i1, j0, std::min(cols, j0 + kTile));
    }
  });
}

}  // namespace

bool transpose_2d(const void* src, int64_t src_cs, void* dst, int64_t dst_rs, int64_t rows, int64_t cols,
                  int64_t element_bytes, bool parallel) {
  switch (element_bytes) {
    case 2:
      transpose_blocks(static_cast<const uint16_t*>(src), src_cs, static_cast<uint16_t*>(dst), dst_rs, rows, cols,
                       parallel);
      return true;
    case 4:
      transpose_blocks(static_cast<const uint32_t*>(src), src_cs, static_cast<uint32_t*>(dst), dst_rs, rows, cols,
                       parallel);
      return true;
    case 8:
      transpose_blocks(static_cast<const uint64_t*>(src), src_cs, static_cast<uint64_t*>(dst), dst_rs, rows, cols,
                       parallel);
      return true;
    default:
      return false;
  }
}

}  // namespace tapegrad::cpu
