// Note [why our own sgemm]: OpenBLAS chooses its kernels by CPU model when it loads, and a release
// that predates a CPU falls back to an older family's: Debian's 0.3.21 runs its AVX2 (Haswell)
// sgemm on Zen 4 and Zen 5, whose AVX-512 units then do half the work they could (about 130 against
// 250 GFLOP/s per core on Zen 5). The choice is made before any of our code runs and has no API, so
// float products on such CPUs go through this kernel instead (runtime.cpp decides; double stays
// with OpenBLAS). It is the usual blocked design: a 12 x 32 register tile of C (24 accumulators), B
// packed in blocks of 512 columns (L2) cut into 32-column panels that stay in L1 while every row
// tile of A passes over them; a transposed B packs through 16 x 16 register transposes. B with
// contiguous rows and few rows of A (a few hundred, Note [B in place for a few hundred rows]) is
// read in place instead, since packing it would cost about as much as the product (an LSTM's
// recurrent step; a recurrence whose weights outgrow L2 lays them out once for all its steps
// instead, Note [B laid out once for many products]). A with contiguous rows is always read in
// place: the kernel broadcasts one value per row and depth, which costs the same from a row as from
// a packed tile, while packing is a scattered transpose. On the model shapes of bench_kernels (2
// threads) packed A was up to 12% slower, and a third slower for an LSTM's backward step ([64, 512]
// x [512, 128]). Only A with strided rows (a transposed operand) is packed, in blocks that stay in
// L2.
#include "cpu/gemm/sgemm_avx512.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#include "cpu/loops/parallel.h"
#include "cpu/loops/split_choice.h"
#include "tapegrad/core/error.h"
#include "tapegrad/runtime.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TG_HAVE_AVX512_SGEMM 1
#include <immintrin.h>
#endif

namespace tapegrad::cpu {

#ifdef TG_HAVE_AVX512_SGEMM

namespace {

#define TG_AVX512 __attribute__((target("avx512f")))

constexpr int kMr = 12;       // rows of a register tile
constexpr int kNr = 32;       // columns of a register tile: two 16-float vectors
constexpr int64_t kKc = 256;  // depth of a packed block: a B panel is 32 KiB, for L1
constexpr int64_t kNc = 512;  // columns of a packed B block: 512 KiB, for L2 (2048^3: +12%)
constexpr int64_t kMc = 144;  // rows of a packed A block (a multiple of kMr): 144 KiB, for L2
// Below this many multiply-adds a product stays on the calling thread: waking the other threads
// costs a few microseconds, as much as ~1M multiply-adds take.
constexpr int64_t kParallelMacs = int64_t{1} << 20;
// Note [measured team for mid-sized products]: from kParallelMacs up to this many multiply-adds
// (about 5 to 20 us on two Zen 5 cores, 10 to 40 on one) a product may still run faster on one
// thread, when its
// operands were just written by another core that does not share this one's last-level cache: a
// virtual machine's vCPUs are sometimes placed so (Note [measured choice between one thread and a
// team], cpu/loops/split_choice.h): lstm_small:1's training step took 0.296 ms on 2 threads against
// 0.263 on 1 there, and its 3.2M multiply-add weight gradient was one of the step's few parallel
// regions; with its products measured, 0.280-0.303 against 0.271-0.278 (on one L3: 0.215 against
// 0.260-0.270). Each thread splits C by rows or columns and every element keeps its chain, so one
// thread and a team give the same bits, and each kind of product (size class, layout, team) keeps
// the faster way, measured. Larger products are left to the team: their exploring costs more.
constexpr int64_t kMeasuredTeamMacs = int64_t{1} << 22;

// A 64-byte aligned scratch buffer per thread, grown on demand and kept: packing happens on every
// call, and allocating there would put malloc on the path of every LSTM step.
float* scratch(std::vector<float>& buffer, int64_t floats) {
  const size_t need = static_cast<size_t>(floats) + 16;
  if (buffer.size() < need) buffer.resize(need);
  auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<float*>((address + 63) & ~uintptr_t{63});
}

__mmask16 lanes(int64_t count) {
  if (count <= 0) return 0;
  return count >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

// n rounded up to whole panels of kNr columns.
int64_t panel_columns(int64_t n) {
  return (n + kNr - 1) / kNr * kNr;
}

// Rows [0, rows) by depth [0, kc) of A into tiles of kMr rows: for each depth p a tile holds its kMr
// values side by side (zeros past the last row), the order in which the kernel broadcasts them.
// Only A with strided rows comes here (contiguous rows are read in place).
TG_AVX512 void pack_a(const float* a, int64_t rs, int64_t cs, int64_t rows, int64_t kc, float* out) {
  for (int64_t t = 0; t < rows; t += kMr, out += kc * kMr) {
    const int64_t r = std::min<int64_t>(kMr, rows - t);
    if (r < kMr) std::memset(out, 0, sizeof(float) * static_cast<size_t>(kc * kMr));
    if (rs == 1) {  // columns contiguous (a transposed operand): each depth is one masked copy
      const __mmask16 mask = lanes(r);
      for (int64_t p = 0; p < kc; ++p)
        _mm512_mask_storeu_ps(out + p * kMr, mask, _mm512_maskz_loadu_ps(mask, a + t + p * cs));
    } else {
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t i = 0; i < r; ++i) out[p * kMr + i] = a[(t + i) * rs + p * cs];
    }
  }
}

// r[i] (16 floats each) becomes column i: r[i][j] = old r[j][i]. Three rounds of in-lane and
// cross-lane shuffles, 64 in all for 256 values. (GCC 12's headers start these intrinsics from a
// self-initialised "undefined" vector, which -Wmaybe-uninitialized reports once inlined.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
TG_AVX512 inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // pairs of rows interleaved
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane l: rows 4g..4g+3 at column 4l + c
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int c = 0; c < 4; ++c) {  // gather lane l of u[c], u[4 + c], u[8 + c], u[12 + c]: column 4l + c
    const __m512 even_lo = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88),
                 odd_lo = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 even_hi = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 odd_hi = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(even_lo, even_hi, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(even_lo, even_hi, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(odd_lo, odd_hi, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(odd_lo, odd_hi, 0xDD);
  }
}
#pragma GCC diagnostic pop

// dst[j * ldd + i] = src[i * lds + j] for a rows x cols src, through 16 x 16 register transposes.
TG_AVX512 void transpose_matrix(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst, int64_t ldd) {
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    const int64_t height = std::min<int64_t>(16, rows - i0);
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      const int64_t width = std::min<int64_t>(16, cols - j0);
      const __mmask16 mask = lanes(width);
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = i < height ? _mm512_maskz_loadu_ps(mask, src + (i0 + i) * lds + j0) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int64_t j = 0; j < width; ++j) _mm512_mask_storeu_ps(dst + (j0 + j) * ldd + i0, lanes(height), r[j]);
    }
  }
}

