// Note [bf16 products]: mixed precision's products on the CPU. Operands are rounded to bf16 (8 bits
// of mantissa) and every sum is kept in f32. On CPUs with AVX512-BF16 (Zen 4 and 5, Cooper Lake,
// Sapphire Rapids and later) one vdpbf16ps does 32 multiply-adds where an f32 FMA does 16, and the
// operands take half the bytes, so the product runs at up to twice the f32 kernel's speed. The
// kernel follows the f32 one (sgemm_avx512.cpp): a 12 x 32 register tile of C (24 accumulators), B
// in panels of 32 columns while row tiles of A pass over them (Note [bf16 blocking]). Differences:
// depth goes in pairs (vdpbf16ps adds a[2p] b[2p] + a[2p+1] b[2p+1] per lane, so a panel holds each
// column's pair side by side and a row's pair is one 32-bit broadcast), B is packed once into a
// PackedBf16Matrix that many products reuse (an LSTM's weights, at every step), and A is
// converted to bf16 rows per call (vcvtneps2bf16, which rounds to nearest even and, unlike the
// scalar conversion, flushes denormals to zero). Elsewhere the operands are rounded the same way
// (scalar) and multiplied by the f32 GEMM, so results agree to within the order of f32 sums.
#include "cpu/gemm/sbgemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "cpu/gemm/sbgemm_amx.h"
#include "cpu/gemm/sgemm_avx512.h"
#include "cpu/half/bf16_round.h"
#include "cpu/half/convert_16bit.h"
#include "cpu/loops/transpose_16x16.h"
#include "tapegrad/core/error.h"
#include "tapegrad/runtime.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TG_HAVE_AVX512_BF16 1
#include <immintrin.h>
#endif

namespace tapegrad::cpu {

namespace {

std::atomic<SbgemmKernel> kernel_limit{SbgemmKernel::Amx};

// Depth pairs of a packed panel, padded with zeros to whole AMX tiles so that both native kernels
// read the same layout.
int64_t panel_pairs(int64_t k) {
  return (k + 1) / 2 + (-((k + 1) / 2) & (amx::kTilePairs - 1));
}

uint16_t round_bf16(float v) {
  return BFloat16(v).bits;
}
uint16_t round_bf16(BFloat16 v) {
  return v.bits;
}
float as_float(uint16_t bits) {
  return detail::bits_float(static_cast<uint32_t>(bits) << 16);
}

// Below this many multiply-adds a product stays on the calling thread (as in sgemm_avx512.cpp).
constexpr int64_t kParallelMacs = int64_t{1} << 20;
// Below this many elements B is packed on the calling thread.
constexpr int64_t kParallelPack = int64_t{1} << 16;

#ifdef TG_HAVE_AVX512_BF16

#define TG_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

constexpr int kMr = 12;  // rows of a register tile
constexpr int kNr = 32;  // columns of a register tile and of a panel
// Note [bf16 blocking]: at twice the f32 kernel's rate, the product's time went to memory rather
// than to vdpbf16ps (about two thirds of the peak at 2048^3, on Zen 5). Three changes, each measured:
// - Deep depth blocks (up to 2048): a tile's sums finish in registers, so C is written once instead
//   of being read and written per block of 512; the panel then lives in L2, not L1, which costs
//   less than C's passes did. The tile kernel also prefetches its C lines as it starts.
// - Rows in blocks of kMc: a block of A (48 rows, 192 KiB at depth 2048) stays in L2 while it
//   passes over a thread's panels, instead of every panel streaming all of A from L3.
// - Panels handed out in chunks to whichever thread is free (two cores of a shared machine rarely
//   run at the same speed), and a bf16 output rounded by the tile kernel as it stores.
// At 2048^3 on 2 threads this took the kernel from about 540 to about 730 GFLOP/s (the peak of
// vdpbf16ps there is about 870).
constexpr int64_t kKp = 1024;               // depth pairs of a block: a 2048-deep product touches C once
constexpr int64_t kMc = 48;                 // rows of A that pass over one panel block while it stays in L2
constexpr int64_t kChunkBytes = 512 << 10;  // the panels a thread takes at a time: their blocks in L2

TG_AVX512_BF16 __mmask16 lanes(int64_t count) {
  if (count <= 0) return 0;
  return count >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

// n contiguous floats to bf16, vectorised.
TG_AVX512_BF16 void floats_to_bf16(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 mask = lanes(n - i);
    _mm256_mask_storeu_epi16(out + i, mask, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + i)));
  }
}

