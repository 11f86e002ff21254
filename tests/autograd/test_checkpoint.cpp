// checkpoint(): gradients bit-identical (f64) to the run without it, for an MLP block and an LSTM
// block with dropout inside (the generator's state replayed), nested, with retain_graph, through
// captured parameters when the input needs no gradient, with two outputs; the negative control
// without the replay; bad inputs; and the memory it frees, counted by the CPU allocator.
#include <cstdint>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu/runtime/caching_allocator.h"
#include "support/test_util.h"
#include "tapegrad/amp/autocast.h"
#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/node.h"

namespace tapegrad {
namespace {

using testing::expect_error;
using testing::values;

Tensor input(const Shape& shape, uint64_t seed, bool requires_grad = true) {
  Tensor x = testing::leaf(shape, seed);
  return requires_grad ? x : x.detach();
}

void clear_grads(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) t.set_grad(Tensor());
}

// Every gradient of `tensors` (empty where undefined), plus the generator's state after the run.
struct RunResult {
  std::vector<std::vector<double>> grads;
  uint64_t generator_offset = 0;
};

RunResult collect(const std::vector<Tensor>& tensors) {
  RunResult r;
  for (const Tensor& t : tensors) r.grads.push_back(t.grad().defined() ? values(t.grad()) : std::vector<double>{});
  r.generator_offset = default_generator().offset();
  return r;
}

void expect_identical(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_FALSE(a.grads[i].empty()) << "tensor " << i << " has no gradient";
    EXPECT_EQ(a.grads[i], b.grads[i]) << "gradient of tensor " << i;
  }
  EXPECT_EQ(a.generator_offset, b.generator_offset);
}

struct Mlp {
  nn::Linear fc1{8, 16}, fc2{16, 8};
  Mlp() {
    fc1.to(kFloat64);
    fc2.to(kFloat64);
  }
  Tensor block(const Tensor& x) { return fc2.forward(dropout(relu(fc1.forward(x)), 0.3)); }
  std::vector<Tensor> params() { return {fc1.weight, fc1.bias, fc2.weight, fc2.bias}; }
};

// The loss draws after the block too, so the generator must continue as it would without
// checkpointing.
Tensor mlp_loss(Mlp& m, const Tensor& x, bool use_checkpoint) {
  Tensor h = use_checkpoint ? checkpoint([&](const Tensor& in) { return m.block(in); }, x) : m.block(x);
  return sum(square(dropout(h, 0.2)));
}

TEST(Checkpoint, MlpBlockWithDropoutGivesIdenticalGradients) {
  Mlp m;
  Tensor x = input({5, 8}, 1);
  std::vector<Tensor> all = m.params();
  all.push_back(x);
  RunResult runs[2];
  for (int use = 0; use < 2; ++use) {
    clear_grads(all);
    manual_seed(7);
    Tensor loss = mlp_loss(m, x, use == 1);
    if (use == 1) EXPECT_EQ(loss.grad_fn()->next_edges().size(), 1u);
    loss.backward();
    runs[use] = collect(all);
  }
  expect_identical(runs[1], runs[0]);
}

TEST(Checkpoint, LstmBlockWithDropoutGivesIdenticalGradients) {
  nn::LSTM lstm(4, 6, nn::LSTMOptions().num_layers(2).dropout(0.25));
  lstm.to(kFloat64);
  lstm.train();
  Tensor x = input({5, 3, 4}, 2);
  Tensor h0 = input({2, 3, 6}, 3);
  auto block = [&](const Tensor& in, const Tensor& h) {
    nn::LSTMOutput out = lstm.forward(in, h, zeros_like(h));
    return dropout(out.output, 0.2);
  };
  std::vector<Tensor> all = lstm.parameters();
  all.push_back(x);
  all.push_back(h0);
  RunResult runs[2];
  for (int use = 0; use < 2; ++use) {
    clear_grads(all);
    manual_seed(11);
    Tensor y = use == 1 ? checkpoint(block, x, h0) : block(x, h0);
    sum(mul(y, y)).backward();
    runs[use] = collect(all);
  }
  expect_identical(runs[1], runs[0]);
}

