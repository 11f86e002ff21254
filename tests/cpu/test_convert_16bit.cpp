// The vectorised float32 <-> bfloat16 / float16 copies (src/cpu/half/convert_16bit.cpp) give exactly the
// bits of the scalar conversions (core/half.h) on every 16-bit pattern and on float32 values chosen
// to hit rounding ties, denormals, overflow, infinities and NaNs, at lengths that are not multiples
// of the vector width; and a strided copy (the scalar path) agrees, as the negative control that
// the fast path was the one compared.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/half/convert_16bit.h"
#include "tapegrad/core/half.h"
#include "tapegrad/tapegrad.h"

using namespace tapegrad;

namespace {

std::vector<float> tricky_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e-8f,
                          -3e-39f,
                          1e-45f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min()};
  std::mt19937 gen(3);
  for (int i = 0; i < 5000; ++i) {  // random bit patterns: every exponent, ties included by the low bits
    uint32_t u = gen();
    if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;  // an exact bf16 tie
    if (i % 3 == 1) u = (u & 0xffffe000u) | 0x1000u;  // an exact f16 tie
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  v.push_back(1.5f);  // 5,017 values: not a multiple of 16
  return v;
}

std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data_ptr(), out.size() * 2);
  return out;
}

}  // namespace

TEST(Convert16Bit, FloatToBf16AndF16MatchTheScalarBits) {
  const std::vector<float> values = tricky_floats();
  const Tensor src = tensor(values, {static_cast<int64_t>(values.size())});
  for (DType low : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor dst = empty({src.numel()}, low);
    if (!cpu::copy_16bit_contiguous(src, dst)) GTEST_SKIP() << "no AVX-512 on this CPU: the scalar path is used";
    const std::vector<uint16_t> got = bits_of(dst);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t want = low == kBFloat16 ? BFloat16(values[i]).bits : Half(values[i]).bits;
      ASSERT_EQ(got[i], want) << "value " << values[i] << " at " << i;
    }
    // The same through the public cast, and through a strided source (the scalar loop).
    EXPECT_EQ(bits_of(src.to(low)), got);
    const Tensor strided = stack({src, src}, 1).select(1, 0);
    ASSERT_FALSE(strided.is_contiguous());
    EXPECT_EQ(bits_of(strided.to(low)), got);
  }
}

TEST(Convert16Bit, EveryBf16AndF16PatternToFloat) {
  std::vector<uint16_t> all(65536 + 7);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (DType low : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor src = empty({static_cast<int64_t>(all.size())}, low);
    std::memcpy(src.data_ptr(), all.data(), all.size() * 2);
    Tensor dst = empty({src.numel()}, kFloat32);
    if (!cpu::copy_16bit_contiguous(src, dst)) GTEST_SKIP() << "no AVX-512 on this CPU: the scalar path is used";
    const float* got = dst.data<float>();
    for (size_t i = 0; i < all.size(); ++i) {
      BFloat16 b;
      Half h;
      b.bits = h.bits = all[i];
      const float want = low == kBFloat16 ? static_cast<float>(b) : static_cast<float>(h);
      uint32_t gw, ww;
      std::memcpy(&gw, &got[i], 4);
      std::memcpy(&ww, &want, 4);
      ASSERT_EQ(gw, ww) << "pattern " << all[i];
    }
  }
}

TEST(Convert16Bit, OtherPairsAndLayoutsAreLeftToTheScalarPath) {
  const Tensor x = ones({4, 3});
  Tensor d = empty({4, 3}, kFloat64);
  EXPECT_FALSE(cpu::copy_16bit_contiguous(x, d));                             // not a 16-bit pair
  EXPECT_FALSE(cpu::copy_16bit_contiguous(x.t(), empty({3, 4}, kBFloat16)));  // not contiguous
}
