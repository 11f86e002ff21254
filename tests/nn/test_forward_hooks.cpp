// Module::register_forward_hook: when hooks run, what they see, and removal through the handle.
#include <gtest/gtest.h>

#include "support/test_util.h"

using namespace tapegrad;
using tapegrad::testing::expect_error;

TEST(ForwardHooks, RunAfterOperatorCallWithInputsAndOutputs) {
  nn::Linear fc(3, 2);
  int calls = 0;
  Tensor x = randn({4, 3});
  nn::RemovableHandle handle =
      fc.register_forward_hook([&](nn::Module& m, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
        ++calls;
        EXPECT_EQ(&m, &fc);
        ASSERT_EQ(in.size(), 1u);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(in[0].sizes(), (Shape{4, 3}));
        EXPECT_EQ(out[0].sizes(), (Shape{4, 2}));
      });
  EXPECT_TRUE(fc.has_forward_hooks());
  Tensor y = fc(x);
  EXPECT_EQ(calls, 1);
  // As in PyTorch, calling forward() directly bypasses the hooks.
  fc.forward(x);
  EXPECT_EQ(calls, 1);
  handle.remove();
  EXPECT_FALSE(fc.has_forward_hooks());
  fc(x);
  EXPECT_EQ(calls, 1);
  handle.remove();  // twice: nothing happens
}

TEST(ForwardHooks, RunInRegistrationOrderAndMayRemoveThemselves) {
  nn::ReLU relu;
  std::vector<int> order;
  nn::RemovableHandle second;
  nn::RemovableHandle first =
      relu.register_forward_hook([&](nn::Module&, const auto&, const auto&) { order.push_back(1); });
  second = relu.register_forward_hook([&](nn::Module&, const auto&, const auto&) {
    order.push_back(2);
    second.remove();
  });
  relu.register_forward_hook([&](nn::Module&, const auto&, const auto&) { order.push_back(3); });
  relu(randn({2}));
  relu(randn({2}));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 1, 3}));
}

TEST(ForwardHooks, SequentialCallsChildrenThroughTheirHooks) {
  nn::Sequential seq(nn::Linear(5, 4), nn::ReLU(), nn::Linear(4, 2));
  std::vector<std::string> seen;
  std::vector<nn::RemovableHandle> handles;
  for (const auto& [name, m] : seq.named_modules())
    handles.push_back(m->register_forward_hook([&seen, name = name](nn::Module& mod, const auto&, const auto& out) {
      seen.push_back((name.empty() ? "root" : name) + ":" + mod.name() + shape_str(out[0].sizes()));
    }));
  seq(randn({3, 5}));
  EXPECT_EQ(seen,
            (std::vector<std::string>{"0:Linear[3, 4]", "1:ReLU[3, 4]", "2:Linear[3, 2]", "root:Sequential[3, 2]"}));
  // Negative control: with the hooks removed nothing is recorded.
  for (auto& h : handles) h.remove();
  seen.clear();
  seq(randn({3, 5}));
  EXPECT_TRUE(seen.empty());
}

TEST(ForwardHooks, LstmHookSeesAllOutputs) {
  nn::LSTM lstm(3, 4, nn::LSTMOptions().batch_first(true));
  std::vector<Shape> shapes;
  lstm.register_forward_hook([&](nn::Module&, const auto& in, const auto& out) {
    EXPECT_EQ(in.size(), 4u);
    for (const Tensor& t : out) shapes.push_back(t.sizes());
  });
  lstm(randn({2, 5, 3}));
  EXPECT_EQ(shapes, (std::vector<Shape>{{2, 5, 4}, {1, 2, 4}, {1, 2, 4}}));
}

TEST(ForwardHooks, HandleOutlivesModuleAndCopiesHaveTheirOwnHooks) {
  nn::RemovableHandle handle;
  int calls = 0;
  {
    nn::ReLU relu;
    handle = relu.register_forward_hook([&](nn::Module&, const auto&, const auto&) { ++calls; });
    nn::ReLU copy = relu;  // the copy has the hook too, but the handle removes only the original's
    handle.remove();
    copy(randn({2}));
    relu(randn({2}));
    EXPECT_EQ(calls, 1);
    handle = relu.register_forward_hook([&](nn::Module&, const auto&, const auto&) { ++calls; });
  }
  handle.remove();  // the module is gone: nothing happens
}

TEST(ForwardHooks, EmptyHookIsAnError) {
  nn::ReLU relu;
  expect_error([&] { relu.register_forward_hook(nn::ForwardHook()); }, {"register_forward_hook", "empty"});
}