// A stored by columns (row stride 1, a transposed view such as a weight gradient's dgates^T). Per
// 16 rows and 16 depth pairs: each pair of depths is converted for the 16 rows by one instruction
// and interleaved into the rows' pairs, the 16 x 16 pairs are transposed in registers, and each row
// gets one 64-byte store. Row by row with scalar rounding it took a third of an LSTM step; with
// 32-bit scatters the rows, ld apart, still conflicted in L1.
// 16 values of a 16-bit or float column as bf16 lanes (zero where mask is clear).
TG_AVX512_BF16 __m256i bf16_lanes(const float* x, __mmask16 mask) {
  return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x));
}
TG_AVX512_BF16 __m256i bf16_lanes(const BFloat16* x, __mmask16 mask) {
  return _mm256_maskz_loadu_epi16(mask, x);
}

template <class T>
TG_AVX512_BF16 void columns_to_bf16(const T* a, int64_t cs, int64_t m, int64_t k, uint16_t* out, int64_t ld) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  // Depth in blocks of kColumnBlock: a block's source rows (cs apart, often 4 KiB or more) stay in
  // the TLB and cache while every 16 rows of A pass over them. Row by row down the whole depth, each
  // 64-byte read was on another page: an eighth of a character LSTM's bf16 step went here.
  constexpr int64_t kColumnBlock = 256;
  for (int64_t block = 0; block < k; block += kColumnBlock) {
    for (int64_t i = 0; i < m; i += 16) {
      const __mmask16 rows = lanes(m - i);
      const int64_t row_count = std::min<int64_t>(16, m - i);
      for (int64_t p0 = block; p0 < std::min(k, block + kColumnBlock); p0 += 32) {
        __m512i pairs[16];
        for (int q = 0; q < 16; ++q) {
          const int64_t p = p0 + 2 * q;
          if constexpr (std::is_same_v<T, float>) {  // one instruction converts both depths
            const __m512 lo = p < k ? _mm512_maskz_loadu_ps(rows, a + i + p * cs) : _mm512_setzero_ps();
            const __m512 hi = p + 1 < k ? _mm512_maskz_loadu_ps(rows, a + i + (p + 1) * cs) : _mm512_setzero_ps();
            pairs[q] = _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
          } else {  // each row's pair is its two depths' 16 bits side by side in one 32-bit lane
            constexpr __mmask16 all = 0xFFFF;
            const __m256i lo = p < k ? bf16_lanes(a + i + p * cs, rows) : _mm256_setzero_si256();
            const __m256i hi = p + 1 < k ? bf16_lanes(a + i + (p + 1) * cs, rows) : _mm256_setzero_si256();
            pairs[q] = _mm512_or_si512(_mm512_maskz_cvtepu16_epi32(all, lo),
                                       _mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, hi), 16));
          }
        }
        transpose_16x16(pairs);
        for (int64_t r = 0; r < row_count; ++r) _mm512_storeu_si512(out + (i + r) * ld + p0, pairs[r]);
      }
    }
  }
}

// Rows of A as bf16, `ld` (even, >= k) apart, each padded with zeros to ld.
template <class T>
TG_AVX512_BF16 void rows_to_bf16(const T* a, int64_t rs, int64_t cs, int64_t m, int64_t k, uint16_t* out, int64_t ld) {
  if (cs != 1 && rs == 1 && ld % 32 == 0) {  // whole 16-pair stores stay inside each row
    columns_to_bf16(a, cs, m, k, out, ld);
    const int64_t written = (k + 31) / 32 * 32;
    for (int64_t i = 0; i < m; ++i) std::fill(out + i * ld + written, out + (i + 1) * ld, uint16_t{0});
    return;
  }
  for (int64_t i = 0; i < m; ++i) {
    uint16_t* row = out + i * ld;
    if (cs == 1) {
      if constexpr (std::is_same_v<T, float>) {
        floats_to_bf16(a + i * rs, k, row);
      } else {
        std::memcpy(row, a + i * rs, static_cast<size_t>(k) * sizeof(uint16_t));
      }
    } else {
      for (int64_t p = 0; p < k; ++p) row[p] = round_bf16(a[i * rs + p * cs]);
    }
    for (int64_t p = k; p < ld; ++p) row[p] = 0;
  }
}

