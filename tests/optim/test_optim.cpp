// Optimisers against independent references: a plain double loop of PyTorch's documented update
// rules, and values worked out by hand.
#include <cmath>

#include "support/optim_reference.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;

// Gradient for step k of the reference runs: a fixed, varied sequence.
std::vector<double> grad_at(int k) {
  return {0.5 - 0.1 * k, -1.0 + 0.3 * k, 2.0 * std::cos(k)};
}

using SgdRef = testing::SgdRule;
using AdamRef = testing::AdamRule;

std::vector<double> sgd_reference(const std::vector<double>& p, const SgdRef& o, int steps) {
  return testing::sgd_reference(p, o, steps, grad_at);
}

std::vector<double> adam_reference(const std::vector<double>& p, const AdamRef& o, int steps) {
  return testing::adam_reference(p, o, steps, grad_at);
}

const std::vector<double> kStart{1.0, -2.0, 0.5};

template <class Opt>
Tensor run(Opt& opt, Tensor& p, int steps) {
  for (int k = 0; k < steps; ++k) {
    p.set_grad(tensor<double>(grad_at(k)));
    opt.step();
  }
  return p;
}

TEST(SGD, PlainStepByHand) {
  Tensor p = tensor<double>({1.0, 2.0}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  p.set_grad(tensor<double>({0.5, -1.0}));
  opt.step();
  expect_close(p, {0.95, 2.1}, 1e-15);
}

struct SgdCase {
  const char* name;
  SgdRef ref;
};
class SgdMatchesReference : public ::testing::TestWithParam<SgdCase> {};

TEST_P(SgdMatchesReference, FiveSteps) {
  const SgdRef& o = GetParam().ref;
  Tensor p = tensor<double>(kStart).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions(o.lr)
                          .momentum(o.momentum)
                          .dampening(o.dampening)
                          .weight_decay(o.weight_decay)
                          .nesterov(o.nesterov));
  run(opt, p, 5);
  expect_close(p, sgd_reference(kStart, o, 5), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Optim, SgdMatchesReference,
                         ::testing::Values(SgdCase{"plain", {0.1, 0, 0, 0, false}},
                                           SgdCase{"momentum", {0.05, 0.9, 0, 0, false}},
                                           SgdCase{"dampening", {0.05, 0.9, 0.3, 0, false}},
                                           SgdCase{"nesterov", {0.05, 0.9, 0, 0, true}},
                                           SgdCase{"weight_decay", {0.1, 0.5, 0, 0.01, false}}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Adam, FirstStepMovesByLearningRate) {
  // After one step m_hat = g and v_hat = g^2, so the update is lr * g / (|g| + eps).
  Tensor p = tensor<double>({1.0, -3.0}).requires_grad_();
  optim::Adam opt({p}, optim::AdamOptions(0.1));
  p.set_grad(tensor<double>({0.5, -4.0}));
  opt.step();
  expect_close(p, {1.0 - 0.1 * 0.5 / (0.5 + 1e-8), -3.0 + 0.1 * 4.0 / (4.0 + 1e-8)}, 1e-14);
}

struct AdamCase {
  const char* name;
  AdamRef ref;
};
class AdamMatchesReference : public ::testing::TestWithParam<AdamCase> {};

TEST_P(AdamMatchesReference, FiveSteps) {
  const AdamRef& o = GetParam().ref;
  Tensor p = tensor<double>(kStart).requires_grad_();
  optim::AdamOptions options =
      optim::AdamOptions(o.lr).betas(o.b1, o.b2).eps(o.eps).weight_decay(o.weight_decay).amsgrad(o.amsgrad);
  std::unique_ptr<optim::Optimizer> opt;
  if (o.decoupled)
    opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, options);
  else
    opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, options);
  run(*opt, p, 5);
  expect_close(p, adam_reference(kStart, o, 5), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Optim, AdamMatchesReference,
                         ::testing::Values(AdamCase{"adam", {1e-2, 0.9, 0.999, 1e-8, 0, false, false}},
                                           AdamCase{"adam_betas", {3e-2, 0.8, 0.99, 1e-6, 0, false, false}},
                                           AdamCase{"adam_l2", {1e-2, 0.9, 0.999, 1e-8, 0.1, false, false}},
                                           AdamCase{"adam_amsgrad", {1e-2, 0.9, 0.999, 1e-8, 0, false, true}},
                                           AdamCase{"adamw", {1e-2, 0.9, 0.999, 1e-8, 0.05, true, false}},
                                           AdamCase{"adamw_amsgrad", {1e-2, 0.9, 0.999, 1e-8, 0.05, true, true}}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Adam, Float32MatchesFloat64) {
  Tensor p64 = tensor<double>(kStart).requires_grad_();
  Tensor p32 = tensor<double>(kStart).to(kFloat32).requires_grad_();
  optim::Adam a64({p64}), a32({p32});
  for (int k = 0; k < 5; ++k) {
    p64.set_grad(tensor<double>(grad_at(k)));
    p32.set_grad(tensor<double>(grad_at(k)).to(kFloat32));
    a64.step();
    a32.step();
  }
  expect_close(p32, testing::values(p64), 1e-6);
}

TEST(Adam, StateDictRoundTripContinuesIdentically) {
  Tensor a = tensor<double>(kStart).requires_grad_();
  Tensor b = tensor<double>(kStart).requires_grad_();
  optim::Adam first({a}), second({b});
  run(first, a, 3);
  b.set_data(a.detach().clone());
  second.load_state_dict(first.state_dict());
  for (int k = 3; k < 6; ++k) {
    a.set_grad(tensor<double>(grad_at(k)));
    b.set_grad(tensor<double>(grad_at(k)));
    first.step();
    second.step();
  }
  expect_close(b, testing::values(a), 0);
}

TEST(Optimizer, SkipsParametersWithoutGradAndZeroGrad) {
  Tensor p = tensor<double>({1.0}).requires_grad_();
  Tensor q = tensor<double>({2.0}).requires_grad_();
  optim::SGD opt({p, q}, optim::SGDOptions(1.0));
  p.set_grad(tensor<double>({0.25}));
  opt.step();
  expect_close(p, {0.75}, 0);
  expect_close(q, {2.0}, 0);
  opt.zero_grad(false);
  expect_close(p.grad(), {0.0}, 0);
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(Optimizer, BadSettingsAreErrors) {
  Tensor p = zeros({2}).requires_grad_();
  expect_error([&] { optim::SGD({p}, optim::SGDOptions(-1.0)); }, {"learning rate", "-1"});
  expect_error([&] { optim::SGD({p}, optim::SGDOptions(NAN)); }, {"learning rate"});
  expect_error([&] { optim::SGD({p}, optim::SGDOptions(0.1).nesterov(true)); }, {"SGD", "nesterov"});
  expect_error([&] { optim::Adam({p}, optim::AdamOptions().betas(1.0, 0.9)); }, {"Adam", "betas"});
  Tensor not_leaf = mul(p, 2.0);
  expect_error([&] { optim::Adam({not_leaf}); }, {"leaf"});
}

}  // namespace
}  // namespace tapegrad

namespace tapegrad {
namespace {

TEST(Scheduler, StepLRDecaysEveryStepSize) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions(1.0));
  optim::StepLR sched(opt, 2, 0.5);
  std::vector<double> seen;
  for (int e = 0; e < 6; ++e) {
    seen.push_back(opt.lr());
    sched.step();
  }
  EXPECT_EQ(seen, (std::vector<double>{1.0, 1.0, 0.5, 0.5, 0.25, 0.25}));
}

TEST(Scheduler, CosineAnnealingEndsAtEtaMin) {
  Tensor p = zeros({1}).requires_grad_();
  optim::Adam opt({p}, optim::AdamOptions(0.1));
  optim::CosineAnnealingLR sched(opt, 4, 0.01);
  std::vector<double> expected{0.1, 0.01 + 0.09 * (1 + std::cos(M_PI / 4)) / 2, 0.055,
                               0.01 + 0.09 * (1 + std::cos(3 * M_PI / 4)) / 2, 0.01};
  for (int e = 0; e <= 4; ++e) {
    EXPECT_NEAR(opt.lr(), expected[e], 1e-12) << "epoch " << e;
    sched.step();
  }
  sched.set_epoch(2);
  EXPECT_NEAR(opt.lr(), 0.055, 1e-12);
  testing::expect_error([&] { optim::StepLR(opt, 0); }, {"StepLR", "step_size"});
}

}  // namespace
}  // namespace tapegrad
