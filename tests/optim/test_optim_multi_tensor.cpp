// The multi-tensor optimiser path (foreach, the default) against the per-parameter path
// (foreach(false)): on the CPU the two must agree bit for bit, over several steps, with parameters
// of mixed dtypes, odd and large sizes, empty ones, and gradients missing on some steps (so the
// parameters' step counts differ and they fall into different groups). Where a GPU is present the
// same runs mix CPU and CUDA parameters.
#include <cmath>
#include <functional>
#include <memory>

#include "support/optim_reference.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

struct ParamSpec {
  Shape shape;
  DType dtype;
  Device device;
};

// Large enough to be split among threads, odd sizes, an empty one, and two dtypes.
std::vector<ParamSpec> cpu_specs() {
  return {{{3, 5}, kFloat32, kCPU},    {{70001}, kFloat32, kCPU}, {{0, 4}, kFloat32, kCPU},    {{7}, kFloat64, kCPU},
          {{129, 33}, kFloat64, kCPU}, {{1}, kFloat32, kCPU},     {{20000, 3}, kFloat32, kCPU}};
}

std::vector<Tensor> make_params(const std::vector<ParamSpec>& specs, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> params;
  for (const ParamSpec& s : specs)
    params.push_back(randn(s.shape, kFloat64, &g).to(s.device, s.dtype).requires_grad_());
  return params;
}

// Gives parameter i a gradient at step k, except that parameter 1 skips step 1 and parameter 3
// skips step 0: their state and step counts then differ from the others'.
void set_grads(const std::vector<Tensor>& params, int k) {
  Generator g(1000 + k);
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor grad = randn(params[i].sizes(), kFloat64, &g).to(params[i].device(), params[i].dtype());
    const bool skip = (i == 1 && k == 1) || (i == 3 && k == 0);
    params[i].set_grad(skip ? Tensor() : grad);
  }
}

using testing::adam;
using testing::MakeOptimizer;
using testing::sgd;

// Runs `steps` steps with foreach on and off from the same start and compares parameters and state.
void expect_paths_agree(const std::vector<ParamSpec>& specs, const MakeOptimizer& make, int steps = 4) {
  std::vector<Tensor> fused = make_params(specs, 7), single = make_params(specs, 7);
  auto opt_fused = make(fused, true);
  auto opt_single = make(single, false);
  for (int k = 0; k < steps; ++k) {
    set_grads(fused, k);
    set_grads(single, k);
    opt_fused->step();
    opt_single->step();
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<double> a = testing::values(fused[i].detach().cpu()), b = testing::values(single[i].detach().cpu());
    if (specs[i].device.is_cpu()) {
      EXPECT_EQ(a, b) << "parameter " << i << " differs between the multi-tensor and per-parameter paths";
    } else {
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-6 * (1 + std::abs(b[j]))) << "param " << i;
    }
  }
  auto state_fused = opt_fused->state_dict(), state_single = opt_single->state_dict();
  ASSERT_EQ(state_fused.size(), state_single.size());
  for (size_t i = 0; i < state_fused.size(); ++i) {
    EXPECT_EQ(state_fused[i].first, state_single[i].first);
    if (state_fused[i].second.device().is_cpu())
      EXPECT_EQ(testing::values(state_fused[i].second), testing::values(state_single[i].second))
          << state_fused[i].first;
  }
}

TEST(MultiTensorSGD, PlainMatchesPerParameterBitForBit) {
  expect_paths_agree(cpu_specs(), sgd(optim::SGDOptions(0.1)));
}

TEST(MultiTensorSGD, MomentumWeightDecayMatchesPerParameterBitForBit) {
  expect_paths_agree(cpu_specs(), sgd(optim::SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-3)));
}

TEST(MultiTensorSGD, NesterovMatchesPerParameterBitForBit) {
  expect_paths_agree(cpu_specs(), sgd(optim::SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(1e-2)));
}

TEST(MultiTensorAdam, AdamMatchesPerParameterBitForBit) {
  expect_paths_agree(cpu_specs(), adam(optim::AdamOptions(1e-2).weight_decay(1e-3), false));
}

TEST(MultiTensorAdam, AmsgradMatchesPerParameterBitForBit) {
  expect_paths_agree(cpu_specs(), adam(optim::AdamOptions(1e-2).betas(0.8, 0.99).amsgrad(true), false));
}

TEST(MultiTensorAdam, AdamWMatchesPerParameterBitForBit) {
  expect_paths_agree(cpu_specs(), adam(optim::AdamOptions(3e-3).weight_decay(0.1).amsgrad(true), true));
}

TEST(MultiTensorOptim, StateDictRoundTripContinuesIdentically) {
  // A checkpoint restored into the multi-tensor path continues as the original did.
  auto specs = cpu_specs();
  std::vector<Tensor> a = make_params(specs, 3), b = make_params(specs, 3);
  optim::Adam opt_a(a, optim::AdamOptions(1e-2).foreach (false));
  for (int k = 0; k < 2; ++k) {
    set_grads(a, k);
    opt_a.step();
  }
  for (size_t i = 0; i < a.size(); ++i) b[i].detach().copy_(a[i].detach());
  optim::Adam opt_b(b, optim::AdamOptions(1e-2));
  opt_b.load_state_dict(opt_a.state_dict());
  set_grads(a, 2);
  set_grads(b, 2);
  opt_a.step();
  opt_b.step();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(testing::values(a[i].detach()), testing::values(b[i].detach()));
}

TEST(MultiTensorOptim, NonContiguousParameterIsAnErrorBeforeAnyUpdate) {
  Tensor good = ones({4}).requires_grad_();
  Tensor bad = ones({3, 2}).t().requires_grad_();  // a leaf whose layout is transposed
  good.set_grad(ones({4}));
  bad.set_grad(ones({2, 3}));
  optim::SGD opt({good, bad}, optim::SGDOptions(0.5));
  testing::expect_error([&] { opt.step(); }, {"SGD", "parameter 1", "contiguous"});
  EXPECT_EQ(testing::values(good.detach()), std::vector<double>(4, 1.0)) << "no parameter may move";
}

// CPU and CUDA parameters (and two dtypes) in one optimiser: grouped by device, each group runs
// its own backend's path.
TEST(MultiTensorOptim, MixedDevicesGroupSeparately) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  std::vector<ParamSpec> specs = cpu_specs();
  specs.push_back({{1000, 70}, kFloat32, kCUDA});
  specs.push_back({{5}, kFloat64, kCUDA});
  specs.push_back({{0}, kFloat32, kCUDA});
  expect_paths_agree(specs, sgd(optim::SGDOptions(0.05).momentum(0.9).nesterov(true)));
  expect_paths_agree(specs, adam(optim::AdamOptions(1e-2).amsgrad(true), true));
}

}  // namespace
}  // namespace tapegrad