// Depth [0, kc) by columns [0, cols) of B into panels of kNr columns (zeros past the last column).
TG_AVX512 void pack_b(const float* b, int64_t rs, int64_t cs, int64_t kc, int64_t cols, float* out) {
  for (int64_t j = 0; j < cols; j += kNr, out += kc * kNr) {
    const int64_t w = std::min<int64_t>(kNr, cols - j);
    if (w < kNr) std::memset(out, 0, sizeof(float) * static_cast<size_t>(kc * kNr));
    if (rs == 1 && cs != 1) {  // columns contiguous (a transposed operand): the panel is their transpose
      transpose_matrix(b + j * cs, w, kc, cs, out, kNr);
    } else if (cs == 1) {
      for (int64_t p = 0; p < kc; ++p)
        std::memcpy(out + p * kNr, b + p * rs + j, sizeof(float) * static_cast<size_t>(w));
    } else {  // columns strided too: element by element
      for (int64_t jj = 0; jj < w; ++jj) {
        const float* column = b + (j + jj) * cs;
        for (int64_t p = 0; p < kc; ++p) out[p * kNr + jj] = column[p * rs];
      }
    }
  }
}

// C[R x w] = alpha * (A tile)(B panel) + beta * C (+ bias) for one register tile. a: the tile's
// first value, either packed (kPackedA: kMr values per depth) or read in place from rows lda apart;
// b: the panel's first row, rows ldb apart; m0, m1: the columns of each half that exist (masked loads
// never touch memory past the matrix edge); bias: null, or the tile's columns of a row added to each
// row (in place of beta * C, which the caller then passes as 0).
template <int R, bool kPackedA>
TG_AVX512 void tile_kernel(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b, int64_t ldb,
                           float* __restrict c, int64_t ldc, __mmask16 m0, __mmask16 m1, float alpha, float beta,
                           const float* __restrict bias) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  // In place, rows are reached from four group pointers and one stride (three rows each), which
  // keeps the addressing in registers: [group + stride * {0, 1, 2}].
  const float* groups[4] = {a, a + 3 * lda, a + 6 * lda, a + 9 * lda};
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + p * ldb);
    const __m512 b1 = _mm512_maskz_loadu_ps(m1, b + p * ldb + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const float value = kPackedA ? a[p * kMr + r] : groups[r / 3][p + (r % 3) * lda];
      const __m512 av = _mm512_set1_ps(value);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
  if (bias != nullptr) {
    bias0 = _mm512_maskz_loadu_ps(m0, bias);
    bias1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    __m512 x0 = _mm512_mul_ps(va, acc0[r]), x1 = _mm512_mul_ps(va, acc1[r]);
    if (beta != 0.0f) {  // beta = 0 must not read C: it may hold anything, NaN included
      x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, row), x0);
      x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, row + 16), x1);
    } else if (bias != nullptr) {  // the same rounding as 1 * bias, copied into C, added as beta * C
      x0 = _mm512_add_ps(bias0, x0);
      x1 = _mm512_add_ps(bias1, x1);
    }
    _mm512_mask_storeu_ps(row, m0, x0);
    _mm512_mask_storeu_ps(row + 16, m1, x1);
  }
}

