// The elementwise losses (l1, smooth_l1, huber, binary_cross_entropy_with_logits) and their
// modules: values against PyTorch's formulas in double, extreme logits, gradchecks in input and
// target, all three reductions, float32 and float64, and bad input.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/reference.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;
using testing::values;

using reference::kInf;
using reference::make;
using testing::uniform_values;

std::vector<double> representable(std::vector<double> v, DType dt) {
  if (dt == kFloat32)
    for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

// ---------------------------------------------------------------------------------------------
// References in double, straight from PyTorch's documentation.
// ---------------------------------------------------------------------------------------------

double l1_ref(double x, double y) {
  return std::fabs(x - y);
}
double smooth_l1_ref(double x, double y, double beta) {
  const double z = std::fabs(x - y);
  if (beta == 0.0) return z;
  return z < beta ? 0.5 * z * z / beta : z - 0.5 * beta;
}
double huber_ref(double x, double y, double delta) {
  const double z = std::fabs(x - y);
  return z < delta ? 0.5 * z * z : delta * (z - 0.5 * delta);
}
double log_sigmoid_ref(double x) {
  return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x)));
}
// PyTorch's binary_cross_entropy_with_logits element: w * ((1 - y) x - (1 + (pw - 1) y) log_sigmoid(x)).
double bce_ref(double x, double y, double w = 1.0, double pw = 1.0) {
  return w * ((1 - y) * x - (1 + (pw - 1) * y) * log_sigmoid_ref(x));
}
// The documented form -w [pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], for moderate x only.
double bce_naive(double x, double y, double w = 1.0, double pw = 1.0) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return -w * (pw * y * std::log(s) + (1 - y) * std::log(1 - s));
}

double reduce_ref(const std::vector<double>& v, Reduction r) {
  double s = 0;
  for (double x : v) s += x;
  return r == Reduction::Mean ? s / static_cast<double>(v.size()) : s;
}

using LossFn = std::function<Tensor(const Tensor&, const Tensor&, Reduction)>;
using RefFn = std::function<double(double, double)>;

struct Case {
  std::string name;
  LossFn loss;
  RefFn ref;
};

std::vector<Case> cases() {
  return {
      {"l1_loss", [](const Tensor& x, const Tensor& y, Reduction r) { return l1_loss(x, y, r); }, l1_ref},
      {"smooth_l1_loss", [](const Tensor& x, const Tensor& y, Reduction r) { return smooth_l1_loss(x, y, r); },
       [](double x, double y) { return smooth_l1_ref(x, y, 1.0); }},
      {"smooth_l1_loss beta 0.3",
       [](const Tensor& x, const Tensor& y, Reduction r) { return smooth_l1_loss(x, y, r, 0.3); },
       [](double x, double y) { return smooth_l1_ref(x, y, 0.3); }},
      {"smooth_l1_loss beta 0",
       [](const Tensor& x, const Tensor& y, Reduction r) { return smooth_l1_loss(x, y, r, 0.0); },
       [](double x, double y) { return smooth_l1_ref(x, y, 0.0); }},
      {"huber_loss", [](const Tensor& x, const Tensor& y, Reduction r) { return huber_loss(x, y, r); },
       [](double x, double y) { return huber_ref(x, y, 1.0); }},
      {"huber_loss delta 2.5", [](const Tensor& x, const Tensor& y, Reduction r) { return huber_loss(x, y, r, 2.5); },
       [](double x, double y) { return huber_ref(x, y, 2.5); }},
      {"bce_with_logits",
       [](const Tensor& x, const Tensor& y, Reduction r) {
         BCEWithLogitsOptions o;
         o.reduction = r;
         return binary_cross_entropy_with_logits(x, y, o);
       },
       [](double x, double y) { return bce_ref(x, y); }},
  };
}

// ---------------------------------------------------------------------------------------------
// Values, every reduction, both dtypes
// ---------------------------------------------------------------------------------------------