TEST(Checkpoint, NestedCheckpointsGiveIdenticalGradients) {
  Mlp a, b;
  Tensor x = input({3, 8}, 4);
  auto plain = [&](const Tensor& in) { return b.block(tanh(a.block(in))); };
  auto nested = [&](const Tensor& in) {
    Tensor h = checkpoint([&](const Tensor& t) { return a.block(t); }, in);
    return checkpoint([&](const Tensor& t) { return b.block(tanh(t)); }, h);
  };
  std::vector<Tensor> all = a.params();
  for (const Tensor& p : b.params()) all.push_back(p);
  all.push_back(x);
  RunResult runs[2];
  for (int use = 0; use < 2; ++use) {
    clear_grads(all);
    manual_seed(5);
    Tensor y = use == 1 ? checkpoint(nested, x) : plain(x);
    sum(square(y)).backward();
    runs[use] = collect(all);
  }
  expect_identical(runs[1], runs[0]);
}

// Two backward calls through one checkpoint: each recomputes (with the same dropout masks) and the
// gradients add up as they do without checkpointing.
TEST(Checkpoint, RetainGraphAllowsASecondBackward) {
  Mlp m;
  Tensor x = input({4, 8}, 6);
  std::vector<Tensor> all = m.params();
  all.push_back(x);
  RunResult runs[2];
  for (int use = 0; use < 2; ++use) {
    clear_grads(all);
    manual_seed(9);
    Tensor loss = mlp_loss(m, x, use == 1);
    loss.backward(Tensor(), /*retain_graph=*/true);
    loss.backward();
    runs[use] = collect(all);
  }
  expect_identical(runs[1], runs[0]);
  // Without retain_graph the second backward is an error, as without checkpointing.
  manual_seed(9);
  Tensor loss = mlp_loss(m, x, true);
  loss.backward();
  expect_error([&] { loss.backward(); }, {"backward", "second time"});
}

// The input needs no gradient; only the parameters fn captures do. The output must still require
// grad, and the parameters' gradients accumulate (on top of what is there) as without it.
TEST(Checkpoint, CapturedParametersAccumulateWhenTheInputNeedsNoGradient) {
  Mlp m;
  Tensor x = input({5, 8}, 7, /*requires_grad=*/false);
  std::vector<Tensor> params = m.params();
  RunResult runs[2];
  for (int use = 0; use < 2; ++use) {
    for (const Tensor& p : params) p.set_grad(full_like(p, 0.125));
    manual_seed(3);
    Tensor loss = mlp_loss(m, x, use == 1);
    EXPECT_TRUE(loss.requires_grad());
    loss.backward();
    runs[use] = collect(params);
  }
  expect_identical(runs[1], runs[0]);
  EXPECT_FALSE(x.grad().defined());
  // Negative control: nothing in fn requires grad, so there is nothing to record.
  Tensor y = checkpoint([](const Tensor& in) { return relu(in); }, x);
  EXPECT_FALSE(y.requires_grad());
}

TEST(Checkpoint, FunctionReturningTwoTensors) {
  Mlp m;
  Tensor x = input({3, 8}, 8);
  auto fn = [&](const Tensor& in) -> std::vector<Tensor> {
    Tensor h = m.fc1.forward(in);
    return {h, mul(tanh(h), 2.0), argmax(h, 1)};
  };
  std::vector<Tensor> all = m.params();
  all.push_back(x);
  all.pop_back();
  all.push_back(x);
  for (bool use_second : {true, false}) {
    SCOPED_TRACE(use_second ? "both outputs used" : "second output unused");
    RunResult runs[2];
    for (int use = 0; use < 2; ++use) {
      clear_grads(all);
      std::vector<Tensor> out = use == 1 ? checkpoint(fn, x) : fn(x);
      ASSERT_EQ(out.size(), 3u);
      EXPECT_EQ(out[2].dtype(), kInt64);
      EXPECT_FALSE(out[2].requires_grad());
      Tensor loss = sum(square(out[0]));
      if (use_second) loss = add(loss, sum(mul(out[1], out[0])));
      loss.backward();
      runs[use] = collect({m.fc1.weight, m.fc1.bias, x});
    }
    expect_identical(runs[1], runs[0]);
  }
}