// Note [tall tiles for the last rows]: a block whose rows end 1-4 past a multiple of kMr (a thread's
// 16-row slice of char_lstm's batch 32, a batch of 64) would end on a thin tile of 1-4 rows, whose
// 2-8 accumulators leave the multiply-add units waiting and which streams the B panel once more
// for little work. Its last 13-16 rows instead go through this tile, 16 columns wide: one B vector
// and R broadcasts per depth. 16 rows x 1024 columns by depth 256-512, one Zen 5 core: 12 + 4 rows
// 177-179 GFLOP/s, 16 x 16 tiles 188-198. Each element's sum runs over the depth in the same order,
// with the same last steps (alpha, beta C, bias), so the bits equal tile_kernel's. Rows of A that lie
// a multiple of 2 KiB apart would share one or two of L1's 64 sets, 8-16 lines in 12 ways (the
// gate gradients of a 256-unit LSTM are rows of 4 KiB: its backward products took 45 -> 57 ms of
// char_lstm's step read in place), so those rows are first packed side by side (kPackedA: 16 values
// per depth); others are read in place.
constexpr int64_t kTallRows = 16;
template <int R, bool kPackedA>
TG_AVX512 void tall_tile_kernel(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b,
                                int64_t ldb, float* __restrict c, int64_t ldc, __mmask16 m0, float alpha, float beta,
                                const float* __restrict bias) {
  static_assert(R > kMr && R <= kTallRows, "a tall tile holds 13 to 16 rows");
  __m512 acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const float* groups[4] = {a, a + 4 * lda, a + 8 * lda, a + 12 * lda};  // four rows each
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + p * ldb);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float value = kPackedA ? a[p * kTallRows + r] : groups[r / 4][p + (r % 4) * lda];
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(value), b0, acc[r]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __m512 bias0 = bias != nullptr ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    __m512 x0 = _mm512_mul_ps(va, acc[r]);
    if (beta != 0.0f) {
      x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, row), x0);
    } else if (bias != nullptr) {
      x0 = _mm512_add_ps(bias0, x0);
    }
    _mm512_mask_storeu_ps(row, m0, x0);
  }
}

using TallTileKernel = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t, __mmask16,
                                float, float, const float*);
template <bool kPackedA>
constexpr TallTileKernel kTallTileKernels[4] = {tall_tile_kernel<13, kPackedA>, tall_tile_kernel<14, kPackedA>,
                                                tall_tile_kernel<15, kPackedA>, tall_tile_kernel<16, kPackedA>};

// Into how many of L1's 64 sets (of 64-byte lines) the rows of A fall, `a_rs` floats apart (64 sets
// on Zen 4 and 5 and on Intel's cores: 32 or 48 KiB, 8 or 12 ways): 1 for rows a multiple of 4 KiB
// apart, 2 for 2 KiB.
int l1_sets_of_rows(int64_t a_rs) {
  const int64_t bytes = a_rs * static_cast<int64_t>(sizeof(float));
  if (bytes % 64 != 0) return 64;  // rows start at different offsets in their lines: spread
  const int64_t lines = (bytes / 64) % 64;
  return lines == 0 ? 1 : static_cast<int>(64 / std::gcd<int64_t>(lines, 64));
}

