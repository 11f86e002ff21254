// nn::utils::clip_grad_norm_ and clip_grad_value_ against torch.nn.utils' formulas, computed here
// in double: total = (sum over all gradient elements of |g|^p)^(1/p) (max |g| for p = inf), each
// gradient scaled by min(1, max_norm / (total + 1e-6)).
#include <cmath>
#include <limits>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using nn::utils::clip_grad_norm_;
using nn::utils::clip_grad_value_;
using testing::expect_error;

const double kInf = std::numeric_limits<double>::infinity();

struct Case {
  std::vector<Tensor> params;
  std::vector<std::vector<double>> grads;  // empty: no gradient
};

Case make_case(DType dtype = kFloat64) {
  Case c;
  c.grads = {{0.5, -1.25, 3.0}, {}, {-2.0, 0.75}, {4.5, -0.1, 0.2, -3.3}};
  for (const auto& g : c.grads) {
    const int64_t n = g.empty() ? 2 : static_cast<int64_t>(g.size());
    Tensor p = zeros({n}, dtype).requires_grad_();
    if (!g.empty()) p.set_grad(tensor<double>(g).to(dtype));
    c.params.push_back(p);
  }
  return c;
}

double reference_norm(const Case& c, double p) {
  double acc = 0;
  for (const auto& g : c.grads)
    for (double v : g) acc = std::isinf(p) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), p);
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

TEST(ClipGradNorm, ScalesEveryGradientByTheFormulaForEachNormType) {
  for (double p : {2.0, 1.0, 3.0, 0.5, kInf}) {
    Case c = make_case();
    const double total = reference_norm(c, p);
    const double max_norm = 0.4 * total;
    Tensor got = clip_grad_norm_(c.params, max_norm, p);
    EXPECT_EQ(got.dim(), 0);
    EXPECT_EQ(got.dtype(), kFloat64);
    EXPECT_NEAR(got.item(), total, 1e-13 * total) << "norm_type " << p;
    const double coef = max_norm / (total + 1e-6);
    for (size_t i = 0; i < c.params.size(); ++i) {
      if (c.grads[i].empty()) {
        EXPECT_FALSE(c.params[i].grad().defined()) << "a parameter without a gradient gets none";
        continue;
      }
      std::vector<double> expected;
      for (double v : c.grads[i]) expected.push_back(v * coef);
      testing::expect_close(c.params[i].grad(), expected, 1e-13);
    }
    // After clipping the norm is max_norm (less the 1e-6 guard's share).
    EXPECT_NEAR(clip_grad_norm_(c.params, 1e9, p).item(), max_norm * total / (total + 1e-6), 1e-12) << p;
  }
}

TEST(ClipGradNorm, GradientsWithinTheLimitAreLeftExactlyAsTheyWere) {
  Case c = make_case();
  const double total = reference_norm(c, 2.0);
  // coef = max_norm / (total + 1e-6) > 1 clamps to exactly 1: a multiplication by 1 changes no bit.
  Tensor got = clip_grad_norm_(c.params, total + 1e-3);
  EXPECT_NEAR(got.item(), total, 1e-13);
  for (size_t i = 0; i < c.params.size(); ++i)
    if (!c.grads[i].empty()) EXPECT_EQ(testing::values(c.params[i].grad()), c.grads[i]);
  // Negative control: a limit just below the norm does change them.
  clip_grad_norm_(c.params, total * 0.999);
  EXPECT_NE(testing::values(c.params[0].grad()), c.grads[0]);
}

TEST(ClipGradNorm, Float32AndHalfPrecisionGradients) {
  Case c = make_case(kFloat32);
  const double total = reference_norm(c, 2.0);
  Tensor got = clip_grad_norm_(c.params, 1.0);
  EXPECT_EQ(got.dtype(), kFloat32);
  EXPECT_NEAR(got.item(), total, 1e-6 * total);
  testing::expect_close(c.params[0].grad(), {0.5 / (total + 1e-6), -1.25 / (total + 1e-6), 3.0 / (total + 1e-6)}, 1e-7);

  // 300^2 overflows float16 (max 65504): the norm must still be 500 (sqrt(300^2 + 400^2)).
  for (DType dtype : {kFloat16, kBFloat16}) {
    Tensor p = zeros({2}, dtype).requires_grad_();
    p.set_grad(tensor<double>({300.0, 400.0}).to(dtype));
    Tensor norm = clip_grad_norm_({p}, 1e6);
    EXPECT_EQ(norm.dtype(), dtype);
    EXPECT_NEAR(norm.item(), 500.0, dtype == kFloat16 ? 0.5 : 2.0);
    clip_grad_norm_({p}, 5.0);
    testing::expect_close(p.grad(), {3.0, 4.0}, 0.02);
    clip_grad_value_({p}, 3.5);
    testing::expect_close(p.grad(), {3.0, 3.5}, 0.02);
  }
  // Mixed dtypes: the norm comes back in the promoted dtype.
  Tensor a = zeros({1}, kFloat32).requires_grad_(), b = zeros({1}, kFloat64).requires_grad_();
  a.set_grad(full({1}, 3.0, kFloat32));
  b.set_grad(full({1}, 4.0, kFloat64));
  Tensor mixed = clip_grad_norm_({a, b}, 10.0);
  EXPECT_EQ(mixed.dtype(), kFloat64);
  EXPECT_NEAR(mixed.item(), 5.0, 1e-12);
}