// The negative control of the generator replay: without it the recomputation draws other dropout
// masks, and the gradients differ.
TEST(Checkpoint, WithoutTheGeneratorReplayDropoutGradientsDiffer) {
  Mlp m;
  Tensor x = input({6, 8}, 10);
  auto grads_with = [&](bool checkpointed, bool preserve) {
    clear_grads({x});
    manual_seed(21);
    CheckpointFunction fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{m.block(in[0])}; };
    Tensor h = checkpointed ? checkpoint(fn, {x}, preserve)[0] : m.block(x);
    sum(square(h)).backward();
    return values(x.grad());
  };
  const std::vector<double> plain = grads_with(false, true);
  EXPECT_EQ(grads_with(true, true), plain);
  EXPECT_NE(grads_with(true, false), plain);
}

// A Dropout that draws from a Generator of its own gets its forward mask again in the
// recomputation, and that generator ends where the plain run leaves it, also when the training
// loop draws from it between forward and backward. Without the replay the masks differ (the
// negative control).
TEST(Checkpoint, DropoutWithItsOwnGeneratorGivesIdenticalGradients) {
  Mlp m;
  Generator own(99);
  nn::Dropout drop(0.4, &own);
  Tensor x = input({5, 8}, 17);
  CheckpointFunction block = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{m.fc2.forward(drop(relu(m.fc1.forward(in[0]))))};
  };
  std::vector<Tensor> all = m.params();
  all.push_back(x);
  auto run = [&](bool checkpointed, bool preserve) {
    clear_grads(all);
    own.manual_seed(99);
    manual_seed(1);
    Tensor h = checkpointed ? checkpoint(block, {x}, preserve)[0] : block({x})[0];
    rand({3}, TensorOptions(), &own);  // a draw between forward and backward
    sum(square(h)).backward();
    RunResult r = collect(all);
    r.generator_offset = own.offset();
    r.grads.push_back(values(rand({4}, TensorOptions(kFloat64), &own)));  // the stream continues alike
    return r;
  };
  const RunResult plain = run(false, true);
  expect_identical(run(true, true), plain);
  EXPECT_NE(run(true, false).grads, plain.grads);
}

// Forward under CPU autocast (bf16), backward outside it: the recomputation runs in bf16 again,
// so the gradients are those of the plain autocast run. And the other way round: a forward
// outside autocast is recomputed in float32 even when backward runs inside an autocast region.
// The negative control: bf16 and float32 gradients differ, so the comparison can tell them apart.
TEST(Checkpoint, RecomputesUnderTheForwardsCpuAutocast) {
  nn::Linear fc1(8, 16), fc2(16, 8);
  Tensor x = testing::leaf({5, 8}, 18).to(kFloat32).detach().requires_grad_(true);
  auto block = [&](const Tensor& in) { return fc2.forward(dropout(relu(fc1.forward(in)), 0.3)); };
  std::vector<Tensor> all{fc1.weight, fc1.bias, fc2.weight, fc2.bias, x};
  auto run = [&](bool checkpointed, bool forward_autocast, bool backward_autocast) {
    clear_grads(all);
    manual_seed(4);
    Tensor loss;
    {
      amp::AutocastGuard autocast(kCPU, kBFloat16, forward_autocast);
      Tensor h = checkpointed ? checkpoint(block, x) : block(x);
      loss = sum(square(h.to(kFloat32)));
    }
    amp::AutocastGuard autocast(kCPU, kBFloat16, backward_autocast);
    loss.backward();
    return collect(all);
  };
  const RunResult low = run(false, true, false), full = run(false, false, false);
  expect_identical(run(true, true, false), low);
  expect_identical(run(true, false, true), full);
  EXPECT_NE(low.grads, full.grads);
}