// B stored by columns (row stride 1: a weight seen through .t(), as linear multiplies by it; or a
// small product's A^T, Note [products computed transposed]). A column's depth pairs are adjacent in
// memory, so 32 depths of a column become 16 pairs in one instruction (a conversion from float32, a
// load from bf16); 16 columns' pairs are transposed in registers into 16 rows of a panel's half.
// Element by element this gather was most of a small autocast product's time.
TG_AVX512_BF16 __m512i column_pairs(const float* column, int64_t left) {
  const __m512 lo = _mm512_maskz_loadu_ps(lanes(left), column),
               hi = _mm512_maskz_loadu_ps(lanes(left - 16), column + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // depths in order: pair i is 32-bit lane i
}
TG_AVX512_BF16 __m512i column_pairs(const BFloat16* column, int64_t left) {
  const __mmask32 mask = left >= 32 ? ~__mmask32{0} : left <= 0 ? 0 : (__mmask32{1} << left) - 1;
  return _mm512_maskz_loadu_epi16(mask, column);
}

template <class T>
TG_AVX512_BF16 void pack_panels_by_columns(const T* b, int64_t cs, int64_t k, int64_t n, uint16_t* out) {
  const int64_t pairs = (k + 1) / 2, stride = panel_pairs(k);
  for (int64_t j0 = 0; j0 < n; j0 += kNr) {
    uint16_t* panel = out + (j0 / kNr) * stride * 2 * kNr;
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
        const int64_t depth = 2 * p0;
        __m512i rows[16];
        for (int q = 0; q < 16; ++q) {
          const int64_t col = j0 + 16 * h + q;
          rows[q] = col < n ? column_pairs(b + col * cs + depth, k - depth) : _mm512_setzero_si512();
        }
        transpose_16x16(rows);
        const int64_t count = std::min<int64_t>(16, pairs - p0);
        for (int64_t r = 0; r < count; ++r) _mm512_storeu_si512(panel + (p0 + r) * 2 * kNr + 32 * h, rows[r]);
      }
    }
  }
}

// Panel j of B: for each depth pair p, 64 values: column c's (b[2p][c], b[2p + 1][c]) at 2c, 2c + 1.
// Contiguous rows (float or bf16): two rows' 16 columns are converted and interleaved in registers.
// Depth in blocks of kPairBlock pairs, every panel within a block: a block's 32 source rows are read
// whole, one after another, where panel by panel down the whole depth each row was read 128 bytes at
// a time, a row (4 KB at mlp_seed's 1000 inputs) apart. A weight gradient's B is the layer's input,
// often just fetched from memory (a batch of the data): there, panel by panel, mlp_seed:1024's dW
// (512 x 1024 by 1024 x 1000) ran at 710-740 GFLOP/s on 2 Zen 5 threads against 880 with B in
// cache; by depth blocks, 815-835.
constexpr int64_t kPairBlock = 16;

template <class T>
TG_AVX512_BF16 void pack_panels(const T* b, int64_t rs, int64_t cs, int64_t k, int64_t n, uint16_t* out) {
  const int64_t pairs = (k + 1) / 2, stride = panel_pairs(k);
  for (int64_t pb = 0; pb < pairs; pb += kPairBlock)
    for (int64_t j0 = 0; j0 < n; j0 += kNr) {
      uint16_t* panel = out + (j0 / kNr) * stride * 2 * kNr;
      for (int64_t p = pb; p < std::min(pairs, pb + kPairBlock); ++p) {
        uint16_t* dst = panel + p * 2 * kNr;
        const int64_t r0 = 2 * p, r1 = 2 * p + 1;
        {
          if (cs == 1) {
            for (int64_t h = 0; h < 2; ++h) {
              const int64_t col = j0 + 16 * h;
              const __mmask16 mask = lanes(n - col);
              const __m256i lo = bf16_lanes(b + r0 * rs + col, mask);
              const __m256i hi = r1 < k ? bf16_lanes(b + r1 * rs + col, mask) : _mm256_setzero_si256();
              // Pairs within 128-bit lanes, then the lanes put in column order.
              const __m256i low = _mm256_unpacklo_epi16(lo, hi), high = _mm256_unpackhi_epi16(lo, hi);
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * h), _mm256_permute2x128_si256(low, high, 0x20));
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * h + 16),
                                  _mm256_permute2x128_si256(low, high, 0x31));
            }
            continue;
          }
        }
        for (int64_t c = 0; c < kNr; ++c) {
          const int64_t col = j0 + c;
          dst[2 * c] = col < n ? round_bf16(b[r0 * rs + col * cs]) : 0;
          dst[2 * c + 1] = col < n && r1 < k ? round_bf16(b[r1 * rs + col * cs]) : 0;
        }
      }
    }
}

