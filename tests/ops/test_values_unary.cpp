// Forward values of the unary ops against std math in double precision, constants and special values.
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
// Unary ops
// ---------------------------------------------------------------------------------------------

// torch.nn.functional.softplus: x itself where beta * x > threshold.
std::function<double(double)> softplus_ref(double beta, double threshold) {
  return [=](double x) { return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta; };
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -3, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.05, 20},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 20},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1.0 / std::sqrt(x); }, 0.05, 20},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -5, 5},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -10,
       10},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, -3, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }, -5, 5},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, -3, 3},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x); }, [](double x) { return x > 0 ? x : 0.01 * x; }, -3,
       3},
      {"leaky_relu(0.2)", [](const Tensor& x) { return leaky_relu(x, 0.2); },
       [](double x) { return x > 0 ? x : 0.2 * x; }, -3, 3},
      {"softplus", [](const Tensor& x) { return softplus(x); }, softplus_ref(1, 20), -30, 30},
      {"softplus(2, 5)", [](const Tensor& x) { return softplus(x, 2.0, 5.0); }, softplus_ref(2, 5), -6, 6},
      {"elu", [](const Tensor& x) { return elu(x); }, [](double x) { return x > 0 ? x : std::expm1(x); }, -5, 3},
      {"elu(0.5)", [](const Tensor& x) { return elu(x, 0.5); },
       [](double x) { return x > 0 ? x : 0.5 * std::expm1(x); }, -5, 3},
  };
}

TEST(UnaryValues, EveryOpMatchesStdMathInF32AndF64) {
  uint32_t seed = 10;
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      std::vector<double> v = data_for(dt, 60, seed++, c.lo, c.hi);
      Tensor x = make(v, {6, 10}, dt);
      Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), dt) << c.name;
      EXPECT_EQ(y.sizes(), (Shape{6, 10})) << c.name;
      expect_values(y, map_ref(v, c.ref), tol_for(dt), dt == kFloat32 ? 1e-6 : 1e-14,
                    std::string(c.name) + " " + dtype_name(dt));
    }
  }
}

TEST(UnaryValues, KnownConstants) {
  for (DType dt : {kFloat32, kFloat64}) {
    double rt = dt == kFloat32 ? 1e-6 : 1e-14;
    expect_values(exp(make({0.0, 1.0, -1.0}, {3}, dt)), {1.0, 2.718281828459045, 0.36787944117144233}, rt, 0);
    expect_values(log(make({1.0, 2.718281828459045, 0.5}, {3}, dt)), {0.0, 1.0, -0.6931471805599453}, rt, 1e-7);
    expect_values(sqrt(make({0.0, 4.0, 2.0}, {3}, dt)), {0.0, 2.0, 1.4142135623730951}, rt, 0);
    expect_values(rsqrt(make({0.25, 4.0, 1.0}, {3}, dt)), {2.0, 0.5, 1.0}, rt, 0);
    expect_values(tanh(make({0.0, 0.5, -20.0}, {3}, dt)), {0.0, 0.46211715726000974, -1.0}, rt, 0);
    expect_values(sigmoid(make({0.0, 2.0, -100.0, 100.0}, {4}, dt)), {0.5, 0.8807970779778823, 0.0, 1.0}, rt, 1e-30);
    expect_values(relu(make({-0.5, 0.0, 0.5}, {3}, dt)), {0.0, 0.0, 0.5}, 0, 0);
    expect_values(gelu(make({0.0, 1.0, -1.0, 2.0}, {4}, dt)),
                  {0.0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416}, rt, 1e-7);
    expect_values(square(make({-3.0, 0.5}, {2}, dt)), {9.0, 0.25}, 0, 0);
    expect_values(abs(make({-3.0, 0.0, 2.5}, {3}, dt)), {3.0, 0.0, 2.5}, 0, 0);
    expect_values(neg(make({-3.0, 0.0, 2.5}, {3}, dt)), {3.0, 0.0, -2.5}, 0, 0);
  }
}