// Two threads checkpoint dropout on the default generator at once. Thread a's forward lets
// thread b draw (and checkpoint) in the middle of it, so the numbers a drew do not follow the
// generator's state when a's checkpoint began; each recomputation must still draw its own
// forward's mask. With x = 1, the gradient of sum(dropout(x)) is the forward's output.
TEST(Checkpoint, TwoThreadsCheckpointingKeepTheirOwnMasks) {
  auto masked = [](const Tensor& in) { return dropout(in, 0.5); };
  std::promise<void> a_started, b_done;
  std::future<void> a_started_f = a_started.get_future(), b_done_f = b_done.get_future();
  std::vector<double> b_out, b_grad;
  std::thread b([&] {
    a_started_f.wait();
    Tensor xb = ones({256}, TensorOptions(kFloat64)).requires_grad_(true);
    Tensor yb = checkpoint(masked, xb);
    rand({100});
    sum(yb).backward();
    b_out = values(yb);
    b_grad = values(xb.grad());
    b_done.set_value();
  });
  int calls = 0;
  Tensor xa = ones({256}, TensorOptions(kFloat64)).requires_grad_(true);
  Tensor ya = checkpoint(
      [&](const Tensor& in) {
        if (++calls == 1) {
          a_started.set_value();
          b_done_f.wait();
        }
        return masked(in);
      },
      xa);
  b.join();
  sum(ya).backward();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(values(xa.grad()), values(ya));
  EXPECT_EQ(b_grad, b_out);
}

// fn throws when recomputed (after drawing from the default generator and from one of its own):
// backward fails with fn's error and leaves no state behind: the generators, grad mode and the
// autocast state are as they were before backward.
TEST(Checkpoint, AFunctionThrowingInTheRecomputationLeavesNoStateBehind) {
  Generator own(5);
  nn::Linear fc(8, 8);
  int calls = 0;
  auto fn = [&](const Tensor& in) {
    Tensor h = dropout(dropout(fc.forward(in), 0.2), 0.3, true, &own);
    if (++calls == 2) throw std::runtime_error("fn failed in the recomputation");
    return h;
  };
  Tensor x = testing::leaf({4, 8}, 19).to(kFloat32).detach().requires_grad_(true);
  Tensor y;
  {
    amp::AutocastGuard autocast(kCPU, kBFloat16);
    y = checkpoint(fn, x);
  }
  Tensor loss = sum(y.to(kFloat32));
  const uint64_t own_offset = own.offset(), default_offset = default_generator().offset();
  EXPECT_THROW(loss.backward(), std::runtime_error);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(own.offset(), own_offset);
  EXPECT_EQ(default_generator().offset(), default_offset);
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceKind::CPU));
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceKind::CUDA));
}

// A recomputation that draws other random numbers than the forward pass would silently give
// other masks, and so wrong gradients: a Dropout switched to eval() (or to train()) between
// forward and backward is an error, not a silent wrong gradient. With preserve_rng_state = false
// nothing is checked.
TEST(Checkpoint, ARecomputationThatDrawsDifferentlyIsAnError) {
  nn::Linear fc(8, 8);
  Generator own(3);
  for (Generator* g : {static_cast<Generator*>(nullptr), &own}) {
    SCOPED_TRACE(g == nullptr ? "default generator" : "own generator");
    nn::Dropout drop(0.5, g);
    auto fn = [&](const Tensor& in) { return drop(fc.forward(in)); };
    Tensor x = input({3, 8}, 20).to(kFloat32).detach().requires_grad_(true);
    drop.train();
    Tensor y = checkpoint(fn, x);
    drop.eval();
    expect_error([&] { sum(y).backward(); }, {"checkpoint", "drew", "the same work each time"});
    Tensor z = checkpoint(fn, x);
    drop.train();
    expect_error([&] { sum(z).backward(); }, {"checkpoint", "drew", "the same work each time"});
  }
}

