// Note [AMX products]: on CPUs with Advanced Matrix Extensions (Sapphire Rapids and later Xeons)
// one tdpbf16ps multiplies a 16 x 32 bf16 tile of A by a 32 x 16 tile of B into a 16 x 16 f32 tile
// of C: 8,192 multiply-adds per instruction, against 32 for an AVX512-BF16 vdpbf16ps. The tile
// registers hold 16 rows of 64 bytes, which is exactly one row block of A (16 rows x 16 depth pairs)
// and, for B, 16 depth pairs of 16 columns with each column's pair side by side: the layout of
// PackedBf16Matrix's panels, which are 32 columns (two B tiles) wide. So B needs no other packing,
// A is the bf16 row buffer that the AVX512-BF16 path already makes, and the whole depth
// accumulates inside the tiles, with no depth blocking.
//
// Eight tile registers: a 32 x 32 block of C (2 x 2 tiles, 2 of A, 2 of B) when 32 rows remain, and
// a 16 x 64 block (1 x 4 tiles, 1 of A, B reloaded) for the last 16 rows and for the small-batch
// products of an LSTM step (16 rows per thread at batch 32), so that each A tile is loaded once per
// four products. C tiles that lie wholly inside C are loaded from and stored to C directly when
// alpha = 1 (beta 0 or 1, the LSTM's two cases); the others pass through a 16 x 16 scratch tile.
//
// Linux gives a process the 8 KiB of tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM);
// without the grant the first tile instruction would fault, so available() asks once and says no
// if refused. Each call configures the tiles and releases them at the end: a thread that holds
// tile state makes every context switch save it.
#include "cpu/gemm/sbgemm_amx.h"

#include <algorithm>
#include <cstring>

#include "cpu/half/bf16_round.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define TG_HAVE_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tapegrad::cpu::amx {

#ifdef TG_HAVE_AMX

namespace {

#define TG_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an extended state component
constexpr long kXfeatureXtiledata = 18;     // the tile data state

bool cpu_has_amx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tile = (edx >> 24) & 1u, bf16 = (edx >> 22) & 1u;
  if (!tile || !bf16) return false;
  // The OS must enable the tile configuration and data states in XCR0 (bits 17 and 18).
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1u)) return false;  // OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if (((xcr0_lo >> 17) & 3u) != 3u) return false;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// ldtilecfg's 64-byte operand (palette 1): every tile used here is 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

TG_AMX void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

constexpr int64_t kPanelColumns = 32;
constexpr int64_t kPanelRowBytes = kPanelColumns * 2 * 2;  // 32 columns x a pair of bf16
constexpr int64_t kTileBytes = 64;

// Where a C tile's sums go: straight to C, or through `scratch` and then alpha/beta per element;
// with a bf16 output (the last depth block of a rounded product), rounded into it instead of C.
struct TileTarget {
  float* c;
  int64_t rows, cols;  // the part inside C (up to 16 x 16)
  bool direct;
  uint16_t* c16;  // null: the sums stay float32 in C
  int64_t ld16;
};

TileTarget target(float* c, int64_t ldc, int64_t m, int64_t n, int64_t i, int64_t j, float alpha, float beta,
                  const Bf16Output& out) {
  const int64_t rows = std::min<int64_t>(16, m - i), cols = std::min<int64_t>(16, n - j);
  const bool direct = out.c == nullptr && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && rows == 16 && cols == 16;
  return {c + i * ldc + j, rows, cols, direct, out.c != nullptr ? out.c + i * out.ld + j : nullptr, out.ld};
}

// C tile = alpha * scratch + beta * C over its part inside C (beta = 0 never reads C), written to
// C, or rounded into the bf16 output.
TG_AMX void finish_tile(const TileTarget& t, const float* scratch, int64_t ldc, float alpha, float beta) {
  if (t.cols <= 0 || t.rows <= 0) return;
  const __mmask16 mask = static_cast<__mmask16>(t.cols >= 16 ? 0xFFFF : (1u << t.cols) - 1u);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int64_t r = 0; r < t.rows; ++r) {
    __m512 x = _mm512_mul_ps(va, _mm512_loadu_ps(scratch + r * 16));
    if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, t.c + r * ldc), x);
    if (t.c16 != nullptr) {
      _mm256_mask_storeu_epi16(t.c16 + r * t.ld16, mask, round_to_bf16(x));
    } else {
      _mm512_mask_storeu_ps(t.c + r * ldc, mask, x);
    }
  }
}

