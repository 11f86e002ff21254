// Modules under InferenceMode (docs/inference.md): eval() semantics, the streaming LSTM step
// (one timestep or chunk at a time with the carried state gives the full sequence's numbers),
// the LSTM's kept weight layouts, no allocation in the steady state, and one model shared by
// several threads.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "backend/weight_layouts.h"
#include "cpu/runtime/caching_allocator.h"
#include "support/random_values.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad {
namespace {

using testing::uniform;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && allclose(a, b, 0.0, 0.0);
}

std::shared_ptr<nn::LSTM> make_lstm(uint64_t seed, int64_t layers = 2) {
  Generator g(seed);
  return std::make_shared<nn::LSTM>(5, 8, nn::LSTMOptions().num_layers(layers), &g);
}

TEST(Inference, EvalTurnsDropoutOffAndTrainModeKeepsItUnderInferenceMode) {
  Generator g(7);
  nn::Dropout dropout(0.5, &g);
  Tensor x = ones({64});
  InferenceMode guard;
  dropout.eval();
  EXPECT_TRUE(same_bits(dropout.forward(x), x));
  dropout.train();  // as PyTorch: InferenceMode does not change train/eval
  EXPECT_FALSE(same_bits(dropout.forward(x), x));
}

// Note [inference layouts]: the step by step and chunked runs give the whole sequence's numbers.
TEST(Inference, StreamingLstmStepsMatchTheFullSequence) {
  auto lstm = make_lstm(11);
  Tensor x = uniform({12, 3, 5}, kFloat32, 12);
  nn::LSTMOutput full = lstm->forward(x);  // grad mode on: the training forward's numbers
  InferenceMode guard;
  for (const std::vector<int64_t>& chunks : {std::vector<int64_t>(12, 1), std::vector<int64_t>{5, 4, 3}}) {
    Tensor h, c;
    std::vector<Tensor> outputs;
    int64_t begin = 0;
    for (int64_t steps : chunks) {
      nn::LSTMOutput o = lstm->forward(x.narrow(0, begin, steps), h, c);
      outputs.push_back(o.output);
      h = o.h_n;
      c = o.c_n;
      begin += steps;
    }
    const std::string what = chunks.size() == 12 ? "one step at a time" : "chunks of 5, 4, 3";
    EXPECT_TRUE(allclose(cat(outputs, 0), full.output.detach(), 1e-6, 1e-6)) << what;
    EXPECT_TRUE(allclose(h, full.h_n.detach(), 1e-6, 1e-6)) << what;
    EXPECT_TRUE(allclose(c, full.c_n.detach(), 1e-6, 1e-6)) << what;
  }
}

TEST(Inference, LstmKeepsItsWeightLayoutsUntilTheWeightsChange) {
  auto lstm = make_lstm(21);
  Tensor x = uniform({1, 1, 5}, kFloat32, 22);
  auto made = [] { return backend::weight_layout_counts().made; };
  auto reused = [] { return backend::weight_layout_counts().reused; };
  // Negative control: outside InferenceMode no call finds a kept layout.
  {
    NoGradGuard no_grad;
    const int64_t before = reused();
    lstm->forward(x);
    lstm->forward(x);
    EXPECT_EQ(reused() - before, 0);
  }
  Tensor first;
  {
    InferenceMode guard;
    const int64_t before = made();
    first = lstm->forward(x).output;
    const int64_t reused_before = reused();
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(lstm->forward(x).output, first));
    EXPECT_EQ(made() - before, 2);  // once per layer
    EXPECT_EQ(reused() - reused_before, 10);
  }
  // An optimiser-style in-place update changes the weights: the next call packs the new ones.
  {
    NoGradGuard no_grad;
    for (Tensor& p : lstm->parameters()) p.mul_(0.5);
  }
  Tensor fresh_output;
  {
    NoGradGuard no_grad;
    fresh_output = lstm->forward(x).output;  // packed afresh, the reference
  }
  InferenceMode guard;
  const int64_t before = made();
  Tensor after = lstm->forward(x).output;
  EXPECT_EQ(made() - before, 2);
  EXPECT_TRUE(same_bits(after, fresh_output));
  EXPECT_FALSE(same_bits(after, first));
}

// Weights that are inference tensors themselves count no versions, so no layout is kept from them:
// an in-place update inside InferenceMode is seen by the next call.
TEST(Inference, LstmBuiltUnderInferenceModeSeesInPlaceUpdates) {
  InferenceMode guard;
  auto lstm = make_lstm(23);  // its parameters are inference tensors
  ASSERT_TRUE(lstm->parameters()[0].is_inference());
  Tensor x = uniform({2, 1, 5}, kFloat32, 24);
  Tensor before = lstm->forward(x).output;
  for (Tensor& p : lstm->parameters()) p.mul_(0.5);
  Tensor after = lstm->forward(x).output;
  auto fresh = make_lstm(23);
  for (Tensor& p : fresh->parameters()) p.mul_(0.5);
  EXPECT_TRUE(same_bits(after, fresh->forward(x).output));
  EXPECT_FALSE(same_bits(after, before));
}

TEST(Inference, StreamingStepAllocatesNothingFromTheSystemOnceWarm) {
  auto lstm = make_lstm(31);
  Generator g(32);
  nn::Linear head(8, 6, true, &g);
  Tensor x = uniform({1, 1, 5}, kFloat32, 33);
  InferenceMode guard;
  Tensor h, c;
  auto step = [&] {
    nn::LSTMOutput o = lstm->forward(x, h, c);
    h = o.h_n;
    c = o.c_n;
    return relu(head.forward(o.output.view({1, 8})));
  };
  for (int i = 0; i < 3; ++i) step();
  const cpu::CpuMemoryStats before = cpu::cpu_memory_stats();
  if (!before.caching_enabled) GTEST_SKIP() << "the CPU caching allocator is off";
  for (int i = 0; i < 50; ++i) step();
  const cpu::CpuMemoryStats after = cpu::cpu_memory_stats();
  EXPECT_GT(after.num_allocations, before.num_allocations);      // the step does allocate tensors...
  EXPECT_EQ(after.num_system_allocs, before.num_system_allocs);  // ...all from the cache
}

// One model, many threads: each thread's forwards under its own InferenceMode give exactly what
// they give alone (CI runs this under ThreadSanitizer too).
TEST(Inference, ThreadsShareOneModel) {
  Generator g(41);
  auto lstm = make_lstm(42);
  nn::Sequential mlp;
  mlp.push_back(std::make_shared<nn::Linear>(5, 16, true, &g));
  mlp.push_back(std::make_shared<nn::ReLU>());
  mlp.push_back(std::make_shared<nn::Linear>(16, 3, true, &g));
  mlp.eval();
  lstm->eval();
  constexpr int kThreads = 4, kCalls = 10;
  std::vector<Tensor> inputs, want_mlp, want_lstm;
  {
    InferenceMode guard;
    for (int t = 0; t < kThreads; ++t) {
      inputs.push_back(uniform({3, 2, 5}, kFloat32, 50 + t));
      want_mlp.push_back(mlp.forward(inputs.back().view({6, 5})));
      want_lstm.push_back(lstm->forward(inputs.back()).output);
    }
  }
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      InferenceMode guard;
      for (int i = 0; i < kCalls; ++i) {
        if (!same_bits(mlp.forward(inputs[t].view({6, 5})), want_mlp[t])) ++mismatches[t];
        if (!same_bits(lstm->forward(inputs[t]).output, want_lstm[t])) ++mismatches[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace tapegrad
