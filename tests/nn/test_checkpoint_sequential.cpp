// checkpoint_sequential(): PyTorch's split (size() / segments modules per run, the remainder in the
// last, which is not checkpointed), seen through forward hooks; gradients bit-identical (f64) to the
// plain Sequential with dropout in the stack, for every segment count; the negative control without
// the generator replay; bad inputs; and the live bytes it saves, counted by the CPU allocator.
#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/runtime/caching_allocator.h"
#include "support/test_util.h"
#include "tapegrad/nn/activation.h"
#include "tapegrad/nn/checkpoint_sequential.h"

namespace tapegrad {
namespace {

using testing::expect_error;
using testing::values;

// 7 modules with dropout in two places.
nn::Sequential make_stack() {
  nn::Sequential s(nn::Linear(6, 12), nn::ReLU(), nn::Dropout(0.3), nn::Linear(12, 12), nn::Tanh(), nn::Dropout(0.2),
                   nn::Linear(12, 4));
  s.to(kFloat64);
  s.train();
  return s;
}

struct Outcome {
  std::vector<std::vector<double>> grads;
  double loss = 0;
  uint64_t generator_offset = 0;
};

// One forward and backward (plain when segments == 0), after dropping the old gradients.
Outcome run(nn::Sequential& s, const Tensor& x, int64_t segments, bool preserve_rng_state = true) {
  std::vector<Tensor> tensors = s.parameters();
  tensors.push_back(x);
  for (const Tensor& t : tensors) t.set_grad(Tensor());
  manual_seed(17);
  Tensor y = segments == 0 ? s.forward(x) : checkpoint_sequential(s, segments, x, preserve_rng_state);
  Tensor loss = sum(square(dropout(y, 0.1)));  // draws after the stack too
  loss.backward();
  Outcome r;
  for (const Tensor& t : tensors) r.grads.push_back(t.grad().defined() ? values(t.grad()) : std::vector<double>{});
  r.loss = loss.item();
  r.generator_offset = default_generator().offset();
  return r;
}

TEST(CheckpointSequential, EverySegmentCountGivesIdenticalGradients) {
  nn::Sequential s = make_stack();
  Tensor x = testing::leaf({5, 6}, 1);
  const Outcome plain = run(s, x, 0);
  for (int64_t segments = 1; segments <= 7; ++segments) {
    SCOPED_TRACE("segments = " + std::to_string(segments));
    const Outcome r = run(s, x, segments);
    ASSERT_EQ(r.grads.size(), plain.grads.size());
    for (size_t i = 0; i < r.grads.size(); ++i) {
      EXPECT_FALSE(r.grads[i].empty()) << "tensor " << i << " has no gradient";
      EXPECT_EQ(r.grads[i], plain.grads[i]) << "gradient of tensor " << i;
    }
    EXPECT_EQ(r.loss, plain.loss);
    EXPECT_EQ(r.generator_offset, plain.generator_offset);
  }
}

// Without the replay the recomputed dropout masks differ, and so do the gradients: the identity
// above is not vacuous.
TEST(CheckpointSequential, WithoutTheGeneratorReplayGradientsDiffer) {
  nn::Sequential s = make_stack();
  Tensor x = testing::leaf({5, 6}, 2);
  const Outcome plain = run(s, x, 0);
  const Outcome r = run(s, x, 3, /*preserve_rng_state=*/false);
  EXPECT_EQ(r.loss, plain.loss);  // the forward is the same
  EXPECT_NE(r.grads.back(), plain.grads.back());
}

// Counts each module's calls through forward hooks: a checkpointed module runs twice (forward and
// recomputation), the others once. 7 modules in 3 segments: runs [0, 2) and [2, 4) checkpointed,
// [4, 7) plain, as torch.utils.checkpoint.checkpoint_sequential splits them.
TEST(CheckpointSequential, SplitsLikePyTorch) {
  struct Case {
    int64_t segments;
    std::vector<int> calls;
  };
  const std::vector<Case> cases = {
      {1, {1, 1, 1, 1, 1, 1, 1}}, {2, {2, 2, 2, 1, 1, 1, 1}},
      {3, {2, 2, 2, 2, 1, 1, 1}}, {4, {2, 2, 2, 1, 1, 1, 1}},  // runs of 7 / 4 = 1: the last takes the 4 left over
      {7, {2, 2, 2, 2, 2, 2, 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("segments = " + std::to_string(c.segments));
    nn::Sequential s = make_stack();
    std::vector<int> calls(s.size(), 0);
    for (size_t i = 0; i < s.size(); ++i)
      s[i]->register_forward_hook(
          [&calls, i](nn::Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) { ++calls[i]; });
    Tensor x = testing::leaf({3, 6}, 3);
    sum(checkpoint_sequential(s, c.segments, x)).backward();
    EXPECT_EQ(calls, c.calls);
  }
}

// The list form, on modules shared with a Sequential: same gradients.
TEST(CheckpointSequential, ListOfModules) {
  nn::Sequential s = make_stack();
  std::vector<std::shared_ptr<nn::UnaryModule>> modules;
  for (size_t i = 0; i < s.size(); ++i) modules.push_back(s[i]);
  Tensor x = testing::leaf({4, 6}, 4);
  const Outcome plain = run(s, x, 0);
  for (const Tensor& p : s.parameters()) p.set_grad(Tensor());
  x.set_grad(Tensor());
  manual_seed(17);
  Tensor loss = sum(square(dropout(checkpoint_sequential(modules, 2, x), 0.1)));
  loss.backward();
  EXPECT_EQ(values(x.grad()), plain.grads.back());
  EXPECT_EQ(values(s.parameters().front().grad()), plain.grads.front());
}

// A Dropout switched to eval() between forward and backward would be recomputed without its mask,
// and the gradients would silently be those of another network; it is an error instead (PyTorch's
// checkpoint raises one too: the recomputation saves other tensors). The stack in eval() for both
// passes is fine.
TEST(CheckpointSequential, AModuleSwitchedToEvalBeforeBackwardIsAnError) {
  nn::Sequential s = make_stack();
  Tensor x = testing::leaf({3, 6}, 8);
  Tensor y = checkpoint_sequential(s, 3, x);
  s.eval();
  expect_error([&] { sum(y).backward(); }, {"checkpoint", "drew", "train() and eval()"});
  x.set_grad(Tensor());
  sum(checkpoint_sequential(s, 3, x)).backward();
  EXPECT_TRUE(x.grad().defined());
}

TEST(CheckpointSequential, BadInputs) {
  nn::Sequential s = make_stack();
  Tensor x = testing::leaf({2, 6}, 5);
  expect_error([&] { checkpoint_sequential(s, 0, x); },
               {"checkpoint_sequential", "segments must be at least 1, got 0"});
  expect_error([&] { checkpoint_sequential(s, -2, x); }, {"checkpoint_sequential", "got -2"});
  expect_error([&] { checkpoint_sequential(s, 8, x); },
               {"checkpoint_sequential", "segments (8) exceeds the number of modules (7)"});
  expect_error([&] { checkpoint_sequential(s, INT64_MAX, x); }, {"checkpoint_sequential", "exceeds"});
  expect_error([&] { checkpoint_sequential(s, INT64_MIN, x); }, {"checkpoint_sequential", "at least 1"});
  expect_error([&] { checkpoint_sequential(nn::Sequential(), 1, x); },
               {"checkpoint_sequential", "exceeds the number of modules (0)"});
  expect_error([&] { checkpoint_sequential(s, 2, Tensor()); }, {"checkpoint_sequential", "input is undefined"});
  std::vector<std::shared_ptr<nn::UnaryModule>> with_null{s[0], nullptr};
  expect_error([&] { checkpoint_sequential(with_null, 1, x); }, {"checkpoint_sequential", "module 1 is null"});
}

TEST(CheckpointSequential, WithGradModeOffItIsTheForward) {
  nn::Sequential s = make_stack();
  s.eval();
  Tensor x = testing::leaf({2, 6}, 6);
  NoGradGuard no_grad;
  Tensor y = checkpoint_sequential(s, 3, x);
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_EQ(values(y), values(s.forward(x)));
}

// A 16-layer stack in 4 segments keeps, after the forward pass, the inputs of 3 segments and the
// last segment's activations; the plain one keeps every layer's. Counted by the CPU allocator.
TEST(CheckpointSequential, KeepsFewerActivations) {
  const int64_t batch = 64, width = 128, layers = 16;
  nn::Sequential s;
  for (int64_t i = 0; i < layers; ++i) {
    s.push_back(nn::Linear(width, width));
    s.push_back(nn::ReLU());
  }
  s.to(kFloat64);
  Tensor x = testing::leaf({batch, width}, 7);
  const size_t activation = static_cast<size_t>(batch * width) * sizeof(double);
  size_t live[2];
  std::vector<double> grads[2];
  for (int use = 0; use < 2; ++use) {
    for (const Tensor& p : s.parameters()) p.set_grad(Tensor());
    const size_t before = cpu::cpu_memory_stats().allocated_bytes;
    Tensor loss = sum(use == 1 ? checkpoint_sequential(s, 4, x) : s.forward(x));
    live[use] = cpu::cpu_memory_stats().allocated_bytes - before;
    loss.backward();
    grads[use] = values(s.parameters().front().grad());
  }
  // Negative control: the plain stack keeps at least one activation per layer.
  EXPECT_GE(live[0], static_cast<size_t>(layers) * activation);
  // 3 boundaries plus the last segment's 4 layers (a Linear's output and a ReLU's) and the output.
  EXPECT_LT(live[1], static_cast<size_t>(3 + 2 * 4 + 2) * activation);
  EXPECT_LT(live[1] * 2, live[0]);
  EXPECT_EQ(grads[1], grads[0]);
}

}  // namespace
}  // namespace tapegrad
