// The register-blocked AVX-512 matrix-vector product (gemv_avx512.cpp) against the chain it
// promises: each y[j] is one fused multiply-add per row, rows in order, so the expected value is
// computed the same way with std::fma and must match bit for bit. Every block width and tail, a
// leading dimension past the columns, alpha and beta, and that nothing past y's end is written;
// then the same products through mm at batch 1 (the path an LSTM step takes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/gemm/gemv_avx512.h"
#include "support/random_values.h"
#include "tapegrad/tapegrad.h"

namespace {

using tapegrad::testing::uniform_values;

struct GemvCase {
  int64_t rows, cols, lead;
  float alpha, beta;
};

// y = alpha * M^T x + beta * y as the kernel's contract spells it.
std::vector<float> chained(const GemvCase& t, const std::vector<float>& m, const std::vector<float>& x,
                           const std::vector<float>& y) {
  std::vector<float> out(y);
  for (int64_t j = 0; j < t.cols; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < t.rows; ++i) acc = std::fma(x[i], m[i * t.lead + j], acc);
    const float scaled = t.alpha * acc;
    out[j] = t.beta == 0.0f ? scaled : std::fma(t.beta, y[j], scaled);
  }
  return out;
}

void check(const GemvCase& t) {
  const std::vector<float> m = uniform_values<float>(static_cast<size_t>(t.rows * t.lead), 1);
  const std::vector<float> x = uniform_values<float>(static_cast<size_t>(t.rows), 2);
  // y has 17 guard floats past its end; with beta = 0 it starts as NaN, which must never be read.
  std::vector<float> y = uniform_values<float>(static_cast<size_t>(t.cols + 17), 3);
  if (t.beta == 0.0f)
    for (int64_t j = 0; j < t.cols; ++j) y[j] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> want = chained(t, m, x, y);
  tapegrad::cpu::gemv_columns_avx512(t.rows, t.cols, t.alpha, m.data(), t.lead, x.data(), t.beta, y.data());
  for (int64_t j = 0; j < t.cols + 17; ++j)
    ASSERT_EQ(y[j], want[j]) << "y[" << j << "] of rows=" << t.rows << " cols=" << t.cols << " lead=" << t.lead
                             << " alpha=" << t.alpha << " beta=" << t.beta;
}

class Gemv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tapegrad::cpu::gemv_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512";
  }
};

TEST_F(Gemv, EveryWidthMatchesTheInOrderChainBitForBit) {
  // 1..16 vectors in one block, with every kind of tail; 17 and more split into equal blocks.
  for (int64_t cols : {1, 5, 15, 16, 17, 31, 32, 100, 128, 255, 256, 257, 300, 512, 513, 1000})
    for (int64_t rows : {1, 3, 160})
      for (float beta : {0.0f, 1.0f}) check({rows, cols, cols, 1.0f, beta});
}

TEST_F(Gemv, LeadingDimensionAlphaAndBeta) {
  check({160, 512, 520, 1.0f, 0.0f});  // a view of wider rows: the columns past 512 are not summed
  check({37, 130, 201, 0.5f, 0.0f});
  check({37, 130, 130, -2.0f, 0.25f});
  check({512, 128, 128, 1.0f, 1.0f});  // the backward step of an LSTM with H = 128
}

TEST_F(Gemv, NoRowsGivesBetaTimesY) {
  check({0, 40, 40, 1.0f, 0.0f});
  check({0, 40, 40, 1.0f, 0.5f});
}

// Negative control: the checker does see a changed summation order (rows backwards).
TEST_F(Gemv, CheckerTellsAnotherOrderApart) {
  const GemvCase t{160, 512, 512, 1.0f, 0.0f};
  const std::vector<float> m = uniform_values<float>(static_cast<size_t>(t.rows * t.lead), 1),
                           x = uniform_values<float>(static_cast<size_t>(t.rows), 2);
  std::vector<float> y(static_cast<size_t>(t.cols), 0.0f);
  tapegrad::cpu::gemv_columns_avx512(t.rows, t.cols, 1.0f, m.data(), t.lead, x.data(), 0.0f, y.data());
  int differ = 0;
  for (int64_t j = 0; j < t.cols; ++j) {
    float acc = 0.0f;
    for (int64_t i = t.rows - 1; i >= 0; --i) acc = std::fma(x[i], m[i * t.lead + j], acc);
    differ += acc != y[j];
  }
  EXPECT_GT(differ, 0);
}