// The tile-register numbers of the intrinsics are immediates, hence one macro per register.
#define TG_TILE_START(reg, t)                                          \
  if ((t).direct && beta == 1.0f) {                                    \
    _tile_loadd(reg, (t).c, ldc* static_cast<int64_t>(sizeof(float))); \
  } else {                                                             \
    _tile_zero(reg);                                                   \
  }
#define TG_TILE_FINISH(reg, t)                                            \
  if ((t).direct) {                                                       \
    _tile_stored(reg, (t).c, ldc* static_cast<int64_t>(sizeof(float)));   \
  } else {                                                                \
    _tile_stored(reg, scratch, 16 * static_cast<int64_t>(sizeof(float))); \
    finish_tile(t, scratch, ldc, alpha, beta);                            \
  }

// Rows [i, i + 32) by the 32 columns of one panel: C tiles 0-3, A tiles 4-5, B tiles 6-7.
TG_AMX void block_32x32(int64_t m, int64_t n, int64_t pairs, float alpha, const uint16_t* a, int64_t lda,
                        const uint16_t* panel, float beta, float* c, int64_t ldc, int64_t i, int64_t j,
                        const Bf16Output& out) {
  alignas(64) float scratch[16 * 16];
  const TileTarget t00 = target(c, ldc, m, n, i, j, alpha, beta, out),
                   t01 = target(c, ldc, m, n, i, j + 16, alpha, beta, out);
  const TileTarget t10 = target(c, ldc, m, n, i + 16, j, alpha, beta, out),
                   t11 = target(c, ldc, m, n, i + 16, j + 16, alpha, beta, out);
  TG_TILE_START(0, t00)
  TG_TILE_START(1, t01)
  TG_TILE_START(2, t10)
  TG_TILE_START(3, t11)
  const int64_t a_stride = lda * 2;
  const char* a0 = reinterpret_cast<const char*>(a + i * lda);
  const char* a1 = a0 + 16 * a_stride;
  const char* b = reinterpret_cast<const char*>(panel);
  for (int64_t p = 0; p < pairs; p += kTilePairs) {
    _tile_loadd(4, a0 + p * 4, a_stride);
    _tile_loadd(5, a1 + p * 4, a_stride);
    _tile_loadd(6, b + p * kPanelRowBytes, kPanelRowBytes);
    _tile_loadd(7, b + p * kPanelRowBytes + kTileBytes, kPanelRowBytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  TG_TILE_FINISH(0, t00)
  TG_TILE_FINISH(1, t01)
  TG_TILE_FINISH(2, t10)
  TG_TILE_FINISH(3, t11)
}

// Rows [i, i + 16) by two panels (64 columns): C tiles 0-3, A tile 4, B tiles 5-7.
TG_AMX void block_16x64(int64_t m, int64_t n, int64_t pairs, float alpha, const uint16_t* a, int64_t lda,
                        const uint16_t* panel0, const uint16_t* panel1, float beta, float* c, int64_t ldc, int64_t i,
                        int64_t j, const Bf16Output& out) {
  alignas(64) float scratch[16 * 16];
  const TileTarget t0 = target(c, ldc, m, n, i, j, alpha, beta, out),
                   t1 = target(c, ldc, m, n, i, j + 16, alpha, beta, out);
  const TileTarget t2 = target(c, ldc, m, n, i, j + 32, alpha, beta, out),
                   t3 = target(c, ldc, m, n, i, j + 48, alpha, beta, out);
  TG_TILE_START(0, t0)
  TG_TILE_START(1, t1)
  TG_TILE_START(2, t2)
  TG_TILE_START(3, t3)
  const int64_t a_stride = lda * 2;
  const char* a0 = reinterpret_cast<const char*>(a + i * lda);
  const char* b0 = reinterpret_cast<const char*>(panel0);
  const char* b1 = reinterpret_cast<const char*>(panel1);
  for (int64_t p = 0; p < pairs; p += kTilePairs) {
    _tile_loadd(4, a0 + p * 4, a_stride);
    _tile_loadd(5, b0 + p * kPanelRowBytes, kPanelRowBytes);
    _tile_loadd(6, b0 + p * kPanelRowBytes + kTileBytes, kPanelRowBytes);
    _tile_loadd(7, b1 + p * kPanelRowBytes, kPanelRowBytes);
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(5, b1 + p * kPanelRowBytes + kTileBytes, kPanelRowBytes);
    _tile_dpbf16ps(2, 4, 7);
    _tile_dpbf16ps(3, 4, 5);
  }
  TG_TILE_FINISH(0, t0)
  TG_TILE_FINISH(1, t1)
  TG_TILE_FINISH(2, t2)
  TG_TILE_FINISH(3, t3)
}

// Rows [i, i + 16) by one panel (the odd last one): C tiles 0-1, A tile 4, B tiles 6-7.
TG_AMX void block_16x32(int64_t m, int64_t n, int64_t pairs, float alpha, const uint16_t* a, int64_t lda,
                        const uint16_t* panel, float beta, float* c, int64_t ldc, int64_t i, int64_t j,
                        const Bf16Output& out) {
  alignas(64) float scratch[16 * 16];
  const TileTarget t0 = target(c, ldc, m, n, i, j, alpha, beta, out),
                   t1 = target(c, ldc, m, n, i, j + 16, alpha, beta, out);
  TG_TILE_START(0, t0)
  TG_TILE_START(1, t1)
  const int64_t a_stride = lda * 2;
  const char* a0 = reinterpret_cast<const char*>(a + i * lda);
  const char* b = reinterpret_cast<const char*>(panel);
  for (int64_t p = 0; p < pairs; p += kTilePairs) {
    _tile_loadd(4, a0 + p * 4, a_stride);
    _tile_loadd(6, b + p * kPanelRowBytes, kPanelRowBytes);
    _tile_loadd(7, b + p * kPanelRowBytes + kTileBytes, kPanelRowBytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
  }
  TG_TILE_FINISH(0, t0)
  TG_TILE_FINISH(1, t1)
}

#undef TG_TILE_START
#undef TG_TILE_FINISH

// Blocks of the depth and of the panels (Note [AMX products]): a block of B, 256 depth pairs by 16
// panels (512 KiB), stays in L2 while every row block of A passes over it, and a 32-row block of A
// for one depth block (32 KiB) stays in L1 while it meets the block's panels. A product with a
// deeper or wider B than one block walks the blocks; later depth blocks add onto C.
constexpr int64_t kBlockPairs = 256;
constexpr int64_t kBlockPanels = 16;

TG_AMX void run_panels(int64_t m, int64_t n, int64_t pairs, float alpha, const uint16_t* a, int64_t lda,
                       const uint16_t* panels, float beta, float* c, int64_t ldc, int64_t panel_begin,
                       int64_t panel_end, const Bf16Output& rounded) {
  configure_tiles();
  const int64_t panel_values = pairs * 2 * kPanelColumns;
  for (int64_t p0 = 0; p0 < pairs; p0 += kBlockPairs) {
    const int64_t depth = std::min(kBlockPairs, pairs - p0);
    const float beta_block = p0 == 0 ? beta : 1.0f;  // later depth blocks add to what the first wrote
    const Bf16Output out = p0 + kBlockPairs >= pairs ? rounded : Bf16Output{};  // the last one rounds
    const uint16_t* a_block = a + 2 * p0;
    const uint16_t* b_block = panels + p0 * 2 * kPanelColumns;
    for (int64_t q0 = panel_begin; q0 < panel_end; q0 += kBlockPanels) {
      const int64_t q1 = std::min(panel_end, q0 + kBlockPanels);
      int64_t i = 0;
      for (; i + 32 <= m; i += 32)
        for (int64_t jp = q0; jp < q1; ++jp)
          block_32x32(m, n, depth, alpha, a_block, lda, b_block + jp * panel_values, beta_block, c, ldc, i,
                      jp * kPanelColumns, out);
      for (; i < m; i += 16) {
        int64_t jp = q0;
        for (; jp + 2 <= q1; jp += 2)
          block_16x64(m, n, depth, alpha, a_block, lda, b_block + jp * panel_values, b_block + (jp + 1) * panel_values,
                      beta_block, c, ldc, i, jp * kPanelColumns, out);
        if (jp < q1)
          block_16x32(m, n, depth, alpha, a_block, lda, b_block + jp * panel_values, beta_block, c, ldc, i,
                      jp * kPanelColumns, out);
      }
    }
  }
  _tile_release();
}

}  // namespace

bool available() {
  static const bool granted = cpu_has_amx();
  return granted;
}

void product(int64_t m, int64_t n, int64_t pairs, float alpha, const uint16_t* a, int64_t lda, const uint16_t* panels,
             float beta, float* c, int64_t ldc, int64_t panel_begin, int64_t panel_end, const Bf16Output& rounded) {
  run_panels(m, n, pairs, alpha, a, lda, panels, beta, c, ldc, panel_begin, panel_end, rounded);
}

#else  // no AMX in this build

bool available() {
  return false;
}

void product(int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const uint16_t*, float, float*, int64_t,
             int64_t, int64_t, const Bf16Output&) {}

#endif

}  // namespace tapegrad::cpu::amx