// C[R x w] = alpha * (A rows)(panel) + beta * C (+ bias, when given: the tile's first column's) over
// `pairs` depth pairs. a: the first row's first pair, rows lda values apart; panel: the block's first
// pair; m0, m1: the columns of each half.
template <int R>
TG_AVX512_BF16 void tile_kernel(int64_t pairs, const uint16_t* __restrict a, int64_t lda,
                                const uint16_t* __restrict panel, float* __restrict c, int64_t ldc, __mmask16 m0,
                                __mmask16 m1, float alpha, float beta, const float* __restrict bias,
                                uint16_t* __restrict c16, int64_t ld16) {
  __m512 acc0[R], acc1[R];
  // C's lines are fetched while the tile's sums run: waiting for them at the end was a tenth of a
  // large product's time.
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    acc0[r] = acc1[r] = _mm512_setzero_ps();
    if (beta != 0.0f || c16 == nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
    }
    if (c16 != nullptr) _mm_prefetch(reinterpret_cast<const char*>(c16 + r * ld16), _MM_HINT_T0);
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + p * 2 * kNr);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(panel + p * 2 * kNr + kNr);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, sizeof(pair));
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      acc0[r] = _mm512_dpbf16_ps(acc0[r], av, b0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], av, b1);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __m512 bias0 = bias != nullptr ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias != nullptr ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    __m512 x0 = _mm512_mul_ps(va, acc0[r]), x1 = _mm512_mul_ps(va, acc1[r]);
    if (beta != 0.0f) {  // beta = 0 must not read C: it may hold anything, NaN included
      x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, row), x0);
      x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, row + 16), x1);
    }
    if (bias != nullptr) {  // one rounding, as beta = 1 over a C holding the bias had
      x0 = _mm512_add_ps(x0, bias0);
      x1 = _mm512_add_ps(x1, bias1);
    }
    if (c16 != nullptr) {  // the last depth block of a bf16 output: rounded here, C is not written
      _mm256_mask_storeu_epi16(c16 + r * ld16, m0, round_to_bf16(x0));
      _mm256_mask_storeu_epi16(c16 + r * ld16 + 16, m1, round_to_bf16(x1));
    } else {
      _mm512_mask_storeu_ps(row, m0, x0);
      _mm512_mask_storeu_ps(row + 16, m1, x1);
    }
  }
}

using TileKernel = void (*)(int64_t, const uint16_t*, int64_t, const uint16_t*, float*, int64_t, __mmask16, __mmask16,
                            float, float, const float*, uint16_t*, int64_t);
constexpr TileKernel kTileKernels[kMr + 1] = {
    nullptr,        tile_kernel<1>, tile_kernel<2>, tile_kernel<3>,  tile_kernel<4>,  tile_kernel<5>, tile_kernel<6>,
    tile_kernel<7>, tile_kernel<8>, tile_kernel<9>, tile_kernel<10>, tile_kernel<11>, tile_kernel<12>};

// Panels [j0, j1) of C for all m rows of A (bf16 rows lda apart), on the calling thread. With
// `rounded`, the last depth block's tiles are rounded into it as they finish and C is only scratch;
// the first depth block's tiles add `bias` (n floats) when given.
void native_panels(int64_t m, float alpha, const uint16_t* a, int64_t lda, const PackedBf16Matrix& b, float beta,
                   float* c, int64_t ldc, int64_t j0, int64_t j1, const RoundedOutput& rounded, const float* bias) {
  const int64_t pairs = (b.rows() + 1) / 2, stride = panel_pairs(b.rows()), n = b.cols();
  for (int64_t p0 = 0; p0 < pairs; p0 += kKp) {
    const int64_t kp = std::min(kKp, pairs - p0);
    const float beta_block = p0 == 0 ? beta : 1.0f;  // later depth blocks add to what the first wrote
    uint16_t* c16 = p0 + kp == pairs ? reinterpret_cast<uint16_t*>(rounded.out) : nullptr;
    for (int64_t i0 = 0; i0 < m; i0 += kMc) {
      const int64_t i1 = std::min(m, i0 + kMc);
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t col = j * kNr;
        const __mmask16 m0 = lanes(n - col), m1 = lanes(n - col - 16);
        const uint16_t* panel = b.pairs() + j * stride * 2 * kNr + p0 * 2 * kNr;
        for (int64_t i = i0; i < i1; i += kMr) {
          const int r = static_cast<int>(std::min<int64_t>(kMr, i1 - i));
          kTileKernels[r](kp, a + i * lda + 2 * p0, lda, panel, c + i * ldc + col, ldc, m0, m1, alpha, beta_block,
                          p0 == 0 && bias != nullptr ? bias + col : nullptr,
                          c16 == nullptr ? nullptr : c16 + i * rounded.ld + col, rounded.ld);
        }
      }
    }
  }
}

