// Views, conversions and copies read and write the right elements.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/reference.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using namespace reference;

// ---------------------------------------------------------------------------------------------
// Views and copies
// ---------------------------------------------------------------------------------------------

TEST(ViewValues, ViewsReadTheRightElements) {
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[i] = i;
  Tensor x = make(v, {2, 3, 4});
  expect_values(x.permute({2, 0, 1}), [&] {
    std::vector<double> r;
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) r.push_back(v[(i * 3 + j) * 4 + k]);
    return r;
  }());
  expect_values(x.transpose(0, 2).reshape({-1}), [&] {
    std::vector<double> r;
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 3; ++j)
        for (int i = 0; i < 2; ++i) r.push_back(v[(i * 3 + j) * 4 + k]);
    return r;
  }());
  expect_values(x.select(1, 2), {8, 9, 10, 11, 20, 21, 22, 23});
  expect_values(x[1].select(1, -1), {15, 19, 23});
  expect_values(x.narrow(2, 1, 2), {1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22});
  expect_values(x.slice(2, 0, 4, 3), {0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23});
  expect_values(x.slice(1, -2, 100), {4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
  expect_values(x.flatten(1), v);
  EXPECT_EQ(x.flatten(1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(x.unsqueeze(1).sizes(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(-1).sizes(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(1).squeeze().sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.unsqueeze(0).squeeze(0).sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.squeeze(1).sizes(), (Shape{2, 3, 4}));  // not size 1: unchanged
  Tensor e = make({1, 2, 3}, {3, 1}).expand({2, 3, 4});
  EXPECT_EQ(e.sizes(), (Shape{2, 3, 4}));
  expect_values(e, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  expect_values(make({1, 2, 3}, {3, 1}).expand({-1, 2}), {1, 1, 2, 2, 3, 3});
  expect_values(x.view({4, 6}).t().contiguous().view({-1}), [&] {
    std::vector<double> r;
    for (int j = 0; j < 6; ++j)
      for (int i = 0; i < 4; ++i) r.push_back(v[i * 6 + j]);
    return r;
  }());
}

TEST(ViewValues, ConversionsAndCopies) {
  Tensor f = make({1.5, -2.5, 3.0}, {3});
  EXPECT_EQ(f.to(kInt64).tolist<int64_t>(), (std::vector<int64_t>{1, -2, 3}));  // truncation, like C
  expect_values(f.to(kFloat32), {1.5, -2.5, 3.0});
  expect_values(f.to(kFloat16).to(kFloat64), {1.5, -2.5, 3.0});
  expect_values(f.to(kBFloat16), {1.5, -2.5, 3.0});
  expect_values(f.to(kBool), {1, 1, 1});
  expect_values(make({0.0, 2.0}, {2}).to(kBool), {0, 1});
  Tensor dst = zeros({2, 3}, kFloat32);
  dst.copy_(make({1, 2, 3}, {3}));
  expect_values(dst, {1, 2, 3, 1, 2, 3});
  Tensor c = make({1, 2, 3, 4}, {2, 2}).t().clone();
  EXPECT_TRUE(c.is_contiguous());
  expect_values(c, {1, 3, 2, 4});
  EXPECT_EQ(arange(5).tolist<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  expect_values(arange(1, 2, 0.25, kFloat64), {1, 1.25, 1.5, 1.75});
  expect_values(arange(3, 0, -1, kFloat64), {3, 2, 1});
  expect_values(linspace(0, 1, 5, kFloat64), {0, 0.25, 0.5, 0.75, 1});
  expect_values(full({2}, 3.5, kFloat32), {3.5, 3.5});
  expect_values(ones_like(make_i32({1, 2})), {1, 1});
  EXPECT_EQ(ones_like(make_i32({1, 2})).dtype(), kInt32);
}

// Transposes of matrices of at least 64 x 64 take the CPU copy's blocked path (an LSTM's
// [W_ih^T; W_hh^T] layout); edges that are not multiples of its 32-element tiles, every element
// size, and a destination with a row stride (cat writes into a narrow of its output). The 40 x 70
// case stays on the element loop: a control that the two agree.
TEST(ViewValues, TransposedCopiesReadEveryElement) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32}) {
    for (const std::array<int64_t, 2>& rc : {std::array<int64_t, 2>{130, 70}, {64, 97}, {40, 70}}) {
      const int64_t r = rc[0], c = rc[1];
      SCOPED_TRACE(std::to_string(r) + " x " + std::to_string(c));
      // Integers below 256 are exact in every dtype here.
      std::vector<double> av, bv;
      for (int64_t k = 0; k < r * c; ++k) av.push_back(static_cast<double>(k % 251));
      for (int64_t k = 0; k < 33 * c; ++k) bv.push_back(static_cast<double>(k % 241));
      Tensor a = tensor(av, {r, c}).to(dtype), b = tensor(bv, {33, c}).to(dtype);
      std::vector<double> expected_t;
      for (int64_t j = 0; j < c; ++j)
        for (int64_t i = 0; i < r; ++i) expected_t.push_back(static_cast<double>((i * c + j) % 251));
      EXPECT_EQ(values(a.t().contiguous()), expected_t) << dtype;
      std::vector<double> expected_cat = expected_t;
      for (int64_t j = 0; j < c; ++j)
        for (int64_t i = 0; i < 33; ++i) expected_cat.push_back(static_cast<double>((i * c + j) % 241));
      Tensor laid_out = cat({a.t(), b.t()}, 1);  // [c, r + 33]: each part has a row stride r + 33
      std::vector<double> got = values(laid_out), want;
      for (int64_t j = 0; j < c; ++j) {
        for (int64_t i = 0; i < r; ++i) want.push_back(expected_t[static_cast<size_t>(j * r + i)]);
        for (int64_t i = 0; i < 33; ++i) want.push_back(expected_cat[static_cast<size_t>(c * r + j * 33 + i)]);
      }
      EXPECT_EQ(got, want) << dtype;
    }
  }
}

TEST(ViewValues, ReshapeOfExpandedAndSizeOneDims) {
  Tensor e = make({1, 2, 3}, {3, 1}).expand({3, 4});
  expect_values(e.reshape({12}), {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  expect_values(e.reshape({4, 3}), {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  expect_values(e.t().reshape({-1}), {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  // Views with size-1 dims whose strides are arbitrary.
  Tensor base = make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor col = base.narrow(1, 2, 1);  // [3, 1] stride (4, 1)
  expect_values(col.view({3}), {2, 6, 10});
  expect_values(col.t().view({3}), {2, 6, 10});
  expect_values(col.unsqueeze(0).view({1, 3}), {2, 6, 10});
  Tensor row = base.select(0, 1).unsqueeze(1);  // [4, 1]
  expect_values(row.expand({4, 2}).reshape({8}), {4, 4, 5, 5, 6, 6, 7, 7});
  expect_values(base.t().narrow(0, 1, 1).view({3}), {1, 5, 9});
}

TEST(ViewValues, SliceNarrowEdgeCasesAndOverlappingCopy) {
  Tensor x = make({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  expect_values(x.narrow(1, -2, 2), {2, 3, 6, 7});
  EXPECT_EQ(x.slice(1, 3, 1).sizes(), (Shape{2, 0}));
  EXPECT_EQ(x.slice(1, 10, 20).sizes(), (Shape{2, 0}));
  expect_values(x.slice(1, -100, 2), {0, 1, 4, 5});
  expect_values(x.slice(1, 1, 4, 2), {1, 3, 5, 7});
  Tensor y = make({1, 2, 3, 4}, {4});
  y.slice(0, 1, 4).copy_(y.slice(0, 0, 3));  // overlapping source and destination
  expect_values(y, {1, 1, 2, 3});
  Tensor s = scalar_tensor(4.0, kFloat64);
  EXPECT_EQ(sum(s, {0}).dim(), 0);
  EXPECT_DOUBLE_EQ(sum(s, {0}).item(), 4.0);
  EXPECT_DOUBLE_EQ(mean(s, {-1}).item(), 4.0);
  EXPECT_DOUBLE_EQ(max(s, 0).values.item(), 4.0);
  EXPECT_EQ(max(s, 0).indices.item<int64_t>(), 0);
  EXPECT_EQ(s.unsqueeze(0).sizes(), (Shape{1}));
  EXPECT_EQ(ones({1, 1}).squeeze().dim(), 0);
  expect_values(s.expand({2, 3}), std::vector<double>(6, 4.0));
}

TEST(ViewValues, SixteenBitConversionsRound) {
  Tensor x = make({65504.0, 65519.0, 65520.0, 1.0 / 3.0, -2.5, 1e-8, 6e-8, 1e5, kNaN}, {9});
  expect_values(x.to(kFloat16), {65504.0, 65504.0, kInf, 0.333251953125, -2.5, 0.0, 5.960464477539063e-08, kInf, kNaN},
                0, 0, "float16");
  Tensor y = make({1.0 / 3.0, -2.5, 1e30, 3.0e38, kNaN}, {5});
  expect_values(y.to(kBFloat16), {0.333984375, -2.5, 1.0002555517425873e+30, 3.00405527047391e+38, kNaN}, 0, 0,
                "bfloat16");
}

}  // namespace
}  // namespace tapegrad
