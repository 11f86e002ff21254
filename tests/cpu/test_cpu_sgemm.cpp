// tapegrad's AVX-512 sgemm against a double-precision reference: every edge of its blocking (tile
// rows and columns, packed depth and row blocks), both layouts of each operand, strided and
// broadcast operands, alpha and beta, one and two threads; and the switch that selects it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cpu/gemm/sgemm_avx512.h"
#include "cpu/loops/split_choice.h"
#include "support/gemm_case.h"
#include "support/random_values.h"
#include "support/thread_count.h"
#include "tapegrad/tapegrad.h"

namespace {

using tapegrad::CpuGemm;

using Case = tapegrad::testing::GemmCase;

using tapegrad::testing::ThreadCount;

using tapegrad::testing::uniform_values;

// Runs one case (operands as GemmOperands pads them) and checks every element of C, and that the
// padding of C is untouched.
void check_case(const Case& t) {
  tapegrad::testing::GemmOperands o(t);
  const int64_t ldc = o.ldc;
  const std::vector<float>& c = o.c;
  const std::vector<float>& c_before = o.c_before;
  auto a_at = [&](int64_t i, int64_t p) { return o.a_at(i, p); };
  auto b_at = [&](int64_t p, int64_t j) { return o.b_at(p, j); };

  tapegrad::cpu::sgemm_avx512(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(), o.b.data(),
                              o.b_row_stride(), o.b_col_stride(), t.beta, o.c.data(), ldc);

  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (j >= t.n) {
        ASSERT_EQ(got, c_before[i * ldc + j]) << "wrote past column " << t.n;
        continue;
      }
      double want = 0, magnitude = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        want += static_cast<double>(a_at(i, p)) * b_at(p, j);
        magnitude += std::fabs(static_cast<double>(a_at(i, p)) * b_at(p, j));
      }
      want *= t.alpha;
      if (t.beta != 0.0f) want += static_cast<double>(t.beta) * c_before[i * ldc + j];
      ASSERT_NEAR(got, want, 1e-5 * (magnitude + 1.0))
          << "C(" << i << ", " << j << ") of m=" << t.m << " n=" << t.n << " k=" << t.k;
    }
  }
}

// C after sgemm_avx512 of case t on o's operands, starting from o.c_before, with `bias` (or null).
std::vector<float> avx512_product(const Case& t, const tapegrad::testing::GemmOperands& o, const float* bias) {
  std::vector<float> c = o.c_before;
  tapegrad::cpu::sgemm_avx512(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(), o.b.data(),
                              o.b_row_stride(), o.b_col_stride(), t.beta, c.data(), o.ldc, bias);
  return c;
}

class Sgemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tapegrad::cpu::sgemm_avx512_available()) GTEST_SKIP() << "no AVX-512 on this CPU";
  }
};

TEST_F(Sgemm, MatchesReferenceAcrossTileAndBlockEdges) {
  // 12 x 32 tiles, depth blocks of 256, row blocks of 144; a transposed B packs in 16 x 16 blocks,
  // a transposed A in 12-row tiles, or (m >= 2n, 256 <= k <= 4096, m n <= 1024 x 256) the product
  // is computed as C^T, as it is for a transposed B against 32 or 64 rows of A (n >= 2m, k >= 512).
  const int64_t sizes_mn[] = {1, 2, 11, 12, 13, 16, 17, 31, 32, 33, 47, 64, 145};
  const int64_t depths[] = {1, 7, 16, 17, 256, 257, 600};
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (int64_t m : sizes_mn)
      for (int64_t n : sizes_mn)
        for (int64_t k : depths) {
          if (m * n * k > 4'000'000) continue;
          for (bool a_transposed : {false, true})
            for (bool b_transposed : {false, true}) check_case({m, n, k, a_transposed, b_transposed, 1.0f, 0.0f});
        }
  }
}

TEST_F(Sgemm, EveryOperandLayout) {
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (bool at : {false, true})
      for (bool bt : {false, true}) {
        check_case({37, 70, 300, at, bt, 1.0f, 0.0f});
        check_case({160, 33, 20, at, bt, 1.0f, 0.0f});
        check_case({64, 512, 128, at, bt, 1.0f, 1.0f});   // an LSTM step: B read in place
        check_case({300, 300, 513, at, bt, 1.0f, 0.0f});  // large enough to thread, several blocks
        check_case({30, 1100, 70, at, bt, 1.0f, 0.5f});   // several 512-column blocks of B per thread
      }
  }
}