// The native kernels' A: rows of bf16 padded with zeros to the panels' depth and, for AMX, to whole
// tiles of rows. Threads that share a product convert a share of the rows each.
template <class T>
void native_product(int64_t m, float alpha, const T* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b,
                    float beta, float* c, int64_t ldc, const RoundedOutput& rounded, const float* bias, bool amx) {
  // A row length that is a multiple of 4 KiB would put a tile's 16 rows in one L1 set: one more
  // 64-byte tile column of zeros keeps them apart.
  const int64_t lda = 2 * panel_pairs(b.rows()) + ((2 * panel_pairs(b.rows())) % 2048 == 0 ? 32 : 0);
  const int64_t k = b.rows(), n = b.cols();
  const int64_t rows = amx ? m + (-m & (amx::kTileRows - 1)) : m;
  thread_local std::vector<uint16_t> buffer;  // kept: an LSTM step must not allocate
  buffer.resize(static_cast<size_t>(rows * lda));
  std::fill(buffer.begin() + m * lda, buffer.end(), uint16_t{0});
  uint16_t* a16 = buffer.data();
  auto convert = [&](int64_t i0, int64_t i1) {
    if (i1 > i0) rows_to_bf16(a + i0 * a_rs, a_rs, a_cs, i1 - i0, k, a16 + i0 * lda, lda);
  };
  const int64_t panels = (n + kNr - 1) / kNr;
  auto run = [&](int64_t begin, int64_t end) {
    if (amx) {  // rounds each C tile as it finishes
      const amx::Bf16Output out{reinterpret_cast<uint16_t*>(rounded.out), rounded.ld};
      amx::product(m, n, panel_pairs(k), alpha, a16, lda, b.pairs(), beta, c, ldc, begin, end, out);
    } else {
      native_panels(m, alpha, a16, lda, b, beta, c, ldc, begin, end, rounded, bias);
    }
  };
  const int threads = get_num_threads();
  // AMX does 16 times the work per instruction: split only products that are large for it too.
  const int64_t parallel_macs = amx ? 16 * kParallelMacs : kParallelMacs;
  const bool split_rows = !amx && sbgemm_splits_rows(m, k, n, threads);
  if (threads <= 1 || m * n * k < parallel_macs || omp_in_parallel() || (panels < 2 && !split_rows)) {
    convert(0, m);
    run(0, panels);
    return;
  }
  if (split_rows) {
    // Few panels and many rows (a product computed transposed, Note [products computed
    // transposed]), or a B small enough for every thread's L2 (Note [shallow products split by
    // rows]): each thread converts and multiplies its own rows over every panel, with no barrier
    // between the two and no thread reading rows another converted.
    const int use = static_cast<int>(std::min<int64_t>(threads, m / kMc));
#pragma omp parallel num_threads(use)
    {
      const int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
      const int64_t i0 = m * part / parts / kMr * kMr, i1 = part + 1 == parts ? m : m * (part + 1) / parts / kMr * kMr;
      convert(i0, i1);
      const RoundedOutput rows{rounded.out == nullptr ? nullptr : rounded.out + i0 * rounded.ld, rounded.ld};
      if (i1 > i0)
        native_panels(i1 - i0, alpha, a16 + i0 * lda, lda, b, beta, c + i0 * ldc, ldc, 0, panels, rows, bias);
    }
    return;
  }
  const int use = static_cast<int>(std::min<int64_t>(threads, panels));
  // The f32-accumulating kernel hands out panels in chunks, first come first served: a fixed half
  // each left one core waiting a tenth of a large product whenever the other ran slower.
  const int64_t panel_bytes = panel_pairs(k) * 2 * kNr * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t chunk = std::clamp<int64_t>(kChunkBytes / panel_bytes, 1, (panels + use - 1) / use);
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(use)
  {
    const int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
    convert(m * part / parts, m * (part + 1) / parts);
#pragma omp barrier
    if (amx) {
      run(panels * part / parts, panels * (part + 1) / parts);
    } else {
      for (int64_t j = next.fetch_add(chunk); j < panels; j = next.fetch_add(chunk))
        run(j, std::min(panels, j + chunk));
    }
  }
}

// store_transposed in 16 x 16 blocks: 16 rows of T are transposed in registers into 16 rows of C.
TG_AVX512_BF16 void store_transposed_native(const float* t, int64_t ldt, int64_t n, int64_t m, float beta, float* c,
                                            BFloat16* c16, int64_t ldc) {
  const __m512 vb = _mm512_set1_ps(beta);
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    const __mmask16 row_lanes = lanes(n - i0);
    for (int64_t j0 = 0; j0 < m; j0 += 16) {
      const __mmask16 col_lanes = lanes(m - j0);
      __m512i block[16];
      for (int q = 0; q < 16; ++q)
        block[q] = j0 + q < m ? _mm512_castps_si512(_mm512_maskz_loadu_ps(row_lanes, t + (j0 + q) * ldt + i0))
                              : _mm512_setzero_si512();
      transpose_16x16(block);
      for (int64_t r = 0; r < std::min<int64_t>(16, n - i0); ++r) {
        __m512 x = _mm512_castsi512_ps(block[r]);
        const int64_t at = (i0 + r) * ldc + j0;
        if (c16 != nullptr) {
          uint16_t* row = reinterpret_cast<uint16_t*>(c16) + at;
          if (beta != 0.0f) {
            const __m512i old = _mm512_maskz_cvtepu16_epi32(col_lanes, _mm256_maskz_loadu_epi16(col_lanes, row));
            x = _mm512_fmadd_ps(vb, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(col_lanes, old, 16)), x);
          }
          _mm256_mask_storeu_epi16(row, col_lanes, round_to_bf16(x));
        } else {
          if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(col_lanes, c + at), x);
          _mm512_mask_storeu_ps(c + at, col_lanes, x);
        }
      }
    }
  }
}