TEST(ElementwiseLosses, ValuesMatchTheFormulas) {
  // Differences from 0 to 6 in size: both sides of every beta/delta used above.
  const std::vector<double> xs0 = uniform_values(12, 1, -4.0, 4.0), ys0 = uniform_values(12, 2, 0.0, 1.0);
  for (DType dt : {kFloat64, kFloat32}) {
    const std::vector<double> xs = representable(xs0, dt), ys = representable(ys0, dt);
    const double tol = dt == kFloat32 ? 2e-6 : 1e-13;
    for (const Case& c : cases()) {
      std::vector<double> expected(xs.size());
      for (size_t i = 0; i < xs.size(); ++i) expected[i] = c.ref(xs[i], ys[i]);
      Tensor x = make(xs, {3, 4}, dt), y = make(ys, {3, 4}, dt);
      Tensor none = c.loss(x, y, Reduction::None);
      EXPECT_EQ(none.sizes(), (Shape{3, 4})) << c.name;
      EXPECT_EQ(none.dtype(), dt) << c.name;
      std::vector<double> got = values(none);
      for (size_t i = 0; i < xs.size(); ++i)
        EXPECT_NEAR(got[i], expected[i], tol * std::max(1.0, std::fabs(expected[i]))) << c.name << " at " << i;
      const double total = reduce_ref(expected, Reduction::Sum);
      EXPECT_NEAR(c.loss(x, y, Reduction::Sum).item(), total, 4 * tol * std::max(1.0, std::fabs(total))) << c.name;
      EXPECT_NEAR(c.loss(x, y, Reduction::Mean).item(), reduce_ref(expected, Reduction::Mean), tol) << c.name;
      EXPECT_EQ(c.loss(x, y, Reduction::Mean).dim(), 0) << c.name;
    }
  }
}

TEST(ElementwiseLosses, PiecewiseBoundaries) {
  // smooth_l1 and huber switch at z == beta (delta) to the linear piece, as PyTorch's `z < beta`.
  Tensor x = make({0.0, 0.0, 0.0, 0.0}, {4});
  Tensor y = make({0.5, -1.0, 2.0, -3.0}, {4});
  testing::expect_close(smooth_l1_loss(x, y, Reduction::None), {0.125, 0.5, 1.5, 2.5}, 1e-15);
  testing::expect_close(huber_loss(x, y, Reduction::None), {0.125, 0.5, 1.5, 2.5}, 1e-15);
  testing::expect_close(huber_loss(x, y, Reduction::None, 2.0), {0.125, 0.5, 2.0, 4.0}, 1e-15);
  testing::expect_close(smooth_l1_loss(x, y, Reduction::None, 2.0), {0.0625, 0.25, 1.0, 2.0}, 1e-15);
  // huber(delta) = delta * smooth_l1(beta = delta).
  Tensor a = make(uniform_values(10, 3, -3, 3), {10}), b = make(uniform_values(10, 4, -3, 3), {10});
  testing::expect_close(huber_loss(a, b, Reduction::None, 1.7),
                        values(mul(smooth_l1_loss(a, b, Reduction::None, 1.7), 1.7)), 1e-14);
  // l1's gradient at a zero difference is 0 (sign(0)), like PyTorch.
  Tensor p = make({1.0, 2.0}, {2}).requires_grad_(true);
  l1_loss(p, make({1.0, 0.0}, {2}), Reduction::Sum).backward();
  EXPECT_EQ(values(p.grad()), (std::vector<double>{0.0, 1.0}));
}

// ---------------------------------------------------------------------------------------------
// BCE with logits: stability, weights, the gradient
// ---------------------------------------------------------------------------------------------

TEST(BCEWithLogits, AgreesWithTheDocumentedFormWhereThatIsAccurate) {
  const std::vector<double> xs = uniform_values(8, 5, -6, 6), ys = uniform_values(8, 6, 0, 1),
                            pw = uniform_values(8, 7, 0.2, 3);
  const std::vector<double> w = uniform_values(8, 8, 0.1, 2);
  BCEWithLogitsOptions o;
  o.reduction = Reduction::None;
  o.weight = make(w, {8});
  o.pos_weight = make(pw, {8});
  std::vector<double> got = values(binary_cross_entropy_with_logits(make(xs, {8}), make(ys, {8}), o));
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(got[i], bce_naive(xs[i], ys[i], w[i], pw[i]), 1e-12) << i;
    EXPECT_NEAR(got[i], bce_ref(xs[i], ys[i], w[i], pw[i]), 1e-13) << i;
  }
}