// Note [measured team for mid-sized products]: a product of 1M to 4M multiply-adds runs on a team
// or on one thread, whichever its kind has measured faster; the first calls alternate the two.
// Every call must give the first call's bits, for each layout
// (by rows and by columns, A or B transposed).
TEST_F(Sgemm, MidSizedProductsGiveTheSameBitsOnATeamOrOneThread) {
  ThreadCount guard(tapegrad::testing::at_least_threads(2));
  for (const Case& layout : {Case{160, 96, 100, false, false, 1.0f, 0.0f}, Case{512, 64, 64, true, false, 1.0f, 0.5f},
                             Case{64, 512, 48, false, true, 1.0f, 0.0f}}) {
    tapegrad::testing::GemmOperands o(layout);
    std::vector<float> first;
    for (int call = 0; call < tapegrad::cpu::SplitChoice::kTrialCalls + 2; ++call) {
      std::vector<float> c = o.c_before;
      tapegrad::cpu::sgemm_avx512(layout.m, layout.n, layout.k, layout.alpha, o.a.data(), o.a_row_stride(),
                                  o.a_col_stride(), o.b.data(), o.b_row_stride(), o.b_col_stride(), layout.beta,
                                  c.data(), o.ldc);
      if (call == 0) first = c;
      ASSERT_TRUE(c == first) << "call " << call << " of m=" << layout.m << " n=" << layout.n << " k=" << layout.k;
    }
  }
}

TEST_F(Sgemm, AlphaAndBeta) {
  for (float alpha : {1.0f, -0.5f, 2.0f})
    for (float beta : {0.0f, 1.0f, 0.25f}) {
      check_case({13, 45, 270, false, true, alpha, beta});
      check_case({200, 100, 40, true, false, alpha, beta});
      check_case({300, 45, 300, true, false, alpha, beta});    // a weight gradient: computed as C^T
      check_case({1040, 256, 260, true, false, alpha, beta});  // one too large for C^T: packed
    }
}

// A bias added as the tiles are written (C = alpha A B + bias, beta 0) gives the bits of copying it
// into every row of C and passing beta = 1, the pass it saves: across tile and depth-block edges,
// in-place and packed A, the C^T path, both team sizes; C's padding stays untouched.
TEST_F(Sgemm, BiasEpilogueGivesTheBitsOfACopiedBias) {
  const Case cases[] = {{13, 45, 270, false, true, 1.0f, 0.0f},     // B packed, two depth blocks
                        {128, 512, 160, false, false, 1.0f, 0.0f},  // an LSTM step: A and B in place
                        {64, 512, 1000, false, true, 1.0f, 0.0f},   // a layer's forward, four depth blocks
                        {37, 70, 300, true, false, -0.5f, 0.0f},    // A packed, alpha != 1
                        {300, 45, 300, true, false, 1.0f, 0.0f},    // the C^T path
                        {300, 300, 513, false, false, 1.0f, 0.0f},  // large enough to thread
                        {1, 33, 17, false, false, 1.0f, 0.0f}};
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (const Case& t : cases) {
      tapegrad::testing::GemmOperands o(t);
      const std::vector<float> bias = uniform_values<float>(static_cast<size_t>(t.n), 4);
      std::vector<float> copied = o.c_before;
      for (int64_t i = 0; i < t.m; ++i) std::copy(bias.begin(), bias.end(), copied.begin() + i * o.ldc);
      tapegrad::cpu::sgemm_avx512(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(), o.b.data(),
                                  o.b_row_stride(), o.b_col_stride(), 1.0f, copied.data(), o.ldc);
      std::vector<float> fused = o.c_before;  // NaN in the first n columns: never read
      tapegrad::cpu::sgemm_avx512(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(), o.b.data(),
                                  o.b_row_stride(), o.b_col_stride(), 0.0f, fused.data(), o.ldc, bias.data());
      ASSERT_TRUE(fused == copied) << "m=" << t.m << " n=" << t.n << " k=" << t.k << ", " << threads << " threads";
    }
  }
  // No product (k = 0): C is the bias in every row.
  std::vector<float> c(6, 2.0f);
  const float a = 1, b = 1, bias[3] = {1.5f, -2.0f, 0.25f};
  tapegrad::cpu::sgemm_avx512(2, 3, 0, 1.0f, &a, 1, 1, &b, 1, 1, 0.0f, c.data(), 3, bias);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], bias[i % 3]);
}