#endif  // TG_HAVE_AVX512_BF16

// The portable path: A rounded to bf16 values held as floats, times B's rounded floats, in f32.
template <class T>
void portable_product(int64_t m, float alpha, const T* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b,
                      float beta, float* c, int64_t ldc, const RoundedOutput& rounded) {
  const int64_t k = b.rows(), n = b.cols();
  std::vector<float> rounded_a(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      rounded_a[static_cast<size_t>(i * k + p)] = as_float(round_bf16(a[i * a_rs + p * a_cs]));
  if (use_sgemm_avx512(m, n, k)) {
    sgemm_avx512(m, n, k, alpha, rounded_a.data(), k, 1, b.floats(), n, 1, beta, c, ldc);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, rounded_a.data(), static_cast<int>(k), b.floats(), static_cast<int>(n),
                beta, c, static_cast<int>(ldc));
  }
  rounded.columns(0, m, c, ldc, 0, n);
}

// C = beta * C + bias in every row (beta = 0 never reads C): the bias for the paths whose kernels
// do not add it, which then add the product to C with beta = 1.
void start_from_bias(int64_t m, int64_t n, float beta, const float* bias, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float old = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      c[i * ldc + j] = bias != nullptr ? old + bias[j] : old;
    }
}

template <class T>
void product(int64_t m, float alpha, const T* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b, float beta,
             float* c, int64_t ldc, const RoundedOutput& rounded, const float* bias) {
  const int64_t n = b.cols();
  if (m <= 0 || n <= 0) return;
  if (b.rows() == 0 || alpha == 0.0f) {  // no product: C = beta * C (+ bias), and beta = 0 clears it
    start_from_bias(m, n, beta, bias, c, ldc);
    rounded.columns(0, m, c, ldc, 0, n);
    return;
  }
#ifdef TG_HAVE_AVX512_BF16
  if (b.native() && sbgemm_kernel() != SbgemmKernel::Amx) {
    native_product(m, alpha, a, a_rs, a_cs, b, beta, c, ldc, rounded, bias, false);
    return;
  }
#endif
  if (bias != nullptr) {
    start_from_bias(m, n, beta, bias, c, ldc);
    beta = 1.0f;
  }
#ifdef TG_HAVE_AVX512_BF16
  if (b.native()) {
    native_product(m, alpha, a, a_rs, a_cs, b, beta, c, ldc, rounded, nullptr, true);
    return;
  }
#endif
  portable_product(m, alpha, a, a_rs, a_cs, b, beta, c, ldc, rounded);
}

}  // namespace

SbgemmKernel sbgemm_best_kernel() {
#ifdef TG_HAVE_AVX512_BF16
  static const SbgemmKernel best = [] {
    if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl"))
      return SbgemmKernel::Portable;
    return amx::available() ? SbgemmKernel::Amx : SbgemmKernel::Avx512Bf16;
  }();
  return best;
#else
  return SbgemmKernel::Portable;
#endif
}

SbgemmKernel sbgemm_kernel() {
  return std::min(sbgemm_best_kernel(), kernel_limit.load(std::memory_order_relaxed));
}

void sbgemm_limit_kernel(SbgemmKernel most) {
  kernel_limit.store(most);
}

const char* sbgemm_kernel_name(SbgemmKernel kernel) {
  switch (kernel) {
    case SbgemmKernel::Portable:
      return "portable";
    case SbgemmKernel::Avx512Bf16:
      return "avx512-bf16";
    case SbgemmKernel::Amx:
      return "amx";
  }
  return "?";
}

PackedBf16Matrix::PackedBf16Matrix(const float* b, int64_t rs, int64_t cs, int64_t k, int64_t n)
    : k_(k), n_(n), native_(sbgemm_kernel() != SbgemmKernel::Portable) {
  TG_CHECK(k >= 0 && n >= 0, "bf16 matmul: bad matrix size ", k, " x ", n);
  pack(b, rs, cs);
}

PackedBf16Matrix::PackedBf16Matrix(const BFloat16* b, int64_t rs, int64_t cs, int64_t k, int64_t n)
    : k_(k), n_(n), native_(sbgemm_kernel() != SbgemmKernel::Portable) {
  TG_CHECK(k >= 0 && n >= 0, "bf16 matmul: bad matrix size ", k, " x ", n);
  pack(b, rs, cs);
}