// Note [B in place for a few hundred rows]: B with contiguous rows is read in place by up to kMc rows
// of C (one row block), and packed beyond, where its panels are read again by every row block. The
// pack is a pass of its own, bound by memory when B is large (a weight gradient's G, T x B rows),
// that nothing overlaps with the multiply-adds; read in place, the first row block's loads stream B
// in while the FMAs run, and the blocks after it find the rows in L2. That holds while the
// block's rows stay in L2, kKc of them one B row apart: they fall into L2's sets (way bytes / 64 of
// them) every way-bytes / row-stride rows, so rows 4 KiB apart in a 2 MiB, 16-way L2 put 8 lines
// (of a panel's 256 rows) into each set they touch, half its ways; 8 KiB apart, 16, and the
// panels evict one another. Measured on a 2-vCPU Xeon (2 MiB 16-way L2), 2 threads, the two ways
// alternated in one process, median us: char_lstm's dW_hh as C^T, 256 rows by 512 columns of its
// [4064, 1024] G a thread, 8737 -> 8277 (-5 to -7% over four runs); lstm_small:256's weight
// gradients (512 rows a thread, rows 512 B apart) -5 to -7%; 256 x 512 x 784 -7%, 432 and 576 rows
// -2%; 1024 and 1536 rows even; but rows 8 KiB apart +17-19% from 288 rows on and 16 KiB +62%.
// So in place up to kMaxRowsForBInPlace rows where a depth block's rows fill at most half of each
// L2 set they touch. The same loads feed the same kernel either way: the bits do not change.
constexpr int64_t kMaxRowsForBInPlace = 4 * kMc;

// The bytes of one way of this CPU's L2 (its size over its ways), or 64 KiB (1 MiB, 16 ways: Zen 4
// and 5) where the C library does not say.
int64_t l2_way_bytes() {
  static const int64_t bytes = [] {
    const long size = sysconf(_SC_LEVEL2_CACHE_SIZE), ways = sysconf(_SC_LEVEL2_CACHE_ASSOC);
    return size > 0 && ways > 0 ? static_cast<int64_t>(size / ways) : int64_t{64} << 10;
  }();
  return bytes;
}

// Whether a thread's block of `rows` rows of C reads B (rows b_rs floats apart, columns contiguous)
// in place rather than packing it (Note [B in place for a few hundred rows]).
bool b_read_in_place(int64_t rows, int64_t b_rs) {
  if (rows <= kMc) return true;
  // A depth block's kKc rows fall 8 to a set or fewer: kKc * |b_rs| * 4 bytes <= 8 way-bytes (written so
  // that no stride overflows it; a negative one walks the rows backwards over as many sets).
  const uint64_t stride = b_rs < 0 ? 0 - static_cast<uint64_t>(b_rs) : static_cast<uint64_t>(b_rs);
  const uint64_t max_stride = 8 * static_cast<uint64_t>(l2_way_bytes()) / (kKc * sizeof(float));
  return rows <= kMaxRowsForBInPlace && stride <= max_stride;
}

using TileKernel = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t, __mmask16,
                            __mmask16, float, float, const float*);
template <bool kPackedA>
constexpr TileKernel kTileKernels[kMr + 1] = {
    nullptr,
    tile_kernel<1, kPackedA>,
    tile_kernel<2, kPackedA>,
    tile_kernel<3, kPackedA>,
    tile_kernel<4, kPackedA>,
    tile_kernel<5, kPackedA>,
    tile_kernel<6, kPackedA>,
    tile_kernel<7, kPackedA>,
    tile_kernel<8, kPackedA>,
    tile_kernel<9, kPackedA>,
    tile_kernel<10, kPackedA>,
    tile_kernel<11, kPackedA>,
    tile_kernel<12, kPackedA>,
};

struct Operands {
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t a_rs, a_cs;
  const float* b;
  int64_t b_rs, b_cs;
  float beta;
  float* c;
  int64_t ldc;
  const float* bias;  // null, or n values added to every row of C (beta is then 0)
  // Null, or B laid out once as the kernel's panels (Note [B laid out once for many products]); b,
  // b_rs and b_cs are then unused.
  const float* b_panels = nullptr;
};

// Columns [j0, j1) and rows [i0, i1) of C, on the calling thread, at most kNc columns at a time.
void gemm_block(const Operands& o, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

void gemm_columns(const Operands& o, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t jc = j0; jc < j1; jc += kNc) gemm_block(o, i0, i1, jc, std::min(j1, jc + kNc));
}

