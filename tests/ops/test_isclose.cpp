// isclose / allclose against PyTorch's rule |a - b| <= atol + rtol * |b|, with equality first
// (equal infinities are close), NaN close only with equal_nan, broadcasting and bad input.
#include <cmath>
#include <limits>
#include <vector>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor make(const std::vector<double>& v, DType dt = kFloat64) {
  return tensor<double>(v, {static_cast<int64_t>(v.size())}, TensorOptions(dt));
}

std::vector<bool> flags(const Tensor& t) {
  EXPECT_EQ(t.dtype(), kBool);
  std::vector<bool> out;
  for (double v : testing::values(t)) out.push_back(v != 0.0);
  return out;
}

TEST(IsClose, DefaultTolerances) {
  for (DType dt : {kFloat64, kFloat32}) {
    // allowed = 1e-8 + 1e-5 * |b| = 1.001e-5 for b = 1.
    Tensor a = make({1.0, 1.0 + 5e-6, 1.0 + 5e-5, 1e-9, 1e-7, 0.0}, dt);
    Tensor b = make({1.0, 1.0, 1.0, 0.0, 0.0, -0.0}, dt);
    EXPECT_EQ(flags(isclose(a, b)), (std::vector<bool>{true, true, false, true, false, true})) << dt;
  }
}

TEST(IsClose, ToleranceIsRelativeToTheSecondArgument) {
  Tensor zero = make({0.0}), one = make({1.0});
  EXPECT_TRUE(flags(isclose(zero, one, 1.0, 0.0))[0]);   // 1 <= 1 * |1|
  EXPECT_FALSE(flags(isclose(one, zero, 1.0, 0.0))[0]);  // 1 <= 1 * |0| is false
  EXPECT_TRUE(flags(isclose(make({100.0}), make({100.5}), 0.0, 0.5))[0]);
  EXPECT_FALSE(flags(isclose(make({100.0}), make({100.5}), 0.0, 0.49))[0]);
}

TEST(IsClose, InfinitiesAndNaN) {
  Tensor a = make({kInf, -kInf, kInf, 1.0, kInf, kNaN, kNaN, 1.0});
  Tensor b = make({kInf, -kInf, -kInf, kInf, 1.0, kNaN, 1.0, kNaN});
  const std::vector<bool> plain = {true, true, false, false, false, false, false, false};
  EXPECT_EQ(flags(isclose(a, b)), plain);
  EXPECT_EQ(flags(isclose(a, b, 0.0, 0.0)), plain);
  // Huge tolerances still do not call 1 and inf close: |1 - inf| = inf is not finite. (Negative
  // control: the bare inequality inf <= atol + rtol * inf would hold.)
  EXPECT_EQ(flags(isclose(a, b, 10.0, 1e300)), plain);
  EXPECT_LE(kInf, 1e300 + 10.0 * kInf);
  EXPECT_EQ(flags(isclose(a, b, 1e-5, 1e-8, true)),
            (std::vector<bool>{true, true, false, false, false, true, false, false}));
  EXPECT_FALSE(allclose(make({kNaN}), make({kNaN})));
  EXPECT_TRUE(allclose(make({kNaN}), make({kNaN}), 1e-5, 1e-8, true));
  EXPECT_TRUE(allclose(make({kInf, 2.0}), make({kInf, 2.0})));
}

TEST(IsClose, BroadcastsAndIntegers) {
  Tensor a = tensor<double>({1, 2, 3, 1.5, 2, 3.00001}, {2, 3});
  Tensor b = make({1, 2, 3});
  Tensor c = isclose(a, b);
  EXPECT_EQ(c.sizes(), (Shape{2, 3}));
  EXPECT_EQ(flags(c), (std::vector<bool>{true, true, true, false, true, true}));
  EXPECT_EQ(isclose(b, a).sizes(), (Shape{2, 3}));
  Tensor i = tensor<int64_t>({100, 100, 7}, {3}), j = tensor<int64_t>({100, 101, 9}, {3});
  EXPECT_EQ(flags(isclose(i, j)), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(flags(isclose(i, j, 0.01, 0.0)), (std::vector<bool>{true, true, false}));
  EXPECT_TRUE(allclose(gt(make({1, -1}), 0.0), gt(make({2, -2}), 0.0)));
}

TEST(AllClose, Basics) {
  Tensor x = make({1.0, 2.0, 3.0});
  EXPECT_TRUE(allclose(x, x));
  EXPECT_TRUE(allclose(x, add(x, 1e-9)));
  EXPECT_FALSE(allclose(x, make({1.0, 2.0, 3.001})));
  EXPECT_TRUE(allclose(x, make({1.0, 2.0, 3.001}), 1e-3));
  EXPECT_TRUE(allclose(zeros({0}, kFloat64), zeros({0}, kFloat64)));
  EXPECT_TRUE(allclose(tensor<double>({2, 2, 2, 2}, {2, 2}), make({2.0})));
  // Tensors in the graph: compared without recording anything.
  Tensor p = make({1.0, 2.0}).requires_grad_(true);
  Tensor isc = isclose(mul(p, 1.0), p);
  EXPECT_FALSE(isc.requires_grad());
  EXPECT_TRUE(allclose(mul(p, 1.0), p));
}

TEST(IsClose, BadInput) {
  Tensor x = make({1.0, 2.0});
  expect_error([&] { isclose(x, make({1.0, 2.0}, kFloat32)); }, {"isclose", "float64", "float32"});
  expect_error([&] { allclose(x, make({1.0, 2.0, 3.0})); }, {"isclose", "[2]", "[3]"});
  expect_error([&] { isclose(x, x, -1e-5); }, {"isclose", "rtol", "-1e-05"});
  expect_error([&] { isclose(x, x, 1e-5, -1.0); }, {"isclose", "atol", "-1"});
  expect_error([&] { isclose(x, x, kNaN); }, {"isclose", "rtol", "nan"});
  expect_error([&] { isclose(Tensor(), x); }, {"isclose", "undefined"});
}

}  // namespace
}  // namespace tapegrad