TEST(UnaryValues, SpecialValues) {
  Tensor x = make({0.0, -1.0, kInf, -kInf, kNaN}, {5});
  expect_values(log(x), {-kInf, kNaN, kInf, kNaN, kNaN});
  expect_values(sqrt(x), {0.0, kNaN, kInf, kNaN, kNaN});
  expect_values(exp(x), {1.0, std::exp(-1.0), kInf, 0.0, kNaN});
  expect_values(tanh(x), {0.0, std::tanh(-1.0), 1.0, -1.0, kNaN});
  expect_values(relu(make({0.0, -1.0, kInf, -kInf}, {4})), {0.0, 0.0, kInf, 0.0}, 0, 0);
}

TEST(UnaryValues, IntegerInputs) {
  Tensor xi = make_i32({1, -2, 3, 0});
  Tensor n = neg(xi), a = abs(xi), r = relu(xi), s = square(xi);
  EXPECT_EQ(n.dtype(), kInt32);
  EXPECT_EQ(a.dtype(), kInt32);
  EXPECT_EQ(r.dtype(), kInt32);
  EXPECT_EQ(s.dtype(), kInt32);
  EXPECT_EQ(n.tolist<int32_t>(), (std::vector<int32_t>{-1, 2, -3, 0}));
  EXPECT_EQ(a.tolist<int32_t>(), (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(r.tolist<int32_t>(), (std::vector<int32_t>{1, 0, 3, 0}));
  EXPECT_EQ(s.tolist<int32_t>(), (std::vector<int32_t>{1, 4, 9, 0}));
  // Transcendentals of integers are float32, like PyTorch.
  Tensor e = exp(make_i64({0, 1}));
  EXPECT_EQ(e.dtype(), kFloat32);
  expect_values(e, {1.0, 2.718281828459045}, 1e-6, 0);
  Tensor q = sqrt(make_i64({4, 9}));
  EXPECT_EQ(q.dtype(), kFloat32);
  expect_values(q, {2.0, 3.0});
}

TEST(UnaryValues, MethodFormsMatchFreeFunctions) {
  std::vector<double> v = uniform_values(12, 3, 0.1, 2.0);
  Tensor x = make(v, {3, 4});
  expect_values(x.exp(), map_ref(v, [](double a) { return std::exp(a); }));
  expect_values(x.log(), map_ref(v, [](double a) { return std::log(a); }));
  expect_values(x.sqrt(), map_ref(v, [](double a) { return std::sqrt(a); }));
  expect_values(x.tanh(), map_ref(v, [](double a) { return std::tanh(a); }));
  expect_values(x.sigmoid(), map_ref(v, [](double a) { return 1 / (1 + std::exp(-a)); }));
  expect_values((-x).relu(), std::vector<double>(12, 0.0));
  expect_values((-x).abs(), v);
  expect_values(x.pow(3.0), map_ref(v, [](double a) { return a * a * a; }));
}

// ---------------------------------------------------------------------------------------------
// The parameterised activations: edges of their formulas
// ---------------------------------------------------------------------------------------------

TEST(ActivationValues, LeakyReluSlopesAndSpecialValues) {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = make({-2.0, -0.0, 0.0, 3.0, -kInf, kInf, kNaN}, {7}, dt);
    expect_values(leaky_relu(x), {-0.02, 0.0, 0.0, 3.0, -kInf, kInf, kNaN}, dt == kFloat32 ? 1e-7 : 1e-15, 0);
    // A negative slope (allowed, as in PyTorch) and slope 1 (the identity).
    expect_values(leaky_relu(x, -0.5), {1.0, 0.0, 0.0, 3.0, kInf, kInf, kNaN}, 0, 0);
    expect_values(leaky_relu(x, 1.0), values(x), 0, 0);
  }
}

TEST(ActivationValues, SoftplusThresholdEdge) {
  for (DType dt : {kFloat32, kFloat64}) {
    const double rt = dt == kFloat32 ? 2e-7 : 1e-15;
    // beta * x exactly at the threshold still takes the log1p branch; just past it returns x.
    Tensor at = make({10.0, 10.5, 20.0, 20.5}, {4}, dt);
    expect_values(softplus(at, 2.0, 20.0), {std::log1p(std::exp(20.0)) / 2.0, 10.5, 20.0, 20.5}, rt, 0,
                  "beta 2 threshold 20");
    expect_values(softplus(make({20.0, 20.25}, {2}, dt)), {std::log1p(std::exp(20.0)), 20.25}, rt, 0);
    // Negative control: the two branches differ measurably at the edge, so the test above can fail.
    EXPECT_GT(std::log1p(std::exp(20.0)) / 2.0 - 10.0, 1e-10);
    // Far below zero: exp underflows gracefully; softplus(0) = log 2 / beta.
    expect_values(softplus(make({-100.0, 0.0, 0.0}, {3}, dt), 0.5),
                  {2.0 * std::log1p(std::exp(-50.0)), 2.0 * std::log(2.0), 2.0 * std::log(2.0)}, rt, 0);
    expect_values(softplus(make({kInf, -kInf, kNaN}, {3}, dt)), {kInf, 0.0, kNaN});
    // A negative beta mirrors the curve (softplus(x, -1) = -log(1 + exp(-x))), and the threshold
    // applies to beta * x, so x = -30 returns itself.
    expect_values(softplus(make({1.0, -3.0, -30.0}, {3}, dt), -1.0),
                  {-std::log1p(std::exp(-1.0)), -std::log1p(std::exp(3.0)), -30.0}, rt, 0);
  }
}

TEST(ActivationValues, EluAlphaAndSpecialValues) {
  for (DType dt : {kFloat32, kFloat64}) {
    const double rt = dt == kFloat32 ? 2e-7 : 1e-15;
    Tensor x = make({-1e-8, -1.0, 0.0, 2.0, -kInf, kInf, kNaN}, {7}, dt);
    // expm1 keeps tiny negative inputs accurate: elu(-1e-8) = -1e-8 (1 - 5e-9), not 0.
    const double tiny = dt == kFloat32 ? static_cast<double>(static_cast<float>(-1e-8)) : -1e-8;
    expect_values(elu(x), {std::expm1(tiny), std::expm1(-1.0), 0.0, 2.0, -1.0, kInf, kNaN}, rt, 0);
    expect_values(elu(x, 2.5), {2.5 * std::expm1(tiny), 2.5 * std::expm1(-1.0), 0.0, 2.0, -2.5, kInf, kNaN}, rt, 0);
  }
}

TEST(ActivationValues, IntegerInputsComputeInFloat32) {
  Tensor xi = make_i64({-2, 0, 3});
  Tensor l = leaky_relu(xi), s = softplus(xi), e = elu(xi);
  EXPECT_EQ(l.dtype(), kFloat32);
  EXPECT_EQ(s.dtype(), kFloat32);
  EXPECT_EQ(e.dtype(), kFloat32);
  expect_values(l, {-0.02, 0.0, 3.0}, 1e-7, 0);
  expect_values(s, {std::log1p(std::exp(-2.0)), std::log(2.0), std::log1p(std::exp(3.0))}, 1e-6, 0);
  expect_values(e, {std::expm1(-2.0), 0.0, 3.0}, 1e-6, 0);
}

TEST(ActivationValues, BadParametersAreClearErrors) {
  Tensor x = make({1.0}, {1});
  testing::expect_error([&] { leaky_relu(x, kNaN); }, {"leaky_relu", "negative_slope", "nan"});
  testing::expect_error([&] { softplus(x, 0.0); }, {"softplus", "beta", "0"});
  testing::expect_error([&] { softplus(x, kInf); }, {"softplus", "beta", "inf"});
  testing::expect_error([&] { softplus(x, 1.0, kNaN); }, {"softplus", "threshold"});
  testing::expect_error([&] { elu(x, -kInf); }, {"elu", "alpha", "inf"});
  testing::expect_error([&] { leaky_relu(Tensor()); }, {"leaky_relu"});
  // Negative control: valid parameters, an infinite threshold among them, do not throw.
  EXPECT_NO_THROW(softplus(x, -2.0, kInf));
  EXPECT_NO_THROW(leaky_relu(x, 0.0));
  EXPECT_NO_THROW(elu(x, 0.0));
}

}  // namespace
}  // namespace tapegrad