// Columns [j0, j1) (at most kNc) and rows [i0, i1) of C, on the calling thread.
void gemm_block(const Operands& o, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  thread_local std::vector<float> a_buffer, b_buffer, tall_buffer;
  const int64_t rows = i1 - i0, cols = j1 - j0;
  if (rows <= 0 || cols <= 0) return;
  const bool b_laid_out = o.b_panels != nullptr;
  const bool b_in_place = !b_laid_out && o.b_cs == 1 && b_read_in_place(rows, o.b_rs);
  // Contiguous rows of A are read in place. (Packing rows that share L1 sets, as the tall tiles do, made
  // lstm_large's 12-row tiles over its 8 KiB rows of gate gradients slower: 146 -> 152 ms a step.)
  const bool a_in_place = o.a_cs == 1;
  float* a_pack = a_in_place ? nullptr : scratch(a_buffer, kMc * kKc);
  float* b_pack = b_in_place || b_laid_out ? nullptr : scratch(b_buffer, kKc * ((cols + kNr - 1) / kNr) * kNr);
  for (int64_t p0 = 0; p0 < o.k; p0 += kKc) {
    const int64_t kc = std::min(kKc, o.k - p0);
    const float beta = p0 == 0 ? o.beta : 1.0f;  // later depth blocks add to what the first wrote
    const float* bias = p0 == 0 && o.bias != nullptr ? o.bias + j0 : nullptr;
    const float* b_block = b_laid_out ? nullptr : o.b + p0 * o.b_rs + j0 * o.b_cs;
    if (!b_in_place && !b_laid_out) pack_b(b_block, o.b_rs, o.b_cs, kc, cols, b_pack);
    // This depth block's panels from column j0 on (j0 falls on a panel's edge): laid out before, in
    // the layout pack_b makes here, or packed just now.
    const float* panels = b_laid_out ? o.b_panels + p0 * panel_columns(o.n) + j0 * kc : b_pack;
    for (int64_t ib = i0; ib < i1; ib += kMc) {
      const int64_t mc = std::min(kMc, i1 - ib);
      const float* a_block = o.a + ib * o.a_rs + p0 * o.a_cs;
      // Note [tall tiles for the last rows]: the block's last 13-16 rows, packed where they alias.
      const int64_t tall_rows =
          a_in_place && mc > kMr && mc % kMr != 0 && mc % kMr <= kTallRows - kMr ? kMr + mc % kMr : 0;
      const bool tall_packed = tall_rows > 0 && l1_sets_of_rows(o.a_rs) <= 2;
      if (!a_in_place) pack_a(a_block, o.a_rs, o.a_cs, mc, kc, a_pack);
      const float* tall_a = tall_rows > 0 ? a_block + (mc - tall_rows) * o.a_rs : nullptr;
      if (tall_packed) {
        float* pack = scratch(tall_buffer, kKc * kTallRows);
        transpose_matrix(tall_a, tall_rows, kc, o.a_rs, pack, kTallRows);
        tall_a = pack;
      }
      for (int64_t j = 0; j < cols; j += kNr) {
        const __mmask16 m0 = lanes(cols - j), m1 = lanes(cols - j - 16);
        const float* panel = b_in_place ? b_block + j : panels + (j / kNr) * kc * kNr;
        const int64_t ldb = b_in_place ? o.b_rs : kNr;
        float* c_tile = o.c + ib * o.ldc + j0 + j;
        const float* tile_bias = bias != nullptr ? bias + j : nullptr;
        for (int64_t i = 0; i < mc; i += kMr, c_tile += kMr * o.ldc) {
          const int r = static_cast<int>(std::min<int64_t>(kMr, mc - i));
          if (tall_rows > 0 && mc - i == tall_rows) {  // Note [tall tiles for the last rows]
            const TallTileKernel tall = tall_packed ? kTallTileKernels<true>[tall_rows - kMr - 1]
                                                    : kTallTileKernels<false>[tall_rows - kMr - 1];
            tall(kc, tall_a, o.a_rs, panel, ldb, c_tile, o.ldc, m0, o.alpha, beta, tile_bias);
            if (m1 != 0)
              tall(kc, tall_a, o.a_rs, panel + 16, ldb, c_tile + 16, o.ldc, m1, o.alpha, beta,
                   tile_bias != nullptr ? tile_bias + 16 : nullptr);
            break;
          }
          if (a_in_place) {
            kTileKernels<false>[r](kc, a_block + i * o.a_rs, o.a_rs, panel, ldb, c_tile, o.ldc, m0, m1, o.alpha, beta,
                                   tile_bias);
          } else {
            kTileKernels<true>[r](kc, a_pack + (i / kMr) * kc * kMr, kMr, panel, ldb, c_tile, o.ldc, m0, m1, o.alpha,
                                  beta, tile_bias);
          }
        }
      }
    }
  }
}

// Note [weight gradients as transposed products]: a weight gradient G^T X (G [k, m] the output
// gradients, X [k, n] the inputs, k = batch x steps) has a column-major A, which this kernel packs:
// m x k values in 12-row tiles. When m is several times n (an LSTM's 4H gates against its H or I
// inputs) C^T = X^T G is cheaper: only n x k values to pack, G read in place as B, and C (m x n,
// small) transposed out through registers. lstm_row's dW_hh: 563 -> 488 us, dW_ih: 206 -> 130 us.
// Measured, not derived: from k of about 6000 on (lstm_large, lstm_small at batch 256) reading G in
// place over so many rows made whole steps 3-15% slower, so longer products keep the packed path.
// C^T takes an extra pass, written and read back, which pays only while C stays in a core's L2:
// from 2048 x 256 on (lstm_large's checkpointed runs, k = 1536-1600) the packed path was 2-15%
// faster on Zen 5, 1024 x 256 was even, and smaller products kept the gain above.
constexpr int64_t kTransposedProductMaxOutput = 1024 * 256;