// Note [B laid out once for many products]: B laid out as the kernel's panels gives the bits of the
// same product with B itself: both layouts of A and of B, alpha, beta, a bias, depths on and off the
// 256-deep blocks, widths off the 32-column panels, C's padding untouched; on one thread and on
// two. The control: a layout of B with one element changed gives other bits.
TEST_F(Sgemm, BLaidOutAsPanelsGivesTheBitsOfBItself) {
  const Case cases[] = {{13, 45, 270, false, false, 1.0f, 0.0f},   {32, 2048, 768, false, false, 1.0f, 0.0f},
                        {16, 1000, 300, false, true, 1.0f, 0.0f},  {37, 70, 513, true, false, -0.5f, 1.0f},
                        {2, 33, 17, false, false, 1.0f, 0.0f},     {300, 300, 513, false, false, 1.0f, 0.0f},
                        {160, 600, 256, false, false, 2.0f, 0.5f}, {20, 31, 1, false, true, 1.0f, 0.0f}};
  std::vector<float> panels;
  auto laid_out = [&](const Case& t, const tapegrad::testing::GemmOperands& o) {
    panels.assign(static_cast<size_t>(tapegrad::cpu::sgemm_b_panels_floats(t.k, t.n)) + 16, 0.0f);
    float* p = panels.data() + (16 - reinterpret_cast<uintptr_t>(panels.data()) / 4 % 16) % 16;  // 64-byte aligned
    tapegrad::cpu::sgemm_lay_out_b_panels(t.k, t.n, o.b.data(), o.b_row_stride(), o.b_col_stride(), p);
    return p;
  };
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (const Case& t : cases) {
      for (bool with_bias : {false, true}) {
        if (with_bias && t.beta != 0.0f) continue;
        SCOPED_TRACE("m=" + std::to_string(t.m) + " n=" + std::to_string(t.n) + " k=" + std::to_string(t.k) + ", " +
                     std::to_string(threads) + " threads" + (with_bias ? ", bias" : ""));
        tapegrad::testing::GemmOperands o(t);
        const std::vector<float> bias = uniform_values<float>(static_cast<size_t>(t.n), 4);
        const float* b = with_bias ? bias.data() : nullptr;
        const std::vector<float> direct = avx512_product(t, o, b);
        const float* p = laid_out(t, o);
        std::vector<float> from_panels = o.c_before;
        tapegrad::cpu::sgemm_avx512_b_panels(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(), p,
                                             t.beta, from_panels.data(), o.ldc, b);
        ASSERT_EQ(std::memcmp(from_panels.data(), direct.data(), direct.size() * sizeof(float)), 0);
      }
    }
  }
  // The control: B's last element changed before laying out changes C's last column.
  const Case t{13, 45, 270, false, false, 1.0f, 0.0f};
  tapegrad::testing::GemmOperands o(t);
  std::vector<float> before = o.c_before, after = o.c_before;
  tapegrad::cpu::sgemm_avx512_b_panels(t.m, t.n, t.k, 1.0f, o.a.data(), o.a_row_stride(), 1, laid_out(t, o), 0.0f,
                                       before.data(), o.ldc);
  o.b[(t.k - 1) * o.b_lead + t.n - 1] += 1.0f;
  tapegrad::cpu::sgemm_avx512_b_panels(t.m, t.n, t.k, 1.0f, o.a.data(), o.a_row_stride(), 1, laid_out(t, o), 0.0f,
                                       after.data(), o.ldc);
  EXPECT_NE(before[t.n - 1], after[t.n - 1]);
  EXPECT_EQ(before[t.n - 2], after[t.n - 2]);
}

