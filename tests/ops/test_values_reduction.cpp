// Forward values of the reductions (sum, mean, var, max, min) against hand loops.
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
// Reductions
// ---------------------------------------------------------------------------------------------

TEST(ReductionValues, SumMeanOverDimsAndKeepdim) {
  const Shape shape = {2, 3, 4, 5};
  std::vector<double> v = uniform_values(120, 21);
  Tensor x = make(v, shape);
  const std::vector<std::vector<int64_t>> dim_sets = {{},     {0},    {1},     {3},          {-1},
                                                      {0, 2}, {1, 3}, {-1, 0}, {0, 1, 2, 3}, {2, 1}};
  for (const auto& dims : dim_sets) {
    for (bool keepdim : {false, true}) {
      std::string what = "dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
      Tensor s = dims.empty() ? sum(x) : sum(x, dims, keepdim);
      Tensor m = dims.empty() ? mean(x) : mean(x, dims, keepdim);
      std::vector<bool> mask = mask_of(4, dims);
      Shape want_shape;
      for (size_t d = 0; d < 4; ++d)
        if (!mask[d])
          want_shape.push_back(shape[d]);
        else if (keepdim && !dims.empty())
          want_shape.push_back(1);
      EXPECT_EQ(s.sizes(), want_shape) << what;
      EXPECT_EQ(m.sizes(), want_shape) << what;
      expect_values(s, sum_ref(v, shape, dims), 1e-12, 1e-12, "sum " + what);
      expect_values(m, mean_ref(v, shape, dims), 1e-12, 1e-12, "mean " + what);
    }
  }
  // Method forms.
  expect_values(x.sum(2), sum_ref(v, shape, {2}));
  expect_values(x.mean(1, true), mean_ref(v, shape, {1}));
  EXPECT_EQ(x.mean(1, true).sizes(), (Shape{2, 1, 4, 5}));
  expect_values(x.sum({0, 3}), sum_ref(v, shape, {0, 3}));
}

TEST(ReductionValues, Float32Sums) {
  std::vector<double> v = round_f32(uniform_values(300, 22));
  Tensor x = make(v, {20, 15}, kFloat32);
  Tensor s = sum(x, {0});
  EXPECT_EQ(s.dtype(), kFloat32);
  expect_values(s, sum_ref(v, {20, 15}, {0}), 1e-6, 1e-6);
  expect_values(mean(x, {1}), mean_ref(v, {20, 15}, {1}), 1e-6, 1e-7);
  expect_values(sum(x), sum_ref(v, {20, 15}, {}), 1e-6, 1e-6);
}