// Gradients whose squares (or powers, or their sum) overflow float32 still have a finite norm: the
// powers are summed in float64. Before, the norm came out inf and every gradient was zeroed.
TEST(ClipGradNorm, HugeFloat32GradientsDoNotOverflowTheNorm) {
  struct Huge {
    double p;
    std::vector<double> grad;
    double norm;  // by hand: (sum |g|^p)^(1/p)
  };
  const std::vector<Huge> cases{{2.0, {3e19, -4e19}, 5e19},                  // 9e38 > float32's max (3.4e38)
                                {2.0, {2e38, 2e38}, 2e38 * std::sqrt(2.0)},  // the norm itself still fits
                                {1.0, {3e38, -3e38}, 6e38},  // a sum past the max: the norm is inf in float32
                                {3.0, {1e13, -1e13}, 1e13 * std::cbrt(2.0)},  // 1e39 per term
                                {kInf, {-3.4e38, 1.0}, 3.4e38}};
  for (const Huge& h : cases) {
    Tensor p = zeros({2}, kFloat32).requires_grad_();
    p.set_grad(tensor<double>(h.grad).to(kFloat32));
    const double g0 = static_cast<float>(h.grad[0]), g1 = static_cast<float>(h.grad[1]);
    Tensor total = clip_grad_norm_({p}, 1.0, h.p);
    if (h.norm <= std::numeric_limits<float>::max())
      EXPECT_NEAR(total.item(), h.norm, 1e-6 * h.norm) << "norm_type " << h.p;
    else
      EXPECT_EQ(total.item(), kInf) << "the float32 result holds the norm as inf, but the clip used its value";
    // Scaled by max_norm / norm, not zeroed.
    testing::expect_close(p.grad(), {g0 / h.norm, g1 / h.norm}, 1e-6);
    EXPECT_NE(p.grad().abs().max().item(), 0.0) << "norm_type " << h.p;
  }
  // bfloat16 has float32's range, so the same overflow (summed in float32 before).
  Tensor q = zeros({2}, kBFloat16).requires_grad_();
  q.set_grad(tensor<double>({3e19, 4e19}).to(kBFloat16));
  clip_grad_norm_({q}, 1.0);
  testing::expect_close(q.grad(), {0.6, 0.8}, 0.01);
}

TEST(ClipGradNorm, NoGradientsGiveAZeroNorm) {
  Tensor p = zeros({3}).requires_grad_();
  Tensor norm = clip_grad_norm_({p}, 1.0);
  EXPECT_EQ(norm.item(), 0.0);
  EXPECT_EQ(norm.dtype(), kFloat32);
  EXPECT_EQ(clip_grad_norm_({}, 1.0).item(), 0.0);
  // An empty gradient contributes nothing, also to the infinity norm.
  Tensor e = zeros({0}).requires_grad_();
  e.set_grad(zeros({0}));
  Tensor q = zeros({1}).requires_grad_();
  q.set_grad(full({1}, -2.0));
  EXPECT_EQ(clip_grad_norm_({e, q}, 10.0, kInf).item(), 2.0);
}

TEST(ClipGradNorm, NonFiniteNormIsAnErrorOnRequestAndLeavesTheGradients) {
  for (double p : {2.0, 1.0, kInf}) {
    for (double bad : {std::nan(""), kInf}) {
      Case c = make_case();
      c.params[2].set_grad(tensor<double>({bad, 1.0}));
      expect_error([&] { clip_grad_norm_(c.params, 1.0, p, /*error_if_nonfinite=*/true); },
                   {"clip_grad_norm_", "total norm", "error_if_nonfinite"});
      EXPECT_EQ(testing::values(c.params[0].grad()), c.grads[0]) << "the gradients are not scaled";
      // Without the check, like PyTorch, the norm is returned and the gradients scaled by it.
      Tensor total = clip_grad_norm_(c.params, 1.0, p);
      EXPECT_FALSE(std::isfinite(total.item())) << "norm_type " << p << " grad " << bad;
      // The clip coefficient is max_norm / (total + 1e-6) clamped to at most 1: 0 for an inf norm,
      // NaN for a NaN norm (torch.clamp keeps NaN), so the finite gradients become 0 or NaN.
      for (double v : testing::values(c.params[0].grad())) {
        if (std::isnan(total.item()))
          EXPECT_TRUE(std::isnan(v)) << "norm_type " << p;
        else
          EXPECT_EQ(v, 0.0) << "norm_type " << p;
      }
    }
  }
  // Negative control: finite gradients pass the check.
  Case ok = make_case();
  EXPECT_NO_THROW(clip_grad_norm_(ok.params, 1.0, 2.0, true));
}

