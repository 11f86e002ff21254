// cross_entropy, nll_loss and log_softmax with masked (-inf) logits, on the CPU: the loss is
// PyTorch's (finite without label smoothing, +inf with it) and the gradient is finite, 0 for the
// masked class without smoothing. Also the per-class weight of cross_entropy and nll_loss.
#include <cmath>
#include <limits>
#include <vector>

#include "support/reference.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;
using testing::values;

using reference::kInf;
using reference::make;
using reference::make_i64;

// log(sum exp) of the finite entries of [1, 2, -inf, 0.5], and the softmax.
double masked_lse() {
  return std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5));
}
std::vector<double> masked_softmax() {
  const double l = masked_lse();
  return {std::exp(1.0 - l), std::exp(2.0 - l), 0.0, std::exp(0.5 - l)};
}

double tol(DType dt) {
  return dt == kFloat32 ? 2e-6 : 1e-12;
}

class MaskedLogits : public ::testing::TestWithParam<DType> {};

TEST_P(MaskedLogits, CrossEntropyIsFiniteWithoutSmoothing) {
  const DType dt = GetParam();
  const double expected = masked_lse() - 2.0;
  EXPECT_NEAR(expected, 0.4644, 1e-4);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    Tensor z = make({1, 2, -kInf, 0.5}, {1, 4}, dt).requires_grad_(true);
    CrossEntropyOptions o;
    o.reduction = r;
    Tensor loss = cross_entropy(z, make_i64({1}, {1}), o);
    std::vector<double> got = values(loss);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_NEAR(got[0], expected, tol(dt)) << "reduction " << static_cast<int>(r);
    sum(loss).backward();
    std::vector<double> p = masked_softmax();
    p[1] -= 1.0;
    std::vector<double> grad = values(z.grad());
    for (size_t c = 0; c < 4; ++c) {
      EXPECT_TRUE(std::isfinite(grad[c])) << c;
      EXPECT_NEAR(grad[c], p[c], tol(dt)) << c;
    }
    EXPECT_EQ(grad[2], 0.0);
  }
}

TEST_P(MaskedLogits, CrossEntropyUnbatchedAndInABatch) {
  const DType dt = GetParam();
  Tensor row = make({1, 2, -kInf, 0.5}, {4}, dt);
  EXPECT_NEAR(cross_entropy(row, make_i64({1}, {1}).reshape({})).item(), masked_lse() - 2.0, tol(dt));
  // A masked row beside an ordinary one: the mean is finite and the gradient too.
  Tensor z = make({1, 2, -kInf, 0.5, 0.1, 0.2, 0.3, 0.4}, {2, 4}, dt).requires_grad_(true);
  Tensor loss = cross_entropy(z, make_i64({1, 3}, {2}));
  const double second = std::log(std::exp(0.1) + std::exp(0.2) + std::exp(0.3) + std::exp(0.4)) - 0.4;
  EXPECT_NEAR(loss.item(), (masked_lse() - 2.0 + second) / 2.0, tol(dt));
  loss.backward();
  for (double g : values(z.grad())) EXPECT_TRUE(std::isfinite(g));
  EXPECT_EQ(values(z.grad())[2], 0.0);
}

// PyTorch: (1 - e) * nll + e / C * sum_c(-log_softmax_c) = +inf for a -inf logit. The gradient is
// that of the formula, softmax - (1 - e) onehot - e / C: finite, -e / C for the masked class.
TEST_P(MaskedLogits, CrossEntropyWithSmoothingIsInfiniteWithAFiniteGradient) {
  const DType dt = GetParam();
  const double e = 0.1;
  Tensor z = make({1, 2, -kInf, 0.5}, {1, 4}, dt).requires_grad_(true);
  CrossEntropyOptions o;
  o.label_smoothing = e;
  Tensor loss = cross_entropy(z, make_i64({1}, {1}), o);
  EXPECT_EQ(loss.item(), kInf);
  loss.backward();
  std::vector<double> expected = masked_softmax();
  for (double& g : expected) g -= e / 4.0;
  expected[1] -= 1.0 - e;
  std::vector<double> grad = values(z.grad());
  for (size_t c = 0; c < 4; ++c) EXPECT_NEAR(grad[c], expected[c], tol(dt)) << c;
}