// Note [B in place for a few hundred rows]: B with contiguous rows, read in place by 145 to 576 rows
// of C where its rows lie close enough together, gives the bits of the same B whose rows lie 16 KiB
// apart, which packs it: over depth blocks and a partial panel, alpha, beta and the bias, one and
// two threads, and the path each takes asserted (the control: rows 16 KiB apart, and more than 576
// rows, pack; up to 144 rows read in place at any distance, as before).
TEST_F(Sgemm, BReadInPlaceByAFewHundredRowsGivesThePackedBits) {
  using tapegrad::cpu::sgemm_avx512_reads_b_in_place;
  constexpr int64_t kFarApart = 4096;  // floats: rows 16 KiB apart
  for (int64_t rows : {145, 200, 288, 576}) {
    EXPECT_TRUE(sgemm_avx512_reads_b_in_place(rows, 70, 1)) << rows;
    EXPECT_FALSE(sgemm_avx512_reads_b_in_place(rows, kFarApart, 1)) << rows;
  }
  EXPECT_FALSE(sgemm_avx512_reads_b_in_place(577, 70, 1));
  EXPECT_FALSE(sgemm_avx512_reads_b_in_place(200, 70, 2));  // columns strided: packed
  EXPECT_TRUE(sgemm_avx512_reads_b_in_place(144, kFarApart, 1));
  EXPECT_TRUE(sgemm_avx512_reads_b_in_place(200, -70, 1));  // rows walked backwards: as far apart
  EXPECT_FALSE(sgemm_avx512_reads_b_in_place(200, -kFarApart, 1));
  EXPECT_FALSE(sgemm_avx512_reads_b_in_place(200, std::numeric_limits<int64_t>::max(), 1));  // no overflow
  EXPECT_FALSE(sgemm_avx512_reads_b_in_place(200, std::numeric_limits<int64_t>::min(), 1));

  const int64_t n = 70, k = 300;
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (int64_t m : {145, 200, 288, 576}) {
      const std::vector<float> a = uniform_values<float>(static_cast<size_t>(m * k), 1);
      const std::vector<float> b_near = uniform_values<float>(static_cast<size_t>(k * n), 2);
      std::vector<float> b_far(static_cast<size_t>(k * kFarApart), 0.0f);
      for (int64_t p = 0; p < k; ++p) std::copy_n(b_near.data() + p * n, n, b_far.data() + p * kFarApart);
      const std::vector<float> bias = uniform_values<float>(static_cast<size_t>(n), 3);
      const std::vector<float> c_before = uniform_values<float>(static_cast<size_t>(m * n), 4);
      for (const auto& [alpha, beta, with_bias] :
           {std::tuple{1.0f, 0.0f, false}, std::tuple{-0.5f, 0.25f, false}, std::tuple{1.0f, 0.0f, true}}) {
        SCOPED_TRACE("m=" + std::to_string(m) + ", " + std::to_string(threads) + " threads, beta " +
                     std::to_string(beta) + (with_bias ? ", bias" : ""));
        const float* b = with_bias ? bias.data() : nullptr;
        std::vector<float> near = c_before, far = c_before;
        tapegrad::cpu::sgemm_avx512(m, n, k, alpha, a.data(), k, 1, b_near.data(), n, 1, beta, near.data(), n, b);
        tapegrad::cpu::sgemm_avx512(m, n, k, alpha, a.data(), k, 1, b_far.data(), kFarApart, 1, beta, far.data(), n, b);
        ASSERT_EQ(std::memcmp(near.data(), far.data(), near.size() * sizeof(float)), 0);
      }
    }
  }
  for (int threads : {1, 2}) {  // and the values, against the reference
    ThreadCount guard(threads);
    check_case({200, 70, 300, false, false, 1.0f, 0.0f});
    check_case({576, 33, 257, true, false, 0.5f, 1.0f});
  }
}