TEST(BCEWithLogits, ExtremeLogitsStayFiniteAndPrecise) {
  const std::vector<double> xs = {100, -100, 100, -100, 40, -40, 0, 1e4, -1e4, 100};
  const std::vector<double> ys = {0, 1, 1, 0, 1, 0, 0.3, 0.5, 0.5, 0.25};
  for (DType dt : {kFloat64, kFloat32}) {
    Tensor x = make(xs, {10}, dt).requires_grad_(true);
    Tensor y = make(ys, {10}, dt).requires_grad_(true);
    BCEWithLogitsOptions o;
    o.reduction = Reduction::None;
    Tensor loss = binary_cross_entropy_with_logits(x, y, o);
    sum(loss).backward();
    std::vector<double> got = values(loss), gx = values(x.grad()), gy = values(y.grad());
    for (size_t i = 0; i < xs.size(); ++i) {
      const double expected = bce_ref(xs[i], ys[i]);
      ASSERT_TRUE(std::isfinite(got[i])) << dt << " at " << i;
      // Relative: x = 40, y = 1 gives log1p(e^-40) = 4.2e-18, which log(1 + e^-40) rounds to 0.
      const double rel = dt == kFloat32 ? 1e-6 : 1e-14;
      EXPECT_NEAR(got[i], expected, rel * std::fabs(expected) + (dt == kFloat32 ? 1e-40 : 0.0)) << dt << " at " << i;
      // d/dx = sigmoid(x) - y; d/dy = -x - 0 (no pos_weight).
      const double sig = xs[i] >= 0 ? 1 / (1 + std::exp(-xs[i])) : std::exp(xs[i]) / (1 + std::exp(xs[i]));
      EXPECT_NEAR(gx[i], sig - ys[i], 1e-7) << dt << " at " << i;
      EXPECT_NEAR(gy[i], -xs[i], 1e-12 * std::fabs(xs[i])) << dt << " at " << i;
    }
    EXPECT_NEAR(gx[6], 0.2, 1e-7);  // the kinks of min(x, 0) and |x| at 0 give the true derivative
  }
  // Negative control for the precision check above: the plain form does round to 0 there.
  EXPECT_EQ(std::log(1.0 + std::exp(-40.0)), 0.0);
  EXPECT_GT(bce_ref(40, 1), 4e-18);
}

TEST(BCEWithLogits, PosWeightAndWeightBroadcast) {
  const std::vector<double> xs = uniform_values(6, 9, -3, 3), ys = uniform_values(6, 10, 0, 1);
  const std::vector<double> pw = {0.5, 2.0, 4.0};
  const std::vector<double> w = {1.5, 0.25};
  BCEWithLogitsOptions o;
  o.reduction = Reduction::None;
  o.pos_weight = make(pw, {3});  // one per class of [N, C]
  o.weight = make(w, {2, 1});    // one per row
  std::vector<double> got = values(binary_cross_entropy_with_logits(make(xs, {2, 3}), make(ys, {2, 3}), o));
  for (size_t n = 0; n < 2; ++n)
    for (size_t c = 0; c < 3; ++c)
      EXPECT_NEAR(got[n * 3 + c], bce_ref(xs[n * 3 + c], ys[n * 3 + c], w[n], pw[c]), 1e-13);
  // pos_weight = 1 is no pos_weight; pos_weight only scales the positive part.
  BCEWithLogitsOptions unit;
  unit.pos_weight = ones({3}, kFloat64);
  EXPECT_NEAR(binary_cross_entropy_with_logits(make(xs, {2, 3}), make(ys, {2, 3}), unit).item(),
              binary_cross_entropy_with_logits(make(xs, {2, 3}), make(ys, {2, 3})).item(), 1e-14);
  BCEWithLogitsOptions doubled;
  doubled.pos_weight = full({1}, 2.0, kFloat64);
  EXPECT_NEAR(binary_cross_entropy_with_logits(make({-1.0}, {1}), make({1.0}, {1}), doubled).item(),
              -2 * log_sigmoid_ref(-1.0), 1e-14);
  EXPECT_NEAR(binary_cross_entropy_with_logits(make({-1.0}, {1}), make({0.0}, {1}), doubled).item(),
              -std::log(1 - 1 / (1 + std::exp(1.0))), 1e-14);
}

