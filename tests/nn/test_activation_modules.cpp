// The parameterised activation modules (LeakyReLU, Softplus, ELU): values against PyTorch's
// formulas, equality with their functional ops (forward and backward), PyTorch's printed form,
// and bad parameters rejected by the constructor.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/parity.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;
using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<double> kPoints = {-30.0, -3.0, -1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0, 3.0, 15.0, 30.0};

Tensor points() {
  return tensor<double>(kPoints, {static_cast<int64_t>(kPoints.size())});
}

// PyTorch's formulas, written here in double.
double leaky_relu_ref(double x, double slope) {
  return x > 0 ? x : slope * x;
}
double softplus_ref(double x, double beta, double threshold) {
  return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}
double elu_ref(double x, double alpha) {
  return x > 0 ? x : alpha * std::expm1(x);
}

void expect_values(nn::UnaryModule& m, double (*ref)(double, double, double), double a, double b,
                   const std::string& what) {
  std::vector<double> got = values(m.forward(points()));
  for (size_t i = 0; i < kPoints.size(); ++i)
    EXPECT_NEAR(got[i], ref(kPoints[i], a, b), 1e-14 * (1 + std::fabs(got[i]))) << what << " at x = " << kPoints[i];
}

// The module's forward and backward are its op's, bit for bit.
void expect_same_as_op(nn::UnaryModule& m, const std::function<Tensor(const Tensor&)>& op, const std::string& what) {
  Generator g(3);
  Tensor x = mul(add(rand({4, 7}, kFloat32, &g), -0.5), 8.0);
  Tensor a = x.clone().requires_grad_(true), b = x.clone().requires_grad_(true);
  Tensor ya = m.forward(a), yb = op(b);
  testing::expect_allclose(ya, yb, testing::kExact, what + " forward");
  sum(mul(ya, ya)).backward();
  sum(mul(yb, yb)).backward();
  testing::expect_allclose(a.grad(), b.grad(), testing::kExact, what + " backward");
  EXPECT_TRUE(m.parameters().empty()) << what;
}

TEST(ActivationModules, LeakyReLU) {
  nn::LeakyReLU defaults;
  EXPECT_EQ(defaults.negative_slope(), 0.01);
  expect_values(
      defaults, [](double x, double s, double) { return leaky_relu_ref(x, s); }, 0.01, 0, "default");
  nn::LeakyReLU steep(0.2);
  expect_values(
      steep, [](double x, double s, double) { return leaky_relu_ref(x, s); }, 0.2, 0, "0.2");
  expect_same_as_op(
      steep, [](const Tensor& x) { return leaky_relu(x, 0.2); }, "LeakyReLU(0.2)");
  EXPECT_EQ(defaults.str(), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(steep.str(), "LeakyReLU(negative_slope=0.2)");
  EXPECT_EQ(nn::LeakyReLU(1).str(), "LeakyReLU(negative_slope=1.0)");
}

TEST(ActivationModules, Softplus) {
  nn::Softplus defaults;
  EXPECT_EQ(defaults.beta(), 1.0);
  EXPECT_EQ(defaults.threshold(), 20.0);
  expect_values(defaults, softplus_ref, 1.0, 20.0, "default");
  // beta * x = 30 > threshold: x itself; beta * x = 15 is computed.
  nn::Softplus sharp(2.0, 10.0);
  expect_values(sharp, softplus_ref, 2.0, 10.0, "beta 2, threshold 10");
  expect_same_as_op(
      sharp, [](const Tensor& x) { return softplus(x, 2.0, 10.0); }, "Softplus(2, 10)");
  EXPECT_EQ(defaults.str(), "Softplus(beta=1.0, threshold=20.0)");
  EXPECT_EQ(sharp.str(), "Softplus(beta=2.0, threshold=10.0)");
  EXPECT_EQ(nn::Softplus(0.5, kInf).str(), "Softplus(beta=0.5, threshold=inf)");
}

TEST(ActivationModules, ELU) {
  nn::ELU defaults;
  EXPECT_EQ(defaults.alpha(), 1.0);
  expect_values(
      defaults, [](double x, double a, double) { return elu_ref(x, a); }, 1.0, 0, "default");
  nn::ELU half(0.5);
  expect_values(
      half, [](double x, double a, double) { return elu_ref(x, a); }, 0.5, 0, "0.5");
  expect_same_as_op(
      half, [](const Tensor& x) { return elu(x, 0.5); }, "ELU(0.5)");
  EXPECT_EQ(defaults.str(), "ELU(alpha=1.0)");
  EXPECT_EQ(half.str(), "ELU(alpha=0.5)");
}

// Negative control for expect_values: a module with other parameters is told apart.
TEST(ActivationModules, ValueCheckSeesAWrongParameter) {
  std::vector<double> got = values(nn::LeakyReLU(0.02).forward(points()));
  EXPECT_NE(got[0], leaky_relu_ref(kPoints[0], 0.01));
  got = values(nn::ELU(2.0).forward(points()));
  EXPECT_NE(got[1], elu_ref(kPoints[1], 1.0));
}

TEST(ActivationModules, InASequential) {
  nn::Sequential model(nn::Linear(3, 4), nn::LeakyReLU(), nn::Linear(4, 4), nn::Softplus(), nn::ELU(0.5));
  EXPECT_EQ(model.str(),
            "Sequential(\n"
            "  (0): Linear(in_features=3, out_features=4, bias=true)\n"
            "  (1): LeakyReLU(negative_slope=0.01)\n"
            "  (2): Linear(in_features=4, out_features=4, bias=true)\n"
            "  (3): Softplus(beta=1.0, threshold=20.0)\n"
            "  (4): ELU(alpha=0.5)\n"
            ")");
  EXPECT_EQ(model.forward(zeros({2, 3})).sizes(), (Shape{2, 4}));
}

TEST(ActivationModules, BadParametersThrowFromTheConstructor) {
  expect_error([] { nn::LeakyReLU{kNaN}; }, {"LeakyReLU", "negative_slope", "nan"});
  expect_error([] { nn::LeakyReLU{kInf}; }, {"LeakyReLU", "negative_slope", "inf"});
  expect_error([] { nn::Softplus{0.0}; }, {"Softplus", "beta", "0"});
  expect_error([] { nn::Softplus{kNaN}; }, {"Softplus", "beta", "nan"});
  expect_error([] { nn::Softplus(1.0, kNaN); }, {"Softplus", "threshold", "NaN"});
  expect_error([] { nn::ELU{kInf}; }, {"ELU", "alpha", "inf"});
  // Braces above: `nn::ELU(kInf);` would declare a variable named kInf. Negative controls: edge
  // values that are allowed.
  EXPECT_NO_THROW(nn::LeakyReLU(-0.5));
  EXPECT_NO_THROW(nn::Softplus(-1.0, -kInf));
  EXPECT_NO_THROW(nn::ELU(0.0));
}

}  // namespace
}  // namespace tapegrad
