// Note [dividing by the bias correction without a division] (math/optim.h): Adam's float update
// divides sqrt(v) by the bias correction through a product with its reciprocal and one FMA
// correction. Every result must carry the bits of the division: over the whole range sqrt(v) can
// take, at its ends, and for infinite and NaN second moments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "math/optim.h"

namespace {

using tapegrad::math::AdamConstants;
using tapegrad::math::AdamDecay;
using tapegrad::math::AdamHyper;

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

AdamHyper hyper(double beta2, int step) {
  AdamHyper h{};
  h.lr = 1e-3;
  h.beta1 = 0.9;
  h.beta2 = beta2;
  h.eps = 1e-8;
  h.bias_correction1 = 1 - std::pow(h.beta1, step);
  h.bias_correction2_sqrt = std::sqrt(1 - std::pow(beta2, step));
  return h;
}

// The values sqrt(v) takes for a float v >= 0: 0, then sqrt of the smallest subnormal (about
// 2^-74.5) up to sqrt of the largest float (below 2^64); random bit patterns over that range, and
// its ends.
std::vector<float> square_roots() {
  std::vector<float> xs = {0.0f, std::sqrt(std::numeric_limits<float>::denorm_min()),
                           std::sqrt(std::numeric_limits<float>::min()), 1.0f,
                           std::sqrt(std::numeric_limits<float>::max())};
  const uint32_t lo = bits_of(std::sqrt(std::numeric_limits<float>::denorm_min()));
  const uint32_t hi = bits_of(std::sqrt(std::numeric_limits<float>::max()));
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> pattern(lo, hi);
  for (int i = 0; i < (1 << 20); ++i) xs.push_back(from_bits(pattern(gen)));
  return xs;
}

TEST(AdamBiasCorrection, ProductWithTheReciprocalGivesTheBitsOfTheDivision) {
  const std::vector<float> xs = square_roots();
  int64_t product_alone_differs = 0;
  for (double beta2 : {0.999, 0.99, 0.9999, 0.9}) {
    for (int step : {1, 2, 3, 10, 100, 10000}) {
      const AdamConstants<float> c = tapegrad::math::adam_constants<float>(hyper(beta2, step));
      for (float x : xs) {
        const float want = x / c.bias_correction2_sqrt;
        ASSERT_EQ(bits_of(tapegrad::math::divided_by_bias_correction(x, c)), bits_of(want))
            << "x = " << x << " (bits " << bits_of(x) << "), bias correction " << c.bias_correction2_sqrt;
        product_alone_differs += bits_of(x * c.bias_correction2_sqrt_recip) != bits_of(want);
      }
    }
  }
  // The control: the product without its correction differs often, so the comparison can fail.
  EXPECT_GT(product_alone_differs, 1000);
}

// An infinite or NaN second moment gives what the division gives: inf / c is inf (the update then
// moves p by m / inf = 0), NaN stays NaN; and a bias correction of 0 (beta2 = 1) gives inf or NaN.
TEST(AdamBiasCorrection, InfiniteAndNanMomentsAsTheDivisionGivesThem) {
  const AdamConstants<float> c = tapegrad::math::adam_constants<float>(hyper(0.999, 1));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(tapegrad::math::divided_by_bias_correction(inf, c), inf);
  EXPECT_TRUE(std::isnan(tapegrad::math::divided_by_bias_correction(std::nanf(""), c)));
  const AdamConstants<float> zero = tapegrad::math::adam_constants<float>(hyper(1.0, 1));
  EXPECT_EQ(zero.bias_correction2_sqrt, 0.0f);
  EXPECT_EQ(tapegrad::math::divided_by_bias_correction(2.0f, zero), inf);
  EXPECT_TRUE(std::isnan(tapegrad::math::divided_by_bias_correction(0.0f, zero)));

  // A gradient whose square overflows: v is inf, and p does not move, as with the division.
  float p = 0.5f, m = 0.0f, v = 0.0f;
  tapegrad::math::adam_update<float, AdamDecay::None, false>(p, 1e21f, m, v, nullptr, c);
  EXPECT_EQ(v, inf);
  EXPECT_EQ(p, 0.5f);
}

}  // namespace