// Note [linear's forward as a transposed product]: X W^T with 32 or 64 rows of X against at least
// twice as many columns is computed as C^T = W X^T. Every element keeps its chain, so its bits equal
// those of the same product with W^T stored row-major (never mirrored): alpha, beta, the bias, C's
// padding untouched, one and two threads, shapes on and beside the path's edges (k 512, m 48).
TEST_F(Sgemm, LinearForwardAsTransposedProductGivesTheDirectBits) {
  const Case shapes[] = {{64, 512, 1000, false, true, 1.0f, 0.0f},  // mlp_seed's first layer, 4 depth blocks
                         {32, 130, 512, false, true, 1.0f, 0.0f},   // C^T rows off the tile edges
                         {64, 200, 600, false, true, 1.0f, 0.0f},
                         {48, 512, 600, false, true, 1.0f, 0.0f}};  // beside the path: direct
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (Case t : shapes)
      for (const auto& [alpha, beta, with_bias] :
           {std::tuple{1.0f, 0.0f, false}, std::tuple{-0.5f, 0.25f, false}, std::tuple{1.0f, 0.0f, true}}) {
        t.alpha = alpha;
        t.beta = beta;
        tapegrad::testing::GemmOperands o(t);
        // The path is taken (else this compares the direct product with itself), except beside its edge.
        EXPECT_EQ(tapegrad::cpu::sgemm_avx512_via_c_transposed(t.m, t.n, t.k, o.a_row_stride(), o.a_col_stride(),
                                                               o.b_row_stride(), o.b_col_stride()),
                  t.m != 48);
        EXPECT_FALSE(
            tapegrad::cpu::sgemm_avx512_via_c_transposed(t.m, t.n, t.k, o.a_row_stride(), o.a_col_stride(), t.n, 1));
        // The same B stored row-major: [k, n], lead n.
        std::vector<float> b_rows(static_cast<size_t>(t.k * t.n));
        for (int64_t p = 0; p < t.k; ++p)
          for (int64_t j = 0; j < t.n; ++j) b_rows[p * t.n + j] = o.b_at(p, j);
        const std::vector<float> bias = uniform_values<float>(static_cast<size_t>(t.n), 4);
        const float* bias_ptr = with_bias ? bias.data() : nullptr;
        std::vector<float> mirrored = o.c_before, direct = o.c_before;
        tapegrad::cpu::sgemm_avx512(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(), o.b.data(),
                                    o.b_row_stride(), o.b_col_stride(), t.beta, mirrored.data(), o.ldc, bias_ptr);
        tapegrad::cpu::sgemm_avx512(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(),
                                    b_rows.data(), t.n, 1, t.beta, direct.data(), o.ldc, bias_ptr);
        ASSERT_TRUE(mirrored == direct) << "m=" << t.m << " n=" << t.n << " k=" << t.k << " alpha=" << alpha
                                        << " beta=" << beta << (with_bias ? " bias" : "") << ", " << threads
                                        << " threads";
        check_case(t);  // and both against the reference
      }
  }
}

// The C^T path keeps C^T in a buffer of the calling thread: two threads of the program multiplying
// at once, each its own product of a different shape (so a shared buffer would mix them), must each
// get the bits of the same product run alone, also when called again and again.
TEST_F(Sgemm, TransposedProductsFromTwoCallersAtOnceGiveTheirOwnBits) {
  ThreadCount guard(1);  // each caller's product on its own thread: the two run side by side
  const Case shapes[2] = {{64, 512, 1000, false, true, 1.0f, 0.0f}, {32, 300, 600, false, true, 1.0f, 0.0f}};
  ASSERT_TRUE(tapegrad::cpu::sgemm_avx512_via_c_transposed(64, 512, 1000, 1000 + 3, 1, 1, 1000 + 3));
  ASSERT_TRUE(tapegrad::cpu::sgemm_avx512_via_c_transposed(32, 300, 600, 600 + 3, 1, 1, 600 + 3));
  std::vector<tapegrad::testing::GemmOperands> operands;
  std::vector<std::vector<float>> alone;
  for (const Case& t : shapes) {
    operands.emplace_back(t);
    const auto& o = operands.back();
    alone.push_back(o.c_before);
    tapegrad::cpu::sgemm_avx512(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(), o.b.data(),
                                o.b_row_stride(), o.b_col_stride(), t.beta, alone.back().data(), o.ldc);
  }
  std::vector<int> mismatches(2, 0);
  std::vector<std::thread> callers;
  for (int w = 0; w < 2; ++w)
    callers.emplace_back([&, w] {
      const Case& t = shapes[w];
      const auto& o = operands[w];
      for (int call = 0; call < 50; ++call) {
        std::vector<float> c = o.c_before;
        tapegrad::cpu::sgemm_avx512(t.m, t.n, t.k, t.alpha, o.a.data(), o.a_row_stride(), o.a_col_stride(), o.b.data(),
                                    o.b_row_stride(), o.b_col_stride(), t.beta, c.data(), o.ldc);
        if (c != alone[w]) ++mismatches[w];
      }
    });
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0}));
}