// The segmented product of a batch-1 LSTM step split by hidden units (Note [segmented columns]):
// the rows of x1 then x2, `segments` column blocks `stride` apart in M written `y_stride` apart in
// y, each element the same in-order chain as gemv_columns_avx512's. Everything else in y (the gaps
// between segments and the guard past the end) keeps its value.
void check_segmented(int segments, int64_t cols, int64_t rows1, int64_t rows2, int64_t stride, int64_t lead,
                     int64_t y_stride, float beta) {
  const int64_t rows = rows1 + rows2;
  const std::vector<float> m = uniform_values<float>(static_cast<size_t>(std::max<int64_t>(rows, 1) * lead), 11);
  const std::vector<float> x = uniform_values<float>(static_cast<size_t>(rows), 12);
  const size_t y_size = static_cast<size_t>((segments - 1) * y_stride + cols + 17);
  const std::vector<float> y0 = uniform_values<float>(y_size, 13);
  std::vector<float> want = y0;
  for (int s = 0; s < segments; ++s)
    for (int64_t j = 0; j < cols; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < rows; ++i) acc = std::fma(x[i], m[i * lead + s * stride + j], acc);
      float& out = want[static_cast<size_t>(s * y_stride + j)];
      out = beta == 0.0f ? acc : std::fma(beta, out, acc);
    }
  std::vector<float> y = y0;
  if (beta == 0.0f)  // never read
    for (int s = 0; s < segments; ++s)
      for (int64_t j = 0; j < cols; ++j)
        y[static_cast<size_t>(s * y_stride + j)] = std::numeric_limits<float>::quiet_NaN();
  tapegrad::cpu::gemv_segmented_columns_avx512(rows1, x.data(), rows2, x.data() + rows1, segments, cols, m.data(), lead,
                                               stride, beta, y.data(), y_stride);
  for (size_t k = 0; k < y_size; ++k)
    ASSERT_EQ(y[k], want[k]) << "y[" << k << "] of segments=" << segments << " cols=" << cols << " rows=" << rows1
                             << "+" << rows2 << " stride=" << stride << " y_stride=" << y_stride << " beta=" << beta;
}

TEST_F(Gemv, SegmentedColumnsMatchTheInOrderChainBitForBit) {
  for (int segments : {1, 2, 3, 4})
    for (int64_t cols : {1, 7, 16, 17, 40, 64, 65, 100, 144})
      for (float beta : {0.0f, 1.0f}) {
        // packed panel: segments side by side, y in an LSTM's gate layout
        check_segmented(segments, cols, 32, 128, cols, segments * cols, 3 * cols + 5, beta);
        // columns of a wider matrix, x all in one part or the other
        check_segmented(segments, cols, 0, 37, cols + 9, segments * (cols + 9) + 3, cols, beta);
        check_segmented(segments, cols, 37, 0, cols + 9, segments * (cols + 9) + 3, cols, beta);
      }
}

