// autograd::register_post_accumulate_grad_hook: when it runs, what it sees, and its errors.
// Values are small integers, so every expected gradient is exact.
#include "support/test_util.h"
#include "tapegrad/autograd/hooks.h"

namespace tapegrad {
namespace {

Tensor leaf(std::vector<double> values) {
  Tensor t = tensor(values, {int64_t(values.size())}, kFloat64);
  t.requires_grad_();
  return t;
}

TEST(PostAccumulateGradHook, RunsOnceAfterAccumulationAndSeesTheSum) {
  Tensor w = leaf({1, 2, 3});
  std::vector<std::vector<double>> seen;
  auto handle = autograd::register_post_accumulate_grad_hook(w, [&](const Tensor& t) {
    EXPECT_TRUE(t.is_same(w));
    seen.push_back(testing::values(t.grad()));
  });
  // w is used twice in one graph: one accumulation, one call, with both contributions.
  (w * 2.0 + w * w).sum().backward();  // d/dw = 2 + 2w
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{4, 6, 8}));
  // A second backward accumulates; the hook sees the running sum.
  (w * 3.0).sum().backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<double>{7, 9, 11}));
  handle.remove();
  (w * 3.0).sum().backward();
  EXPECT_EQ(seen.size(), 2u) << "a removed hook ran";
  handle.remove();  // twice: nothing happens
}

TEST(PostAccumulateGradHook, RunsInRegistrationOrderAndMayChangeTheGrad) {
  Tensor w = leaf({1, 1});
  std::vector<int> order;
  auto first = autograd::register_post_accumulate_grad_hook(w, [&](const Tensor& t) {
    order.push_back(1);
    t.grad().mul_(10.0);
  });
  auto second = autograd::register_post_accumulate_grad_hook(w, [&](const Tensor& t) {
    order.push_back(2);
    EXPECT_EQ(testing::values(t.grad()), (std::vector<double>{10, 10}));
  });
  w.sum().backward();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(testing::values(w.grad()), (std::vector<double>{10, 10}));
}

TEST(PostAccumulateGradHook, NotRunForLeavesBackwardDoesNotReach) {
  Tensor used = leaf({1}), unused = leaf({1});
  int calls = 0;
  auto handle = autograd::register_post_accumulate_grad_hook(unused, [&](const Tensor&) { ++calls; });
  (used * 2.0).sum().backward();
  EXPECT_EQ(calls, 0);
  // Negative control: the same hook does run once `unused` is part of the graph.
  (used * unused).sum().backward();
  EXPECT_EQ(calls, 1);
}

TEST(PostAccumulateGradHook, SurvivesSetDataAndModuleTo) {
  nn::Linear layer(2, 1, true);
  int calls = 0;
  auto handle = autograd::register_post_accumulate_grad_hook(layer.weight, [&](const Tensor&) { ++calls; });
  layer.to(kFloat64);
  layer.forward(ones({3, 2}, kFloat64)).sum().backward();
  EXPECT_EQ(calls, 1);
}

TEST(PostAccumulateGradHook, AnExceptionInAHookReachesTheCaller) {
  Tensor w = leaf({1});
  auto handle =
      autograd::register_post_accumulate_grad_hook(w, [](const Tensor&) { throw Error("hook failed on purpose"); });
  testing::expect_error([&] { w.sum().backward(); }, {"hook failed on purpose"});
}

TEST(PostAccumulateGradHook, BadTensorsAreErrors) {
  auto noop = [](const Tensor&) {};
  testing::expect_error([&] { autograd::register_post_accumulate_grad_hook(Tensor(), noop); },
                        {"register_post_accumulate_grad_hook", "undefined"});
  testing::expect_error([&] { autograd::register_post_accumulate_grad_hook(ones({2}), noop); },
                        {"register_post_accumulate_grad_hook", "does not require grad"});
  Tensor w = leaf({1, 2});
  testing::expect_error([&] { autograd::register_post_accumulate_grad_hook(w * 2.0, noop); },
                        {"register_post_accumulate_grad_hook", "non-leaf"});
  testing::expect_error([&] { autograd::register_post_accumulate_grad_hook(w, nullptr); },
                        {"register_post_accumulate_grad_hook", "empty"});
}

}  // namespace
}  // namespace tapegrad