TEST(ReductionValues, IntegerAndBoolSumsAreInt64) {
  Tensor i = make_i32({2000000000, 2000000000, 5, -7, 1, 2}, {2, 3});
  Tensor s = sum(i);
  EXPECT_EQ(s.dtype(), kInt64);
  EXPECT_EQ(s.item<int64_t>(), 4000000001LL);
  Tensor s0 = sum(i, {0});
  EXPECT_EQ(s0.dtype(), kInt64);
  EXPECT_EQ(s0.tolist<int64_t>(), (std::vector<int64_t>{1999999993, 2000000001, 7}));
  Tensor s1 = sum(i, {1}, true);
  EXPECT_EQ(s1.sizes(), (Shape{2, 1}));
  EXPECT_EQ(s1.tolist<int64_t>(), (std::vector<int64_t>{4000000005LL, -4}));
  Tensor b = gt(make({1, -1, 2, -2, 3, 0}, {2, 3}), 0.0);
  Tensor c = sum(b);
  EXPECT_EQ(c.dtype(), kInt64);
  EXPECT_EQ(c.item<int64_t>(), 3);
  EXPECT_EQ(sum(b, {1}).tolist<int64_t>(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(sum(make_i64({-1, -2, -3})).item<int64_t>(), -6);
}

TEST(ReductionValues, VarCorrections) {
  const Shape shape = {3, 4, 5};
  std::vector<double> v = uniform_values(60, 23, -3, 3);
  Tensor x = make(v, shape);
  expect_values(var(x), var_ref(v, shape, {}, 1.0), 1e-12, 1e-12, "var all");
  expect_values(var(x, 0.0), var_ref(v, shape, {}, 0.0), 1e-12, 1e-12, "var all c0");
  expect_values(var(x, Shape{1}), var_ref(v, shape, {1}, 1.0), 1e-12, 1e-12, "var dim 1");
  expect_values(var(x, Shape{1}, 0.0), var_ref(v, shape, {1}, 0.0), 1e-12, 1e-12, "var dim 1 c0");
  Tensor k = var(x, Shape{0, 2}, 1.0, true);
  EXPECT_EQ(k.sizes(), (Shape{1, 4, 1}));
  expect_values(k, var_ref(v, shape, {0, 2}, 1.0), 1e-12, 1e-12, "var dims 0,2");
  // Known values: var([1,2,3,4]) = 5/3 (unbiased), 1.25 (population).
  EXPECT_NEAR(var(make({1, 2, 3, 4}, {4})).item(), 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(var(make({1, 2, 3, 4}, {4}), 0.0).item(), 1.25, 1e-12);
  Tensor f = var(make({1, 2, 3, 4}, {2, 2}, kFloat32), Shape{1}, 0.0);
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_values(f, {0.25, 0.25});
}

TEST(ReductionValues, EmptyReductions) {
  Tensor e = zeros({0, 3}, kFloat64);
  Tensor s = sum(e, {0});
  EXPECT_EQ(s.sizes(), (Shape{3}));
  expect_values(s, {0, 0, 0});
  EXPECT_EQ(sum(e).item(), 0.0);
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(sum(e, {1}).sizes(), (Shape{0}));
}

TEST(ReductionValues, MaxMinOverallAndAlongDims) {
  const Shape shape = {3, 4, 5};
  std::vector<double> v = uniform_values(60, 24);
  Tensor x = make(v, shape);
  EXPECT_DOUBLE_EQ(max(x).item(), *std::max_element(v.begin(), v.end()));
  EXPECT_DOUBLE_EQ(min(x).item(), *std::min_element(v.begin(), v.end()));
  EXPECT_EQ(max(x).dim(), 0);
  EXPECT_DOUBLE_EQ(x.max().item(), *std::max_element(v.begin(), v.end()));
  EXPECT_DOUBLE_EQ(x.min().item(), *std::min_element(v.begin(), v.end()));
  for (int64_t d : {0, 1, 2, -1}) {
    for (bool is_max : {true, false}) {
      std::vector<double> want_v, want_i;
      extreme_ref(v, shape, d < 0 ? d + 3 : d, is_max, want_v, want_i);
      ValuesIndices r = is_max ? max(x, d) : min(x, d);
      std::string what = std::string(is_max ? "max" : "min") + " dim " + std::to_string(d);
      EXPECT_EQ(r.indices.dtype(), kInt64) << what;
      expect_values(r.values, want_v, 0, 0, what);
      expect_values(r.indices, want_i, 0, 0, what);
      Tensor arg = is_max ? argmax(x, d) : argmin(x, d);
      expect_values(arg, want_i, 0, 0, "arg" + what);
      ValuesIndices k = is_max ? max(x, d, true) : min(x, d, true);
      Shape kept = shape;
      kept[static_cast<size_t>(d < 0 ? d + 3 : d)] = 1;
      EXPECT_EQ(k.values.sizes(), kept) << what;
      EXPECT_EQ(k.indices.sizes(), kept) << what;
    }
  }
  expect_values(x.argmax(1), [&] {
    std::vector<double> a, b;
    extreme_ref(v, shape, 1, true, a, b);
    return b;
  }());
}

TEST(ReductionValues, TiesGiveTheFirstIndex) {
  Tensor x = make({1, 3, 3, 2, 2, 1, 5, 5, 5}, {3, 3});
  ValuesIndices mx = max(x, 1);
  expect_values(mx.values, {3, 2, 5});
  EXPECT_EQ(mx.indices.tolist<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  ValuesIndices mn = min(x, 1);
  expect_values(mn.values, {1, 1, 5});
  EXPECT_EQ(mn.indices.tolist<int64_t>(), (std::vector<int64_t>{0, 2, 0}));
  Tensor y = make({2, 7, 1, 2, 7, 1, 0, 7, 1}, {3, 3});  // ties down the columns
  EXPECT_EQ(max(y, 0).indices.tolist<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(min(y, 0).indices.tolist<int64_t>(), (std::vector<int64_t>{2, 0, 0}));
  EXPECT_EQ(argmax(y, 0).tolist<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(argmin(y, 1).tolist<int64_t>(), (std::vector<int64_t>{2, 2, 0}));
  // Flattened argmax: the first of the three 7s.
  EXPECT_EQ(argmax(y).item<int64_t>(), 1);
  EXPECT_EQ(argmax(y).dim(), 0);
  // Integers.
  Tensor i = make_i32({4, 9, 9, -1}, {2, 2});
  ValuesIndices mi = max(i, 1);
  EXPECT_EQ(mi.values.dtype(), kInt32);
  EXPECT_EQ(mi.values.tolist<int32_t>(), (std::vector<int32_t>{9, 9}));
  EXPECT_EQ(mi.indices.tolist<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(max(i).item<int32_t>(), 9);
  EXPECT_EQ(min(i).item<int32_t>(), -1);
}

TEST(ReductionValues, MaxWithNaNIsNaN) {
  Tensor x = make({1, kNaN, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(std::isnan(max(x).item()));
  ValuesIndices r = max(x, 1);
  expect_values(r.values, {kNaN, 6});
  EXPECT_EQ(r.indices.tolist<int64_t>(), (std::vector<int64_t>{1, 2}));
}

}  // namespace
}  // namespace tapegrad