// ---------------------------------------------------------------------------------------------
// Gradchecks
// ---------------------------------------------------------------------------------------------

TEST(ElementwiseLosses, GradcheckInputAndTarget) {
  for (const Case& c : cases())
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      Tensor x = testing::leaf({3, 4}, 11, -3.0, 3.0);
      Tensor y = testing::leaf({3, 4}, 12, 0.0, 1.0);
      auto result = autograd::gradcheck([&](const std::vector<Tensor>& in) { return c.loss(in[0], in[1], r); }, {x, y});
      EXPECT_TRUE(result.ok) << c.name << " reduction " << static_cast<int>(r) << ": " << result.report;
    }
}

TEST(BCEWithLogits, GradcheckWithWeights) {
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    auto result = autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          BCEWithLogitsOptions o;
          o.reduction = r;
          o.weight = in[2];
          o.pos_weight = in[3];
          return binary_cross_entropy_with_logits(in[0], in[1], o);
        },
        {testing::leaf({4, 3}, 13, -8.0, 8.0), testing::leaf({4, 3}, 14, 0.0, 1.0), testing::leaf({4, 1}, 15, 0.5, 2.0),
         testing::leaf({3}, 16, 0.5, 3.0)});
    EXPECT_TRUE(result.ok) << "reduction " << static_cast<int>(r) << ": " << result.report;
  }
  // Non-contiguous input and target.
  auto t = autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0].t(), in[1].t()); },
      {testing::leaf({3, 4}, 17, -5.0, 5.0), testing::leaf({3, 4}, 18, 0.0, 1.0)});
  EXPECT_TRUE(t.ok) << t.report;
}

// ---------------------------------------------------------------------------------------------
// Modules
// ---------------------------------------------------------------------------------------------