TEST(ClipGradNorm, BadInputIsAnError) {
  Case c = make_case();
  expect_error([&] { clip_grad_norm_(c.params, -1.0); }, {"clip_grad_norm_", "max_norm", "-1"});
  expect_error([&] { clip_grad_norm_(c.params, std::nan("")); }, {"clip_grad_norm_", "max_norm", "nan"});
  expect_error([&] { clip_grad_norm_(c.params, 1.0, 0.0); }, {"clip_grad_norm_", "norm_type", "0"});
  expect_error([&] { clip_grad_norm_(c.params, 1.0, -2.0); }, {"norm_type", "-2"});
  expect_error([&] { clip_grad_norm_(c.params, 1.0, std::nan("")); }, {"norm_type", "nan"});
  expect_error([&] { clip_grad_norm_({c.params[0], Tensor()}, 1.0); }, {"clip_grad_norm_", "parameter 1", "undefined"});
  // Nothing was scaled by the refused calls.
  EXPECT_EQ(testing::values(c.params[0].grad()), c.grads[0]);
}

TEST(ClipGradNorm, DoesNotRecordAndKeepsTheGradientTensors) {
  Case c = make_case();
  Tensor before = c.params[0].grad();
  Tensor total = clip_grad_norm_(c.params, 0.1);
  EXPECT_FALSE(total.requires_grad());
  EXPECT_EQ(c.params[0].grad().impl(), before.impl()) << "scaled in place, as PyTorch's mul_";
}

TEST(ClipGradValue, ClampsEveryGradientAndSkipsMissingOnes) {
  Case c = make_case();
  clip_grad_value_(c.params, 1.0);
  for (size_t i = 0; i < c.params.size(); ++i) {
    if (c.grads[i].empty()) {
      EXPECT_FALSE(c.params[i].grad().defined());
      continue;
    }
    std::vector<double> expected;
    for (double v : c.grads[i]) expected.push_back(std::min(1.0, std::max(-1.0, v)));
    EXPECT_EQ(testing::values(c.params[i].grad()), expected);
  }
  expect_error([&] { clip_grad_value_(c.params, -0.5); }, {"clip_grad_value_", "clip_value", "-0.5"});
  expect_error([&] { clip_grad_value_(c.params, std::nan("")); }, {"clip_grad_value_", "nan"});
  // Zero clamps everything to zero.
  clip_grad_value_(c.params, 0.0);
  EXPECT_EQ(testing::values(c.params[3].grad()), std::vector<double>(4, 0.0));
}

// Gradients on the GPU (and on both devices at once) give the CPU's numbers.
TEST(ClipGradNormCuda, MatchesTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (double p : {2.0, kInf}) {
    Case cpu = make_case(kFloat32), gpu = make_case(kFloat32), mixed = make_case(kFloat32);
    for (size_t i = 0; i < gpu.params.size(); ++i) {
      Tensor on_gpu = gpu.params[i].detach().to(kCUDA).requires_grad_();
      if (!gpu.grads[i].empty()) on_gpu.set_grad(gpu.params[i].grad().to(kCUDA));
      gpu.params[i] = on_gpu;
      if (i % 2 == 1) {
        Tensor m = mixed.params[i].detach().to(kCUDA).requires_grad_();
        if (!mixed.grads[i].empty()) m.set_grad(mixed.params[i].grad().to(kCUDA));
        mixed.params[i] = m;
      }
    }
    const double a = clip_grad_norm_(cpu.params, 1.0, p).item();
    Tensor b = clip_grad_norm_(gpu.params, 1.0, p);
    EXPECT_TRUE(b.device().is_cuda()) << "the norm stays on the gradients' device";
    const double c = clip_grad_norm_(mixed.params, 1.0, p).item();
    EXPECT_NEAR(b.item(), a, 1e-6 * a);
    EXPECT_NEAR(c, a, 1e-6 * a);
    for (size_t i = 0; i < cpu.params.size(); ++i) {
      if (cpu.grads[i].empty()) continue;
      testing::expect_close(gpu.params[i].grad().cpu(), testing::values(cpu.params[i].grad()), 1e-6);
      testing::expect_close(mixed.params[i].grad().cpu(), testing::values(cpu.params[i].grad()), 1e-6);
    }
  }
}

}  // namespace
}  // namespace tapegrad
