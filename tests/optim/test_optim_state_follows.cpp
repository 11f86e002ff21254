// An optimiser's state follows its parameters: after Module::to(dtype) (or set_data with another
// dtype) the moments and momentum buffers are converted, and a parameter whose shape changed under
// the optimiser is refused with a clear error, never updated with mismatched buffers.
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

void train_step(nn::Linear& lin, optim::Optimizer& opt) {
  Tensor x = ones({4, 256}, TensorOptions(lin.weight.dtype()));
  Tensor loss = lin.forward(x).sum();
  loss.backward();
  opt.step();
  opt.zero_grad();
}

// Issue 16, item 1: heap-buffer-overflow in the Adam update after Linear::to(kFloat64).
TEST(OptimStateFollows, AdamAfterModuleToFloat64) {
  manual_seed(0);
  auto lin = std::make_shared<nn::Linear>(256, 256);
  optim::Adam opt(lin->parameters());
  train_step(*lin, opt);
  lin->to(kFloat64);
  train_step(*lin, opt);
  // The state now has the parameters' dtype, and a state dict round trip keeps it.
  for (const auto& [name, t] : opt.state_dict())
    if (name.find("exp_avg") != std::string::npos) EXPECT_EQ(t.dtype(), kFloat64) << name;
  EXPECT_EQ(lin->weight.dtype(), kFloat64);
}

// The converted state continues exactly where the old one stopped: the same run in f64 from the
// start and a run converted after one step agree to float precision.
TEST(OptimStateFollows, AdamConvertedStateMatchesAContinuousRun) {
  manual_seed(0);
  auto a = std::make_shared<nn::Linear>(256, 256);
  auto b = std::make_shared<nn::Linear>(256, 256);
  b->load_state_dict(a->state_dict());
  optim::Adam opt_a(a->parameters());
  optim::Adam opt_b(b->parameters());
  train_step(*a, opt_a);
  train_step(*b, opt_b);
  a->to(kFloat64);
  b->to(kFloat64);
  opt_b.load_state_dict(opt_b.state_dict());  // an explicit conversion through the state dict
  train_step(*a, opt_a);
  train_step(*b, opt_b);
  testing::expect_close(a->weight, b->weight, 1e-12);
}

TEST(OptimStateFollows, SgdMomentumAfterModuleToFloat64) {
  manual_seed(0);
  auto lin = std::make_shared<nn::Linear>(256, 256);
  optim::SGD opt(lin->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  train_step(*lin, opt);
  lin->to(kFloat64);
  train_step(*lin, opt);
  for (const auto& [name, t] : opt.state_dict()) EXPECT_EQ(t.dtype(), kFloat64) << name;
}

TEST(OptimStateFollows, AmsgradAndForeachOffAfterDtypeChange) {
  manual_seed(0);
  auto lin = std::make_shared<nn::Linear>(256, 256);
  optim::Adam opt(lin->parameters(), optim::AdamOptions().amsgrad(true).foreach (false));
  train_step(*lin, opt);
  lin->to(kFloat64);
  train_step(*lin, opt);
  lin->to(kFloat32);
  train_step(*lin, opt);
  for (const auto& [name, t] : opt.state_dict())
    if (name.find("exp_avg") != std::string::npos) EXPECT_EQ(t.dtype(), kFloat32) << name;
}

TEST(OptimStateFollows, ShapeChangeUnderTheOptimiserIsRefused) {
  Tensor w = ones({8}).requires_grad_();
  optim::Adam adam({w});
  optim::SGD sgd({w}, optim::SGDOptions(0.1).momentum(0.9));
  (w * 2.0).sum().backward();
  adam.step();
  sgd.step();
  {
    NoGradGuard no_grad;
    w.set_data(ones({16}));
  }
  (w * 2.0).sum().backward();
  expect_error([&] { adam.step(); }, {"Adam", "parameter 0", "[8]", "[16]"});
  expect_error([&] { sgd.step(); }, {"SGD", "parameter 0", "[8]", "[16]"});
  // The refused step changed nothing.
  testing::expect_close(w, std::vector<double>(16, 1.0));
}

// Beyond the issue: a parameter listed twice was updated twice per step with two sets of state.
TEST(OptimStateFollows, AParameterListedTwiceIsRefused) {
  Tensor w = ones({2}).requires_grad_(), v = ones({2}).requires_grad_();
  expect_error([&] { optim::Adam({w, v, w}); }, {"parameter 2", "more than once"});
  expect_error([&] { optim::SGD({v, v}); }, {"parameter 1", "more than once"});
  // A module shared under two names (tied weights) lists its parameters once.
  auto shared = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential tied({shared, shared});
  EXPECT_EQ(tied.named_parameters().size(), 4u);
  EXPECT_EQ(tied.parameters().size(), 2u);
  optim::Adam ok(tied.parameters());
}

// Beyond the issue: a graph recorded before set_data kept an accumulator that stored a gradient of
// the old dtype as the leaf's .grad; it now converts it, and refuses one of the old shape.
TEST(OptimStateFollows, GraphRecordedBeforeSetDataAccumulatesInTheNewDtype) {
  Tensor w = ones({3}).requires_grad_();
  Tensor loss = (w * 2.0).sum();  // recorded while w is float32
  {
    NoGradGuard no_grad;
    w.set_data(w.to(kFloat64));
  }
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat64);
  testing::expect_close(w.grad(), {2, 2, 2});
  // A fresh graph gets a fresh accumulator, so both gradients add up in float64.
  (w * 3.0).sum().backward();
  testing::expect_close(w.grad(), {5, 5, 5});

  Tensor v = ones({3}).requires_grad_();
  Tensor stale = (v * 2.0).sum();
  {
    NoGradGuard no_grad;
    v.set_data(ones({5}));
  }
  expect_error([&] { stale.backward(); }, {"backward", "[5]", "[3]", "set_data"});
}

}  // namespace
}  // namespace tapegrad