// A -inf target logit: nll = +inf (PyTorch too), the gradient softmax - onehot stays finite.
TEST_P(MaskedLogits, CrossEntropyOfAMaskedTargetIsInfinite) {
  const DType dt = GetParam();
  Tensor z = make({1, 2, -kInf, 0.5}, {1, 4}, dt).requires_grad_(true);
  Tensor loss = cross_entropy(z, make_i64({2}, {1}));
  EXPECT_EQ(loss.item(), kInf);
  loss.backward();
  std::vector<double> expected = masked_softmax();
  expected[2] = -1.0;
  std::vector<double> grad = values(z.grad());
  for (size_t c = 0; c < 4; ++c) EXPECT_NEAR(grad[c], expected[c], tol(dt)) << c;
}

TEST_P(MaskedLogits, LogSoftmaxAndNllLoss) {
  const DType dt = GetParam();
  Tensor z = make({1, 2, -kInf, 0.5}, {1, 4}, dt).requires_grad_(true);
  Tensor lp = log_softmax(z, 1);
  std::vector<double> got = values(lp);
  EXPECT_EQ(got[2], -kInf);
  EXPECT_NEAR(got[1], 2.0 - masked_lse(), tol(dt));
  Tensor loss = nll_loss(lp, make_i64({1}, {1}));
  EXPECT_NEAR(loss.item(), masked_lse() - 2.0, tol(dt));
  loss.backward();
  std::vector<double> expected = masked_softmax();
  expected[1] -= 1.0;
  std::vector<double> grad = values(z.grad());
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_TRUE(std::isfinite(grad[c])) << c;
    EXPECT_NEAR(grad[c], expected[c], tol(dt)) << c;
  }
  // An ignored row that holds -inf where the ignored target reads: no NaN leaks into the result.
  Tensor lp2 = make({-kInf, -1.0, -2.0, -0.5}, {2, 2}, dt).requires_grad_(true);
  Tensor l2 = nll_loss(lp2, make_i64({-100, 1}, {2}), CrossEntropyOptions{Reduction::Sum});
  EXPECT_NEAR(l2.item(), 0.5, tol(dt));
  l2.backward();
  EXPECT_EQ(values(lp2.grad()), (std::vector<double>{0, 0, 0, -1}));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MaskedLogits, ::testing::Values(kFloat64, kFloat32));

// ---------------------------------------------------------------------------------------------
// Per-class weight
// ---------------------------------------------------------------------------------------------

// PyTorch's weighted cross-entropy with smoothing in double, over rows of `classes` logits:
// nll_r = -w[t] lp[t], smooth_r = -sum_c w_c lp_c (0 for ignored rows); mean divides both by
// sum of w[t] over the rows kept; result (1 - e) nll + e / C smooth.
double weighted_ce_reference(const std::vector<double>& z, const std::vector<int64_t>& t, const std::vector<double>& w,
                             int64_t classes, double e, Reduction r, int64_t ignore = -100) {
  double nll = 0, smooth = 0, total = 0;
  for (size_t n = 0; n < t.size(); ++n) {
    if (t[n] == ignore) continue;
    double lse = 0;
    for (int64_t c = 0; c < classes; ++c) lse += std::exp(z[n * classes + c]);
    lse = std::log(lse);
    nll += -w[t[n]] * (z[n * classes + t[n]] - lse);
    for (int64_t c = 0; c < classes; ++c) smooth += -w[c] * (z[n * classes + c] - lse);
    total += w[t[n]];
  }
  if (r == Reduction::Mean) {
    nll /= total;
    smooth /= total;
  }
  return (1 - e) * nll + e / static_cast<double>(classes) * smooth;
}