template <class T>
void PackedBf16Matrix::pack(const T* b, int64_t rs, int64_t cs) {
#ifdef TG_HAVE_AVX512_BF16
  if (native_) {
    const int64_t panels = (n_ + kNr - 1) / kNr;
    const int64_t stride = panel_pairs(k_), real = (k_ + 1) / 2;
    pairs_.reset(new uint16_t[static_cast<size_t>(panels * stride * 2 * kNr)]);
    // Panels [j0, j1): each thread packs its own columns. A large weight packed by one thread
    // while the other waited was a tenth of a small batch's autocast step.
    auto pack_range = [&](int64_t j0, int64_t j1) {
      if (j1 <= j0) return;
      for (int64_t j = j0; j < j1; ++j)  // the pairs that pad the depth to whole tiles: zeros
        std::fill_n(pairs_.get() + (j * stride + real) * 2 * kNr, (stride - real) * 2 * kNr, uint16_t{0});
      const int64_t cols = std::min(n_, j1 * kNr) - j0 * kNr;
      uint16_t* out = pairs_.get() + j0 * stride * 2 * kNr;
      if (rs == 1 && cs != 1) {
        pack_panels_by_columns(b + j0 * kNr * cs, cs, k_, cols, out);
        return;
      }
      pack_panels(b + j0 * kNr * cs, rs, cs, k_, cols, out);
    };
    const int threads = get_num_threads();
    if (threads <= 1 || k_ * n_ < kParallelPack || omp_in_parallel() || panels < 2) {
      pack_range(0, panels);
      return;
    }
    const int use = static_cast<int>(std::min<int64_t>(threads, panels));
#pragma omp parallel num_threads(use)
    {
      const int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
      pack_range(panels * part / parts, panels * (part + 1) / parts);
    }
    return;
  }
#endif
  floats_.resize(static_cast<size_t>(k_ * n_));
  for (int64_t p = 0; p < k_; ++p)
    for (int64_t j = 0; j < n_; ++j)
      floats_[static_cast<size_t>(p * n_ + j)] = as_float(round_bf16(b[p * rs + j * cs]));
}

// Note [shallow products split by rows]: the threads of a product take panels of C's columns, so
// that each reads only its own panels of a large B. A product with a shallow B (a weight gradient
// at a small batch: mlp_seed's dW = dY^T x, 512 x 64 times 64 x 1000, packs into 128 KiB) has
// nothing to gain from that, and the column split costs twice over: every row of C is written by
// both threads, so the optimiser that reads the gradient next, split by contiguous ranges, finds
// half of its range in the other core's cache; and the rows of A converted by one thread are read
// by both, with a barrier between. Splitting by rows (each thread converts and multiplies its own
// rows over every panel, as for a product computed transposed) took that product in mlp_seed's
// bf16 step from 206 to 142 us on 2 Zen 5 threads, and the whole step from 0.59 to 0.54 ms.
// With B packed by one thread, the other still read all of it from that core's cache, every call:
// packed once and reused, the same product took 92 us against 116 us packed per call. So where B
// is not packed yet (sbgemm_unpacked, every autocast product), each thread packs its own copy
// inside the shared region: twice the packing work, done side by side, and no panel crosses cores.
// Used where B's panels fit in kChunkBytes (every thread keeps all of B in its L2), or where B has
// too few panels to share, and A has rows enough for two of kMc.
bool sbgemm_splits_rows(int64_t m, int64_t k, int64_t n, int threads) {
#ifdef TG_HAVE_AVX512_BF16
  const int64_t panels = (n + kNr - 1) / kNr;
  const int64_t panel_bytes = panel_pairs(k) * 2 * kNr * static_cast<int64_t>(sizeof(uint16_t));
  return sbgemm_kernel() == SbgemmKernel::Avx512Bf16 && threads > 1 && m * n * k >= kParallelMacs && m >= 2 * kMc &&
         (panels < 2 * threads || panels * panel_bytes <= kChunkBytes);
#else
  (void)m, (void)k, (void)n, (void)threads;
  return false;
#endif
}

// Note [products computed transposed]: a small batch times a weight (linear's x W^T, 64 rows
// against 512 x 1000) packs B, the large operand, by columns: each of its values goes through a
// 16 x 16 register transpose, and the panels are written out only for a few row tiles to read
// them back. As C^T = W x^T the weight is A instead, whose rows convert to bf16 in one streaming
// pass with no transpose, and the batch (x^T, 64 columns) is the small matrix to pack; C^T's
// n x m sums are then transposed into C in registers, adding beta C and rounding as they go.
// For mlp_seed's first layer at batch 64 (x W^T + b, 64 x 1000 times 1000 x 512) this took
// linear's bf16 forward from 0.24 to 0.155 ms on 2 Zen 5 threads (f32: 0.20). Only where B is read
// by columns and A has a quarter of B's columns or fewer rows (otherwise C's transpose and A's pack
// outweigh what B's pack saves), and only on the AVX512-BF16 kernel (the portable path packs both
// ways alike; AMX is untried).
bool sbgemm_transposed_is_cheaper(int64_t n, int64_t k, int64_t m, int64_t b_rs, int64_t b_cs) {
  return sbgemm_kernel() == SbgemmKernel::Avx512Bf16 && b_rs == 1 && b_cs != 1 && m > 1 && k > 1 && 4 * n <= m &&
         k * m >= kParallelPack;
}