// A panel's result equals the plain kernel's on the unpacked matrix: the packing moves bytes only.
TEST_F(Gemv, SegmentedColumnsOfAPanelEqualThePlainProduct) {
  const int64_t input = 32, hidden = 128, width = 4 * hidden, depth = input + hidden, u0 = 64, units = 64;
  const std::vector<float> w = uniform_values<float>(static_cast<size_t>(depth * width), 14);
  const std::vector<float> x = uniform_values<float>(static_cast<size_t>(depth), 15);
  std::vector<float> panel(static_cast<size_t>(depth * 4 * units));
  for (int64_t i = 0; i < depth; ++i)
    for (int64_t gate = 0; gate < 4; ++gate)
      for (int64_t j = 0; j < units; ++j)
        panel[static_cast<size_t>(i * 4 * units + gate * units + j)] = w[i * width + gate * hidden + u0 + j];
  std::vector<float> plain(static_cast<size_t>(width)), split(static_cast<size_t>(width), 0.0f);
  tapegrad::cpu::gemv_columns_avx512(depth, width, 1.0f, w.data(), width, x.data(), 0.0f, plain.data());
  tapegrad::cpu::gemv_segmented_columns_avx512(input, x.data(), hidden, x.data() + input, 4, units, panel.data(),
                                               4 * units, units, 0.0f, split.data() + u0, hidden);
  for (int64_t gate = 0; gate < 4; ++gate)
    for (int64_t j = u0; j < u0 + units; ++j)
      ASSERT_EQ(split[gate * hidden + j], plain[gate * hidden + j]) << "gate " << gate << " unit " << j;
}

// A chain split in two (the input rows first, Note [the input rows first] in kernels/lstm.cpp)
// and carried on with the bias added at the end has the bits of the one-shot product onto the
// bias; without a bias, those of beta = 0.
TEST_F(Gemv, SegmentedChainsCarriedOnEqualTheWholeChain) {
  for (int64_t units : {7, 16, 40, 64})
    for (bool with_bias : {true, false}) {
      const int64_t input = 32, hidden = 96, depth = input + hidden, lead = 4 * units + 3, y_stride = units + 5;
      const std::vector<float> m = uniform_values<float>(static_cast<size_t>(depth * lead), 21);
      const std::vector<float> x = uniform_values<float>(static_cast<size_t>(depth), 22);
      const std::vector<float> bias = uniform_values<float>(static_cast<size_t>(3 * y_stride + units), 23);
      std::vector<float> whole = with_bias ? bias : std::vector<float>(bias.size(), 0.0f);
      tapegrad::cpu::gemv_segmented_columns_avx512(input, x.data(), hidden, x.data() + input, 4, units, m.data(), lead,
                                                   units, with_bias ? 1.0f : 0.0f, whole.data(), y_stride);
      std::vector<float> split(bias.size(), std::numeric_limits<float>::quiet_NaN());
      tapegrad::cpu::gemv_segmented_columns_avx512(input, x.data(), 0, x.data(), 4, units, m.data(), lead, units, 0.0f,
                                                   split.data(), y_stride);
      tapegrad::cpu::gemv_segmented_columns_continue_avx512(hidden, x.data() + input, 4, units, m.data() + input * lead,
                                                            lead, units, with_bias ? bias.data() : nullptr,
                                                            split.data(), y_stride);
      for (int64_t gate = 0; gate < 4; ++gate)
        for (int64_t j = 0; j < units; ++j) {
          const size_t k = static_cast<size_t>(gate * y_stride + j);
          ASSERT_EQ(split[k], whole[k]) << "units " << units << " bias " << with_bias << " gate " << gate << " j " << j;
        }
    }
}

// The product an LSTM step takes at batch 1 goes through mm as a [1, k] x [k, n] product; it must
// agree with a double-precision reference.
TEST(GemvThroughMm, BatchOneRowTimesMatrix) {
  using namespace tapegrad;
  for (int64_t n : {10, 128, 512, 700}) {
    const int64_t k = 160;
    Tensor a = tensor(uniform_values<float>(static_cast<size_t>(k), 4), {1, k});
    Tensor b = tensor(uniform_values<float>(static_cast<size_t>(k * n), 5), {k, n});
    Tensor c = mm(a, b);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    const float* pc = c.data<float>();
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p) want += static_cast<double>(pa[p]) * pb[p * n + j];
      ASSERT_NEAR(pc[j], want, 1e-5) << "column " << j << " of n=" << n;
    }
  }
}

}  // namespace
