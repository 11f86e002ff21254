// The vectorised float uniform draw (src/cpu/kernels/uniform_avx512.h) against the scalar Philox path it
// replaces, bit for bit: odd ranges and lengths, counters across a 2^32 boundary, a range whose top
// the rounding reaches, and rand() through the public API; and randint into a float tensor, which
// shares the Philox stream but not the conversion (a control that only uniform draws take the path).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/kernels/uniform_avx512.h"
#include "math/philox.h"
#include "tapegrad/tapegrad.h"

namespace {

std::vector<float> scalar(int64_t begin, int64_t end, double low, double high, uint64_t seed, uint64_t offset) {
  std::vector<float> out;
  for (int64_t i = begin; i < end; ++i)
    out.push_back(
        tapegrad::math::uniform_f32(tapegrad::math::philox4x32_10(offset + static_cast<uint64_t>(i), seed), low, high));
  return out;
}

void expect_same_bits(int64_t begin, int64_t end, double low, double high, uint64_t seed, uint64_t offset) {
  std::vector<float> got(static_cast<size_t>(end - begin) + 1, -7.0f);  // one past the end must stay
  tapegrad::cpu::uniform_f32_avx512(got.data(), begin, end, low, high, seed, offset);
  const std::vector<float> want = scalar(begin, end, low, high, seed, offset);
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t g, w;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&w, &want[i], 4);
    ASSERT_EQ(g, w) << "element " << begin + static_cast<int64_t>(i) << " of [" << low << ", " << high << ")";
  }
  EXPECT_EQ(got.back(), -7.0f) << "wrote past the end";
}

TEST(CpuUniform, VectorisedDrawHasTheScalarBits) {
  for (int64_t n : {1, 15, 16, 17, 1000, 4099}) expect_same_bits(0, n, 0.0, 1.0, 42, 0);
  expect_same_bits(5, 300, -3.0, 0.5, 7, 123456789);
  expect_same_bits(0, 257, -1e-3, 1e-3, 0xDEADBEEFCAFEULL, 5);
  // Counters crossing 2^32 (the lanes' high halves differ): the block there goes the scalar way.
  expect_same_bits(0, 100, 0.0, 1.0, 9, 0xFFFFFFFFULL - 40);
  // A range so narrow that some draws round up to high and must step below it.
  expect_same_bits(0, 2000, 1.0, 1.0000001, 3, 0);
}

TEST(CpuUniform, RandThroughTheApiMatchesTheScalarDraw) {
  tapegrad::Generator g(11);
  const tapegrad::Tensor r = tapegrad::rand({3, 1000}, tapegrad::TensorOptions(tapegrad::kFloat32), &g);
  const std::vector<float> want = scalar(0, 3000, 0.0, 1.0, 11, 0);
  const float* got = r.data<float>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
}

// randint's integers stored as floats: the scalar integer draw, not a uniform one.
TEST(CpuUniform, RandintIntoFloatsStaysIntegral) {
  tapegrad::Generator g(5);
  const tapegrad::Tensor r = tapegrad::randint(-7, 1000, {2000}, tapegrad::TensorOptions(tapegrad::kFloat32), &g);
  const float* got = r.data<float>();
  for (int64_t i = 0; i < 2000; ++i) {
    const int64_t want =
        tapegrad::math::randint_value(tapegrad::math::philox4x32_10(static_cast<uint64_t>(i), 5), -7, 1007);
    ASSERT_EQ(got[i], static_cast<float>(want)) << "element " << i;
  }
}

}  // namespace