void store_transposed(const float* t, int64_t ldt, int64_t n, int64_t m, float beta, float* c, BFloat16* c16,
                      int64_t ldc) {
  TG_ASSERT((c == nullptr) != (c16 == nullptr));
#ifdef TG_HAVE_AVX512_BF16
  if (sbgemm_kernel() != SbgemmKernel::Portable) {
    store_transposed_native(t, ldt, n, m, beta, c, c16, ldc);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float x = t[j * ldt + i];
      if (c16 != nullptr) {
        if (beta != 0.0f) x += beta * static_cast<float>(c16[i * ldc + j]);
        c16[i * ldc + j] = BFloat16(x);
      } else {
        if (beta != 0.0f) x += beta * c[i * ldc + j];
        c[i * ldc + j] = x;
      }
    }
}

void RoundedOutput::columns(int64_t i0, int64_t i1, const float* c, int64_t ldc, int64_t j0, int64_t j1) const {
  if (out == nullptr || j1 <= j0) return;
  for (int64_t i = i0; i < i1; ++i)
    narrow_16bit(kBFloat16, c + i * ldc + j0, reinterpret_cast<char*>(out + i * ld + j0), 2, j1 - j0);
}

void sbgemm(int64_t m, float alpha, const float* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b, float beta,
            float* c, int64_t ldc, const RoundedOutput& rounded, const float* bias) {
  product(m, alpha, a, a_rs, a_cs, b, beta, c, ldc, rounded, bias);
}

void sbgemm(int64_t m, float alpha, const BFloat16* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b,
            float beta, float* c, int64_t ldc, const RoundedOutput& rounded, const float* bias) {
  product(m, alpha, a, a_rs, a_cs, b, beta, c, ldc, rounded, bias);
}

template <class TA, class TB>
void sbgemm_unpacked(int64_t m, int64_t k, int64_t n, float alpha, const TA* a, int64_t a_rs, int64_t a_cs, const TB* b,
                     int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc, const RoundedOutput& rounded,
                     const float* bias) {
  TG_CHECK(m >= 0 && k >= 0 && n >= 0, "bf16 matmul: bad product size ", m, " x ", k, " x ", n);
  const int threads = get_num_threads();
  if (omp_in_parallel() || !sbgemm_splits_rows(m, k, n, threads)) {
    sbgemm(m, alpha, a, a_rs, a_cs, PackedBf16Matrix(b, b_rs, b_cs, k, n), beta, c, ldc, rounded, bias);
    return;
  }
#ifdef TG_HAVE_AVX512_BF16
  // Row slices on tile boundaries, as native_product's; inside the region both the packing and
  // the product run serially on their thread.
  const int use = static_cast<int>(std::min<int64_t>(threads, m / kMc));
#pragma omp parallel num_threads(use)
  {
    const int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
    const int64_t i0 = m * part / parts / kMr * kMr, i1 = part + 1 == parts ? m : m * (part + 1) / parts / kMr * kMr;
    if (i1 > i0) {
      const PackedBf16Matrix own(b, b_rs, b_cs, k, n);
      const RoundedOutput rows{rounded.out == nullptr ? nullptr : rounded.out + i0 * rounded.ld, rounded.ld};
      sbgemm(i1 - i0, alpha, a + i0 * a_rs, a_rs, a_cs, own, beta, c + i0 * ldc, ldc, rows, bias);
    }
  }
#endif
}

template void sbgemm_unpacked(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*, int64_t,
                              int64_t, float, float*, int64_t, const RoundedOutput&, const float*);
template void sbgemm_unpacked(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const BFloat16*,
                              int64_t, int64_t, float, float*, int64_t, const RoundedOutput&, const float*);
template void sbgemm_unpacked(int64_t, int64_t, int64_t, float, const BFloat16*, int64_t, int64_t, const float*,
                              int64_t, int64_t, float, float*, int64_t, const RoundedOutput&, const float*);
template void sbgemm_unpacked(int64_t, int64_t, int64_t, float, const BFloat16*, int64_t, int64_t, const BFloat16*,
                              int64_t, int64_t, float, float*, int64_t, const RoundedOutput&, const float*);

}  // namespace tapegrad::cpu