bool transposed_product_is_cheaper(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_cs) {
  return a_rs == 1 && a_cs != 1 && b_cs == 1 && m >= 2 * n && k >= 256 && k <= 4096 &&
         m * n <= kTransposedProductMaxOutput;
}

// Note [linear's forward as a transposed product]: the mirror case. Linear's forward X W^T (W [n, k]
// row-major: a B whose columns are contiguous) packs all of W through 16 x 16 transposes on every
// call, n x k values: 2 MB at mlp_seed's first layer, for a batch of 64 rows. C^T = W X^T reads W in
// place as A and packs X^T (m x k) instead. Its team shares C^T by rows, so each thread reads only
// its own rows of W, the ones the optimiser's step (which shares the parameters out in the same
// halves) has just written from that core: shared by columns, each thread read all of W, and the
// next Adam step, writing lines the other core now held, took 207 us where it took 55
// (mlp_seed:64, tapegrad's profiler, the two builds a minute apart). 2 Zen 5 threads, the passes
// over C^T included, direct -> C^T, us: 32 x 1000 x 512 80 -> 66, 64 x 1000 x 512 145 -> 135,
// 64 x 784 x 512 113 -> 106, 64 x 1000 x 2048 587 -> 522, 32 x 4096 x 1024 669 -> 538. Measured, not
// derived: m of 16 or 48 (C^T's columns, 32 to a tile, then half empty) was 20-27% slower, 96 and
// 128 even, and a depth of 256 8% slower.
constexpr int64_t kMaxRowsForMirroredProduct = 2 * kNr;

bool mirrored_product_is_cheaper(int64_t m, int64_t n, int64_t k, int64_t a_cs, int64_t b_rs, int64_t b_cs) {
  return a_cs == 1 && b_rs == 1 && b_cs != 1 && m % kNr == 0 && m <= kMaxRowsForMirroredProduct && n >= 2 * m &&
         k >= 512 && k <= 4096 && m * n <= kTransposedProductMaxOutput;
}

// How a team shares a product's C: as the caller's shape suggests, or by rows of C (each thread
// reads its own rows of A and all of B).
enum class Split { kAuto, kRows };

void product(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
             int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc, const float* bias, Split split);
void run_product(const Operands& o, Split split);

// C = alpha A B + beta C (or + bias, beta then 0) through C^T = alpha B^T A^T + beta C^T in a buffer:
// every element keeps its chain over the depth and its last steps (beta C or the bias, now in C^T
// with beta = 1: the same single rounding), so the bits equal the direct product's.
void transposed_product(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                        const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc,
                        const float* bias, Split split) {
  thread_local std::vector<float> buffer;
  float* ct = scratch(buffer, n * m);  // C^T, [n, m]
  if (bias != nullptr) {
    for (int64_t j = 0; j < n; ++j) std::fill_n(ct + j * m, m, bias[j]);
    beta = 1.0f;
  } else if (beta != 0.0f) {
    transpose_matrix(c, m, n, ldc, ct, m);
  }
  // B^T: element (j, p) at b[j * b_cs + p * b_rs]; A^T: element (p, i) at a[i * a_rs + p * a_cs].
  product(n, m, k, alpha, b, b_cs, b_rs, a, a_cs, a_rs, beta, ct, m, nullptr, split);
  transpose_matrix(ct, n, m, m, c, ldc);
}

// One kind of product for the measured team: its size class (each of m, n and k rounded down to a
// power of two, so that products whose sizes vary from call to call, such as those of text chunks
// of different lengths, share what they learn), which operands are transposed or strided, whether C
// is read, and the team size. Its calls are compared by time per multiply-add.
struct ProductKind {
  int m_class, n_class, k_class;
  int layout, team;
  bool operator<(const ProductKind& o) const {
    return std::tie(m_class, n_class, k_class, layout, team) <
           std::tie(o.m_class, o.n_class, o.k_class, o.layout, o.team);
  }
};
int size_class(int64_t size) {
  return 63 - __builtin_clzll(static_cast<unsigned long long>(size));
}
int layout_bits(int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs, float beta) {
  return (a_rs == 1) | (a_cs == 1) << 1 | (b_rs == 1) << 2 | (b_cs == 1) << 3 | (beta != 0.0f) << 4;
}

// [begin, end) cut into `parts` near-equal ranges whose inner edges fall on multiples of `align`.
int64_t split_point(int64_t begin, int64_t end, int part, int parts, int64_t align) {
  if (part >= parts) return end;
  const int64_t units = (end - begin + align - 1) / align;
  return std::min(end, begin + (units * part / parts) * align);
}