TEST(Checkpoint, BadInputs) {
  Tensor x = input({2, 3}, 12);
  CheckpointFunction none = [](const std::vector<Tensor>&) { return std::vector<Tensor>{}; };
  expect_error([&] { checkpoint(none, {x}); }, {"checkpoint", "fn returned no tensor"});
  expect_error([&] { checkpoint([](const Tensor&) { return Tensor(); }, x); },
               {"checkpoint", "output 0 of fn is undefined"});
  expect_error([&] { checkpoint(CheckpointFunction(), {x}); }, {"checkpoint", "fn is empty"});
  expect_error([&] { checkpoint([](const Tensor& a, const Tensor&) { return a; }, x, Tensor()); },
               {"checkpoint", "input 1 is undefined"});
  // A recomputation that differs from the first run.
  int calls = 0;
  Tensor y = checkpoint([&](const Tensor& in) { return ++calls == 1 ? mul(in, 2.0) : sum(in); }, x);
  expect_error([&] { sum(y).backward(); }, {"checkpoint", "output 0 has shape", "the same work each time"});
  // An input changed in place between forward and backward.
  Tensor base = input({2, 3}, 13, false);
  Tensor w = input({2, 3}, 14);
  Tensor z = checkpoint([&](const Tensor& in) { return mul(in, w); }, base);
  base.add_(1.0);
  expect_error([&] { sum(z).backward(); }, {"modified by an in-place operation"});
}

TEST(Checkpoint, WithGradModeOffItJustCallsTheFunction) {
  Mlp m;
  Tensor x = input({2, 8}, 15);
  NoGradGuard no_grad;
  Tensor y = checkpoint([&](const Tensor& in) { return m.fc1.forward(in); }, x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

// A deep stack checkpointed as one segment keeps only its input and output alive after the
// forward pass; without checkpointing every layer's saved activations stay until backward.
// Counted by the CPU allocator's live bytes, not by timing.
TEST(Checkpoint, FreesTheActivationsOfTheForwardPass) {
  const int64_t batch = 64, width = 256, layers = 8;
  std::vector<nn::Linear> stack;
  for (int64_t i = 0; i < layers; ++i) stack.emplace_back(width, width);
  for (nn::Linear& l : stack) l.to(kFloat64);
  auto body = [&](const Tensor& in) {
    Tensor h = in;
    for (nn::Linear& l : stack) h = relu(l.forward(h));
    return h;
  };
  Tensor x = input({batch, width}, 16);
  const size_t activation = static_cast<size_t>(batch * width) * sizeof(double);
  size_t live[2];
  std::vector<double> grads[2];
  for (int use = 0; use < 2; ++use) {
    x.set_grad(Tensor());
    for (nn::Linear& l : stack) clear_grads({l.weight, l.bias});
    const size_t before = cpu::cpu_memory_stats().allocated_bytes;
    Tensor y = use == 1 ? checkpoint(body, x) : body(x);
    Tensor loss = sum(y);
    live[use] = cpu::cpu_memory_stats().allocated_bytes - before;
    loss.backward();
    grads[use] = values(stack.front().weight.grad());
  }
  // Negative control: the plain run keeps at least one activation per layer.
  EXPECT_GE(live[0], layers * activation);
  // Checkpointed: the output and the loss, under two activations' worth.
  EXPECT_LT(live[1], 2 * activation);
  EXPECT_EQ(grads[1], grads[0]);
}

}  // namespace
}  // namespace tapegrad