// Note [tall tiles for the last rows]: a block's last 13-16 rows (A read in place) go through 16-column
// tiles instead of a 12-row and a 1-4-row tile. Their bits must equal the thin tiles': each C row
// here is compared with the same row computed in a product of 12 rows or fewer, which the tall tile
// never serves. Both B layouts, column edges, depth blocks, alpha, beta, bias, one and two threads.
TEST_F(Sgemm, TallTilesGiveTheBitsOfThinOnes) {
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (int64_t m : {13, 14, 15, 16, 28, 64})
      for (const Case& shape :
           {Case{m, 1024, 256, false, false, 1.0f, 0.0f}, Case{m, 45, 300, false, true, -0.5f, 0.25f},
            Case{m, 17, 600, false, false, 1.0f, 1.0f}}) {
        tapegrad::testing::GemmOperands o(shape);
        for (bool with_bias : {false, true}) {
          const float beta = with_bias ? 0.0f : shape.beta;
          const std::vector<float> bias = uniform_values<float>(static_cast<size_t>(shape.n), 5);
          const float* b = with_bias ? bias.data() : nullptr;
          std::vector<float> whole = o.c_before, by_rows = o.c_before;
          const auto product = [&](int64_t row0, int64_t rows, std::vector<float>& c) {
            tapegrad::cpu::sgemm_avx512(rows, shape.n, shape.k, shape.alpha, o.a.data() + row0 * o.a_row_stride(),
                                        o.a_row_stride(), o.a_col_stride(), o.b.data(), o.b_row_stride(),
                                        o.b_col_stride(), beta, c.data() + row0 * o.ldc, o.ldc, b);
          };
          product(0, m, whole);
          for (int64_t row0 = 0; row0 < m; row0 += 12) product(row0, std::min<int64_t>(12, m - row0), by_rows);
          ASSERT_TRUE(whole == by_rows) << "m=" << m << " n=" << shape.n << " k=" << shape.k << " beta " << beta
                                        << (with_bias ? " with a bias" : "");
        }
      }
  }
}

// A tall tile's rows a multiple of 2 or 4 KiB apart would crowd L1's sets, so they are packed before
// the kernel reads them (Note [tall tiles for the last rows]); the same values with a stride that
// does not alias are read in place. Both must give the same bits, whichever tiles the rows fall in.
TEST_F(Sgemm, RowsThatAliasInL1GiveTheBitsOfRowsThatDoNot) {
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (int64_t lda : {1024, 512})
      for (int64_t m : {12, 13, 16, 20, 28, 40, 64})
        for (int64_t n : {256, 45}) {
          const int64_t k = lda, spread = k + 3;
          const std::vector<float> values = uniform_values<float>(static_cast<size_t>(m * k), 6);
          const std::vector<float> b = uniform_values<float>(static_cast<size_t>(k * n), 7);
          std::vector<float> aliasing(static_cast<size_t>(m * lda)), spread_rows(static_cast<size_t>(m * spread));
          for (int64_t i = 0; i < m; ++i)
            for (int64_t p = 0; p < k; ++p) aliasing[i * lda + p] = spread_rows[i * spread + p] = values[i * k + p];
          for (float beta : {0.0f, 0.5f}) {
            std::vector<float> c1(static_cast<size_t>(m * n), 1.0f), c2 = c1;
            tapegrad::cpu::sgemm_avx512(m, n, k, 1.0f, aliasing.data(), lda, 1, b.data(), n, 1, beta, c1.data(), n);
            tapegrad::cpu::sgemm_avx512(m, n, k, 1.0f, spread_rows.data(), spread, 1, b.data(), n, 1, beta, c2.data(),
                                        n);
            ASSERT_TRUE(c1 == c2) << "lda=" << lda << " m=" << m << " n=" << n << " beta " << beta << ", " << threads
                                  << " threads";
          }
        }
  }
}