TEST(LossModules, DefaultsAndOptionsMatchTheFunctions) {
  Tensor x = make(uniform_values(6, 19, -3, 3), {2, 3}), y = make(uniform_values(6, 20, 0, 1), {2, 3});
  EXPECT_EQ(nn::L1Loss()(x, y).item(), l1_loss(x, y).item());
  EXPECT_EQ(nn::L1Loss(Reduction::Sum)(x, y).item(), l1_loss(x, y, Reduction::Sum).item());
  EXPECT_EQ(nn::SmoothL1Loss()(x, y).item(), smooth_l1_loss(x, y, Reduction::Mean, 1.0).item());
  EXPECT_EQ(nn::SmoothL1Loss(Reduction::Sum, 0.5)(x, y).item(), smooth_l1_loss(x, y, Reduction::Sum, 0.5).item());
  EXPECT_EQ(nn::HuberLoss()(x, y).item(), huber_loss(x, y, Reduction::Mean, 1.0).item());
  EXPECT_EQ(nn::HuberLoss(Reduction::None, 2.0)(x, y).sizes(), (Shape{2, 3}));
  EXPECT_EQ(nn::BCEWithLogitsLoss()(x, y).item(), binary_cross_entropy_with_logits(x, y).item());
  BCEWithLogitsOptions o;
  o.pos_weight = make({1.0, 2.0, 3.0}, {3});
  EXPECT_EQ(nn::BCEWithLogitsLoss(o)(x, y).item(), binary_cross_entropy_with_logits(x, y, o).item());
  EXPECT_NE(nn::BCEWithLogitsLoss(o)(x, y).item(), nn::BCEWithLogitsLoss()(x, y).item());
  // NLLLoss over log-probabilities, with its options.
  Tensor lp = log_softmax(x, 1);
  Tensor t = tensor<int64_t>({2, 0}, {2});
  EXPECT_EQ(nn::NLLLoss()(lp, t).item(), nll_loss(lp, t).item());
  EXPECT_NEAR(nn::NLLLoss()(lp, t).item(), nn::CrossEntropyLoss()(x, t).item(), 1e-14);
  CrossEntropyOptions w;
  w.weight = make({1.0, 1.0, 3.0}, {3});
  const double lp0 = values(lp)[2], lp1 = values(lp)[3];
  EXPECT_NEAR(nn::NLLLoss(w)(lp, t).item(), -(3 * lp0 + lp1) / 4.0, 1e-14);
  EXPECT_NE(nn::NLLLoss(w)(lp, t).item(), nn::NLLLoss()(lp, t).item());
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

TEST(LossErrors, ShapesDtypesAndParameters) {
  Tensor x = zeros({2, 3}, kFloat64), y3 = zeros({3}, kFloat64), y = zeros({2, 3}, kFloat64);
  expect_error([&] { l1_loss(x, y3); }, {"l1_loss", "[2, 3]", "[3]", "same shape"});
  expect_error([&] { smooth_l1_loss(x, zeros({2, 1}, kFloat64)); }, {"smooth_l1_loss", "[2, 3]", "[2, 1]"});
  expect_error([&] { huber_loss(x, zeros({3, 2}, kFloat64)); }, {"huber_loss", "[2, 3]", "[3, 2]"});
  expect_error([&] { binary_cross_entropy_with_logits(x, y3); }, {"binary_cross_entropy_with_logits", "[2, 3]", "[3]"});
  expect_error([&] { l1_loss(x, zeros({2, 3}, kInt64)); }, {"l1_loss", "target", "int64"});
  expect_error(
      [&] {
        binary_cross_entropy_with_logits(zeros({2, 3}, kInt64), y);
      },
      {"binary_cross_entropy_with_logits", "int64"});
  expect_error([&] { l1_loss(Tensor(), y); }, {"l1_loss", "input"});
  expect_error([&] { smooth_l1_loss(x, y, Reduction::Mean, -0.5); }, {"smooth_l1_loss", "beta", "-0.5"});
  expect_error([&] { huber_loss(x, y, Reduction::Mean, 0.0); }, {"huber_loss", "delta", "0"});
  expect_error([&] { huber_loss(x, y, Reduction::Mean, -1.0); }, {"huber_loss", "delta", "-1"});
  BCEWithLogitsOptions o;
  o.pos_weight = ones({4}, kFloat64);
  expect_error([&] { binary_cross_entropy_with_logits(x, y, o); },
               {"binary_cross_entropy_with_logits", "pos_weight", "[4]", "[2, 3]"});
  o.pos_weight = ones({1, 2, 3}, kFloat64);  // would enlarge the loss to [1, 2, 3]
  expect_error([&] { binary_cross_entropy_with_logits(x, y, o); }, {"pos_weight", "[1, 2, 3]"});
  o.pos_weight = Tensor();
  o.weight = ones({2}, kFloat64);
  expect_error([&] { binary_cross_entropy_with_logits(x, y, o); }, {"weight", "[2]", "[2, 3]"});
  o.weight = ones({3}, kInt64);
  expect_error([&] { binary_cross_entropy_with_logits(x, y, o); }, {"weight", "int64"});
  // The legal broadcasts pass.
  o.weight = ones({2, 1}, kFloat64);
  o.pos_weight = ones({1, 3}, kFloat64);
  EXPECT_NO_THROW(binary_cross_entropy_with_logits(x, y, o));
}

TEST(LossErrors, EmptyInput) {
  Tensor e = zeros({0, 3}, kFloat64);
  for (const Case& c : cases()) {
    std::string name = c.name.substr(0, c.name.find(' '));
    if (name == "bce_with_logits") name = "binary_cross_entropy_with_logits";
    expect_error([&] { c.loss(e, e, Reduction::Mean); }, {name, "empty", "[0, 3]"});
    EXPECT_EQ(c.loss(e, e, Reduction::Sum).item(), 0.0) << c.name;
    EXPECT_EQ(c.loss(e, e, Reduction::None).sizes(), (Shape{0, 3})) << c.name;
  }
}

}  // namespace
}  // namespace tapegrad