TEST(ClassWeight, CrossEntropyAndNllMatchTheFormula) {
  const std::vector<double> z = {0.3, -1.2, 2.0, 0.7, 0.1, -0.4, 1.5, 0.2, -2.0, 0.9, 0.0, 0.5};
  const std::vector<int64_t> t = {2, 0, -100, 1};
  const std::vector<double> w = {0.5, 2.0, 1.5};
  for (DType dt : {kFloat64, kFloat32}) {
    const double eps = dt == kFloat32 ? 1e-5 : 1e-12;
    for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
      for (double e : {0.0, 0.2}) {
        CrossEntropyOptions o;
        o.reduction = r;
        o.label_smoothing = e;
        o.weight = make(w, {3}, dt);
        const double expected = weighted_ce_reference(z, t, w, 3, e, r);
        EXPECT_NEAR(cross_entropy(make(z, {4, 3}, dt), make_i64(t, {4}), o).item(), expected, eps)
            << "e " << e << " reduction " << static_cast<int>(r);
        if (e == 0.0)
          EXPECT_NEAR(nll_loss(log_softmax(make(z, {4, 3}, dt), 1), make_i64(t, {4}), o).item(), expected, eps);
      }
    }
    CrossEntropyOptions none;
    none.reduction = Reduction::None;
    none.weight = make(w, {3}, dt);
    std::vector<double> rows = values(cross_entropy(make(z, {4, 3}, dt), make_i64(t, {4}), none));
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows[2], 0.0);
    EXPECT_NEAR(rows[0], weighted_ce_reference({z[0], z[1], z[2]}, {2}, w, 3, 0.0, Reduction::Sum), eps);
  }
  // Weight all ones equals no weight (the fused kernel), smoothing included.
  CrossEntropyOptions plain, ones_w;
  plain.label_smoothing = ones_w.label_smoothing = 0.3;
  ones_w.weight = ones({3}, kFloat64);
  EXPECT_NEAR(cross_entropy(make(z, {4, 3}), make_i64(t, {4}), ones_w).item(),
              cross_entropy(make(z, {4, 3}), make_i64(t, {4}), plain).item(), 1e-12);
}

TEST(ClassWeight, Gradcheck) {
  const std::vector<int64_t> t = {2, 0, 1, 1};
  for (double e : {0.0, 0.25}) {
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      CrossEntropyOptions o;
      o.reduction = r;
      o.label_smoothing = e;
      o.weight = make({0.5, 2.0, 1.5}, {3});
      auto result =
          autograd::gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], make_i64(t, {4}), o); },
                              {testing::leaf({4, 3}, 7, -2.0, 2.0)});
      EXPECT_TRUE(result.ok) << result.report;
      if (e == 0.0) {
        auto nll =
            autograd::gradcheck([&](const std::vector<Tensor>& in) { return nll_loss(in[0], make_i64(t, {4}), o); },
                                {testing::leaf({4, 3}, 8, -2.0, 0.0)});
        EXPECT_TRUE(nll.ok) << nll.report;
      }
    }
  }
}

TEST(ClassWeight, BadWeight) {
  Tensor z = make({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = make_i64({0, 2}, {2});
  CrossEntropyOptions o;
  o.weight = ones({4}, kFloat64);
  expect_error([&] { cross_entropy(z, t, o); }, {"cross_entropy", "weight", "[4]", "[3]", "[2, 3]"});
  expect_error([&] { nll_loss(z, t, o); }, {"nll_loss", "weight", "[4]"});
  o.weight = ones({1, 3}, kFloat64);
  expect_error([&] { cross_entropy(z, t, o); }, {"cross_entropy", "weight", "[1, 3]"});
  o.weight = ones({3}, kInt64);
  expect_error([&] { nll_loss(z, t, o); }, {"nll_loss", "weight", "int64"});
}

}  // namespace
}  // namespace tapegrad