// Note [products of depth 1]: a product of depth 1 (a weight gradient at batch 1) skips the tiles
// and must give their bits: per element one multiply-add from +0, times alpha, then beta C by one
// multiply-add or the bias by one addition. Every operand layout, alpha, beta, a bias, widths off
// the 16-lane vectors, one thread and a team (C large enough to share); a -0 product comes out +0,
// as from the tiles' zeroed accumulators (the control: a plain multiply keeps -0, and the check
// tells it apart), and inf times 0 is NaN.
TEST_F(Sgemm, ProductsOfDepthOneGiveTheTilesBits) {
  const auto expected = [](const tapegrad::testing::GemmOperands& o, const Case& t, const float* bias, int64_t i,
                           int64_t j) {
    float x = t.alpha * std::fma(o.a_at(i, 0), o.b_at(0, j), 0.0f);
    if (t.beta != 0.0f) return std::fma(t.beta, o.c_before[i * o.ldc + j], x);
    return bias != nullptr ? bias[j] + x : x;
  };
  const Case cases[] = {{512, 128, 1, true, false, 1.0f, 0.0f},   // lstm_small:1's dW_hh from h0
                        {512, 128, 1, true, false, 1.0f, 1.0f},   // added to C
                        {10, 33, 1, false, true, -0.5f, 0.25f},   // B by columns, alpha and beta
                        {700, 130, 1, false, false, 2.0f, 0.0f},  // C large enough for a team
                        {1, 1, 1, true, true, 1.0f, 0.0f},       {3, 17, 1, false, false, 1.0f, 0.0f}};
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    for (const Case& t : cases)
      for (bool with_bias : {false, true}) {
        if (with_bias && t.beta != 0.0f) continue;
        tapegrad::testing::GemmOperands o(t);
        const std::vector<float> bias = uniform_values<float>(static_cast<size_t>(t.n), 4);
        const float* b_ptr = with_bias ? bias.data() : nullptr;
        const std::vector<float> c = avx512_product(t, o, b_ptr);
        for (int64_t i = 0; i < t.m; ++i)
          for (int64_t j = 0; j < o.ldc; ++j) {
            const float got = c[i * o.ldc + j];
            const float want = j < t.n ? expected(o, t, b_ptr, i, j) : o.c_before[i * o.ldc + j];
            ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0)
                << "C(" << i << ", " << j << ") of m=" << t.m << " n=" << t.n << ", " << threads << " threads";
          }
      }
  }
  // Signed zeros and non-finite values: a = {-0, inf, 2}, b = {3, 0}.
  const float a[3] = {-0.0f, std::numeric_limits<float>::infinity(), 2.0f}, b[2] = {3.0f, 0.0f};
  float c[6];
  tapegrad::cpu::sgemm_avx512(3, 2, 1, 1.0f, a, 1, 1, b, 2, 1, 0.0f, c, 2);
  EXPECT_FALSE(std::signbit(c[0])) << "-0 x 3 from a zeroed accumulator is +0";
  EXPECT_TRUE(std::signbit(a[0] * b[0])) << "the control: a plain multiply keeps -0";
  EXPECT_TRUE(std::isinf(c[2]));
  EXPECT_TRUE(std::isnan(c[3])) << "inf x 0";
  EXPECT_EQ(c[4], 6.0f);
  EXPECT_EQ(c[5], 0.0f);
}

TEST_F(Sgemm, ZeroDepthOrZeroAlphaScalesC) {
  std::vector<float> c(6, 2.0f);
  float a = 1, b = 1;
  tapegrad::cpu::sgemm_avx512(2, 3, 0, 1.0f, &a, 1, 1, &b, 1, 1, 0.5f, c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 1.0f);
  tapegrad::cpu::sgemm_avx512(2, 3, 1, 0.0f, &a, 1, 1, &b, 1, 1, 0.0f, c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 0.0f);
}

TEST_F(Sgemm, BroadcastOperands) {
  // Stride-0 rows (an expanded vector) in A and in B.
  const int64_t m = 20, n = 40, k = 30;
  std::vector<float> a_row = uniform_values<float>(static_cast<size_t>(k), 4),
                     b = uniform_values<float>(static_cast<size_t>(k * n), 5);
  std::vector<float> c(static_cast<size_t>(m * n));
  tapegrad::cpu::sgemm_avx512(m, n, k, 1.0f, a_row.data(), 0, 1, b.data(), n, 1, 0.0f, c.data(), n);
  for (int64_t j = 0; j < n; ++j) {
    double want = 0;
    for (int64_t p = 0; p < k; ++p) want += static_cast<double>(a_row[p]) * b[p * n + j];
    for (int64_t i = 0; i < m; ++i) ASSERT_NEAR(c[i * n + j], want, 1e-4);
  }
}