// Note [products of depth 1]: a product of depth 1 is C = alpha a b^T (+ beta C, or + the bias): a
// weight gradient at batch 1, or an LSTM weight gradient's step from h0. Through the tiles every
// 12 x 32 tile of C paid for its packing and its epilogue with one multiply-add an element. Here each
// row of C is one pass over b with the tile's own operations per element: the chain's one
// multiply-add from +0 (so a product of -0 becomes +0, as there), alpha times it, then beta C added
// by one multiply-add or the bias by one addition. So the bits are the tiles'. lstm_small:1's dW_hh
// from h0 (512 x 128) took 10.4-13.0 us of its training step and takes 8.4-8.8, most of it now the
// writes to C's fresh memory; the step is 0.8% faster (in one process, twice).
TG_AVX512 void outer_product_rows(int64_t i0, int64_t i1, int64_t n, float alpha, const float* a, int64_t a_rs,
                                  const float* b, float beta, float* c, int64_t ldc, const float* bias) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta), zero = _mm512_setzero_ps();
  for (int64_t i = i0; i < i1; ++i) {
    const __m512 ai = _mm512_set1_ps(a[i * a_rs]);
    float* row = c + i * ldc;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = lanes(n - j);
      __m512 x = _mm512_mul_ps(va, _mm512_fmadd_ps(ai, _mm512_maskz_loadu_ps(m, b + j), zero));
      if (beta != 0.0f) {
        x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, row + j), x);
      } else if (bias != nullptr) {
        x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, bias + j), x);
      }
      _mm512_mask_storeu_ps(row + j, m, x);
    }
  }
}

void outer_product(int64_t m, int64_t n, float alpha, const float* a, int64_t a_rs, const float* b, int64_t b_cs,
                   float beta, float* c, int64_t ldc, const float* bias) {
  thread_local std::vector<float> b_row;
  if (b_cs != 1) {
    b_row.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) b_row[static_cast<size_t>(j)] = b[j * b_cs];
    b = b_row.data();
  }
  // A memory-bound pass over C: a thread's share must be worth waking it (kGrainSize elements).
  const int64_t grain = std::max<int64_t>(1, kGrainSize / n);
  parallel_for(0, m, grain,
               [&](int64_t i0, int64_t i1) { outer_product_rows(i0, i1, n, alpha, a, a_rs, b, beta, c, ldc, bias); });
}

void product(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
             int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc, const float* bias, Split split) {
  if (m <= 0 || n <= 0) return;
  TG_ASSERT(bias == nullptr || beta == 0.0f);
  if (k <= 0 || alpha == 0.0f) {  // no product: C = beta * C (or the bias), and beta = 0 clears it
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = bias != nullptr ? bias[j] : beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  if (k == 1) {  // Note [products of depth 1]
    outer_product(m, n, alpha, a, a_rs, b, b_cs, beta, c, ldc, bias);
    return;
  }
  if (transposed_product_is_cheaper(m, n, k, a_rs, a_cs, b_cs)) {
    transposed_product(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc, bias, Split::kAuto);
    return;
  }
  if (mirrored_product_is_cheaper(m, n, k, a_cs, b_rs, b_cs)) {  // W's rows shared out as Adam shares them
    transposed_product(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc, bias, Split::kRows);
    return;
  }
  run_product(Operands{m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc, bias}, split);
}

// Runs the product `o` on the calling thread or on a team that shares C by columns or rows.
void run_product(const Operands& o, Split split) {
  const int64_t m = o.m, n = o.n, k = o.k;
  const int threads = get_num_threads();
  const int64_t macs = m * n * k;
  if (threads <= 1 || macs < kParallelMacs || omp_in_parallel()) {
    gemm_columns(o, 0, m, 0, n);
    return;
  }
  // Each thread takes a slab of C, by columns or by rows. By columns every thread reads all of A,
  // by rows all of B; reading in place costs little, packing a strided operand twice does. So
  // columns, unless A must be packed and is the larger operand (a weight gradient such as
  // dgates^T h, m = 4H against n = H), or there are too few columns to share.
  const bool enough_columns = n >= static_cast<int64_t>(threads) * kNr;
  const bool enough_rows = m >= static_cast<int64_t>(threads) * kMr;
  const bool by_columns =
      split == Split::kAuto ? enough_columns && (o.a_cs == 1 || m <= n || !enough_rows) : !enough_rows;
  const int64_t units = by_columns ? (n + kNr - 1) / kNr : (m + kMr - 1) / kMr;
  const int use = static_cast<int>(std::min<int64_t>(threads, units));
  const auto run = [&](int team) {
    if (team <= 1) {
      gemm_columns(o, 0, m, 0, n);
      return;
    }
#pragma omp parallel num_threads(team)
    {
      const int part = omp_get_thread_num(), parts = omp_get_num_threads();
      if (by_columns) {
        gemm_columns(o, 0, m, split_point(0, n, part, parts, kNr), split_point(0, n, part + 1, parts, kNr));
      } else {
        gemm_columns(o, split_point(0, m, part, parts, kMr), split_point(0, m, part + 1, parts, kMr), 0, n);
      }
    }
  };
  if (macs >= kMeasuredTeamMacs) {
    run(use);
    return;
  }
  // Note [measured team for mid-sized products]: per calling thread, so no lock.
  thread_local std::map<ProductKind, SplitChoice> choices;
  const int layout = layout_bits(o.a_rs, o.a_cs, o.b_rs, o.b_cs, o.beta) | (o.b_panels != nullptr) << 5;
  SplitChoice& choice = choices[ProductKind{size_class(m), size_class(n), size_class(k), layout, use}];
  const int team = choice.choose(use);
  const auto start = std::chrono::steady_clock::now();
  run(team);
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  choice.record(team, use, ns / static_cast<double>(macs));
}

}  // namespace

bool sgemm_avx512_available() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

bool sgemm_avx512_via_c_transposed(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs,
                                   int64_t b_cs) {
  return transposed_product_is_cheaper(m, n, k, a_rs, a_cs, b_cs) ||
         mirrored_product_is_cheaper(m, n, k, a_cs, b_rs, b_cs);
}

bool sgemm_avx512_reads_b_in_place(int64_t rows, int64_t b_rs, int64_t b_cs) {
  return b_cs == 1 && b_read_in_place(rows, b_rs);
}

void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                  const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc, const float* bias) {
  product(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc, bias, Split::kAuto);
}

// Note [B laid out once for many products]: a recurrence multiplies the same weights at every step,
// a few rows at a time, and reads them in place (Note [why our own sgemm]): 32-column panels whose
// rows lie one weight row apart, 8 KiB for lstm_large's [768, 2048]. Each such row is a new page
// for the prefetchers, and all of a panel's rows share a few L1 sets. On a 2-vCPU Xeon (AMX, 2 MiB
// of L2 per core) the two threads of a batch-sliced step then went no faster than one: 32 x 768 x
// 2048 on each thread took 1386 us against 649 alone (145 GFLOP/s in all). The same weights laid
// out once as the panels pack_b makes, each panel's rows contiguous, took 768 us on each of two
// threads (262 GFLOP/s), 16 x 1024 x 2048 755 us against 1122. The kernel is the same, so are the
// bits. Laying out costs a pass over the weights, once for every step of a sequence.
int64_t sgemm_b_panels_floats(int64_t k, int64_t n) {
  return k * panel_columns(n);
}

void sgemm_lay_out_b_panels(int64_t k, int64_t n, const float* b, int64_t b_rs, int64_t b_cs, float* panels) {
  for (int64_t p0 = 0; p0 < k; p0 += kKc)
    pack_b(b + p0 * b_rs, b_rs, b_cs, std::min(kKc, k - p0), n, panels + p0 * panel_columns(n));
}

void sgemm_avx512_b_panels(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                           const float* panels, float beta, float* c, int64_t ldc, const float* bias) {
  if (m <= 0 || n <= 0) return;
  TG_ASSERT(bias == nullptr || beta == 0.0f);
  if (k <= 0 || alpha == 0.0f) {  // no product: B is not read
    product(m, n, k, alpha, a, a_rs, a_cs, nullptr, kNr, 1, beta, c, ldc, bias, Split::kAuto);
    return;
  }
  Operands o{m, n, k, alpha, a, a_rs, a_cs, nullptr, kNr, 1, beta, c, ldc, bias};
  o.b_panels = panels;
  run_product(o, Split::kAuto);
}

#else  // no x86-64 AVX-512 kernel in this build

bool sgemm_avx512_available() {
  return false;
}

bool sgemm_avx512_via_c_transposed(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) {
  return false;
}

bool sgemm_avx512_reads_b_in_place(int64_t, int64_t, int64_t) {
  return false;
}

void sgemm_avx512(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                  float, float*, int64_t, const float*) {}

int64_t sgemm_b_panels_floats(int64_t k, int64_t n) {
  return k * ((n + 31) / 32 * 32);
}

void sgemm_lay_out_b_panels(int64_t, int64_t, const float*, int64_t, int64_t, float*) {}

void sgemm_avx512_b_panels(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*, float,
                           float*, int64_t, const float*) {}

#endif

}  // namespace tapegrad::cpu