TEST_F(Sgemm, MatmulThroughEitherKernelAgrees) {
  tapegrad::Generator gen(7);
  tapegrad::Tensor a = tapegrad::randn({70, 300}, tapegrad::TensorOptions(tapegrad::kFloat32), &gen);
  tapegrad::Tensor b = tapegrad::randn({90, 300}, tapegrad::TensorOptions(tapegrad::kFloat32), &gen);
  tapegrad::set_cpu_gemm(CpuGemm::OpenBlas);
  EXPECT_STREQ(tapegrad::cpu_gemm_name(), "openblas");
  tapegrad::Tensor via_openblas = tapegrad::matmul(a, b.t());
  tapegrad::set_cpu_gemm(CpuGemm::Avx512);
  EXPECT_STREQ(tapegrad::cpu_gemm_name(), "avx512");
  tapegrad::Tensor via_avx512 = tapegrad::matmul(a, b.t());
  tapegrad::set_cpu_gemm(CpuGemm::Auto);
  EXPECT_LT(tapegrad::max(tapegrad::abs(tapegrad::sub(via_openblas, via_avx512))).item(), 1e-4);
}

}  // namespace

TEST(CpuGemmSelection, ForcingAvx512WithoutItIsAClearError) {
  if (tapegrad::cpu::sgemm_avx512_available()) {
    tapegrad::set_cpu_gemm(CpuGemm::Avx512);
    EXPECT_STREQ(tapegrad::cpu_gemm_name(), "avx512");
  } else {
    EXPECT_THROW(tapegrad::set_cpu_gemm(CpuGemm::Avx512), tapegrad::Error);
  }
  tapegrad::set_cpu_gemm(CpuGemm::OpenBlas);
  EXPECT_STREQ(tapegrad::cpu_gemm_name(), "openblas");
  tapegrad::set_cpu_gemm(CpuGemm::Auto);
}

// Auto by size (Note [choosing the float kernel by size]): where OpenBLAS runs its own AVX-512
// kernels, small products go to ours and large ones stay with OpenBLAS; elsewhere one kernel takes all.
TEST(CpuGemmSelection, AutoChoosesBySizeWhereOpenBlasHasAvx512) {
  tapegrad::set_cpu_gemm(CpuGemm::Auto);
  const bool openblas_avx512 = tapegrad::cpu::openblas_uses_avx512();
  const bool ours = tapegrad::cpu::sgemm_avx512_available();
  const bool small = tapegrad::cpu::use_sgemm_avx512(64, 512, 1000);
  const bool large = tapegrad::cpu::use_sgemm_avx512(1024, 1024, 1024);
  if (!ours) {
    EXPECT_FALSE(small || large);
    EXPECT_STREQ(tapegrad::cpu_gemm_name(), "openblas");
  } else if (openblas_avx512) {
    EXPECT_TRUE(small) << tapegrad::cpu::openblas_uses_avx512();
    EXPECT_FALSE(large) << tapegrad::cpu::openblas_uses_avx512();
    EXPECT_NE(std::string(tapegrad::cpu_gemm_name()).find("below"), std::string::npos);
  } else {
    EXPECT_TRUE(small && large) << tapegrad::cpu::openblas_uses_avx512();
    EXPECT_STREQ(tapegrad::cpu_gemm_name(), "avx512");
  }
  // A forced choice ignores the size.
  tapegrad::set_cpu_gemm(CpuGemm::OpenBlas);
  EXPECT_FALSE(tapegrad::cpu::use_sgemm_avx512(64, 512, 1000));
  if (ours) {
    tapegrad::set_cpu_gemm(CpuGemm::Avx512);
    EXPECT_TRUE(tapegrad::cpu::use_sgemm_avx512(1024, 1024, 1024));
  }
  tapegrad::set_cpu_gemm(CpuGemm::Auto);
}
